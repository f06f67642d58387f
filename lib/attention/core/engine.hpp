// Internal contract between the public attention API (api.cpp: validation,
// C/C++ wrappers) and the implementation behind it (engine.cpp).
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
  // The softmax scale: 0 means head_dim^-0.5 (an object whose heads are
  // not what its scores are normalized by, MLA's, sets its own).
  float scale = 0.f;
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
  // Set only by objects that own them (MLA's YaRN), never from mha_mods:
  // the rope_dim/2 frequencies (null: rope_theta's), the amplitude that
  // multiplies cos and sin, and the position of a call's first token.
  const double* rope_inv_freq = nullptr;
  double rope_amplitude = 1.0;
  std::ptrdiff_t rope_offset = 0;
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

// Whether options (NULL: fp32) ask for bf16 compute, validated:
// struct_size exactly sizeof(mha_attention_options), a known compute type;
// messages start with prefix. In api.cpp.
bool bf16_compute(const mha_attention_options* options, const char* prefix);

// The dtype of cache options (NULL: MHA_KV_DEFAULT), validated: struct_size
// exactly sizeof(mha_kv_cache_options), a known dtype; messages start with
// fn. In kv_cache_api.cpp.
mha_kv_dtype kv_dtype_of(const mha_kv_cache_options* options, const char* fn);

class AttentionEngine;
struct GemmBf16Kernels;
class KvType;
class PagedKvCache;
struct KvView;
struct SeqSpans;
class Projections;

// Where a call's new K and V go: packed for the call alone, or appended to a
// cache. Sequence i of `seqs` gets new(i) = key_start[i+1] - key_start[i]
// keys (rows key_start[i].. of k and v, [rows, ld], kv head g at column
// g*head_dim) after its kv_len(i) - new(i) earlier ones.
class KvStore {
 public:
  virtual ~KvStore() = default;
  // The element type the store holds K and V in, which the core reads.
  virtual const KvType& type() const = 0;
  // Floats of the calling thread's scratch that append() writes into (a
  // per-call store), else 0.
  virtual std::size_t scratch_floats(const SeqSpans& seqs) const = 0;
  // Keys per block of a paged store (tiles spanning blocks are gathered), or 0.
  virtual std::size_t block_tokens() const { return 0; }
  // Writes the new keys and gives views[i] sequence i's kv_len(i) keys.
  virtual void append(const SeqSpans& seqs, const std::size_t* key_start, const float* k,
                      const float* v, std::size_t ld, float* scratch, KvView* views) = 0;
  // The call succeeded: the new keys are kept. Failed: the store is as
  // before the call (nothing kept, nothing lost).
  virtual void commit(const SeqSpans& seqs) = 0;
  virtual void rollback(const SeqSpans& seqs) noexcept = 0;
};

// Projected K/V of every position decoded so far, for `batch` sequences of up
// to `max_len` positions, stored in the layout of the engine's KV type (so a
// decode step never repacks the cache: the engine's default type, or a
// quantized one). All batch rows have the same length.
// One cache serves one sequence stream: steps on one cache must not run
// concurrently; different caches may.
class KvCache final : public KvStore {
 public:
  KvCache(const AttentionEngine& engine, const KvType& type, std::size_t batch,
          std::size_t max_len);
  ~KvCache() override;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const AttentionEngine& engine() const { return engine_; }
  std::size_t batch() const { return batch_; }
  std::size_t max_len() const { return max_len_; }
  std::size_t length() const { return length_; }
  // Bytes of storage reserved (values and scales).
  std::size_t bytes() const;
  // Drops positions >= len (len <= length()), e.g. to roll back rejected
  // speculative tokens; truncate(0) empties the cache.
  void truncate(std::size_t len);

  const KvType& type() const override { return type_; }
  std::size_t scratch_floats(const SeqSpans&) const override { return 0; }
  void append(const SeqSpans& seqs, const std::size_t* key_start, const float* k, const float* v,
              std::size_t ld, float* scratch, KvView* views) override;
  void commit(const SeqSpans& seqs) override;
  void rollback(const SeqSpans& seqs) noexcept override;

 private:
  // Zeroes positions [from, to) of every row.
  void clear(std::size_t from, std::size_t to) noexcept;
  KvView view(std::size_t row, std::size_t len) const;
  const AttentionEngine& engine_;
  const KvType& type_;
  std::size_t batch_, max_len_, length_ = 0;
  struct Storage;
  std::unique_ptr<Storage> storage_;
};

class AttentionEngine {
 public:
  // Copies/packs the weights; the caller's arrays are not referenced later.
  // bf16: the weights are stored in bf16 and activations rounded to bf16
  // where they enter a projection or Q·Kᵀ (mha_attention_options).
  AttentionEngine(Isa isa, const AttentionShape& shape, const mha_weights& w, bool bf16 = false);
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

}  // namespace mha::detail

// The C handles, defined once here for every C entry point.
struct mha_attention {
  std::unique_ptr<mha::detail::AttentionEngine> engine;
};
struct mha_kv_cache {
  std::unique_ptr<mha::detail::KvCache> cache;
};
