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
inline constexpr bool kMaddByLane<xsimd::neon64> = true;

// fmla by element: the same fused multiply-add as madd on a broadcast.
template <>
template <std::size_t ROWS, std::size_t NV>
inline void Lanes<xsimd::neon64>::madd_by_lane(const float* a, const V (&b)[NV],
                                               V (&acc)[ROWS][NV]) noexcept {
#pragma GCC unroll 4
  for (std::size_t q = 0; q < ROWS / 4; ++q) {
    const float32x4_t av = vld1q_f32(a + 4 * q);
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NV; ++j) {
      acc[4 * q][j] = vfmaq_laneq_f32(acc[4 * q][j], b[j], av, 0);
      acc[4 * q + 1][j] = vfmaq_laneq_f32(acc[4 * q + 1][j], b[j], av, 1);
      acc[4 * q + 2][j] = vfmaq_laneq_f32(acc[4 * q + 2][j], b[j], av, 2);
      acc[4 * q + 3][j] = vfmaq_laneq_f32(acc[4 * q + 3][j], b[j], av, 3);
    }
  }
}

// xsimd 8.1's NEON bitwise_cast goes through a table of wrapper functions
// that GCC 12 does not inline: 3 calls per vector in exp's inner loop, with
// its constants reloaded after each (bench/mca/run-mca).
template <>
inline Lanes<xsimd::neon64>::V Lanes<xsimd::neon64>::add_exponent(const V& p, const V& k) noexcept {
  const int32x4_t pb = vreinterpretq_s32_f32(p), kb = vreinterpretq_s32_f32(k);
  return vreinterpretq_f32_s32(vaddq_s32(pb, vshlq_n_s32(kb, 23)));
}

namespace neon {
inline void sext_x16(const std::uint8_t* p, int32x4_t* out) noexcept {
  const int8x16_t b = vld1q_s8(reinterpret_cast<const std::int8_t*>(p));
  const int16x8_t lo = vmovl_s8(vget_low_s8(b)), hi = vmovl_high_s8(b);
  out[0] = vmovl_s16(vget_low_s16(lo));
  out[1] = vmovl_high_s16(lo);
  out[2] = vmovl_s16(vget_low_s16(hi));
  out[3] = vmovl_high_s16(hi);
}
}  // namespace neon
template <>
inline void Lanes<xsimd::neon64>::widen_i8x16(const std::uint8_t* p, V* out) noexcept {
  int32x4_t x[4];
  neon::sext_x16(p, x);
  for (int i = 0; i < 4; ++i) out[i] = vcvtq_f32_s32(x[i]);
}
template <>
inline Lanes<xsimd::neon64>::V Lanes<xsimd::neon64>::widen_i8(const std::int8_t* p) noexcept {
  std::int32_t four;
  std::memcpy(&four, p, sizeof four);
  const int16x8_t h = vmovl_s8(vreinterpret_s8_s32(vdup_n_s32(four)));
  return vcvtq_f32_s32(vmovl_s16(vget_low_s16(h)));
}
namespace neon {
// The four bytes at p, zero-extended.
inline uint32x4_t bytes_x4(const std::int8_t* p) noexcept {
  std::uint32_t four;
  std::memcpy(&four, p, sizeof four);
  const uint16x8_t h = vmovl_u8(vreinterpret_u8_u32(vdup_n_u32(four)));
  return vmovl_u16(vget_low_u16(h));
}
}  // namespace neon
template <>
inline void Lanes<xsimd::neon64>::widen_s4(const std::int8_t* p, V& lo, V& hi) noexcept {
  const int32x4_t d = vreinterpretq_s32_u32(neon::bytes_x4(p));
  lo = vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(d, 28), 28));
  hi = vcvtq_f32_s32(vshrq_n_s32(vshlq_n_s32(d, 24), 28));
}
template <>
inline void Lanes<xsimd::neon64>::widen_u4(const std::int8_t* p, V& lo, V& hi) noexcept {
  const uint32x4_t d = neon::bytes_x4(p);
  lo = vcvtq_f32_u32(vandq_u32(d, vdupq_n_u32(15)));
  hi = vcvtq_f32_u32(vshrq_n_u32(d, 4));
}
template <>
inline void Lanes<xsimd::neon64>::widen_e4m3x16(const std::uint8_t* p, V* out) noexcept {
  int32x4_t x[4];
  neon::sext_x16(p, x);
  const int32x4_t mask = vdupq_n_s32(static_cast<std::int32_t>(0x87F00000u));
  for (int i = 0; i < 4; ++i) {
    const float32x4_t f = vreinterpretq_f32_s32(vandq_s32(vshlq_n_s32(x[i], 20), mask));
    out[i] = vmulq_n_f32(f, 0x1p120f);
  }
}
template <>
inline void Lanes<xsimd::neon64>::widen_bf16x16(const std::uint16_t* p, V* out) noexcept {
  const uint16x8_t lo = vld1q_u16(p), hi = vld1q_u16(p + 8);
  out[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(lo), 16));
  out[1] = vreinterpretq_f32_u32(vshll_high_n_u16(lo, 16));
  out[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(hi), 16));
  out[3] = vreinterpretq_f32_u32(vshll_high_n_u16(hi, 16));
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
