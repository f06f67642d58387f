// The production attention path: project, attend (flash-style), project.
//
//   Q, K, V = X·Wqᵀ + bq, X·Wkᵀ + bk, X·Wvᵀ + bv      (one GEMM when X is shared)
//   per (batch, head, query block): O = softmax(scale·Q·Kᵀ + mask)·V, computed
//       over key tiles with an online softmax, never materializing S x S
//   out = O·Woᵀ + bo
//
// Everything here is composition of the GEMM and softmax kernel tables; there
// are no intrinsics in this file.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "attention/core.hpp"
#include "attention/engine.hpp"
#include "attention/paged_cache.hpp"
#include "attention/rope.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"
#include "gemm/gemm.hpp"
#include "gemm/gemm_bf16.hpp"
#include "softmax/kernels.hpp"

namespace mha::detail {

struct AttentionEngine::Impl {
  // Packed Wqᵀ, Wkᵀ, Wvᵀ, each starting on a strip boundary, so that when
  // query, key and value share one input (self-attention, kdim == vdim == E)
  // a single GEMM over the concatenation projects all three. Each section is
  // padded to a multiple of nr columns; the padding columns are zero weights
  // and zero bias, so they cost at most nr-1 wasted columns per section.
  AlignedFloats in_weights;
  PackedBView wq, wk, wv;
  PackedBView wqkv;  // all three, valid when `fused`
  bool fused = false;
  std::size_t q_cols = 0, k_cols = 0, v_cols = 0;  // padded section widths
  AlignedFloats in_bias;                           // [q_cols + k_cols + v_cols]
  AlignedFloats out_weights;
  PackedBView wo;
  AlignedFloats out_bias;  // [E], or null
  // A bf16 object: the four weights rounded to bf16 and packed for the bf16
  // GEMM, in one allocation (the fp32 packs above stay empty); with bf16
  // kernels and whole strips, Wq, Wk and Wv packed back to back are one B
  // (wqkv16, `fused`), as in fp32.
  bool bf16 = false;
  const GemmBf16Kernels* core16 = nullptr;  // AttentionEngine::core_bf16
  AlignedFloats bf16_weights;
  PackedBf16B wq16, wk16, wv16, wo16, wqkv16;
};

namespace {

PackedBView pack_weight(const GemmKernels& g, const float* w, std::size_t out_features,
                        std::size_t in_features, float* dst) {
  // w is [out, in] row-major; the GEMM wants op(B) = wᵀ, [in x out].
  return pack_b(g, Trans::T, in_features, out_features, w, in_features, dst);
}

// An fp32 object's weights: Wq, Wk, Wv packed side by side (one GEMM when
// the inputs are shared), Wo on its own.
void pack_fp32_weights(const GemmKernels& g, const AttentionShape& s, const mha_weights& w,
                       AttentionEngine::Impl& m) {
  const std::size_t E = s.embed_dim, kv = s.kv_dim();
  // packed_b_floats(g, k, n) is round_up(n, nr) * k: checked here, as these
  // are the sizes allocated.
  const std::size_t q_floats = checked_mul(E, m.q_cols, "packed q_weight");
  const std::size_t k_floats = checked_mul(s.kdim, m.k_cols, "packed k_weight");
  const std::size_t v_floats = checked_mul(s.vdim, m.v_cols, "packed v_weight");
  const std::size_t in_floats =
      checked_add(checked_add(q_floats, k_floats, "packed weights"), v_floats, "packed weights");
  float_bytes(in_floats, "packed weights");
  m.in_weights = alloc_floats(in_floats);
  float* dst = m.in_weights.get();
  m.wq = pack_weight(g, w.q_weight, E, E, dst);
  m.wk = pack_weight(g, w.k_weight, kv, s.kdim, dst + q_floats);
  m.wv = pack_weight(g, w.v_weight, kv, s.vdim, dst + q_floats + k_floats);
  m.fused = s.kdim == E && s.vdim == E;
  if (m.fused) m.wqkv = PackedBView::whole(dst, E, m.q_cols + m.k_cols + m.v_cols, g.nr);
  m.out_weights = alloc_floats(packed_b_floats(g, E, E));
  m.wo = pack_weight(g, w.out_weight, E, E, m.out_weights.get());
}

// A bf16 object's weights: each [out, in] weight rounded to bf16 and packed
// as the bf16 GEMM's op(B) = wᵀ, all four in m.bf16_weights.
void pack_bf16_weights(const GemmKernels& g, const AttentionShape& s, const mha_weights& w,
                       AttentionEngine::Impl& m) {
  const GemmBf16Kernels* g16 = m.core16;
  const std::size_t E = s.embed_dim, kv = s.kv_dim();
  struct Weight {
    const float* w;
    std::size_t out, in;
    PackedBf16B* dst;
  };
  const Weight weights[] = {{w.q_weight, E, E, &m.wq16},
                            {w.k_weight, kv, s.kdim, &m.wk16},
                            {w.v_weight, kv, s.vdim, &m.wv16},
                            {w.out_weight, E, E, &m.wo16}};
  std::size_t floats = 0, largest = 0;
  for (const Weight& x : weights) {
    // Either packed layout (bf16 pairs or fp32, strips of at most 64
    // columns) takes at most (out + 64) x (in + 2) floats: checked first, so
    // packed_bf16_b_bytes cannot wrap; sections 64-byte aligned.
    float_bytes(checked_mul(checked_add(x.out, 64, "packed bf16 weights"),
                            checked_add(x.in, 2, "packed bf16 weights"), "packed bf16 weights"),
                "packed bf16 weights");
    floats = checked_add(
        floats, round_up(ceil_div(packed_bf16_b_bytes(g16, g, x.in, x.out), sizeof(float)), 16),
        "packed bf16 weights");
    largest = std::max(largest, x.out * x.in);
  }
  float_bytes(floats, "packed bf16 weights");
  m.bf16_weights = alloc_floats(floats);
  std::vector<std::uint16_t> rounded(largest);
  float* dst = m.bf16_weights.get();
  for (const Weight& x : weights) {
    fp32_to_bf16(x.out * x.in, x.w, rounded.data());
    *x.dst = pack_bf16_b(g16, g, Trans::T, x.in, x.out, rounded.data(), x.in, dst);
    dst += round_up(ceil_div(packed_bf16_b_bytes(g16, g, x.in, x.out), sizeof(float)), 16);
  }
  // Wk's strips right after Wq's, and Wv's after Wk's: then they are the
  // strips of one [E x (E + 2 kv)] B.
  const auto follows = [&](const PackedBf16B& a, const PackedBf16B& b) {
    return static_cast<const char*>(a.data) + packed_bf16_b_bytes(g16, g, a.k, a.n) == b.data;
  };
  m.fused = g16 != nullptr && s.kdim == E && s.vdim == E && E % g16->nr == 0 && kv % g16->nr == 0 &&
            follows(m.wq16, m.wk16) && follows(m.wk16, m.wv16);
  if (m.fused) m.wqkv16 = {g16, &g, E, E + 2 * kv, m.wq16.data};
}

}  // namespace

AttentionEngine::AttentionEngine(Isa isa, const AttentionShape& shape, const mha_weights& w,
                                 bool bf16)
    : isa_(isa), shape_(shape), impl_(std::make_unique<Impl>()) {
  const GemmKernels& g = gemm();
  const std::size_t E = shape.embed_dim, kv = shape.kv_dim();
  Impl& m = *impl_;
  m.q_cols = checked_round_up(E, g.nr, "embed_dim (in whole strips)");
  m.k_cols = checked_round_up(kv, g.nr, "num_kv_heads*head_dim (in whole strips)");
  m.v_cols = m.k_cols;
  const std::size_t cols =
      checked_add(m.q_cols, checked_mul(2, m.k_cols, "packed biases"), "packed biases");
  m.bf16 = bf16;
  if (bf16) {
    m.core16 = gemm_bf16_kernels(isa);
    pack_bf16_weights(g, shape, w, m);
  } else {
    pack_fp32_weights(g, shape, w, m);
  }
  m.in_bias = alloc_floats(cols);
  std::fill_n(m.in_bias.get(), cols, 0.0f);
  if (w.q_bias) std::copy_n(w.q_bias, E, m.in_bias.get());
  if (w.k_bias) std::copy_n(w.k_bias, kv, m.in_bias.get() + m.q_cols);
  if (w.v_bias) std::copy_n(w.v_bias, kv, m.in_bias.get() + m.q_cols + m.k_cols);
  if (w.out_bias) {
    m.out_bias = alloc_floats(E);
    std::copy_n(w.out_bias, E, m.out_bias.get());
  }
}

AttentionEngine::~AttentionEngine() = default;

const GemmBf16Kernels* AttentionEngine::core_bf16() const {
  return impl_->core16;
}

namespace {

struct Projected {
  float *q, *k, *v;  // scratch: RoPE rotates q and k in place
  std::size_t ldq, ldkv;
};

std::size_t in_cols(const AttentionEngine::Impl& m) {
  return m.q_cols + m.k_cols + m.v_cols;
}

std::size_t projection_floats(const AttentionEngine::Impl& m, const AttentionShape& s, bool fused,
                              std::size_t q_rows, std::size_t kv_rows) {
  return round_up(fused ? q_rows * in_cols(m) : q_rows * s.embed_dim + 2 * kv_rows * s.kv_dim(),
                  16);
}

// x[i][j] += bias[j] (bias may be null) and, if `round`, rounded to bf16,
// over rows [rows x cols] at stride ld, in parallel over blocks of rows
// (elementwise, so the same bits at any thread count).
void finish_rows(std::size_t rows, std::size_t cols, const float* bias, float* x, std::size_t ld,
                 bool round) {
  constexpr std::size_t kRows = 32;
  const double bytes = 8.0 * static_cast<double>(rows) * static_cast<double>(cols);
  parallel_for(ceil_div(rows, kRows), threads_for({0, bytes}), [&](std::size_t t) {
    const std::size_t r0 = t * kRows, n = std::min(kRows, rows - r0);
    float* xr = x + r0 * ld;
    if (round) {
      add_bias_round_bf16(n, cols, bias, xr, ld);
    } else if (bias != nullptr) {
      for (std::size_t i = 0; i < n; ++i)
        for (std::size_t j = 0; j < cols; ++j) xr[i * ld + j] += bias[j];
    }
  });
}

// Q, K, V in [rows, features] layout: the attention core reads each head as a
// strided column block, so there is no head-split copy. A bf16 object's
// inputs are rounded to bf16 by the products, and V comes out rounded; Q
// and K too unless RoPE will rotate them first (`rope`).
Projected project(const GemmKernels& g, const AttentionEngine::Impl& m, const AttentionShape& s,
                  bool fused, bool rope, std::size_t q_rows, std::size_t kv_rows,
                  const float* query, const float* key, const float* value, float* dst) {
  const std::size_t E = s.embed_dim, kvd = s.kv_dim();
  const float* bias = m.in_bias.get();
  if (m.bf16) {
    Projected p{dst, dst + q_rows * E, dst + q_rows * E + kv_rows * kvd, E, kvd};
    if (fused) {
      p = {dst, dst + E, dst + E + kvd, E + 2 * kvd, E + 2 * kvd};
      gemm_bf16_packed(Trans::N, q_rows, 1.0f, nullptr, query, E, m.wqkv16, 0.0f, dst, p.ldq);
    } else {
      gemm_bf16_packed(Trans::N, q_rows, 1.0f, nullptr, query, E, m.wq16, 0.0f, p.q, E);
      gemm_bf16_packed(Trans::N, kv_rows, 1.0f, nullptr, key, s.kdim, m.wk16, 0.0f, p.k, kvd);
      gemm_bf16_packed(Trans::N, kv_rows, 1.0f, nullptr, value, s.vdim, m.wv16, 0.0f, p.v, kvd);
    }
    finish_rows(q_rows, E, bias, p.q, p.ldq, !rope);
    finish_rows(kv_rows, kvd, bias + m.q_cols, p.k, p.ldkv, !rope);
    finish_rows(kv_rows, kvd, bias + m.q_cols + m.k_cols, p.v, p.ldkv, true);
    return p;
  }
  if (fused) {
    const std::size_t ld = in_cols(m);
    gemm_packed(g, Trans::N, q_rows, query, E, m.wqkv, 1.0f, 0.0f, dst, ld, bias);
    return {dst, dst + m.q_cols, dst + m.q_cols + m.k_cols, ld, ld};
  }
  float* pq = dst;
  float* pk = pq + q_rows * E;
  float* pv = pk + kv_rows * kvd;
  gemm_packed(g, Trans::N, q_rows, query, E, m.wq, 1.0f, 0.0f, pq, E, bias);
  gemm_packed(g, Trans::N, kv_rows, key, s.kdim, m.wk, 1.0f, 0.0f, pk, kvd, bias + m.q_cols);
  gemm_packed(g, Trans::N, kv_rows, value, s.vdim, m.wv, 1.0f, 0.0f, pv, kvd,
              bias + m.q_cols + m.k_cols);
  return {pq, pk, pv, E, kvd};
}

}  // namespace

// The one pipeline of forward and step: project, lay out K and V (packed per
// call, or appended to a cache), attend, project. Scratch, from the calling
// thread: projections | packed K and V (per call only) | merged heads | core.
struct AttentionEngine::Pass {
  std::size_t batch, q_len;
  std::size_t kv_rows;  // key/value rows per batch row that this call projects
  const float *query, *key, *value;
  const mha_mask* mask;
  float* out;
  float* attn_weights;
  bool average_weights;
  KvCache* cache;  // nullptr: K and V packed for this call only
  AttentionMods mods;
  // Ragged sequences (batch 1, q_len and kv_rows their totals), or nullptr,
  // with their per-call arrays.
  const RaggedSeqs* ragged = nullptr;
  const RaggedArrays* arrays = nullptr;
  // A ragged step: sequence i appends to slot slots[i] of `paged`, its
  // kv_len(i) counting the slot's history and its new tokens.
  PagedKvCache* paged = nullptr;
  const std::size_t* slots = nullptr;

