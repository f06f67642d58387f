// AVX512_VNNI int8 kernels: vpdpbusd (_mm512_dpbusd_epi32), which multiplies
// unsigned bytes by signed ones, so the activation codes are stored as
// q + 128 and each column's sum starts at -128 times its code sum (the
// int32 sums wrap and wrap back, so they stay exact; gemm_i8.hpp).
// Tile 6 x 64: 24 zmm accumulators + 4 B vectors + 1 broadcast; per four k,
// 24 vpdpbusd (64 multiply-adds each, twice vdpbf16ps's 32) against 4 loads
// and 6 broadcasts from 6 row streams (the bf16 set's 14 x 32 was tried
// first, before tree-PRE was found and switched off, and not measured
// since: 6 x 64 reaches 400-417 GOPS, m512 n768 k768, Zen 4).
// GCC 12's false positive on the intrinsics' _mm512_undefined_* (as in
// simd/lanes.hpp), set before their header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "gemm/gemm_i8.hpp"
#include "gemm/gemm_i8_tiles.hpp"

namespace mha::detail {
namespace {

constexpr std::size_t kMR = 6, kNV = 4, kW = 16, kNR = kNV * kW;

std::uint32_t load_quad(const std::uint8_t* p) {
  std::uint32_t q;
  std::memcpy(&q, p, 4);
  return q;
}

template <std::size_t ROWS>
MHA_NO_TREE_PRE void tile(std::size_t kq, const std::uint8_t* a, std::size_t lda,
                          const std::int8_t* b, const std::int32_t* start, const float* sa,
                          const float* sb, const float* bias, float* c, std::size_t ldc,
                          std::size_t n) {
  __m512i acc[ROWS][kNV];
#pragma GCC unroll 16
  for (std::size_t v = 0; v < kNV; ++v) {
    const __m512i s = _mm512_loadu_si512(start + v * kW);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) acc[i][v] = s;
  }
  for (std::size_t p = 0; p < kq; ++p, b += kNR * 4) {
    __m512i bv[kNV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kNV; ++v) bv[v] = _mm512_loadu_si512(b + v * kW * 4);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) {
      const __m512i ai = _mm512_set1_epi32(static_cast<int>(load_quad(a + i * lda + 4 * p)));
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kNV; ++v) acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], ai, bv[v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t i = 0; i < ROWS; ++i) {
    const __m512 vsa = _mm512_set1_ps(sa[i]);
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kNV; ++v) {
      const std::size_t lanes = n > v * kW ? std::min(kW, n - v * kW) : 0;
      const auto mask = static_cast<__mmask16>((1u << lanes) - 1u);
      const __m512 s = _mm512_mul_ps(vsa, _mm512_loadu_ps(sb + v * kW));
      __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(acc[i][v]), s);
      if (bias != nullptr) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, bias + v * kW));
      _mm512_mask_storeu_ps(c + i * ldc + v * kW, mask, y);
    }
  }
}

struct Tiles {
  template <std::size_t ROWS>
  static constexpr i8_tiles::TileFn fn = &tile<ROWS>;
};
using Entries = i8_tiles::Dispatch<Tiles, kMR>;

// ukernel_groups on columns [kV*16h, kV*16(h + 1)) of the strip: the integer
// sums of each group as ukernel's, then each FMA'd into an fp32 accumulator
// by its scale. int4 codes: each 64-byte load holds two k steps, split by a
// mask and a shift, less the stored offset of 8. Up to 2 rows take the
// strip's 4 vectors in one pass, so that a decode step streams its weights
// once (int4 g128 m1 n3072 k2048 from memory, Zen 4: 9.1 -> 21.5 GB/s
// against two passes); more rows take 2 vectors a pass, the registers
// holding twice as many accumulators.
template <std::size_t ROWS, std::size_t kV, bool kInt4>
MHA_NO_TREE_PRE void tile_groups(const I8Strip& b, std::size_t h, const std::uint8_t* a,
                                 std::size_t lda, const float* sa, const float* bias, float* c,
                                 std::size_t ldc, std::size_t n) {
  __m512 t[ROWS][kV];
#pragma GCC unroll 16
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) t[i][v] = _mm512_setzero_ps();
  }
  const __m512i low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  for (std::size_t g = 0, p0 = 0; p0 < b.kq; ++g, p0 += b.group_kq) {
    const std::size_t p1 = std::min(b.kq, p0 + b.group_kq);
    __m512i acc[ROWS][kV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) {
      const std::size_t at = g * b.stride + (kV * h + v) * kW;
      const __m512i s = _mm512_loadu_si512(b.start + at);
#pragma GCC unroll 16
      for (std::size_t i = 0; i < ROWS; ++i) acc[i][v] = s;
    }
    if constexpr (kInt4) {
      // Pairs of steps; a group's odd last step pairs with a zero code.
      for (std::size_t p = p0; p < p1; p += 2) {
        const std::int8_t* bp = b.codes + (p / 2 * kNR + kV * h * kW) * 4;
        __m512i lo[kV], hi[kV];
#pragma GCC unroll 16
        for (std::size_t v = 0; v < kV; ++v) {
          const __m512i raw = _mm512_loadu_si512(bp + v * kW * 4);
          lo[v] = _mm512_sub_epi8(_mm512_and_si512(raw, low), eight);
          hi[v] = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low), eight);
        }
#pragma GCC unroll 16
        for (std::size_t i = 0; i < ROWS; ++i) {
          const __m512i a0 = _mm512_set1_epi32(static_cast<int>(load_quad(a + i * lda + 4 * p)));
          const __m512i a1 =
              _mm512_set1_epi32(static_cast<int>(load_quad(a + i * lda + 4 * p + 4)));
#pragma GCC unroll 16
          for (std::size_t v = 0; v < kV; ++v) {
            acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], a0, lo[v]);
            acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], a1, hi[v]);
          }
        }
      }
    } else {
      for (std::size_t p = p0; p < p1; ++p) {
        const std::int8_t* bp = b.codes + (p * kNR + kV * h * kW) * 4;
        __m512i bv[kV];
#pragma GCC unroll 16
        for (std::size_t v = 0; v < kV; ++v) bv[v] = _mm512_loadu_si512(bp + v * kW * 4);
#pragma GCC unroll 16
        for (std::size_t i = 0; i < ROWS; ++i) {
          const __m512i ai = _mm512_set1_epi32(static_cast<int>(load_quad(a + i * lda + 4 * p)));
#pragma GCC unroll 16
          for (std::size_t v = 0; v < kV; ++v)
            acc[i][v] = _mm512_dpbusd_epi32(acc[i][v], ai, bv[v]);
        }
      }
    }
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) {
      const std::size_t at = g * b.stride + (kV * h + v) * kW;
      const __m512 s = _mm512_loadu_ps(b.scales + at);
      // uint4: less z - 8 times the row's group sum, after the sums rather
      // than in their start, so that vpmulld's latency stays off the chain.
      const __m512i z = b.zeros != nullptr ? _mm512_loadu_si512(b.zeros + at) : __m512i{};
#pragma GCC unroll 16
      for (std::size_t i = 0; i < ROWS; ++i) {
        if (b.zeros != nullptr) {
          acc[i][v] = _mm512_sub_epi32(
              acc[i][v], _mm512_mullo_epi32(z, _mm512_set1_epi32(group_sum(a + i * lda, b, g))));
        }
        t[i][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[i][v]), s, t[i][v]);
      }
    }
  }
