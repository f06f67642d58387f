// bf16 GEMM kernels for AVX2 + FMA, which has no bf16 arithmetic: B stays
// bf16 in the K-pair layout of gemm_bf16.hpp (half the bytes of fp32, which
// is what a decode step streams) and each pair is widened to fp32 in
// registers: a 32-bit lane (even, odd) gives the even element as lane << 16
// and the odd one as lane & 0xffff0000, both exact.
//
// A is widened once, when packed or rounded (a_bytes = 4), so each of its
// elements is a plain fp32 broadcast from memory.
//
// Per element, the order of vdpbf16ps: acc = fma(a_odd, b_odd, acc), then
// fma(a_even, b_even, acc); each bf16 product is exact in fp32, so each step
// rounds once, as there; unlike there, denormals are kept (IEEE).
//
// Tile 5 x 16: 10 ymm accumulators, 4 widened B vectors and one A
// broadcast, 15 of the 16 registers; per pair of k, 20 FMAs against 4
// integer ops and 12 loads. With A widened in the kernel instead (4 x 16,
// 12 integer ops per 16 FMAs) a BERT s512 bf16 forward ran 621 M
// instructions, against 595 M now (callgrind).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "gemm/bf16_pack.hpp"
#include "gemm/bf16_tiles.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_avx2_widen {
namespace {

struct avx2_widen_tag {};

constexpr std::size_t kMR = 5, kNV = 2, kW = 8, kNR = kNV * kW;

// Lanes [0, lanes) of a store or load mask.
__m256i lane_mask(std::size_t lanes) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__m256 even_half(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16));
}
__m256 odd_half(__m256i pairs) {
  return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(-65536)));
}

// c[0, lanes) = alpha·acc + beta·c (c read only with kBeta), lanes <= kW.
template <bool kBeta>
void store(float* c, __m256 acc, std::size_t lanes, __m256 va, __m256 vb) {
  __m256 x = _mm256_mul_ps(acc, va);
  if (lanes == kW) {
    if constexpr (kBeta) x = _mm256_add_ps(x, _mm256_mul_ps(vb, _mm256_loadu_ps(c)));
    _mm256_storeu_ps(c, x);
  } else {
    const __m256i mask = lane_mask(lanes);
    if constexpr (kBeta) x = _mm256_add_ps(x, _mm256_mul_ps(vb, _mm256_maskload_ps(c, mask)));
    _mm256_maskstore_ps(c, mask, x);
  }
}

template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
void tile(std::size_t kp, const std::uint32_t* a, std::size_t lda, const std::uint16_t* b, float* c,
          std::size_t ldc, std::size_t n, float alpha, float beta) {
  const auto* af = reinterpret_cast<const float*>(a);
  __m256 acc[ROWS][NV];
  for (std::size_t i = 0; i < ROWS; ++i) {
    for (std::size_t v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  for (std::size_t p = 0; p < kp; ++p) {
    __m256 be[NV], bo[NV];
    for (std::size_t v = 0; v < NV; ++v) {
      const __m256i x =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + (p * kNR + v * kW) * 2));
      be[v] = even_half(x);
      bo[v] = odd_half(x);
    }
    for (std::size_t i = 0; i < ROWS; ++i) {
      const float* ap = af + (kRows ? i * lda + p : p * kMR + i) * 2;
      const __m256 ao = _mm256_broadcast_ss(ap + 1);
      for (std::size_t v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ao, bo[v], acc[i][v]);
      const __m256 ae = _mm256_broadcast_ss(ap);
      for (std::size_t v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ae, be[v], acc[i][v]);
    }
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  // Unrolled, or GCC 12 keeps acc in memory and stores all 10 accumulators
  // on every pair of k (a BERT s128 bf16 forward: 117.7 M instructions
  // then, 97.3 M unrolled, callgrind).
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 4
    for (std::size_t v = 0; v < NV; ++v) {
      const std::size_t j = v * kW;
      store<kBeta>(c + i * ldc + j, acc[i][v], n - j < kW ? n - j : kW, va, vb);
    }
  }
}

struct Tiles {
  template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
  static constexpr bf16_tiles::TileFn fn = &tile<ROWS, NV, kBeta, kRows>;
};
using Entries = bf16_tiles::Dispatch<Tiles, kMR, kNV, kW>;

