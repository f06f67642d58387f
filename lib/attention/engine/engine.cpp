// The attention pipeline, one for every call mode (a padded forward, a
// ragged forward, a KV-cache step, a paged step): project, rotate, store K
// and V (packed for the call, or appended to a cache), attend, project.
//
//   Q, K, V = X·Wqᵀ + bq, X·Wkᵀ + bk, X·Wvᵀ + bv      (projection/projection.cpp)
//   per (sequence, head, query block): O = softmax(scale·Q·Kᵀ + mask)·V,
//       over key tiles with an online softmax (core/core.cpp, core/tile_math.cpp)
//   out = O·Woᵀ + bo
//
// A mode is only its sequences and its KvStore. Everything here is
// composition; there are no intrinsics in this folder.
#include "attention/engine/engine.hpp"

#include <algorithm>
#include <utility>

#include "attention/cache/kv_cache.hpp"
#include "attention/cache/kv_store.hpp"
#include "attention/cache/paged_cache.hpp"
#include "attention/core/core.hpp"
#include "attention/engine/rope.hpp"
#include "attention/kv/kv_type.hpp"
#include "attention/projection/projection.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"

namespace mha::detail {
namespace {

// K and V packed for one call, in the calling thread's scratch: each
// sequence's head-blocks back to back, sized for its keys.
class PerCallKv final : public KvStore {
 public:
  PerCallKv(const KvType& type, const AttentionShape& s) : type_(type), s_(s) {}
  const KvType& type() const override { return type_; }
  std::size_t scratch_floats(const SeqSpans& seqs) const override {
    std::size_t bytes = 0;
    for (std::size_t i = 0; i < seqs.num; ++i) {
      bytes = checked_add(bytes, seq_bytes(type_.layout(s_.head_dim, seqs.kv_len(i))),
                          "packed K and V");
    }
    return float_bytes(bytes / sizeof(float), "packed K and V") / sizeof(float);
  }
  void append(const SeqSpans& seqs, const std::size_t* key_start, const float* k, const float* v,
              std::size_t ld, float* scratch, KvView* views) override {
    const std::size_t kvh = s_.num_kv_heads, d = s_.head_dim;
    char* at = reinterpret_cast<char*>(scratch);
    for (std::size_t i = 0; i < seqs.num; ++i) {
      KvView& view = views[i];
      view = KvView{};
      view.layout = type_.layout(d, seqs.kv_len(i));
      view.k = at;
      view.v = at + kvh * view.layout.k_bytes;
      view.len = seqs.kv_len(i);
      view.block_step = kvh;
      at += seq_bytes(view.layout);
    }
    // K and V read once and written once packed (4 bytes each per element).
    const std::size_t rows = key_start[seqs.num];
    const std::size_t threads = threads_for({0, 16.0 * static_cast<double>(rows * kvh * d)});
    parallel_for(seqs.num * kvh, threads, [&](std::size_t t) {
      const std::size_t i = t / kvh, g = t % kvh;
      const KvView& view = views[i];
      const std::size_t src = key_start[i] * ld + g * d;
      type_.put_rows(view.layout, view.k_block(g, 0), view.v_block(g, 0), 0, view.len, d, k + src,
                     v + src, ld);
    });
  }
  void commit(const SeqSpans&) override {}
  void rollback(const SeqSpans&) noexcept override {}