#pragma GCC unroll 16
  for (std::size_t i = 0; i < ROWS; ++i) {
    const __m512 vsa = _mm512_set1_ps(sa[i]);
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) {
      const std::size_t col = (kV * h + v) * kW;
      const std::size_t lanes = n > col ? std::min(kW, n - col) : 0;
      const auto mask = static_cast<__mmask16>((1u << lanes) - 1u);
      __m512 y = _mm512_mul_ps(t[i][v], vsa);
      if (bias != nullptr) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mask, bias + col));
      _mm512_mask_storeu_ps(c + i * ldc + col, mask, y);
    }
  }
}

using GroupFn = void (*)(const I8Strip&, std::size_t, const std::uint8_t*, std::size_t,
                         const float*, const float*, float*, std::size_t, std::size_t);

template <bool kInt4, std::size_t... R>
constexpr auto make_group_tiles(std::index_sequence<R...>) {
  return std::array<GroupFn, sizeof...(R)>{&tile_groups<R + 1, (R < 2 ? kNV : 2), kInt4>...};
}
constexpr auto kGroupTiles = make_group_tiles<false>(std::make_index_sequence<kMR>());
constexpr auto kGroupTiles4 = make_group_tiles<true>(std::make_index_sequence<kMR>());

void ukernel_groups(const I8Strip& b, const std::uint8_t* a, std::size_t lda, const float* sa,
                    const float* bias, float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  const GroupFn fn = (b.int4 ? kGroupTiles4 : kGroupTiles)[m - 1];
  const std::size_t cols = (m <= 2 ? kNV : 2) * kW;
  for (std::size_t h = 0; h * cols < n; ++h) fn(b, h, a, lda, sa, bias, c, ldc, n);
}

// The header's rules 16 floats at a time: the division is IEEE's, and
// clamping before the conversion (nearest even, MXCSR's default) gives what
// clamping after rounding does, the bounds being integers.
void quantize(std::size_t k, const float* a, void* codes, float* scale) {
  const std::size_t full = k / kW * kW;
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (std::size_t p = 0; p < k; p += kW) {
    const auto mask = static_cast<__mmask16>(p < full ? 0xFFFFu : (1u << (k - p)) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(mask, a + p);
    bad |= _mm512_fpclass_ps_mask(x, 0x99);  // NaN, +inf, -inf
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(x));
  }
  const float s = i8_row_scale(_mm512_reduce_max_ps(vmax), bad == 0);
  *scale = s;
  auto* out = static_cast<std::uint8_t*>(codes);
  if (!(s > 0.0f)) {
    std::memset(out, 128, (k + 7) / 8 * 8);
    return;
  }
  const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (std::size_t p = 0; p < full; p += kW) {
    const __m512 q =
        _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(_mm512_loadu_ps(a + p), vs), lo), hi);
    const __m128i b = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + p), _mm_xor_si128(b, _mm_set1_epi8(-128)));
  }
  quantize_i8_from(1, 128, full, k, a, s, codes);
}

}  // namespace

const GemmI8Kernels gemm_i8_kernels_avx512_vnni = {
    "avx512_vnni", kMR, kNR, 4, 1, 128, Entries::ukernel, quantize, ukernel_groups};

}  // namespace mha::detail
