// round_rows of the kernel sets with AVX512_BF16 (avx512_bf16, amx_bf16),
// instantiated by each TU with its own Tag (bf16_pack.hpp says why).
// vcvtne2ps2bf16 rounds to nearest even and reads denormals as zero, which
// the dot products would do to the rounded denormal anyway.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace mha::detail::bf16_round_avx512 {

template <class Tag>
void round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx, void* out,
                std::size_t ldy) {
  constexpr std::size_t kW = 16;
  const auto lane_mask = [](std::size_t lanes) {
    return static_cast<__mmask16>((1u << lanes) - 1u);
  };
  auto* const y = static_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* xi = x + i * ldx;
    std::uint16_t* yi = y + i * ldy;
    std::size_t j = 0;
    for (; j + 2 * kW <= n; j += 2 * kW) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xi + j + kW), _mm512_loadu_ps(xi + j));
      _mm512_storeu_si512(yi + j, reinterpret_cast<__m512i>(v));
    }
    for (; j < n; j += kW) {
      const std::size_t lanes = n - j < kW ? n - j : kW;
      const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(lane_mask(lanes), xi + j));
      _mm256_mask_storeu_epi16(yi + j, lane_mask(lanes), reinterpret_cast<__m256i>(v));
    }
    if (n % 2 != 0) yi[n] = 0;
  }
}

}  // namespace mha::detail::bf16_round_avx512
