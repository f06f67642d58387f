// Lanes<avx512f>: what xsimd 8.1 lacks or gets wrong on AVX-512. Included by
// lanes.hpp in the AVX-512 translation units only.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <limits>

#include "simd/lanes.hpp"
#include "simd/lanes_x86.hpp"

namespace mha::detail::simd {

// xsimd 8.1 implements fma on avx512f as x*y+z, which -ffp-contract=off keeps
// as a separate multiply and add (half the peak, other bits): the instruction,
// for madd as well.
template <>
inline Lanes<xsimd::avx512f>::V Lanes<xsimd::avx512f>::fma(const V& a, const V& b,
                                                           const V& c) noexcept {
  return _mm512_fmadd_ps(a, b, c);
}
template <>
inline Lanes<xsimd::avx512f>::V Lanes<xsimd::avx512f>::madd(const V& a, const V& b,
                                                            const V& c) noexcept {
  return _mm512_fmadd_ps(a, b, c);
}

// vscalefps scales by 2^n exactly where the result is normal, as adding n
// to the exponent does, in one instruction rather than a shift and an add;
// with the range checks on masks, exp's finish takes 4 instructions rather
// than 7 (scale_exp_sum over 64 rows of 256 floats, 1 thread, AMX Xeon:
// 0.59 -> 0.52 TSC cycles per element).
template <>
inline Lanes<xsimd::avx512f>::V Lanes<xsimd::avx512f>::exp_finish(const V& x, const V& p,
                                                                  const V& n, const V&, float lo,
                                                                  float hi) noexcept {
  const __mmask16 in = _mm512_cmp_ps_mask(x, _mm512_set1_ps(lo), _CMP_NLT_UQ);
  const __mmask16 above = _mm512_cmp_ps_mask(x, _mm512_set1_ps(hi), _CMP_NLE_UQ);
  const __m512 y = _mm512_maskz_scalef_ps(in, p, n);
  return _mm512_mask_add_ps(y, above, x, _mm512_set1_ps(std::numeric_limits<float>::infinity()));
}
template <>
inline Lanes<xsimd::avx512f>::V Lanes<xsimd::avx512f>::exp_finish_low(const V& x, const V& p,
                                                                      const V& n, const V&,
                                                                      float lo) noexcept {
  const __mmask16 in = _mm512_cmp_ps_mask(x, _mm512_set1_ps(lo), _CMP_NLT_UQ);
  return _mm512_maskz_scalef_ps(in, p, n);
}

// 16 -> 8 -> 4 -> 2 -> 1 lanes, each step combining lane i with i + half.
template <>
template <bool kMax>
inline float Lanes<xsimd::avx512f>::reduce(const V& v) noexcept {
  using F = x86::Fold<xsimd::avx512f>;
  const __m512 z = v;
  const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1));
  if constexpr (kMax) return F::m256(F::Max{}(_mm512_castps512_ps256(z), hi), F::Max{});
  return F::m256(F::Add{}(_mm512_castps512_ps256(z), hi), F::Add{});
}

// Masked: lanes past `lanes` are neither read (no fault) nor written.
namespace avx512 {
inline __mmask16 first_lanes(std::size_t lanes) noexcept {
  return static_cast<__mmask16>((1u << lanes) - 1u);
}
}  // namespace avx512
template <>
inline Lanes<xsimd::avx512f>::V Lanes<xsimd::avx512f>::load_n(const float* p,
                                                              std::size_t lanes) noexcept {
  return _mm512_maskz_loadu_ps(avx512::first_lanes(lanes), p);
}
template <>
inline void Lanes<xsimd::avx512f>::store_n(float* p, const V& v, std::size_t lanes) noexcept {
  _mm512_mask_storeu_ps(p, avx512::first_lanes(lanes), v);
}

