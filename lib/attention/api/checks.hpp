// What the entry points of api/ share across their files: the argument
// checks more than one object family makes, and the cache creators (their
// options and sizes checked first). Each is defined in the file named with it.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "attention/core/shape.hpp"
#include "attention/projection/projection.hpp"
#include "common/checked.hpp"

namespace mha::detail {

class AttentionEngine;
class PagedKvCache;

// Validates *m (NULL: no modifiers) for a call producing `rows` query rows
// (the size of lse), whose other arrays span `arrays` (lse, an output, must
// overlap none of them), and resolves it; messages start with `fn`. In api.cpp.
AttentionMods resolve_mods(const mha_mods* m, const AttentionShape& s, std::size_t rows,
                           std::initializer_list<Extent> arrays, const char* fn);

// What options (NULL: fp32, weights in it) ask for, validated: a
// struct_size of this version or the first, a known compute type and
// weight format, and a weight_group this version computes; messages start
// with prefix. In api.cpp.
ObjectOptions object_options(const mha_attention_options* options, const char* prefix);

// The dtype of cache options (NULL: MHA_KV_DEFAULT), validated: struct_size
// exactly sizeof(mha_kv_cache_options), a known dtype; messages start with
// fn. In kv_cache_api.cpp.
mha_kv_dtype kv_dtype_of(const mha_kv_cache_options* options, const char* fn);

// The cache creators every object family shares (kv_cache_api.cpp,
// paged_cache_api.cpp): the options and sizes checked (messages start with
// fn), then a cache of e's KV type for the options' dtype.
mha_kv_cache* make_kv_cache(const AttentionEngine& e, std::size_t batch, std::size_t max_len,
                            const mha_kv_cache_options* options, const char* fn);
mha_paged_kv_cache* make_paged_cache(const AttentionEngine& e, std::size_t num_slots,
                                     std::size_t block_tokens, std::size_t num_blocks,
                                     const mha_kv_cache_options* options, const char* fn);
// A paged step's checks on its slots: distinct and in range, with offsets
// from 0 that never decrease (slots: marks them for this step)...
void check_ragged_slots(PagedKvCache& c, std::size_t num, const std::size_t* slots,
                        const std::size_t* q_start, const char* fn);
// ...and room: no slot outgrows the pool or reaches, with `window` (0:
// none), a position a window dropped.
void check_ragged_room(const PagedKvCache& c, std::size_t num, const std::size_t* slots,
                       const std::size_t* q_start, std::size_t window, const char* fn);
// A tree step's parents: -1 or an earlier token of the same slot.
void check_tree_parents(std::size_t num, const std::size_t* q_start, const std::int32_t* parent,
                        const char* fn);
// An accepted path: the slot's last step was a tree step, and path[0..n)
// runs from one of its roots down, each a child of the one before.
void check_tree_path(const PagedKvCache& c, std::size_t slot, std::size_t n,
                     const std::size_t* path, const char* fn);

}  // namespace mha::detail
