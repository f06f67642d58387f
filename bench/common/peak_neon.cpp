// Peak loop for NEON: 16 independent 4-wide FMA chains (vfmaq_f32). Cores with
// up to four 128-bit FMA pipes and 4 cycles of latency need 16 chains in
// flight; 16 of the 32 vector registers leave the operands room.
#include <arm_neon.h>

#include "peak.hpp"

namespace mha::bench::detail::neon {

double fma_loop(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 16;
  float32x4_t acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = vdupq_n_f32(1.0f + 0.01f * static_cast<float>(c));
  // |m| < 1 keeps every chain converging to a / (1 - m): no overflow, no denormals.
  const float32x4_t m = vdupq_n_f32(0.999999f);
  const float32x4_t a = vdupq_n_f32(1e-6f);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = vfmaq_f32(a, acc[c], m);
  }
  float32x4_t total = vdupq_n_f32(0.0f);
  for (int c = 0; c < kChains; ++c) total = vaddq_f32(total, acc[c]);
  *sink = vaddvq_f32(total);
  return 2.0 * 4 * kChains * static_cast<double>(iterations);
}

}  // namespace mha::bench::detail::neon
