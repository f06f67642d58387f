// The int8 GEMM's row quantization (gemm_i8.hpp) 8 floats at a time on AVX2,
// for the sets that store codes as int16 (avx2: kBytes 2, offset 0) or as
// bytes q + 128 (the ymm vpdpbusd sets: kBytes 1). The bits are the scalar
// rule's, as the AVX-512 set's quantize says why.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm/gemm_i8.hpp"

namespace mha::detail {
namespace {  // NOLINT(build/namespaces): each kernel set's object its own copy

template <std::size_t kBytes>
void quantize_avx2(std::size_t k, const float* a, void* codes, float* scale) {
  static_assert(kBytes == 1 || kBytes == 2);
  constexpr int kOffset = kBytes == 1 ? 128 : 0;
  const std::size_t full = k / 8 * 8;
  const __m256 sign = _mm256_set1_ps(-0.0f), zero = _mm256_setzero_ps();
  __m256 vmax = zero, bad = zero;
  for (std::size_t p = 0; p < full; p += 8) {
    const __m256 x = _mm256_loadu_ps(a + p);
    // x - x is NaN exactly for NaN and infinities.
    bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_sub_ps(x, x), zero, _CMP_NEQ_UQ));
    vmax = _mm256_max_ps(vmax, _mm256_andnot_ps(sign, x));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  float amax = 0.0f;
  bool finite = _mm256_movemask_ps(bad) == 0;
  for (const float x : lanes) amax = std::max(amax, x);
  for (std::size_t p = full; p < k; ++p) {
    finite = finite && std::isfinite(a[p]);
    amax = std::max(amax, std::fabs(a[p]));
  }
  const float s = i8_row_scale(amax, finite);
  *scale = s;
  auto* out = static_cast<std::uint8_t*>(codes);
  if (!(s > 0.0f)) {
    if constexpr (kBytes == 2) {
      std::memset(out, 0, (k + 7) / 8 * 8 * 2);
    } else {
      std::memset(out, kOffset, (k + 7) / 8 * 8);
    }
    return;
  }
  const __m256 vs = _mm256_set1_ps(s), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  for (std::size_t p = 0; p < full; p += 8) {
    const __m256 q =
        _mm256_min_ps(_mm256_max_ps(_mm256_div_ps(_mm256_loadu_ps(a + p), vs), lo), hi);
    const __m256i i = _mm256_cvtps_epi32(q);
    const __m128i words =
        _mm_packs_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    if constexpr (kBytes == 2) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * p), words);
    } else {
      const __m128i bytes = _mm_xor_si128(_mm_packs_epi16(words, words), _mm_set1_epi8(-128));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(out + p), bytes);
    }
  }
  quantize_i8_from(kBytes, kOffset, full, k, a, s, codes);
}

}  // namespace
}  // namespace mha::detail
