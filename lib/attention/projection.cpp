#include "attention/projection.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "common/checked.hpp"
#include "common/parallel.hpp"

namespace mha::detail {
namespace {

PackedBView pack_weight(const GemmKernels& g, const float* w, std::size_t out_features,
                        std::size_t in_features, float* dst) {
  // w is [out, in] row-major; the GEMM wants op(B) = wᵀ, [in x out].
  return pack_b(g, Trans::T, in_features, out_features, w, in_features, dst);
}

// An fp32 object's weights: Wq, Wk, Wv packed side by side (one GEMM when
// the inputs are shared), Wo on its own.
void pack_fp32_weights(const GemmKernels& g, const AttentionShape& s, const mha_weights& w,
                       ProjectionWeights& m) {
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
                       ProjectionWeights& m) {
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

std::size_t in_cols(const ProjectionWeights& m) {
  return m.q_cols + m.k_cols + m.v_cols;
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

}  // namespace

std::size_t projection_floats(const ProjectionWeights& m, const AttentionShape& s, bool fused,
                              std::size_t q_rows, std::size_t kv_rows) {
  return round_up(fused ? q_rows * in_cols(m) : q_rows * s.embed_dim + 2 * kv_rows * s.kv_dim(),
                  16);
}

Projected project(const GemmKernels& g, const ProjectionWeights& m, const AttentionShape& s,
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
    gemm_prepacked_b(g, Trans::N, q_rows, query, E, m.wqkv, 1.0f, 0.0f, dst, ld, bias);
    return {dst, dst + m.q_cols, dst + m.q_cols + m.k_cols, ld, ld};
  }
  float* pq = dst;
  float* pk = pq + q_rows * E;
  float* pv = pk + kv_rows * kvd;
  gemm_prepacked_b(g, Trans::N, q_rows, query, E, m.wq, 1.0f, 0.0f, pq, E, bias);
  gemm_prepacked_b(g, Trans::N, kv_rows, key, s.kdim, m.wk, 1.0f, 0.0f, pk, kvd, bias + m.q_cols);
  gemm_prepacked_b(g, Trans::N, kv_rows, value, s.vdim, m.wv, 1.0f, 0.0f, pv, kvd,
                   bias + m.q_cols + m.k_cols);
  return {pq, pk, pv, E, kvd};
}

ProjectionWeights::ProjectionWeights(const GemmKernels& g, const GemmBf16Kernels* g16,
                                     const AttentionShape& shape, const mha_weights& w,
                                     bool bf16_object) {
  const std::size_t E = shape.embed_dim, kv = shape.kv_dim();
  ProjectionWeights& m = *this;
  m.q_cols = checked_round_up(E, g.nr, "embed_dim (in whole strips)");
  m.k_cols = checked_round_up(kv, g.nr, "num_kv_heads*head_dim (in whole strips)");
  m.v_cols = m.k_cols;
  const std::size_t cols =
      checked_add(m.q_cols, checked_mul(2, m.k_cols, "packed biases"), "packed biases");
  m.bf16 = bf16_object;
  if (bf16_object) {
    m.core16 = g16;
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

void round_rotated(const AttentionShape& s, const Projected& p, std::size_t q_rows,
                   std::size_t kv_rows) {
  finish_rows(q_rows, s.embed_dim, nullptr, p.q, p.ldq, true);
  finish_rows(kv_rows, s.kv_dim(), nullptr, p.k, p.ldkv, true);
}

void project_out(const GemmKernels& g, const ProjectionWeights& m, const AttentionShape& s,
                 std::size_t rows, const float* merged, float* out) {
  const std::size_t E = s.embed_dim;
  if (m.bf16) {
    gemm_bf16_packed(Trans::N, rows, 1.0f, nullptr, merged, E, m.wo16, 0.0f, out, E);
    finish_rows(rows, E, m.out_bias.get(), out, E, false);
  } else {
    gemm_prepacked_b(g, Trans::N, rows, merged, E, m.wo, 1.0f, 0.0f, out, E, m.out_bias.get());
  }
}

void reserve_project_out(const GemmKernels& g, const ProjectionWeights& m, std::size_t rows) {
  if (m.bf16) {
    reserve_gemm_bf16_packed(rows, m.wo16);
  } else {
    reserve_gemm_prepacked_b(g, rows, m.wo);
  }
}

}  // namespace mha::detail
