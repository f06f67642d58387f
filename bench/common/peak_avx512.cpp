// Peak loop for AVX-512: 16 independent 16-wide FMA chains. The intrinsic, not
// xsimd::fma: xsimd 8.1 lowers fma on avx512f to x*y+z, which strict ISO mode
// (-ffp-contract=off) keeps as two instructions. Two 512-bit FMA pipes with
// 4 cycles of latency need 8 chains in flight; 16 of the 32 zmm registers
// leave margin for cores with longer latency.
#include "peak_avx512.hpp"

#include <immintrin.h>

#include "peak.hpp"

namespace mha::bench::detail::avx512 {

double fma_loop(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 16;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 0.01f * static_cast<float>(c));
  // |m| < 1 keeps every chain converging to a / (1 - m): no overflow, no denormals.
  const __m512 m = _mm512_set1_ps(0.999999f);
  const __m512 a = _mm512_set1_ps(1e-6f);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], m, a);
  }
  sink_lanes(acc, kChains, sink);
  return 2.0 * 16 * kChains * static_cast<double>(iterations);
}

}  // namespace mha::bench::detail::avx512
