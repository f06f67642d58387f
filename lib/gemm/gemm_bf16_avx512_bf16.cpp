// AVX512_BF16 GEMM kernels: vdpbf16ps (_mm512_dpbf16_ps) over B packed in
// K-pairs, A broadcast one 32-bit pair at a time (layouts in gemm_bf16.hpp).
//
// Tile 14 x 32, as the fp32 AVX-512 kernel: 28 zmm accumulators + 2 B
// vectors + 1 broadcast of the 32 registers; per pair of k, 28 vdpbf16ps
// against 2 loads and 14 broadcasts, and 28 independent chains, more than
// the 24 that reach the measured vdpbf16ps peak on Zen 4 (229 GFLOP/s).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "gemm/bf16_pack.hpp"
#include "gemm/bf16_pack_avx512.hpp"
#include "gemm/bf16_round_avx512.hpp"
#include "gemm/bf16_tiles.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_avx512_bf16 {
namespace {

struct avx512_bf16_tag {};

constexpr std::size_t kMR = 14, kNV = 2, kW = 16, kNR = kNV * kW;

__mmask16 lane_mask(std::size_t lanes) {
  return static_cast<__mmask16>((1u << lanes) - 1u);
}

// ROWS x NV vectors of C from B's runs; only the first n columns are
// stored (masked), and C is read only when kBeta. A is a packed strip, or
// with kRows rows of pairs lda apart (ukernel_rows, ukernel_runs).
template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
void tile(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c, std::size_t ldc,
          std::size_t n, float alpha, float beta) {
  __m512 acc[ROWS][NV];
#pragma GCC unroll 32
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 2
    for (std::size_t v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  for (std::size_t r = 0; r < b.count; ++r) {
    const std::uint16_t* bp = b.run[r].b;
    for (std::size_t p = 0; p < b.run[r].pairs; ++p, bp += b.ld, a += kRows ? 1 : kMR) {
      __m512bh bv[NV];
#pragma GCC unroll 2
      for (std::size_t v = 0; v < NV; ++v) {
        bv[v] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(bp + v * kW * 2));
      }
#pragma GCC unroll 32
      for (std::size_t i = 0; i < ROWS; ++i) {
        const std::uint32_t pair = kRows ? a[i * lda] : a[i];
        const __m512bh ai = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(pair)));
#pragma GCC unroll 2
        for (std::size_t v = 0; v < NV; ++v) acc[i][v] = _mm512_dpbf16_ps(acc[i][v], ai, bv[v]);
      }
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
#pragma GCC unroll 32
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 2
    for (std::size_t v = 0; v < NV; ++v) {
      const std::size_t lanes = n - v * kW < kW ? n - v * kW : kW;
      const __mmask16 mask = lane_mask(lanes);
      float* p = c + i * ldc + v * kW;
      __m512 x = _mm512_mul_ps(acc[i][v], va);
      if constexpr (kBeta) x = _mm512_add_ps(x, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask, p)));
      _mm512_mask_storeu_ps(p, mask, x);
    }
  }
}

struct Tiles {
  template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
  static constexpr bf16_tiles::TileFn fn = &tile<ROWS, NV, kBeta, kRows>;
};
using Entries = bf16_tiles::Dispatch<Tiles, kMR, kNV, kW, 2 * kNR>;

// One row against S strips (decode steps): 2S independent vdpbf16ps chains
// where ukernel's one-row tile has 2, which leaves the pipes waiting on
// latency; ukernel's bits, as each lane's chain is the same.
template <std::size_t S, bool kBeta>
void row_strips(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
                std::size_t b_strip, float* c, std::size_t n, float alpha, float beta) {
  __m512 acc[S][kNV];
#pragma GCC unroll 4
  for (std::size_t s = 0; s < S; ++s) {
#pragma GCC unroll 2
    for (std::size_t v = 0; v < kNV; ++v) acc[s][v] = _mm512_setzero_ps();
  }
  for (std::size_t p = 0; p < kp; ++p) {
    const __m512bh ai = reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(a[p * as])));
#pragma GCC unroll 4
    for (std::size_t s = 0; s < S; ++s) {
#pragma GCC unroll 2
      for (std::size_t v = 0; v < kNV; ++v) {
        const __m512bh bv = reinterpret_cast<__m512bh>(
            _mm512_loadu_si512(b + s * b_strip + (p * kNR + v * kW) * 2));
        acc[s][v] = _mm512_dpbf16_ps(acc[s][v], ai, bv);
      }
    }
  }
  const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
  for (std::size_t s = 0; s < S; ++s) {
    for (std::size_t v = 0; v < kNV; ++v) {
      const std::size_t j = s * kNR + v * kW;
      if (j >= n) return;
      const __mmask16 mask = lane_mask(n - j < kW ? n - j : kW);
      __m512 x = _mm512_mul_ps(acc[s][v], va);
      if constexpr (kBeta) {
        x = _mm512_add_ps(x, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask, c + j)));
      }
      _mm512_mask_storeu_ps(c + j, mask, x);
    }
  }
}

struct Rows {
  template <std::size_t S, bool kBeta>
  static constexpr auto row_strips = &gemm_bf16_avx512_bf16::row_strips<S, kBeta>;
};

}  // namespace
}  // namespace gemm_bf16_avx512_bf16

const GemmBf16Kernels gemm_bf16_kernels_avx512_bf16 = with_runs(
    GemmBf16Kernels{
        "avx512_bf16", gemm_bf16_avx512_bf16::kMR, gemm_bf16_avx512_bf16::kNR, kBf16MC, kBf16KC,
        kBf16NC, &gemm_bf16_avx512_bf16::Entries::ukernel,
        &gemm_bf16_avx512_bf16::Entries::ukernel_rows,
        &bf16_round_avx512::round_rows<gemm_bf16_avx512_bf16::avx512_bf16_tag>,
        &bf16_pack::pack_a<gemm_bf16_avx512_bf16::avx512_bf16_tag, gemm_bf16_avx512_bf16::kMR>,
        &bf16_pack_avx512::pack_b<gemm_bf16_avx512_bf16::avx512_bf16_tag,
                                  gemm_bf16_avx512_bf16::kNR>,
        true,
        &bf16_tiles::RowDispatch<gemm_bf16_avx512_bf16::Rows,
                                 gemm_bf16_avx512_bf16::kNR>::ukernel_row1},
    &gemm_bf16_avx512_bf16::Entries::ukernel_runs);

}  // namespace mha::detail
