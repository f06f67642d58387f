// Candidate BFMMLA register tiles, for bench/mca/run-mca only: the shapes
// neon_bfmmla's 8 x 8 (lib/gemm/gemm_bf16_neon_bfmmla.cpp) was chosen from.
// Layouts as the library's: A packed in row pairs, per 4-deep k group one q-register
// per pair (row 2r's 4 k, then row 2r+1's); B per k group one q-register per
// column pair (column 2c's 4 k, then column 2c+1's). Each accumulator holds
// a 2 x 2 block of C.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>

namespace {

// Unrolled as the library's tiles are (GCC 12 left the 8 x 12 loops rolled,
// with the accumulators in memory).
// RP row pairs x CP column pairs: RP * CP accumulators, RP A registers live
// through a k group, B streamed one register at a time (CP loads).
template <std::size_t RP, std::size_t CP>
void tile(std::size_t kg, const std::uint16_t* a, const std::uint16_t* b, float* c) {
  float32x4_t acc[RP][CP];
#pragma GCC unroll 8
  for (std::size_t r = 0; r < RP; ++r) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < CP; ++j) acc[r][j] = vdupq_n_f32(0.f);
  }
  for (std::size_t g = 0; g < kg; ++g) {
    bfloat16x8_t av[RP];
#pragma GCC unroll 8
    for (std::size_t r = 0; r < RP; ++r) {
      av[r] = vreinterpretq_bf16_u16(vld1q_u16(a + (g * RP + r) * 8));
    }
#pragma GCC unroll 8
    for (std::size_t j = 0; j < CP; ++j) {
      const bfloat16x8_t bv = vreinterpretq_bf16_u16(vld1q_u16(b + (g * CP + j) * 8));
#pragma GCC unroll 8
      for (std::size_t r = 0; r < RP; ++r) acc[r][j] = vbfmmlaq_f32(acc[r][j], av[r], bv);
    }
  }
#pragma GCC unroll 8
  for (std::size_t r = 0; r < RP; ++r) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < CP; ++j) vst1q_f32(c + (r * CP + j) * 4, acc[r][j]);
  }
}

}  // namespace

// The tiles run-mca measures, by name (MR x NR).
extern "C" void bfmmla_8x8(std::size_t kg, const std::uint16_t* a, const std::uint16_t* b,
                           float* c) {
  tile<4, 4>(kg, a, b, c);
}
extern "C" void bfmmla_8x12(std::size_t kg, const std::uint16_t* a, const std::uint16_t* b,
                            float* c) {
  tile<4, 6>(kg, a, b, c);
}
extern "C" void bfmmla_12x8(std::size_t kg, const std::uint16_t* a, const std::uint16_t* b,
                            float* c) {
  tile<6, 4>(kg, a, b, c);
}
extern "C" void bfmmla_4x16(std::size_t kg, const std::uint16_t* a, const std::uint16_t* b,
                            float* c) {
  tile<2, 8>(kg, a, b, c);
}
