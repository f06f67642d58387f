// Shared by the AVX-512 peak loops; each TU gets its own copy (internal
// linkage), compiled for its own ISA flags.
#pragma once

#include <immintrin.h>

namespace mha::bench::detail {
namespace {

// *sink = the sum of every lane of acc[0..n), so no chain is optimized away.
// Stored and summed by hand: GCC 12's _mm512_reduce_add_ps trips
// -Wuninitialized.
inline void sink_lanes(const __m512* acc, int n, float* sink) {
  __m512 total = _mm512_setzero_ps();
  for (int c = 0; c < n; ++c) total = _mm512_add_ps(total, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, total);
  float sum = 0.0f;
  for (float x : lanes) sum += x;
  *sink = sum;
}

}  // namespace
}  // namespace mha::bench::detail