  std::size_t kv_len() const { return cache != nullptr ? cache->length_ + kv_rows : kv_rows; }
  // Positions (mha_mods) of the first query and key row this call projects.
  std::ptrdiff_t q_pos0() const {
    return static_cast<std::ptrdiff_t>(kv_len()) - static_cast<std::ptrdiff_t>(q_len);
  }
  std::ptrdiff_t k_pos0() const {
    return static_cast<std::ptrdiff_t>(kv_len()) - static_cast<std::ptrdiff_t>(kv_rows);
  }
  // The positions RoPE needs: [rope_first(), rope_first() + rope_positions());
  // a ragged pass's table holds one sequence's at a time.
  std::ptrdiff_t rope_first() const { return std::min(q_pos0(), k_pos0()); }
  std::size_t rope_positions() const {
    if (mods.rope_dim == 0) return 0;
    if (ragged != nullptr) {
      std::size_t most = 0;
      for (std::size_t b = 0; b < ragged->num; ++b) most = std::max(most, rope_positions(b));
      return most;
    }
    const std::ptrdiff_t end = std::max(q_pos0() + static_cast<std::ptrdiff_t>(q_len),
                                        k_pos0() + static_cast<std::ptrdiff_t>(kv_rows));
    return static_cast<std::size_t>(end - rope_first());
  }

