// Peak loop for AVX512_BF16: 24 independent vdpbf16ps chains, the count that
// reached the bf16 peak on Zen 4 (229 GFLOP/s on one core; FACTS.md). Each
// instruction is 32 bf16 multiply-adds (64 flops) into 16 fp32 lanes.
#include <immintrin.h>

#include "peak.hpp"
#include "peak_avx512.hpp"

namespace mha::bench::detail::avx512_bf16 {

double dpbf16_loop(std::uint64_t iterations, float* sink) {
  constexpr int kChains = 24;
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(0.01f * static_cast<float>(c));
  // Products of 2^-20 keep every chain far from overflow (1e-12 per step)
  // and far from the denormals vdpbf16ps would flush.
  const __m512bh x = _mm512_cvtne2ps_pbh(_mm512_set1_ps(0x1p-10f), _mm512_set1_ps(0x1p-10f));
  for (std::uint64_t i = 0; i < iterations; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], x, x);
  }
  sink_lanes(acc, kChains, sink);
  return 2.0 * 32 * kChains * static_cast<double>(iterations);
}

}  // namespace mha::bench::detail::avx512_bf16
