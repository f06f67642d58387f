// Arm FEAT_DotProd int8 kernels: SDOT (vdotq_s32), signed codes on both
// sides, four k of four columns per instruction.
// Tile 4 x 16: 16 q accumulators + 4 B vectors + 1 broadcast of the 32.
#include <arm_neon.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "gemm/gemm_i8.hpp"
#include "gemm/gemm_i8_neon.hpp"
#include "gemm/gemm_i8_tiles.hpp"

namespace mha::detail {
namespace {

constexpr std::size_t kMR = 4, kNV = 4, kW = 4, kNR = kNV * kW;

template <std::size_t ROWS>
void tile(std::size_t kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
          const std::int32_t* start, const float* sa, const float* sb, const float* bias, float* c,
          std::size_t ldc, std::size_t n) {
  int32x4_t acc[ROWS][kNV];
#pragma GCC unroll 16
  for (std::size_t v = 0; v < kNV; ++v) {
    const int32x4_t s = vld1q_s32(start + v * kW);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) acc[i][v] = s;
  }
  for (std::size_t p = 0; p < kq; ++p, b += kNR * 4) {
    int8x16_t bv[kNV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kNV; ++v) bv[v] = vld1q_s8(b + v * 16);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) {
      std::int32_t quad;
      std::memcpy(&quad, a + i * lda + 4 * p, 4);
      const int8x16_t ai = vreinterpretq_s8_s32(vdupq_n_s32(quad));
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kNV; ++v) acc[i][v] = vdotq_s32(acc[i][v], ai, bv[v]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t i = 0; i < ROWS; ++i) {
    const float32x4_t vsa = vdupq_n_f32(sa[i]);
    for (std::size_t v = 0; v < kNV && v * kW < n; ++v) {
      const float32x4_t s = vmulq_f32(vsa, vld1q_f32(sb + v * kW));
      neon_i8::store_lanes(vmulq_f32(vcvtq_f32_s32(acc[i][v]), s),
                           bias != nullptr ? bias + v * kW : nullptr, c + i * ldc + v * kW,
                           std::min(kW, n - v * kW));
    }
  }
}

struct Tiles {
  template <std::size_t ROWS>
  static constexpr i8_tiles::TileFn fn = &tile<ROWS>;
};
using Entries = i8_tiles::Dispatch<Tiles, kMR>;

}  // namespace

const GemmI8Kernels gemm_i8_kernels_neon_dot = {"neon_dot",
                                                kMR,
                                                kNR,
                                                4,
                                                1,
                                                0,
                                                Entries::ukernel,
                                                quantize_i8_scalar,
                                                neon_i8::ukernel_groups<false>};

}  // namespace mha::detail