  // Sequence b of a ragged pass: the key rows this call projects (all its
  // keys, or a step's new ones), and the positions of its first query and
  // first projected key; both end at its kv_len.
  std::size_t new_keys(std::size_t b) const {
    return paged != nullptr ? ragged->q_len(b) : ragged->kv_len(b);
  }
  std::size_t key_row0(std::size_t b) const {
    return paged != nullptr ? ragged->q_start[b] : ragged->kv_start[b];
  }
  std::ptrdiff_t q_pos0(std::size_t b) const {
    return static_cast<std::ptrdiff_t>(ragged->kv_len(b)) -
           static_cast<std::ptrdiff_t>(ragged->q_len(b));
  }
  std::ptrdiff_t k_pos0(std::size_t b) const {
    return static_cast<std::ptrdiff_t>(ragged->kv_len(b) - new_keys(b));
  }
  std::ptrdiff_t rope_first(std::size_t b) const { return std::min(q_pos0(b), k_pos0(b)); }
  std::size_t rope_positions(std::size_t b) const {
    return static_cast<std::size_t>(static_cast<std::ptrdiff_t>(ragged->kv_len(b)) - rope_first(b));
  }
};

struct AttentionEngine::Layout {
  bool fused;
  std::size_t proj, packed, merged, rope;
  KvPacking packing;
  CorePlan plan;
  RaggedPlan ragged;  // for a ragged pass; plan and packing are its own
  std::size_t total() const { return proj + packed + merged + rope + plan.workspace_floats; }
};

AttentionEngine::Layout AttentionEngine::layout(const Pass& a) const {
  const GemmKernels& g = gemm();
  const Impl& m = *impl_;
  const std::size_t q_rows = a.batch * a.q_len, kv_rows = a.batch * a.kv_rows;
  Layout f;
  f.fused = m.fused && a.query == a.key && a.key == a.value && a.q_len == a.kv_rows;
  f.proj = projection_floats(m, shape_, f.fused, q_rows, kv_rows);
  f.packing =
      kv_packing(g, shape_, a.batch, a.kv_rows, a.ragged != nullptr ? nullptr : core_bf16());
  f.packed = a.cache != nullptr ? 0 : f.packing.floats;
  f.merged = round_up(q_rows * shape_.embed_dim, 16);
  f.rope = round_up(rope_table_floats(a.mods, a.rope_positions()), 16);
  if (a.ragged != nullptr) {
    f.ragged = plan_ragged(g, shape_, *a.ragged, a.paged != nullptr ? a.paged->block_tokens() : 0,
                           *a.arrays, core_bf16());
    f.packing = f.ragged.packing;
    f.packed = a.paged != nullptr ? 0 : f.packing.floats;
    f.plan = f.ragged.core;
    return f;
  }
  f.plan = plan_core(g, shape_, a.batch, a.q_len, a.kv_len(), a.attn_weights != nullptr,
                     a.average_weights, a.mods.window, core_bf16());
  return f;
}

void AttentionEngine::run(const Pass& a) const {
  const GemmKernels& g = gemm();
  const Impl& m = *impl_;
  const AttentionShape& s = shape_;
  const std::size_t E = s.embed_dim, q_rows = a.batch * a.q_len;
  const Layout f = layout(a);
  float* ws = thread_scratch(ScratchSlot::kAttention, f.total());
  float* merged = ws + f.proj + f.packed;
  float* rope = merged + f.merged;
  float* core_ws = rope + f.rope;
  const bool rotate = a.mods.rope_dim != 0;
  const Projected p =
      project(g, m, s, f.fused, rotate, q_rows, a.batch * a.kv_rows, a.query, a.key, a.value, ws);
  // Rotated once here, before K is packed or cached: the cache holds
  // rotated keys, as the models' caches do.
  if (rotate && a.ragged == nullptr) {
    rope_table(a.mods, a.rope_first(), a.rope_positions(), rope);
    rope_apply(a.mods, rope, a.rope_first(), a.q_pos0(), a.batch, a.q_len, s.num_heads, s.head_dim,
               p.q, p.ldq);
    rope_apply(a.mods, rope, a.rope_first(), a.k_pos0(), a.batch, a.kv_rows, s.num_kv_heads,
               s.head_dim, p.k, p.ldkv);
  }
  if (rotate && a.ragged != nullptr) {
    const RaggedSeqs& r = *a.ragged;
    for (std::size_t b = 0; b < r.num; ++b) {
      rope_table(a.mods, a.rope_first(b), a.rope_positions(b), rope);
      rope_apply(a.mods, rope, a.rope_first(b), a.q_pos0(b), 1, r.q_len(b), s.num_heads, s.head_dim,
                 p.q + r.q_start[b] * p.ldq, p.ldq);
      rope_apply(a.mods, rope, a.rope_first(b), a.k_pos0(b), 1, a.new_keys(b), s.num_kv_heads,
                 s.head_dim, p.k + a.key_row0(b) * p.ldkv, p.ldkv);
    }
  }
  if (rotate && m.bf16) {
    // A bf16 object's Q and K enter Q·Kᵀ rounded, after their rotation.
    finish_rows(q_rows, s.embed_dim, nullptr, p.q, p.ldq, true);
    finish_rows(a.batch * a.kv_rows, s.kv_dim(), nullptr, p.k, p.ldkv, true);
  }
  // K and V laid out once per (batch, kv head) in the GEMM's B layout and
  // shared by every query head of the group (GQA without copies); a ragged
  // pass's views (each sequence's keys) go to its arrays.
  if (a.paged != nullptr) {
    a.paged->append(a.slots, *a.ragged, p.k, p.v, p.ldkv, a.arrays->views);
  } else if (a.ragged != nullptr) {
    pack_kv_ragged(g, s, f.ragged, *a.ragged, p.k, p.v, p.ldkv, ws + f.proj, a.arrays->views);
  }
  const KvCacheView kv = a.cache != nullptr    ? a.cache->append(p.k, p.v, p.ldkv, a.kv_rows)
                         : a.ragged != nullptr ? KvCacheView{}
                                               : pack_kv(g, s, f.packing, a.batch, a.kv_rows, p.k,
                                                         p.v, p.ldkv, ws + f.proj);
  const CoreInputs in{p.q, p.ldq, a.batch, a.q_len, kv, a.mask, merged, E, a.mods};
  try {
    // run_core writes the weights; the output projection must not then fail
    // for want of this thread's scratch (a call changes nothing or succeeds).
    if (a.attn_weights != nullptr) {
      if (m.bf16) {
        reserve_gemm_bf16_packed(q_rows, m.wo16);
      } else {
        reserve_gemm_packed(g, q_rows, m.wo);
      }
    }
    if (a.ragged != nullptr) {
      run_core_ragged(g, softmax(), s, f.ragged, *a.ragged, p.q, p.ldq, a.arrays->views, a.mods,
                      merged, E, core_ws);
    } else {
      run_core(g, softmax(), s, f.plan, in, a.attn_weights, a.average_weights, core_ws);
    }
    if (m.bf16) {
      gemm_bf16_packed(Trans::N, q_rows, 1.0f, nullptr, merged, E, m.wo16, 0.0f, a.out, E);
      finish_rows(q_rows, E, m.out_bias.get(), a.out, E, false);
    } else {
      gemm_packed(g, Trans::N, q_rows, merged, E, m.wo, 1.0f, 0.0f, a.out, E, m.out_bias.get());
    }
  } catch (...) {
    // A cache keeps its length and contents unless the whole step succeeds.
    if (a.cache != nullptr) a.cache->clear(a.cache->length_, kv.len);
    throw;
  }
  if (a.cache != nullptr) a.cache->length_ = kv.len;
}

std::size_t AttentionEngine::forward_workspace_floats(const ForwardArgs& a) const {
  return layout(forward_pass(a)).total();
}

AttentionEngine::Pass AttentionEngine::forward_pass(const ForwardArgs& a) {
  return {a.batch, a.q_len, a.kv_len,       a.query,           a.key,   a.value,
          a.mask,  a.out,   a.attn_weights, a.average_weights, nullptr, a.mods};
}

void AttentionEngine::forward(const ForwardArgs& a) const {
  run(forward_pass(a));
}

void AttentionEngine::forward_ragged(const RaggedSeqs& seqs, const float* query, const float* key,
                                     const float* value, const AttentionMods& mods,
                                     float* out) const {
  const RaggedArrays arrays = RaggedArrays::take(seqs.num);
  Pass a{1,
         seqs.q_start[seqs.num],
         seqs.kv_start[seqs.num],
         query,
         key,
         value,
         nullptr,
         out,
         nullptr,
         false,
         nullptr,
         mods};
  a.ragged = &seqs;
  a.arrays = &arrays;
  run(a);
}

void AttentionEngine::step_ragged(PagedKvCache& cache, std::size_t num, const std::size_t* slots,
                                  const std::size_t* q_start, const float* query, const float* key,
                                  const float* value, const AttentionMods& mods, float* out) const {
  // Each sequence's keys: the slot's history, then its new tokens.
  const RaggedArrays arrays = RaggedArrays::take(num);
  std::size_t* kv_start = arrays.kv_start;
  kv_start[0] = 0;
  for (std::size_t i = 0; i < num; ++i) {
    kv_start[i + 1] = kv_start[i] + cache.length(slots[i]) + (q_start[i + 1] - q_start[i]);
  }
  const RaggedSeqs seqs{num, q_start, kv_start};
  cache.reserve(slots, seqs);
  const std::size_t rows = q_start[num];
  Pass a{1, rows, rows, query, key, value, nullptr, out, nullptr, false, nullptr, mods};
  a.mods.causal = true;
  a.ragged = &seqs;
  a.arrays = &arrays;
  a.paged = &cache;
  a.slots = slots;
  try {
    run(a);
  } catch (...) {
    cache.rollback(slots, seqs);
    throw;
  }
  cache.commit(slots, seqs, mods.window);
}

void AttentionEngine::step(KvCache& cache, std::size_t n_new, const float* query, const float* key,
                           const float* value, float* out, const AttentionMods& mods) const {
  mha_mask causal{};
  causal.causal = 1;
  run({cache.batch_, n_new, n_new, query, key, value, &causal, out, nullptr, false, &cache, mods});
}

// A cache's blocks are K and V per (batch, kv head), in the layouts of
// core.hpp with room for max_len keys: K as packed Kᵀ columns, V row-major
// (or both bf16, for a bf16 object's core).
struct KvCache::Storage {
  KvPacking packing;
  AlignedFloats data;
};

KvCache::KvCache(const AttentionEngine& engine, std::size_t batch, std::size_t max_len)
    : engine_(engine), batch_(batch), max_len_(max_len), storage_(std::make_unique<Storage>()) {
  storage_->packing = kv_packing(engine.gemm(), engine.shape(), batch, max_len, engine.core_bf16());
  // Left untouched: pages of positions never reached are never backed, and
  // append() zeroes each K strip as it enters it.
  storage_->data = alloc_floats(storage_->packing.floats);
}

KvCache::~KvCache() = default;

PackedBColumns KvCache::keys(std::size_t block) const {
  const AttentionShape& s = engine_.shape();
  return {storage_->data.get() + block * storage_->packing.k_stride, s.head_dim, max_len_,
          engine_.gemm().nr};
}

float* KvCache::values(std::size_t block) const {
  const KvPacking& pk = storage_->packing;
  return storage_->data.get() + batch_ * engine_.shape().num_kv_heads * pk.k_stride +
         block * pk.v_stride;
}

KvCacheView KvCache::view(std::size_t len) const {
  return kv_view(engine_.gemm(), engine_.shape(), storage_->packing, batch_, len,
                 storage_->data.get());
}

KvCacheView KvCache::append(const float* k, const float* v, std::size_t ld, std::size_t n_new) {
  const AttentionShape& s = engine_.shape();
  const std::size_t d = s.head_dim, kvh = s.num_kv_heads, ldv = storage_->packing.ldv;
  const KvCacheView all = view(max_len_);
  for (std::size_t b = 0; b < batch_; ++b) {
    for (std::size_t gh = 0; gh < kvh; ++gh) {
      for (std::size_t t = 0; t < n_new; ++t) {
        const std::size_t pos = length_ + t, row = b * n_new + t;
        const float* krow = k + row * ld + gh * d;
        const float* vrow = v + row * ld + gh * d;
        if (all.g16 != nullptr) {
          put_key_bf16(all, b, gh, pos, krow, vrow);
          continue;
        }
        // A strip's columns past the length must read as zero (core.hpp).
        const PackedBColumns kb = keys(b * kvh + gh);
        if (pos % kb.nr == 0) kb.clear_strip(pos);
        kb.write(pos, krow);
        std::copy_n(vrow, d, values(b * kvh + gh) + pos * ldv);
      }
    }
  }
  return view(length_ + n_new);
}

// Zeroes K columns [from, to): the packed layout promises zero past the
// length. (fp32 V rows past the length are never read; bf16 V pairs are,
// times a zero P, so they must not hold a stale infinity or NaN.)
void KvCache::clear(std::size_t from, std::size_t to) {
  const std::size_t kvh = engine_.shape().num_kv_heads;
  const KvCacheView all = view(max_len_);
  for (std::size_t blk = 0; blk < batch_ * kvh; ++blk) {
    for (std::size_t pos = from; pos < to; ++pos) {
      if (all.g16 != nullptr) {
        clear_key_bf16(all, blk / kvh, blk % kvh, pos);
      } else {
        keys(blk).clear(pos);
      }
    }
  }
}

void KvCache::truncate(std::size_t len) {
  clear(len, length_);
  length_ = std::min(length_, len);
}

}  // namespace mha::detail
