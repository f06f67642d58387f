// Internal contract between the public attention API (api.cpp: validation,
// C/C++ wrappers) and the implementation behind it (the fused engine).
// Arguments reaching the engine are already validated.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <mha/isa.hpp>

#include "common/checked.hpp"
#include "gemm/gemm.hpp"
#include "softmax/kernels.hpp"

namespace mha::detail {

// mha_config with every default resolved (kdim/vdim/num_kv_heads != 0).
struct AttentionShape {
  std::size_t embed_dim = 0;  // E
  std::size_t num_heads = 0;  // H
  std::size_t kdim = 0, vdim = 0;
  std::size_t num_kv_heads = 0;  // divides H
  std::size_t head_dim = 0;      // E / H
  std::size_t kv_dim() const { return num_kv_heads * head_dim; }
};

// mha_mods resolved (rope_theta defaulted) and validated; the zero value is
// "no modifiers".
struct AttentionMods {
  bool causal = false;
  std::size_t window = 0;
  const float* alibi = nullptr;  // [H] slopes
  float softcap = 0.f;
  const float* sinks = nullptr;  // [H] logits
  std::size_t rope_dim = 0;
  float rope_theta = 10000.f;
  bool rope_interleaved = false;
  float* lse = nullptr;  // [rows, H]
};

// Validates *m (NULL: no modifiers) for a call producing `rows` query rows
// (the size of lse), whose other arrays span `arrays` (lse, an output, must
// overlap none of them), and resolves it; messages start with `fn`. In api.cpp.
AttentionMods resolve_mods(const mha_mods* m, const AttentionShape& s, std::size_t rows,
                           std::initializer_list<Extent> arrays, const char* fn);

struct ForwardArgs {
  std::size_t batch = 0, q_len = 0, kv_len = 0;
  const float* query = nullptr;  // [batch, q_len, E]
  const float* key = nullptr;    // [batch, kv_len, kdim]
  const float* value = nullptr;  // [batch, kv_len, vdim]
  const mha_mask* mask = nullptr;
  float* out = nullptr;           // [batch, q_len, E]
  float* attn_weights = nullptr;  // optional, see mha_attention_forward
  bool average_weights = false;
  AttentionMods mods;
};

class AttentionEngine;
struct GemmBf16Kernels;
struct KvCacheView;
struct RaggedSeqs;
class PagedKvCache;

// Projected K/V of every position decoded so far, for `batch` sequences of up
// to `max_len` positions, stored in the packed layout the attention core
// reads (so a decode step never repacks the cache). All batch rows have the
// same length. One cache serves one sequence stream: steps on one cache must
// not run concurrently; different caches may.
class KvCache {
 public:
  KvCache(const AttentionEngine& engine, std::size_t batch, std::size_t max_len);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const AttentionEngine& engine() const { return engine_; }
  std::size_t batch() const { return batch_; }
  std::size_t max_len() const { return max_len_; }
  std::size_t length() const { return length_; }
  // Drops positions >= len (len <= length()), e.g. to roll back rejected
  // speculative tokens; truncate(0) empties the cache.
  void truncate(std::size_t len);

 private:
  friend class AttentionEngine;
  struct Storage;
  // K of block (b * kv_heads + kv head) as packed columns, its V rows.
  PackedBColumns keys(std::size_t block) const;
  float* values(std::size_t block) const;
  KvCacheView view(std::size_t len) const;
  // Writes n_new positions per batch row from length() on (rows [batch *
  // n_new, ld] of projected K and V, kv head g at column g*head_dim) and
  // returns the view of length() + n_new keys; length() is unchanged.
  KvCacheView append(const float* k, const float* v, std::size_t ld, std::size_t n_new);
  void clear(std::size_t from, std::size_t to);
  const AttentionEngine& engine_;
  std::size_t batch_, max_len_, length_ = 0;
  std::unique_ptr<Storage> storage_;
};

class AttentionEngine {
 public:
  // Copies/packs the weights; the caller's arrays are not referenced later.
  // bf16: the weights are stored in bf16 and activations rounded to bf16
  // where they enter a projection or Q·Kᵀ (mha_attention_options).
  AttentionEngine(Isa isa, const AttentionShape& shape, const mha_weights& w, bool bf16 = false);
  ~AttentionEngine();
  AttentionEngine(const AttentionEngine&) = delete;
  AttentionEngine& operator=(const AttentionEngine&) = delete;

  // Thread-safe: any number of concurrent calls on one engine.
  void forward(const ForwardArgs& args) const;
  // The calling thread's scratch that forward(args) uses (grown once, then
  // reused): projections, packed K/V and merged heads, O(batch·len·E); never
  // O(len²) unless weights are requested (they go to the caller's array).
  std::size_t forward_workspace_floats(const ForwardArgs& args) const;
  // Attention over sequences packed back to back (query/out [q_start[num],
  // E], key [kv_start[num], kdim], value [kv_start[num], vdim]), each
  // sequence on its own at positions from 0, its last query aligned with its
  // last key (mods.lse: [q_start[num], H]). Needs q_start[num] > 0.
  void forward_ragged(const RaggedSeqs& seqs, const float* query, const float* key,
                      const float* value, const AttentionMods& mods, float* out) const;

  // Incremental decoding: projects n_new tokens per batch row (query [batch,
  // n_new, E], key [batch, n_new, kdim], value [batch, n_new, vdim]), appends
  // their K/V to the cache and attends them causally over the whole cache
  // (new token t sees positions <= length + t). out: [batch, n_new, E].
  // Requires cache.length() + n_new <= cache.max_len() and a cache created
  // for this engine.
  void step(KvCache& cache, std::size_t n_new, const float* query, const float* key,
            const float* value, float* out, const AttentionMods& mods = {}) const;

  // Continuous batching: sequence i (query/key/value/out rows q_start[i] ..
  // q_start[i+1]-1) appends its tokens to slot slots[i] of the paged cache
  // and attends them causally (mods.causal implied) over the slot's history,
  // at cache positions. Slots are distinct, and a window reaches no position
  // the slot has dropped. Throws MHA_OUT_OF_MEMORY, changing nothing, if the
  // pool lacks the blocks; on any failure the cache is as before. With a
  // window, each slot then returns the blocks no later query can see.
  void step_ragged(PagedKvCache& cache, std::size_t num, const std::size_t* slots,
                   const std::size_t* q_start, const float* query, const float* key,
                   const float* value, const AttentionMods& mods, float* out) const;

  const AttentionShape& shape() const { return shape_; }
  // The ISA the engine was created on: its packed weights and every call run
  // on that ISA's kernels, whatever mha_set_isa chooses later.
  const GemmKernels& gemm() const { return gemm_kernels(isa_); }
  const SoftmaxKernels& softmax() const { return softmax_kernels(isa_); }
  // A bf16 object's attention core kernels where the CPU has bf16 dot
  // products (its K/V then bf16 in the cache and per call), else nullptr.
  const GemmBf16Kernels* core_bf16() const;

  struct Impl;  // packed weights (engine_fused.cpp)

 private:
  struct Pass;
  struct Layout;
  static Pass forward_pass(const ForwardArgs& a);
  Layout layout(const Pass& a) const;
  void run(const Pass& a) const;

  Isa isa_;
  AttentionShape shape_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mha::detail

// The C handles, defined once here for every C entry point.
struct mha_attention {
  std::unique_ptr<mha::detail::AttentionEngine> engine;
};
struct mha_kv_cache {
  std::unique_ptr<mha::detail::KvCache> cache;
};