 private:
  std::size_t seq_bytes(const KvLayout& l) const {
    return checked_mul(s_.num_kv_heads, l.k_bytes + l.v_bytes, "packed K and V");
  }
  const KvType& type_;
  const AttentionShape& s_;
};

std::unique_ptr<KvType> pick_kv_type(Isa isa, const GemmKernels& g, const GemmBf16Kernels* g16,
                                     bool shared_kv) {
  if (g16 != nullptr) return shared_kv ? make_kv_bf16_shared(g, *g16, isa) : make_kv_bf16(g, *g16);
  return shared_kv ? make_kv_latent_fp32(g) : make_kv_fp32(g);
}

}  // namespace

AttentionEngine::AttentionEngine(Isa isa, const AttentionShape& shape, const mha_weights& w,
                                 const ObjectOptions& o)
    : isa_(isa), shape_(shape) {
  const GemmBf16Kernels* g16 = o.bf16 ? gemm_bf16_kernels(isa) : nullptr;
  const QuantSource src[] = {{w.q_weight, nullptr, nullptr, "weights->q_weight"},
                             {w.k_weight, nullptr, nullptr, "weights->k_weight"},
                             {w.v_weight, nullptr, nullptr, "weights->v_weight"},
                             {w.out_weight, nullptr, nullptr, "weights->out_weight"}};
  if (o.int8_activations || o.weights != WeightFormat::as_compute) {
    proj_ = make_projections_coded(isa, shape, o, quant_codes(o.weights), o.group, src, w);
  } else if (o.bf16) {
    proj_ = make_projections_bf16(gemm(), g16, shape, w);
  } else {
    proj_ = make_projections_fp32(gemm(), shape, w);
  }
  // A bf16 object's core runs on bf16 K and V where the CPU has bf16 dot
  // products; elsewhere on fp32 ones (its weights stay bf16).
  make_kv_types(g16, false);
}

AttentionEngine::AttentionEngine(Isa isa, const AttentionShape& shape,
                                 std::unique_ptr<Projections> proj, bool bf16, bool shared_kv)
    : isa_(isa), shape_(shape), proj_(std::move(proj)) {
  make_kv_types(bf16 ? gemm_bf16_kernels(isa) : nullptr, shared_kv);
}

void AttentionEngine::make_kv_types(const GemmBf16Kernels* g16, bool shared_kv) {
  kv_[MHA_KV_DEFAULT] = pick_kv_type(isa_, gemm(), g16, shared_kv);
  kv_[MHA_KV_INT8] = make_kv_quant(kvq::Code::int8, isa_, g16, shared_kv);
  kv_[MHA_KV_FP8_E4M3] = make_kv_quant(kvq::Code::e4m3, isa_, g16, shared_kv);
}

AttentionEngine::~AttentionEngine() = default;

// One call: its sequences, the rows it projects, and where K and V go.
struct AttentionEngine::Call {
  Call(const CoreArrays& arr, const SeqSpans& s, const std::size_t* keys, const float* q,
       const float* k, const float* v, float* o, const AttentionMods& m, bool is_causal,
       KvStore& kv)
      : seqs(s),
        key_start(keys),
        query(q),
        key(k),
        value(v),
        out(o),
        causal(is_causal),
        mods(m),
        store(&kv),
        arrays(arr) {}
  SeqSpans seqs;                 // query rows; keys, history included
  const std::size_t* key_start;  // [num + 1]: the key/value rows this call projects
  const float *query, *key, *value;
  float* out;
  // A padded forward's mask (sequence b is batch row b) and weights.
  const mha_mask* mask = nullptr;
  float* attn_weights = nullptr;
  bool average_weights = false;
  bool causal;
  AttentionMods mods;
  KvStore* store;
  CoreArrays arrays;
  std::size_t* shared_chunks = nullptr;  // the plan's, where asked

