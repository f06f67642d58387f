// Lanes<fma3<avx2>>: what xsimd 8.1 lacks on AVX2 (its fma is native here).
// Included by lanes.hpp in the AVX2 translation units only: the AVX-512 ones
// also have __AVX2__, and a copy built with their flags must never be the one
// the AVX2 kernels call.
#pragma once

#include <immintrin.h>

#include <cstddef>

#include "simd/lanes.hpp"
#include "simd/lanes_x86.hpp"

namespace mha::detail::simd {

using Avx2 = xsimd::fma3<xsimd::avx2>;

// 8 -> 4 -> 2 -> 1 lanes, each step combining lane i with i + half.
template <>
template <bool kMax>
inline float Lanes<Avx2>::reduce(const V& v) noexcept {
  using F = x86::Fold<Avx2>;
  if constexpr (kMax) return F::m256(v, F::Max{});
  return F::m256(v, F::Add{});
}

// vmaskmovps: lanes past `lanes` are neither read (no fault) nor written.
namespace avx2 {
inline __m256i first_lanes(std::size_t lanes) noexcept {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
}  // namespace avx2
template <>
inline Lanes<Avx2>::V Lanes<Avx2>::load_n(const float* p, std::size_t lanes) noexcept {
  return _mm256_maskload_ps(p, avx2::first_lanes(lanes));
}
template <>
inline void Lanes<Avx2>::store_n(float* p, const V& v, std::size_t lanes) noexcept {
  _mm256_maskstore_ps(p, avx2::first_lanes(lanes), v);
}

namespace avx2 {
inline __m256 e4m3_widen(__m256i sext) noexcept {
  const __m256i bits = _mm256_and_si256(_mm256_slli_epi32(sext, 20),
                                        _mm256_set1_epi32(static_cast<int>(0x87F00000u)));
  return _mm256_mul_ps(_mm256_castsi256_ps(bits), _mm256_set1_ps(0x1p120f));
}
}  // namespace avx2
template <>
inline void Lanes<Avx2>::widen_i8x16(const std::uint8_t* p, V* out) noexcept {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  out[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
  out[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}
template <>
inline Lanes<Avx2>::V Lanes<Avx2>::widen_i8(const std::int8_t* p) noexcept {
  return _mm256_cvtepi32_ps(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
}
template <>
inline void Lanes<Avx2>::widen_s4(const std::int8_t* p, V& lo, V& hi) noexcept {
  const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  lo = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 28), 28));
  hi = _mm256_cvtepi32_ps(_mm256_srai_epi32(_mm256_slli_epi32(d, 24), 28));
}
template <>
inline void Lanes<Avx2>::widen_u4(const std::int8_t* p, V& lo, V& hi) noexcept {
  const __m256i d = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  lo = _mm256_cvtepi32_ps(_mm256_and_si256(d, _mm256_set1_epi32(15)));
  hi = _mm256_cvtepi32_ps(_mm256_srli_epi32(d, 4));
}
template <>
inline void Lanes<Avx2>::widen_e4m3x16(const std::uint8_t* p, V* out) noexcept {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  out[0] = avx2::e4m3_widen(_mm256_cvtepi8_epi32(b));
  out[1] = avx2::e4m3_widen(_mm256_cvtepi8_epi32(_mm_srli_si128(b, 8)));
}
template <>
inline void Lanes<Avx2>::widen_bf16x16(const std::uint16_t* p, V* out) noexcept {
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8));
  out[0] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(lo), 16));
  out[1] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(hi), 16));
}

// 8 x 8: 4 x 4 transposes inside each 128-bit lane, then swap lane halves.
template <>
inline void Lanes<Avx2>::transpose(V* r) noexcept {
  __m256 t[8], u[8];
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int q = 0; q < 2; ++q) {
    u[4 * q + 0] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0x44);
    u[4 * q + 1] = _mm256_shuffle_ps(t[4 * q], t[4 * q + 2], 0xEE);
    u[4 * q + 2] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0x44);
    u[4 * q + 3] = _mm256_shuffle_ps(t[4 * q + 1], t[4 * q + 3], 0xEE);
  }
  for (int c = 0; c < 4; ++c) {
    r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
    r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
  }
}

// Non-temporal stores (xsimd 8.1 has none).
template <>
constexpr bool Lanes<Avx2>::has_stream() noexcept {
  return true;
}
template <>
inline void Lanes<Avx2>::stream(float* p, const V& v) noexcept {
  _mm256_stream_ps(p, v);
}
template <>
inline void Lanes<Avx2>::stream_fence() noexcept {
  _mm_sfence();
}

}  // namespace mha::detail::simd
