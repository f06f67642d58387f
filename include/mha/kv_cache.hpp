// mha::KvCache: the C++ face of mha_kv_cache_* (include/mha/mha.h, "KV cache
// for incremental decoding"). Failures throw mha::Error with the status and
// message the C API would return.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <mha/attention.hpp>

namespace mha {

class MHA_API KvCache {
 public:
  // A cache for `batch` sequences of up to `max_len` positions, bound to
  // `attn` (which must outlive it).
  KvCache(const MultiheadAttention& attn, std::size_t batch, std::size_t max_len);
  // The same, storing K and V as `dtype` (mha_kv_cache_create_ex).
  KvCache(const MultiheadAttention& attn, std::size_t batch, std::size_t max_len,
          mha_kv_dtype dtype);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  std::size_t length() const noexcept;
  // Bytes of storage reserved (mha_kv_cache_bytes).
  std::size_t bytes() const noexcept;
  // Drops positions >= len (len <= length()).
  void truncate(std::size_t len);

  // Appends n_new tokens per batch row and attends them causally over the
  // cache; see mha_attention_step for the layouts.
  void step(std::size_t n_new, const float* query, const float* key, const float* value,
            float* out);
  // step with modifiers (mods may be null); see mha_attention_step_mods.
  void step_mods(std::size_t n_new, const float* query, const float* key, const float* value,
                 const mha_mods* mods, float* out);
  // Self-attention decoding: query, key and value are all x.
  void step_self(std::size_t n_new, const float* x, float* out) { step(n_new, x, x, x, out); }

  mha_kv_cache* handle() const noexcept { return handle_; }

 private:
  const mha_attention* attn_;
  mha_kv_cache* handle_ = nullptr;
};

// The C++ face of mha_paged_kv_cache (mha.h, "Paged KV cache for continuous
// batching").
class MHA_API PagedKvCache {
 public:
  // num_slots sequences sharing a pool of num_blocks blocks of block_tokens
  // positions, bound to `attn` (which must outlive it).
  PagedKvCache(const MultiheadAttention& attn, std::size_t num_slots, std::size_t block_tokens,
               std::size_t num_blocks);
  // The same, storing K and V as `dtype` (mha_kv_cache_create_paged_ex).
  PagedKvCache(const MultiheadAttention& attn, std::size_t num_slots, std::size_t block_tokens,
               std::size_t num_blocks, mha_kv_dtype dtype);
  ~PagedKvCache();
  PagedKvCache(PagedKvCache&& other) noexcept;
  PagedKvCache& operator=(PagedKvCache&& other) noexcept;
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  std::size_t slot_length(std::size_t slot) const noexcept;
  std::size_t free_blocks() const noexcept;
  // Bytes of the pool (mha_paged_kv_cache_bytes).
  std::size_t bytes() const noexcept;
  // Empties the slot, returning its blocks to the pool.
  void reset_slot(std::size_t slot);
  // Drops the slot's positions >= len (len <= slot_length(slot)).
  void truncate_slot(std::size_t slot, std::size_t len);
  // Empty slot dst becomes slot src's first len positions, sharing its
  // blocks (mha_kv_cache_fork_slot).
  void fork_slot(std::size_t src, std::size_t dst, std::size_t len);
  // See mha_attention_step_tree and mha_kv_cache_accept_path.
  void step_tree(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
                 const std::int32_t* parent, const float* query, const float* key,
                 const float* value, const mha_mods* mods, float* out);
  void accept_path(std::size_t slot, std::size_t n, const std::size_t* path);
  // Key chunks the last step computed once for several slots
  // (mha_kv_cache_shared_chunks).
  std::size_t shared_chunks() const noexcept;
  // See mha_attention_step_ragged: sequence i's new tokens are rows
  // q_start[i] .. q_start[i+1]-1, appended to slot slots[i].
  void step(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
            const float* query, const float* key, const float* value, float* out);
  // step with modifiers (mods may be null); see mha_attention_step_ragged_mods.
  void step_mods(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
                 const float* query, const float* key, const float* value, const mha_mods* mods,
                 float* out);

  mha_paged_kv_cache* handle() const noexcept { return handle_; }

 private:
  const mha_attention* attn_;
  mha_paged_kv_cache* handle_ = nullptr;
};

}  // namespace mha
