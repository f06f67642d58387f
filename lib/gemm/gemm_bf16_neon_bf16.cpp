// NEON FEAT_BF16 GEMM kernels: BFDOT (vbfdotq_laneq_f32) over B packed in
// K-pairs, one 128-bit load being 4 columns x 1 pair, against A's pairs
// selected by lane (layouts in gemm_bf16.hpp). BFDOT's numerics are not
// vdpbf16ps's: its products and sums round to odd (see mha.h, "neon_bf16",
// and the emulation in gemm_bf16_emulated.cpp).
//
// Tile 8 x 12, BLIS's cortex-a57 sgemm tile: 24 accumulators + 3 B vectors +
// 2 A vectors (8 rows' pairs, read by lane) of the 32 q-registers; per pair
// 24 BFDOTs against 5 loads, and 24 independent chains to cover BFDOT's
// latency.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "gemm/bf16_neon.hpp"
#include "gemm/bf16_pack.hpp"
#include "gemm/bf16_tiles.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_neon_bf16 {
namespace {

struct neon_bf16_tag {};

using bf16_neon::kW;
constexpr std::size_t kMR = 8, kNV = 3, kNR = kNV * kW;

// Row I of the tile += its A pair (lane I % 4 of av) times each B vector;
// the lane is a template argument because BFDOT encodes it.
template <std::size_t I, std::size_t NV>
inline void dot_lane(float32x4_t (&acc)[NV], const bfloat16x8_t (&bv)[NV], bfloat16x8_t av) {
#pragma GCC unroll 3
  for (std::size_t v = 0; v < NV; ++v) {
    acc[v] = vbfdotq_laneq_f32(acc[v], bv[v], av, static_cast<int>(I % 4));
  }
}

// One pair of A (rows 0..7 in the lanes of av[0], av[1]) into every row
// of the tile.
template <std::size_t ROWS, std::size_t NV, std::size_t... I>
inline void dot_pair(float32x4_t (&acc)[ROWS][NV], const bfloat16x8_t (&bv)[NV],
                     const bfloat16x8_t (&av)[2], std::index_sequence<I...>) {
  (dot_lane<I>(acc[I], bv, av[I / 4]), ...);
}

// The pairs of rows I (lda pairs apart, from a) into lane I % 4 of
// rows[I / 4]: A's rows as a packed strip holds them.
template <std::size_t... I>
inline void gather_pairs(const std::uint32_t* a, std::size_t lda, uint32x4_t (&rows)[2],
                         std::index_sequence<I...>) {
  ((rows[I / 4] = vld1q_lane_u32(a + I * lda, rows[I / 4], I % 4)), ...);
}

// ROWS x NV vectors of C from B's runs; only the first n columns are
// stored, and C is read only when kBeta. A is a packed strip (two loads
// per pair), or with kRows rows of pairs lda apart (gathered lane by lane
// into the strip's registers, which keeps the tile in 32 registers).
template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
void tile(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c, std::size_t ldc,
          std::size_t n, float alpha, float beta) {
  float32x4_t acc[ROWS][NV];
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 3
    for (std::size_t v = 0; v < NV; ++v) acc[i][v] = vdupq_n_f32(0.f);
  }
  for (std::size_t r = 0; r < b.count; ++r) {
    const std::uint16_t* bp = b.run[r].b;
    for (std::size_t p = 0; p < b.run[r].pairs; ++p, bp += b.ld, a += kRows ? 1 : kMR) {
      bfloat16x8_t bv[NV];
#pragma GCC unroll 3
      for (std::size_t v = 0; v < NV; ++v)
        bv[v] = vreinterpretq_bf16_u16(vld1q_u16(bp + v * kW * 2));
      bfloat16x8_t av[2];
      if constexpr (kRows) {
        uint32x4_t rows[2] = {vdupq_n_u32(0), vdupq_n_u32(0)};
        gather_pairs(a, lda, rows, std::make_index_sequence<ROWS>{});
        av[0] = vreinterpretq_bf16_u32(rows[0]);
        av[1] = vreinterpretq_bf16_u32(rows[1]);
      } else {
        av[0] = vreinterpretq_bf16_u32(vld1q_u32(a));
        av[1] = ROWS > 4 ? vreinterpretq_bf16_u32(vld1q_u32(a + 4)) : av[0];
      }
      dot_pair(acc, bv, av, std::make_index_sequence<ROWS>{});
    }
  }
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 3
    for (std::size_t v = 0; v < NV; ++v) {
      const std::size_t lanes = n - v * kW < kW ? n - v * kW : kW;
      bf16_neon::update<neon_bf16_tag, kBeta>(c + i * ldc + v * kW, acc[i][v], lanes, alpha, beta);
    }
  }
}

struct Tiles {
  template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
  static constexpr bf16_tiles::TileFn fn = &tile<ROWS, NV, kBeta, kRows>;
};
using Entries = bf16_tiles::Dispatch<Tiles, kMR, kNV, kW, 2 * kNR>;

}  // namespace
}  // namespace gemm_bf16_neon_bf16

const GemmBf16Kernels gemm_bf16_kernels_neon_bf16 = with_runs(
    GemmBf16Kernels{
        "neon_bf16", gemm_bf16_neon_bf16::kMR, gemm_bf16_neon_bf16::kNR, kBf16MC, kBf16KC, kBf16NC,
        &gemm_bf16_neon_bf16::Entries::ukernel, &gemm_bf16_neon_bf16::Entries::ukernel_rows,
        &bf16_neon::round_rows<gemm_bf16_neon_bf16::neon_bf16_tag>,
        &bf16_pack::pack_a<gemm_bf16_neon_bf16::neon_bf16_tag, gemm_bf16_neon_bf16::kMR>,
        &bf16_pack::pack_b<gemm_bf16_neon_bf16::neon_bf16_tag, gemm_bf16_neon_bf16::kNR>},
    &gemm_bf16_neon_bf16::Entries::ukernel_runs);

}  // namespace mha::detail
