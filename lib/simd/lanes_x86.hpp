// The horizontal folds that AVX2 and AVX-512 share (256 -> 128 -> 64 -> 32
// bits, each step combining lane i with lane i + half). A template on the
// Arch only so that each ISA's translation units get their own copy,
// compiled with their flags, which the linker can never merge.
#pragma once

#include <immintrin.h>

namespace mha::detail::simd::x86 {

template <class Arch>
struct Fold {
  struct Add {
    __m256 operator()(__m256 a, __m256 b) const noexcept { return _mm256_add_ps(a, b); }
    __m128 operator()(__m128 a, __m128 b) const noexcept { return _mm_add_ps(a, b); }
  };
  struct Max {
    __m256 operator()(__m256 a, __m256 b) const noexcept { return _mm256_max_ps(a, b); }
    __m128 operator()(__m128 a, __m128 b) const noexcept { return _mm_max_ps(a, b); }
  };
  template <class Op>
  static float m256(__m256 y, Op op) noexcept {
    const __m128 q = op(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    const __m128 d = op(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(op(d, _mm_shuffle_ps(d, d, 1)));
  }
};

}  // namespace mha::detail::simd::x86
