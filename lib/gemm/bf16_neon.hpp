// What the FEAT_BF16 kernel sets (gemm_bf16_neon_bf16.cpp,
// gemm_bf16_neon_bfmmla.cpp) share: partial vectors of C and round_rows.
// Templates on each TU's own Tag, as bf16_pack.hpp, so that no two objects
// define the same symbol.
#pragma once

#include <arm_neon.h>

#include <cfloat>
#include <cstddef>
#include <cstdint>

namespace mha::detail::bf16_neon {

constexpr std::size_t kW = 4;  // fp32 lanes of a q-register

// Lanes [0, lanes) of c, the others zero; lane by lane, not through a
// buffer, which GCC turns into a memcpy call: a call in the tile makes it
// spill the accumulators in the loop.
template <class Tag>
inline float32x4_t load_lanes(const float* c, std::size_t lanes) {
  if (lanes == kW) return vld1q_f32(c);
  float32x4_t x = vdupq_n_f32(0.f);
  x = lanes >= 2 ? vcombine_f32(vld1_f32(c), vdup_n_f32(0.f)) : vld1q_lane_f32(c, x, 0);
  return lanes == 3 ? vld1q_lane_f32(c + 2, x, 2) : x;
}

template <class Tag>
inline void store_lanes(float* c, float32x4_t x, std::size_t lanes) {
  if (lanes == kW) return vst1q_f32(c, x);
  if (lanes >= 2) {
    vst1_f32(c, vget_low_f32(x));
  } else {
    vst1q_lane_f32(c, x, 0);
  }
  if (lanes == 3) vst1q_lane_f32(c + 2, x, 2);
}

// c[0, lanes) = alpha * x + beta * c (C read only with kBeta): three
// roundings, as the emulation.
template <class Tag, bool kBeta>
inline void update(float* c, float32x4_t x, std::size_t lanes, float alpha, float beta) {
  x = vmulq_n_f32(x, alpha);
  if constexpr (kBeta) x = vaddq_f32(x, vmulq_n_f32(load_lanes<Tag>(c, lanes), beta));
  store_lanes<Tag>(c, x, lanes);
}

// x with every lane below FLT_MIN in magnitude made a zero of its sign
// (NaN compares false and stays): BFDOT and BFMMLA read such a bf16 as zero
// anyway.
template <class Tag>
inline float32x4_t flush_denormals(float32x4_t x) {
  const uint32x4_t tiny = vcaltq_f32(x, vdupq_n_f32(FLT_MIN));
  return vreinterpretq_f32_u32(
      vbicq_u32(vreinterpretq_u32_f32(x), vandq_u32(tiny, vdupq_n_u32(0x7fffffffu))));
}

// GemmBf16Kernels::round_rows: BFCVTN rounds to nearest even under Linux's
// FPCR (FZ = 0, DN = 0: a NaN is made quiet, its payload kept), after
// denormals are flushed.
template <class Tag>
void round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx, void* out,
                std::size_t ldy) {
  auto* const y = static_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* xi = x + i * ldx;
    std::uint16_t* yi = y + i * ldy;
    std::size_t j = 0;
    for (; j + kW <= n; j += kW) {
      const bfloat16x4_t v = vcvt_bf16_f32(flush_denormals<Tag>(vld1q_f32(xi + j)));
      vst1_u16(yi + j, vreinterpret_u16_bf16(v));
    }
    if (j < n) {
      std::uint16_t u[kW];
      const float32x4_t t = load_lanes<Tag>(xi + j, n - j);
      vst1_u16(u, vreinterpret_u16_bf16(vcvt_bf16_f32(flush_denormals<Tag>(t))));
      for (std::size_t l = 0; j + l < n; ++l) yi[j + l] = u[l];
    }
    if (n % 2 != 0) yi[n] = 0;
  }
}

}  // namespace mha::detail::bf16_neon
