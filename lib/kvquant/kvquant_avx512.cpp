// The avx512 quantized-KV kernel table (compiled with this ISA's flags only):
// 32 zmm registers, 8 query rows per score tile, 6 per P·V tile.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kvquant/kvquant_kernels.hpp"

namespace mha::detail {
namespace {

using kvq::kStrip;

// Four perfect shuffles of 16 registers, within each 128-bit lane: unit u of
// register r goes to register (r, u)'s bits rotated left by four, so a lane
// of 16 x 16 bytes is transposed (x[i] lane L: unit i of each register's
// lane L), and a lane of 16 x 8 words becomes x[2g + r / 8] holding word g
// of registers r = 8(r / 8) .. + 7, in order (format.cpp's transpose, four
// lanes at once).
template <bool kWords>
[[gnu::always_inline]] inline void perfect_shuffles(__m512i (&x)[kStrip]) {
  for (int round = 0; round < 4; ++round) {
    __m512i y[kStrip];
#pragma GCC unroll 8
    for (std::size_t i = 0; i < kStrip / 2; ++i) {
      y[2 * i] =
          kWords ? _mm512_unpacklo_epi16(x[i], x[i + 8]) : _mm512_unpacklo_epi8(x[i], x[i + 8]);
      y[2 * i + 1] =
          kWords ? _mm512_unpackhi_epi16(x[i], x[i + 8]) : _mm512_unpackhi_epi8(x[i], x[i + 8]);
    }
#pragma GCC unroll 16
    for (std::size_t i = 0; i < kStrip; ++i) x[i] = y[i];
  }
}

__mmask64 first_bytes(std::size_t n) {
  return n >= 64 ? ~__mmask64{0} : (__mmask64{1} << n) - 1;
}

// kvq::strips_from_rows on zmm: a strip's 16 rows 64 codes at a time,
// transposed four 16 x 16 blocks at once, and their scales 32 groups at a
// time (V2-Lite b8 kv4096 int8 latent decode: 15 % of the step's samples
// in the SSE2 transposes).
void strips_from_rows(std::size_t d, const kvq::KeyRuns& keys, std::size_t n,
                      std::uint8_t* strips) {
  const std::size_t G = kvq::groups(d), rb = kvq::value_row_bytes(d), codes = G * kvq::kGroup;
  const auto dd = static_cast<std::ptrdiff_t>(d);
  for (std::size_t t = 0; t * kStrip < n; ++t) {
    std::uint8_t* strip = strips + t * kvq::key_strip_bytes(d);
    const std::uint8_t* rows = keys.row(t * kStrip, d);  // a strip's rows are consecutive
    const std::size_t m = std::min(kStrip, n - t * kStrip);
    __m512i x[kStrip];
    // Scales: group g0 + 8L + g of rows 0-7 in x[2g] lane L, of rows 8-15
    // in x[2g + 1] lane L; the two halves of its 16 lanes side by side.
    for (std::size_t g0 = 0; g0 < G; g0 += 32) {
      const std::size_t gn = std::min<std::size_t>(32, G - g0);
      const auto words = static_cast<__mmask32>(gn == 32 ? ~0u : (1u << gn) - 1);
#pragma GCC unroll 16
      for (std::size_t lane = 0; lane < kStrip; ++lane) {
        x[lane] = lane < m ? _mm512_maskz_loadu_epi16(words, rows + lane * rb + 2 * g0)
                           : _mm512_setzero_si512();
      }
      perfect_shuffles<true>(x);
      const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
      const __m512i hi = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
      for (std::size_t g = 0; g < 8 && g < gn; ++g) {
        const __m512i l01 = _mm512_permutex2var_epi64(x[2 * g], lo, x[2 * g + 1]);
        const __m512i l23 = _mm512_permutex2var_epi64(x[2 * g], hi, x[2 * g + 1]);
        const __m256i out[4] = {_mm512_castsi512_si256(l01), _mm512_extracti64x4_epi64(l01, 1),
                                _mm512_castsi512_si256(l23), _mm512_extracti64x4_epi64(l23, 1)};
        for (std::size_t l = 0; l < 4 && 8 * l + g < gn; ++l) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(strip + 2 * kStrip * (g0 + 8 * l + g)),
                              out[l]);
        }
      }
    }
    // Codes: channel c0 + 16L + i in x[i] lane L; a store takes four
    // channels, lane L of four registers.
    std::uint8_t* channels = strip + 2 * kStrip * G;
    for (std::size_t c0 = 0; c0 < d; c0 += 64) {
      const __mmask64 have = first_bytes(codes - c0);  // rows hold whole groups
#pragma GCC unroll 16
      for (std::size_t lane = 0; lane < kStrip; ++lane) {
        x[lane] = lane < m ? _mm512_maskz_loadu_epi8(have, rows + lane * rb + 2 * G + c0)
                           : _mm512_setzero_si512();
      }
      perfect_shuffles<false>(x);
#pragma GCC unroll 4
      for (std::size_t k = 0; k < 4; ++k) {
        const __m512i* r = x + 4 * k;
        const __m512i t0 = _mm512_shuffle_i64x2(r[0], r[1], 0x44);
        const __m512i t1 = _mm512_shuffle_i64x2(r[0], r[1], 0xEE);
        const __m512i t2 = _mm512_shuffle_i64x2(r[2], r[3], 0x44);
        const __m512i t3 = _mm512_shuffle_i64x2(r[2], r[3], 0xEE);
        const __m512i y[4] = {
            _mm512_shuffle_i64x2(t0, t2, 0x88), _mm512_shuffle_i64x2(t0, t2, 0xDD),
            _mm512_shuffle_i64x2(t1, t3, 0x88), _mm512_shuffle_i64x2(t1, t3, 0xDD)};
#pragma GCC unroll 4
        for (std::size_t l = 0; l < 4; ++l) {
          const std::size_t c = c0 + 16 * l + 4 * k;
          const std::ptrdiff_t left =
              std::clamp<std::ptrdiff_t>(dd - static_cast<std::ptrdiff_t>(c), 0, 4);
          if (left == 4) {
            _mm512_storeu_si512(channels + kStrip * c, y[l]);
          } else if (left > 0) {
            _mm512_mask_storeu_epi8(channels + kStrip * c, first_bytes(kStrip * left), y[l]);
          }
        }
      }
    }
  }
}

constexpr KvQuantKernels table() {
  KvQuantKernels t = KvQuantImpl<xsimd::avx512f, 32, 8, 6>::table();
  t.strips_from_rows = &strips_from_rows;
  return t;
}

}  // namespace

constinit const KvQuantKernels kv_quant_kernels_avx512 = table();

}  // namespace mha::detail
