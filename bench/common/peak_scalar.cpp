// Peak loop for the scalar ISA: plain float multiply and add, compiled for the
// baseline target like the scalar kernels (strict ISO: -ffp-contract=off, so
// no FMA). GCC may pack the independent chains into SSE2/NEON vectors, which is
// exactly what it may do to the scalar kernels too, so this is their ceiling.
#include "peak.hpp"

namespace mha::bench::detail::scalar {

double fma_loop(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 16;
  float acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = 1.0f + 0.01f * static_cast<float>(c);
  // |m| < 1 keeps every chain converging to a / (1 - m): no overflow, no denormals.
  const float m = 0.999999f;
  const float a = 1e-6f;
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * m + a;
  }
  float total = 0.0f;
  for (int c = 0; c < kChains; ++c) total += acc[c];
  *sink = total;
  return 2.0 * kChains * static_cast<double>(iterations);
}

}  // namespace mha::bench::detail::scalar
