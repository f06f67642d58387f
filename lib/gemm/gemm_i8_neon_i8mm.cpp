// Arm FEAT_I8MM int8 kernels: SMMLA (vmmlaq_s32), two rows of eight codes
// against two columns of eight into a 2 x 2 block of int32 sums, 32
// multiply-adds an instruction against SDOT's 16.
// B keeps the SDOT set's packed layout ([kq][nr][4], an even number of
// steps): zipping two k steps of four columns by 32-bit lanes gives two
// columns' eight codes each, SMMLA's column operands; two rows' eight codes
// side by side are its row operand, an odd last row paired with zeros.
// Tile 4 x 16: 16 q accumulators (2 row pairs x 8 column pairs) + 8 column
// operands + 2 row operands of the 32.
#include <arm_neon.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "gemm/gemm_i8.hpp"
#include "gemm/gemm_i8_portable.hpp"
#include "gemm/gemm_i8_tiles.hpp"

namespace mha::detail {
namespace {

constexpr std::size_t kMR = 4, kNV = 4, kW = 4, kNR = kNV * kW;

// Rows i and i + 1's codes for k steps p and p + 1 (row i + 1 zero when
// `pair` is false).
int8x16_t row_pair(const std::uint8_t* a, std::size_t lda, std::size_t p, bool pair) {
  const auto* r = reinterpret_cast<const std::int8_t*>(a + 4 * p);
  return vcombine_s8(vld1_s8(r), pair ? vld1_s8(r + lda) : vdup_n_s8(0));
}

template <std::size_t ROWS>
void tile(std::size_t kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
          const std::int32_t* start, const float* sa, const float* sb, const float* bias, float* c,
          std::size_t ldc, std::size_t n) {
  constexpr std::size_t kPairs = (ROWS + 1) / 2;
  // acc[r][u]: rows 2r, 2r + 1 against columns 2u, 2u + 1, as
  // [r0c0, r0c1, r1c0, r1c1].
  int32x4_t acc[kPairs][2 * kNV];
#pragma GCC unroll 16
  for (std::size_t v = 0; v < kNV; ++v) {
    const int32x4_t s = vld1q_s32(start + v * kW);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kPairs; ++r) {
      acc[r][2 * v] = vcombine_s32(vget_low_s32(s), vget_low_s32(s));
      acc[r][2 * v + 1] = vcombine_s32(vget_high_s32(s), vget_high_s32(s));
    }
  }
  for (std::size_t p = 0; p < kq; p += 2, b += 2 * kNR * 4) {
    int8x16_t bv[2 * kNV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kNV; ++v) {
      const int32x4_t s0 = vreinterpretq_s32_s8(vld1q_s8(b + v * 16));
      const int32x4_t s1 = vreinterpretq_s32_s8(vld1q_s8(b + kNR * 4 + v * 16));
      bv[2 * v] = vreinterpretq_s8_s32(vzip1q_s32(s0, s1));
      bv[2 * v + 1] = vreinterpretq_s8_s32(vzip2q_s32(s0, s1));
    }
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kPairs; ++r) {
      const int8x16_t ar = row_pair(a + 2 * r * lda, lda, p, 2 * r + 1 < ROWS);
#pragma GCC unroll 16
      for (std::size_t u = 0; u < 2 * kNV; ++u) acc[r][u] = vmmlaq_s32(acc[r][u], ar, bv[u]);
    }
  }
#pragma GCC unroll 16
  for (std::size_t i = 0; i < ROWS; ++i) {
    const float32x4_t vsa = vdupq_n_f32(sa[i]);
    for (std::size_t v = 0; v < kNV && v * kW < n; ++v) {
      // Row i's four columns: the low (even i) or high halves of two blocks.
      const int64x2_t lo = vreinterpretq_s64_s32(acc[i / 2][2 * v]);
      const int64x2_t hi = vreinterpretq_s64_s32(acc[i / 2][2 * v + 1]);
      const int32x4_t sum =
          vreinterpretq_s32_s64(i % 2 == 0 ? vzip1q_s64(lo, hi) : vzip2q_s64(lo, hi));
      const float32x4_t s = vmulq_f32(vsa, vld1q_f32(sb + v * kW));
      float y[kW];
      vst1q_f32(y, vmulq_f32(vcvtq_f32_s32(sum), s));
      const std::size_t lanes = std::min(kW, n - v * kW);
      for (std::size_t l = 0; l < lanes; ++l) {
        c[i * ldc + v * kW + l] = bias != nullptr ? y[l] + bias[v * kW + l] : y[l];
      }
    }
  }
}

struct Tiles {
  template <std::size_t ROWS>
  static constexpr i8_tiles::TileFn fn = &tile<ROWS>;
};
using Entries = i8_tiles::Dispatch<Tiles, kMR>;

}  // namespace

const GemmI8Kernels gemm_i8_kernels_neon_i8mm = {
    "neon_i8mm", kMR, kNR, 1, 0, Entries::ukernel, quantize_i8_scalar, ukernel_groups_nr16};

}  // namespace mha::detail
