// Arm FEAT_I8MM int8 kernels: SMMLA (vmmlaq_s32), two rows of eight codes
// against two columns of eight into a 2 x 2 block of int32 sums, 32
// multiply-adds an instruction against SDOT's 16.
// B in k groups of 8 (k_group 8: [ceil(k / 8)][nr][8]), so that two
// columns' eight codes are one 16-byte load, SMMLA's column operand; two
// rows' eight codes side by side are its row operand (a 64-bit load and a
// lane insert), an odd last row paired with zeros.
// Tile 4 x 16: 16 q accumulators (2 row pairs x 8 column pairs) + 8 column
// operands + 2 row operands of the 32; per eight k, 16 SMMLAs against 8 B
// loads, 4 A loads and 2 inserts, bound by the vector pipes: 219 int8
// operations a cycle on Neoverse V1 and V2 and 112 on N2 (llvm-mca 19,
// bench/mca/run-mca), 2.2x SDOT's 4 x 16. On the SDOT layout, zipped into
// column pairs in registers (8 more vector operations), it ran 155 and 78.
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
  for (std::size_t p = 0; p < kq; p += 2, b += kNR * 8) {
    int8x16_t bv[2 * kNV];
#pragma GCC unroll 16
    for (std::size_t u = 0; u < 2 * kNV; ++u) bv[u] = vld1q_s8(b + u * 16);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < kPairs; ++r) {
      const int8x16_t ar = neon_i8::row_pair(a + 2 * r * lda, lda, 4 * p, 2 * r + 1 < ROWS);
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
      neon_i8::store_lanes(vmulq_f32(vcvtq_f32_s32(sum), s),
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

const GemmI8Kernels gemm_i8_kernels_neon_i8mm = {"neon_i8mm",
                                                 kMR,
                                                 kNR,
                                                 8,
                                                 1,
                                                 0,
                                                 Entries::ukernel,
                                                 quantize_i8_scalar,
                                                 neon_i8::ukernel_groups<true>};

}  // namespace mha::detail