// One row against S strips: 2S independent chains instead of ukernel's 2.
template <std::size_t S, bool kBeta>
void row_strips(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
                std::size_t b_strip, float* c, std::size_t n, float alpha, float beta) {
  const auto* af = reinterpret_cast<const float*>(a);
  __m256 acc[S][kNV];
  for (std::size_t s = 0; s < S; ++s) {
    for (std::size_t v = 0; v < kNV; ++v) acc[s][v] = _mm256_setzero_ps();
  }
  for (std::size_t p = 0; p < kp; ++p) {
    const __m256 ae = _mm256_broadcast_ss(af + p * as * 2);
    const __m256 ao = _mm256_broadcast_ss(af + p * as * 2 + 1);
    for (std::size_t s = 0; s < S; ++s) {
      for (std::size_t v = 0; v < kNV; ++v) {
        const __m256i x = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(b + s * b_strip + (p * kNR + v * kW) * 2));
        acc[s][v] = _mm256_fmadd_ps(ao, odd_half(x), acc[s][v]);
        acc[s][v] = _mm256_fmadd_ps(ae, even_half(x), acc[s][v]);
      }
    }
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
  for (std::size_t s = 0; s < S; ++s) {
    for (std::size_t v = 0; v < kNV; ++v) {
      const std::size_t j = s * kNR + v * kW;
      if (j >= n) return;
      store<kBeta>(c + j, acc[s][v], n - j < kW ? n - j : kW, va, vb);
    }
  }
}

template <bool kBeta>
void row1(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
          std::size_t b_strip, float* c, std::size_t n, float alpha, float beta) {
  switch ((n + kNR - 1) / kNR) {
    case 1:
      return row_strips<1, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
    case 2:
      return row_strips<2, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
    case 3:
      return row_strips<3, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
    default:
      return row_strips<4, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
  }
}

void ukernel_row1(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
                  std::size_t b_strip, float* c, std::size_t n, float alpha, float beta) {
  if (beta == 0.f) {
    row1<false>(kp, a, as, b, b_strip, c, n, alpha, beta);
  } else {
    row1<true>(kp, a, as, b, b_strip, c, n, alpha, beta);
  }
}

// 8 lanes rounded to bf16 and kept as fp32 (fp32_to_bf16's rounding:
// nearest even, a NaN made quiet, denormals kept).
__m256 round8(__m256 x) {
  const __m256i u = _mm256_castps_si256(x);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
  const __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  const __m256i bits =
      _mm256_blendv_epi8(r, q, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
  return _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(-65536)));
}

void round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx, void* out,
                std::size_t ldy) {
  auto* const y = static_cast<float*>(out);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* xi = x + i * ldx;
    float* yi = y + i * ldy;
    std::size_t j = 0;
    for (; j + kW <= n; j += kW) _mm256_storeu_ps(yi + j, round8(_mm256_loadu_ps(xi + j)));
    if (j < n) {
      const __m256i mask = lane_mask(n - j);
      _mm256_maskstore_ps(yi + j, mask, round8(_mm256_maskload_ps(xi + j, mask)));
    }
    if (n % 2 != 0) yi[n] = 0.f;
  }
}

}  // namespace
}  // namespace gemm_bf16_avx2_widen

const GemmBf16Kernels gemm_bf16_kernels_avx2_widen{
    "avx2_widen",
    gemm_bf16_avx2_widen::kMR,
    gemm_bf16_avx2_widen::kNR,
    kBf16MC,
    kBf16KC,
    kBf16NC,
    &gemm_bf16_avx2_widen::Entries::ukernel,
    &gemm_bf16_avx2_widen::Entries::ukernel_rows,
    &gemm_bf16_avx2_widen::round_rows,
    &bf16_pack::pack_a<gemm_bf16_avx2_widen::avx2_widen_tag, gemm_bf16_avx2_widen::kMR, true>,
    &bf16_pack::pack_b<gemm_bf16_avx2_widen::avx2_widen_tag, gemm_bf16_avx2_widen::kNR>,
    false,
    &gemm_bf16_avx2_widen::ukernel_row1,
    4};

}  // namespace mha::detail
