// The attention engine: an object's packed weights and KV types, and the
// one pipeline (engine.cpp) behind every call mode of the entry points
// (api/: validation, C/C++ wrappers). Arguments reaching it are already
// validated.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mha/isa.hpp>

#include "attention/core/shape.hpp"
#include "attention/projection/projection.hpp"
#include "gemm/gemm.hpp"
#include "softmax/kernels.hpp"

namespace mha::detail {

struct GemmBf16Kernels;
class KvCache;
class KvStore;
class KvType;
class PagedKvCache;
class Projections;
struct SeqSpans;

// A padded forward's arguments (forward, forward_workspace_floats).
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

class AttentionEngine {
 public:
  // Copies/packs the weights; the caller's arrays are not referenced later.
  // o.bf16: the weights are stored in bf16 and activations rounded to bf16
  // where they enter a projection or Q·Kᵀ (mha_attention_options); weights
  // other than as_compute quantizes them instead, in groups of o.group input
  // features (0: whole rows); o.int8_activations: int8 weights and inputs
  // (W8A8), with either compute type.
  AttentionEngine(Isa isa, const AttentionShape& shape, const mha_weights& w,
                  const ObjectOptions& o = {});
  // With projections of the caller's own (MLA's), made for this isa and
  // precision; shape.kdim/vdim are then the inputs' widths. shared_kv: the
  // projections' K and V are one array, which an fp32 default type then
  // stores once.
  AttentionEngine(Isa isa, const AttentionShape& shape, std::unique_ptr<Projections> proj,
                  bool bf16, bool shared_kv);
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
  void forward_ragged(const SeqSpans& seqs, const float* query, const float* key,
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

  // Speculative decoding: step_ragged whose new tokens form a tree per slot
  // (parent[r], for packed row r: the index among its slot's new tokens of
  // its parent, which comes first, or -1 for a child of the slot's last
  // position; checked). Row r attends the slot's history and its path from
  // the root, at position length + its depth, and every row's K and V is
  // appended; the slot then holds them until PagedKvCache::accept.
  void step_tree(PagedKvCache& cache, std::size_t num, const std::size_t* slots,
                 const std::size_t* q_start, const std::int32_t* parent, const float* query,
                 const float* key, const float* value, const AttentionMods& mods, float* out) const;

  const AttentionShape& shape() const { return shape_; }
  // The ISA the engine was created on: its packed weights and every call run
  // on that ISA's kernels, whatever mha_set_isa chooses later.
  const GemmKernels& gemm() const { return gemm_kernels(isa_); }
  const SoftmaxKernels& softmax() const { return softmax_kernels(isa_); }
  // The K/V element type of a cache of this object (and, as
  // MHA_KV_DEFAULT, of every forward's core), picked at create: the default
  // is bf16 for a bf16 object where the CPU has bf16 dot products, else
  // fp32. dtype is a valid mha_kv_dtype.
  const KvType& kv_type(mha_kv_dtype dtype = MHA_KV_DEFAULT) const {
    return *kv_[static_cast<std::size_t>(dtype)];
  }

 private:
  struct Call;
  struct Layout;
  Layout layout(const Call& c) const;
  // Runs the call, then commits its store, or rolls it back and rethrows.
  void run(const Call& c) const;
  void run_stored(const Call& c) const;
  Call forward_call(const ForwardArgs& a, KvStore& store) const;
  void make_kv_types(const GemmBf16Kernels* g16, bool shared_kv);

  Isa isa_;
  AttentionShape shape_;
  std::unique_ptr<Projections> proj_;
  std::unique_ptr<KvType> kv_[3];  // by mha_kv_dtype
};

}  // namespace mha::detail

// The C handle of an attention object.
struct mha_attention {
  std::unique_ptr<mha::detail::AttentionEngine> engine;
};