template <>
inline void Lanes<xsimd::avx512f>::widen_i8x16(const std::uint8_t* p, V* out) noexcept {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  out[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b));
}
template <>
inline Lanes<xsimd::avx512f>::V Lanes<xsimd::avx512f>::widen_i8(const std::int8_t* p) noexcept {
  return _mm512_cvtepi32_ps(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
template <>
inline void Lanes<xsimd::avx512f>::widen_s4(const std::int8_t* p, V& lo, V& hi) noexcept {
  const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  lo = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 28), 28));
  hi = _mm512_cvtepi32_ps(_mm512_srai_epi32(_mm512_slli_epi32(d, 24), 28));
}
template <>
inline void Lanes<xsimd::avx512f>::widen_u4(const std::int8_t* p, V& lo, V& hi) noexcept {
  const __m512i d = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  lo = _mm512_cvtepi32_ps(_mm512_and_si512(d, _mm512_set1_epi32(15)));
  hi = _mm512_cvtepi32_ps(_mm512_srli_epi32(d, 4));
}
// Sign-extended, shifted by 20, masked to the sign, exponent and mantissa.
template <>
inline void Lanes<xsimd::avx512f>::widen_e4m3x16(const std::uint8_t* p, V* out) noexcept {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m512i bits = _mm512_and_si512(_mm512_slli_epi32(_mm512_cvtepi8_epi32(b), 20),
                                        _mm512_set1_epi32(static_cast<int>(0x87F00000u)));
  out[0] = _mm512_mul_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(0x1p120f));
}
template <>
inline void Lanes<xsimd::avx512f>::widen_bf16x16(const std::uint16_t* p, V* out) noexcept {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  out[0] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// 16 x 16: 4 x 4 transposes inside each 128-bit lane (unpack, shuffle), then a
// 4 x 4 transpose of the lanes themselves (two shuffle_f32x4 rounds).
template <>
inline void Lanes<xsimd::avx512f>::transpose(V* r) noexcept {
  // The all-lanes mask forms: GCC 12's unmasked ones pass an undefined
  // vector that trips -Wmaybe-uninitialized (GCC PR105593).
  constexpr __mmask16 kAll = 0xFFFF;
  __m512 t[16], u[16];
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_mask_unpacklo_ps(r[2 * i], kAll, r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_mask_unpackhi_ps(r[2 * i], kAll, r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 4; ++q) {  // u[4q + c], lane L: rows 4q..4q+3 of column 4L + c
    u[4 * q + 0] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm512_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm512_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    const __m512 x0 = _mm512_mask_shuffle_f32x4(u[c], kAll, u[c], u[4 + c], 0x44);
    const __m512 x1 = _mm512_mask_shuffle_f32x4(u[c], kAll, u[c], u[4 + c], 0xEE);
    const __m512 x2 = _mm512_mask_shuffle_f32x4(u[8 + c], kAll, u[8 + c], u[12 + c], 0x44);
    const __m512 x3 = _mm512_mask_shuffle_f32x4(u[8 + c], kAll, u[8 + c], u[12 + c], 0xEE);
    r[c] = _mm512_mask_shuffle_f32x4(x0, kAll, x0, x2, 0x88);
    r[4 + c] = _mm512_mask_shuffle_f32x4(x0, kAll, x0, x2, 0xDD);
    r[8 + c] = _mm512_mask_shuffle_f32x4(x1, kAll, x1, x3, 0x88);
    r[12 + c] = _mm512_mask_shuffle_f32x4(x1, kAll, x1, x3, 0xDD);
  }
}

// Non-temporal stores (xsimd 8.1 has none).
template <>
constexpr bool Lanes<xsimd::avx512f>::has_stream() noexcept {
  return true;
}
template <>
inline void Lanes<xsimd::avx512f>::stream(float* p, const V& v) noexcept {
  _mm512_stream_ps(p, v);
}
template <>
inline void Lanes<xsimd::avx512f>::stream_fence() noexcept {
  _mm_sfence();
}

}  // namespace mha::detail::simd
