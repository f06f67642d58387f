// Peak loop for AVX2+FMA3: 12 independent 8-wide FMA chains. Two FMA pipes
// with 4-5 cycles of latency need at least 10 chains in flight; 12 leaves room
// while staying within the 16 ymm registers (12 accumulators + 2 operands).
#include <xsimd/xsimd.hpp>

#include "peak.hpp"

namespace mha::bench::detail::avx2 {

double fma_loop(std::uint64_t iterations, float* sink) {
  using batch = xsimd::batch<float, xsimd::fma3<xsimd::avx2>>;
  constexpr int kChains = 12;
  batch acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = batch(1.0f + 0.01f * static_cast<float>(c));
  // |m| < 1 keeps every chain converging to a / (1 - m): no overflow, no denormals.
  const batch m(0.999999f);
  const batch a(1e-6f);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = xsimd::fma(acc[c], m, a);
  }
  batch total(0.0f);
  for (int c = 0; c < kChains; ++c) total += acc[c];
  *sink = xsimd::hadd(total);
  return 2.0 * batch::size * kChains * static_cast<double>(iterations);
}

}  // namespace mha::bench::detail::avx2