  std::size_t q_rows() const { return seqs.q_start[seqs.num]; }
  std::size_t kv_rows() const { return key_start[seqs.num]; }
  std::size_t new_keys(std::size_t i) const { return key_start[i + 1] - key_start[i]; }
  // Positions (mha_mods) of sequence i's first query and first new key;
  // both end at its kv_len.
  std::ptrdiff_t q_pos0(std::size_t i) const {
    return static_cast<std::ptrdiff_t>(seqs.kv_len(i)) - static_cast<std::ptrdiff_t>(seqs.q_len(i));
  }
  std::ptrdiff_t k_pos0(std::size_t i) const {
    return static_cast<std::ptrdiff_t>(seqs.kv_len(i) - new_keys(i));
  }
  // RoPE's positions for sequence i: [rope_first(i), rope_first(i) + rope_positions(i)).
  std::ptrdiff_t rope_first(std::size_t i) const { return std::min(q_pos0(i), k_pos0(i)); }
  std::size_t rope_positions(std::size_t i) const {
    return static_cast<std::size_t>(static_cast<std::ptrdiff_t>(seqs.kv_len(i)) - rope_first(i));
  }
};

// Scratch, from the calling thread: projections | per-call K and V |
// merged heads | RoPE table | the core's workspace.
struct AttentionEngine::Layout {
  bool fused;
  std::size_t proj, packed, merged, rope;
  CorePlan plan;
  std::size_t total() const { return proj + packed + merged + rope + plan.workspace_floats; }
};

AttentionEngine::Layout AttentionEngine::layout(const Call& c) const {
  Layout f;
  f.fused = proj_->fusable() && c.query == c.key && c.key == c.value && c.q_rows() == c.kv_rows();
  f.proj = proj_->scratch_floats(f.fused, c.q_rows(), c.kv_rows());
  f.packed = round_up(c.store->scratch_floats(c.seqs), 16);
  f.merged = round_up(c.q_rows() * shape_.embed_dim, 16);
  std::size_t positions = 0;
  if (c.mods.rope_dim != 0) {
    for (std::size_t i = 0; i < c.seqs.num; ++i) {
      positions = std::max(positions, c.rope_positions(i));
    }
  }
  f.rope = round_up(rope_table_floats(c.mods, positions), 16);
  c.store->describe(c.seqs, c.arrays.views);
  f.plan = plan_core(c.store->type(), gemm(), shape_, c.seqs, c.store->block_tokens(),
                     c.attn_weights != nullptr, c.average_weights, c.mods, c.arrays);
  return f;
}

void AttentionEngine::run(const Call& c) const {
  // A failure anywhere, the scratch included, leaves the store as it was
  // (a paged step has reserved its blocks before this call).
  try {
    run_stored(c);
  } catch (...) {
    c.store->rollback(c.seqs);
    throw;
  }
  c.store->commit(c.seqs);
}

void AttentionEngine::run_stored(const Call& c) const {
  const AttentionShape& s = shape_;
  const SeqSpans& seqs = c.seqs;
  const std::size_t E = s.embed_dim, H = s.num_heads, q_rows = c.q_rows();
  const Layout f = layout(c);
  float* ws = thread_scratch(ScratchSlot::kAttention, f.total());
  float* packed = ws + f.proj;
  float* merged = packed + f.packed;
  float* rope = merged + f.merged;
  float* core_ws = rope + f.rope;
  const bool rotate = c.mods.rope_dim != 0;
  const Projected p =
      proj_->project(f.fused, rotate, q_rows, c.kv_rows(), c.query, c.key, c.value, ws);
  // Rotated once here, before K is stored: caches hold rotated keys, as the
  // models' caches do. Sequences at the same positions share one table.
  if (rotate) {
    std::ptrdiff_t table_first = 0;
    std::size_t table_positions = 0;
    for (std::size_t i = 0; i < seqs.num; ++i) {
      const std::ptrdiff_t first = c.rope_first(i);
      if (i == 0 || first != table_first || c.rope_positions(i) != table_positions) {
        table_first = first;
        table_positions = c.rope_positions(i);
        rope_table(c.mods, table_first, table_positions, rope);
      }
      rope_apply(c.mods, rope, first, c.q_pos0(i), 1, seqs.q_len(i), H, s.head_dim,
                 p.q + seqs.q_start[i] * p.ldq, p.ldq);
      rope_apply(c.mods, rope, first, c.k_pos0(i), 1, c.new_keys(i), s.num_kv_heads, s.head_dim,
                 p.k + c.key_start[i] * p.ldkv, p.ldkv);
    }
    proj_->finish_rotated(p, q_rows, c.kv_rows());
  }
  const mha_mask* mask = c.mask;
  // K and V stored once per (sequence, kv head) and shared by every query
  // head of the group (GQA without copies).
  c.store->append(seqs, c.key_start, p.k, p.v, p.ldkv, packed, c.arrays.views);
  for (std::size_t i = 0; i < seqs.num; ++i) {
    const std::size_t q_len = seqs.q_len(i), kv_len = seqs.kv_len(i);
    CoreSeq& seq = c.arrays.seqs[i];
    seq = CoreSeq{};
    seq.q = p.q + seqs.q_start[i] * p.ldq;
    seq.out = merged + seqs.q_start[i] * E;
    seq.q_len = q_len;
    seq.kv = c.arrays.views[i];
    if (mask != nullptr && mask->key_padding != nullptr) {
      seq.padding = mask->key_padding + i * kv_len;
    }
    if (mask != nullptr && mask->additive != nullptr) {
      const std::size_t plane = q_len * kv_len;
      seq.additive = mask->additive + (mask->additive_per_head ? i * H * plane : 0);
      seq.additive_head_stride = mask->additive_per_head ? plane : 0;
    }
    if (c.mods.lse != nullptr) seq.lse = c.mods.lse + seqs.q_start[i] * H;
    if (c.attn_weights != nullptr) {
      seq.weights = c.attn_weights + i * (c.average_weights ? 1 : H) * q_len * kv_len;
    }
  }
  CoreCall call;
  call.seqs = c.arrays.seqs;
  call.num = seqs.num;
  call.ldq = p.ldq;
  call.ldo = E;
  call.causal = c.causal;
  call.mods = c.mods;
  // run_core writes the weights; the output projection must not then fail
  // for want of this thread's scratch (a call changes nothing or succeeds).
  if (c.attn_weights != nullptr) proj_->reserve_out(q_rows);
  run_core(c.store->type(), softmax(), s, f.plan, call, core_ws);
  proj_->project_out(q_rows, merged, c.out);
  if (c.shared_chunks != nullptr) *c.shared_chunks = f.plan.shared;
}

namespace {

// Sequences of equal lengths in arr: batch rows of q_len queries and kv_len keys.
SeqSpans uniform(const CoreArrays& arr, std::size_t batch, std::size_t q_len, std::size_t kv_len) {
  for (std::size_t b = 0; b <= batch; ++b) {
    arr.q_start[b] = b * q_len;
    arr.kv_start[b] = b * kv_len;
  }
  return {batch, arr.q_start, arr.kv_start};
}

}  // namespace

AttentionEngine::Call AttentionEngine::forward_call(const ForwardArgs& a, KvStore& store) const {
  const CoreArrays arr = CoreArrays::take(a.batch);
  const SeqSpans seqs = uniform(arr, a.batch, a.q_len, a.kv_len);
  Call c(arr, seqs, seqs.kv_start, a.query, a.key, a.value, a.out, a.mods,
         (a.mask != nullptr && a.mask->causal) || a.mods.causal, store);
  c.mask = a.mask;
  c.attn_weights = a.attn_weights;
  c.average_weights = a.average_weights;
  return c;
}

std::size_t AttentionEngine::forward_workspace_floats(const ForwardArgs& a) const {
  PerCallKv store(kv_type(), shape_);
  return layout(forward_call(a, store)).total();
}

void AttentionEngine::forward(const ForwardArgs& a) const {
  PerCallKv store(kv_type(), shape_);
  run(forward_call(a, store));
}

void AttentionEngine::forward_ragged(const SeqSpans& seqs, const float* query, const float* key,
                                     const float* value, const AttentionMods& mods,
                                     float* out) const {
  PerCallKv store(kv_type(), shape_);
  run(Call(CoreArrays::take(seqs.num), seqs, seqs.kv_start, query, key, value, out, mods,
           mods.causal, store));
}

void AttentionEngine::step(KvCache& cache, std::size_t n_new, const float* query, const float* key,
                           const float* value, float* out, const AttentionMods& mods) const {
  const std::size_t batch = cache.batch();
  const CoreArrays arr = CoreArrays::take(batch);
  const SeqSpans seqs = uniform(arr, batch, n_new, cache.length() + n_new);
  run(Call(arr, seqs, seqs.q_start, query, key, value, out, mods, true, cache));
}

void AttentionEngine::step_ragged(PagedKvCache& cache, std::size_t num, const std::size_t* slots,
                                  const std::size_t* q_start, const float* query, const float* key,
                                  const float* value, const AttentionMods& mods, float* out) const {
  const CoreArrays arr = CoreArrays::take(num);
  // Each sequence's keys: the slot's history, then its new tokens.
  arr.kv_start[0] = 0;
  for (std::size_t i = 0; i < num; ++i) {
    arr.kv_start[i + 1] = arr.kv_start[i] + cache.length(slots[i]) + (q_start[i + 1] - q_start[i]);
  }
  const SeqSpans seqs{num, q_start, arr.kv_start};
  cache.reserve(slots, seqs);
  PagedStep store(cache, slots, mods.window);
  AttentionMods causal = mods;
  causal.causal = true;
  Call c(arr, seqs, q_start, query, key, value, out, causal, true, store);
  std::size_t shared = 0;
  c.shared_chunks = &shared;
  run(c);
  cache.set_shared_chunks(shared);
}

void AttentionEngine::step_tree(PagedKvCache& cache, std::size_t num, const std::size_t* slots,
                                const std::size_t* q_start, const std::int32_t* parent,
                                const float* query, const float* key, const float* value,
                                const AttentionMods& mods, float* out) const {
  const std::size_t rows = q_start[num];
  const CoreArrays arr = CoreArrays::take(rows);
  // Per slot its keys after the step ([num + 1]); per row its sequence, its
  // index there and where its path starts ([rows], [rows], [rows + 1]).
  const char* what = "tree rows";
  auto* w = thread_scratch_array<std::size_t>(
      ScratchSlot::kTree, checked_add(checked_mul(3, rows, what), num + 2, what));
  std::size_t* slot_kv = w;
  std::size_t* seq = w + num + 1;
  std::size_t* local = seq + rows;
  std::size_t* path_begin = local + rows;
  slot_kv[0] = 0;
  // Each row's path length (its depth + 1) at path_begin[r + 1], then summed.
  path_begin[0] = 0;
  for (std::size_t i = 0; i < num; ++i) {
    slot_kv[i + 1] = slot_kv[i] + cache.length(slots[i]) + (q_start[i + 1] - q_start[i]);
    for (std::size_t r = q_start[i]; r < q_start[i + 1]; ++r) {
      seq[r] = i;
      local[r] = r - q_start[i];
      path_begin[r + 1] = parent[r] < 0 ? 1 : path_begin[q_start[i] + parent[r] + 1] + 1;
    }
  }
  // The core's sequences: row r alone, over its slot's history and path.
  arr.kv_start[0] = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    arr.q_start[r] = r;
    arr.kv_start[r + 1] = arr.kv_start[r] + cache.length(slots[seq[r]]) + path_begin[r + 1];
    path_begin[r + 1] += path_begin[r];
  }
  arr.q_start[rows] = rows;
  // The paths: a row's is its parent's and itself.
  auto* path = thread_scratch_array<std::size_t>(ScratchSlot::kTreePaths, path_begin[rows]);
  for (std::size_t r = 0; r < rows; ++r) {
    const std::size_t i = seq[r], base = cache.length(slots[i]);
    std::size_t* p = path + path_begin[r];
    if (parent[r] >= 0) {
      const std::size_t up = q_start[i] + static_cast<std::size_t>(parent[r]);
      std::copy(path + path_begin[up], path + path_begin[up + 1], p);
    }
    path[path_begin[r + 1] - 1] = base + local[r];
  }
  const SeqSpans slot_seqs{num, q_start, slot_kv};
  cache.reserve_tree(slots, slot_seqs);
  cache.reserve(slots, slot_seqs);
  TreeStep store(cache, slots, slot_seqs, {seq, local, path_begin, path}, parent);
  AttentionMods causal = mods;
  causal.causal = true;
  Call c(arr, {rows, arr.q_start, arr.kv_start}, arr.q_start, query, key, value, out, causal, true,
         store);
  std::size_t shared = 0;
  c.shared_chunks = &shared;
  run(c);
  cache.set_shared_chunks(shared);
}

}  // namespace mha::detail
