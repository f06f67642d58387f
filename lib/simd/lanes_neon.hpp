// Lanes<neon64>: what xsimd 8.1 lacks on NEON (fma is native fmla; masked
// loads and stores go through the primary template's small array). Included
// by lanes.hpp in the NEON translation units only.
#pragma once

#include <arm_neon.h>

#include "simd/lanes.hpp"

namespace mha::detail::simd {

// 4 -> 2 -> 1 lanes, each step combining lane i with i + half.
template <>
template <bool kMax>
inline float Lanes<xsimd::neon64>::reduce(const V& v) noexcept {
  const float32x4_t q = v;
  const float32x2_t h = kMax ? vmax_f32(vget_low_f32(q), vget_high_f32(q))
                             : vadd_f32(vget_low_f32(q), vget_high_f32(q));
  const float a = vget_lane_f32(h, 0), b = vget_lane_f32(h, 1);
  return kMax ? (a < b ? b : a) : a + b;
}

template <>
inline void Lanes<xsimd::neon64>::transpose(V* r) noexcept {
  const float32x4_t t0 = vtrn1q_f32(r[0], r[1]), t1 = vtrn2q_f32(r[0], r[1]);
  const float32x4_t t2 = vtrn1q_f32(r[2], r[3]), t3 = vtrn2q_f32(r[2], r[3]);
  auto lo = [](float32x4_t a, float32x4_t b) {
    return vreinterpretq_f32_f64(vtrn1q_f64(vreinterpretq_f64_f32(a), vreinterpretq_f64_f32(b)));
  };
  auto hi = [](float32x4_t a, float32x4_t b) {
    return vreinterpretq_f32_f64(vtrn2q_f64(vreinterpretq_f64_f32(a), vreinterpretq_f64_f32(b)));
  };
  r[0] = lo(t0, t2);
  r[1] = lo(t1, t3);
  r[2] = hi(t0, t2);
  r[3] = hi(t1, t3);
}

}  // namespace mha::detail::simd
