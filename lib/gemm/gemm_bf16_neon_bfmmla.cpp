// NEON FEAT_BF16 GEMM kernels on BFMMLA (vbfmmlaq_f32): one instruction
// multiplies a 2 x 4 block of A by a 4 x 2 block of B into a 2 x 2 fp32
// block, 32 FLOP against BFDOT's 16 at the same issue rate on Neoverse N2,
// V1 and V2 (LLVM's scheduling models; bench/mca/run-mca). B and packed A
// come in 4-deep k groups (k_group = 4, gemm_bf16.hpp), one load per
// operand. Per output, BFMMLA is BFDOT's step over k 0-1 then over k 2-3
// (the Arm ARM's BFMatMulAdd with FPCR.EBF = 0; emulated_bfmmla), and the
// pair padding an odd kp adds -0 (bf16_pack::kNegZeroPair), which leaves
// every sum as it is, so this set gives neon_bf16's bits (emulated_bfdot)
// on any tile and k.
//
// Tile 8 x 8: 16 accumulators (4 row pairs x 4 column pairs, each a 2 x 2
// block of C) + 4 A + 4 B registers; per group of 4 k, 16 BFMMLAs against 8
// loads. By mca it is the best tile on V2 and N2 (97-98 % of the BFMMLA
// pipes). On V1 its 16 chains do not cover BFMMLA's latency (100 FLOP/cycle
// for 128 of pipes); this kernel at 12 x 8 (24 chains, B streamed) gave 111
// on packed A but 91 on A rows there, against 100 and 99, and 6-7 % less
// on V2 and N2, so one tile serves all three.
#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <utility>

#include "gemm/bf16_neon.hpp"
#include "gemm/bf16_pack.hpp"
#include "gemm/bf16_tiles.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_neon_bfmmla {
namespace {

struct neon_bfmmla_tag {};

using bf16_neon::kW;
constexpr std::size_t kMR = 8, kNR = 8, kCP = kNR / 2;

// Rows R and R + 1 (lda pairs apart, the second zero when R + 1 == ROWS) of
// group g: the A operand of row pair R / 2, from rows as round_rows leaves
// them. kHalf: the group holds one pair (an odd kp's last), the other
// bf16_pack::kNegZeroPair, as no pair past kp may be read.
template <std::size_t ROWS, std::size_t R, bool kHalf>
inline bfloat16x8_t row_pair(const std::uint32_t* a, std::size_t lda) {
  const std::uint32_t* r0 = a + R * lda;
  if constexpr (kHalf) {
    uint32x4_t v = vld1q_lane_u32(r0, vdupq_n_u32(bf16_pack::kNegZeroPair), 0);
    if constexpr (R + 1 < ROWS) v = vld1q_lane_u32(r0 + lda, v, 2);
    return vreinterpretq_bf16_u32(v);
  } else {
    const uint32x2_t hi = R + 1 < ROWS ? vld1_u32(r0 + lda) : vdup_n_u32(0);
    return vreinterpretq_bf16_u32(vcombine_u32(vld1_u32(r0), hi));
  }
}

// acc[r][c] += A's row pairs times B's column pairs for one group (B at b).
template <std::size_t RP, std::size_t CP>
inline void mma_group(float32x4_t (&acc)[RP][CP], const bfloat16x8_t (&av)[RP],
                      const std::uint16_t* b) {
#pragma GCC unroll 4
  for (std::size_t c = 0; c < CP; ++c) {
    const bfloat16x8_t bv = vreinterpretq_bf16_u16(vld1q_u16(b + c * 8));
#pragma GCC unroll 4
    for (std::size_t r = 0; r < RP; ++r) acc[r][c] = vbfmmlaq_f32(acc[r][c], av[r], bv);
  }
}

template <std::size_t ROWS, bool kHalf, std::size_t... R>
inline void load_rows(const std::uint32_t* a, std::size_t lda, bfloat16x8_t (&av)[sizeof...(R)],
                      std::index_sequence<R...>) {
  ((av[R] = row_pair<ROWS, 2 * R, kHalf>(a, lda)), ...);
}

// ROWS x 2*CP of C from B's runs (each but the last of whole groups);
// only the first n columns are stored, and C is read only when kBeta. A is
// a packed strip (whole groups, zero past kp), or with kRows rows of pairs
// lda apart.
template <std::size_t ROWS, std::size_t CP, bool kBeta, bool kRows>
void tile(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c, std::size_t ldc,
          std::size_t n, float alpha, float beta) {
  constexpr std::size_t RP = (ROWS + 1) / 2;
  float32x4_t acc[RP][CP];
#pragma GCC unroll 4
  for (std::size_t r = 0; r < RP; ++r) {
#pragma GCC unroll 4
    for (std::size_t j = 0; j < CP; ++j) acc[r][j] = vdupq_n_f32(0.f);
  }
  for (std::size_t run = 0; run < b.count; ++run) {
    const std::uint16_t* bp = b.run[run].b;
    const std::size_t kp = b.run[run].pairs, groups = kRows ? kp / 2 : (kp + 1) / 2;
    for (std::size_t g = 0; g < groups; ++g, bp += b.ld, a += kRows ? 2 : kMR * 2) {
      bfloat16x8_t av[RP];
      if constexpr (kRows) {
        load_rows<ROWS, false>(a, lda, av, std::make_index_sequence<RP>{});
      } else {
#pragma GCC unroll 4
        for (std::size_t r = 0; r < RP; ++r) av[r] = vreinterpretq_bf16_u32(vld1q_u32(a + r * 4));
      }
      mma_group(acc, av, bp);
    }
    if (kRows && kp % 2 != 0) {
      bfloat16x8_t av[RP];
      load_rows<ROWS, true>(a, lda, av, std::make_index_sequence<RP>{});
      mma_group(acc, av, bp);
    }
  }
  // Rows 2r and 2r + 1 of columns [4h, 4h + 4) from the 2 x 2 blocks of
  // column pairs 2h and 2h + 1.
#pragma GCC unroll 4
  for (std::size_t r = 0; r < RP; ++r) {
#pragma GCC unroll 2
    for (std::size_t h = 0; 2 * h < CP; ++h) {
      const float64x2_t x0 = vreinterpretq_f64_f32(acc[r][2 * h]);
      const float64x2_t x1 = vreinterpretq_f64_f32(acc[r][2 * h + 1 < CP ? 2 * h + 1 : 2 * h]);
      const std::size_t lanes = n - h * kW < kW ? n - h * kW : kW;
      float* p = c + 2 * r * ldc + h * kW;
      bf16_neon::update<neon_bfmmla_tag, kBeta>(p, vreinterpretq_f32_f64(vzip1q_f64(x0, x1)), lanes,
                                                alpha, beta);
      if (2 * r + 1 < ROWS) {
        bf16_neon::update<neon_bfmmla_tag, kBeta>(
            p + ldc, vreinterpretq_f32_f64(vzip2q_f64(x0, x1)), lanes, alpha, beta);
      }
    }
  }
}

struct Tiles {
  template <std::size_t ROWS, std::size_t CP, bool kBeta, bool kRows>
  static constexpr bf16_tiles::TileFn fn = &tile<ROWS, CP, kBeta, kRows>;
};
// By column pairs: the tile of exactly the pairs n spans.
using Entries = bf16_tiles::Dispatch<Tiles, kMR, kCP, 2, 4 * kNR>;

}  // namespace
}  // namespace gemm_bf16_neon_bfmmla

const GemmBf16Kernels gemm_bf16_kernels_neon_bfmmla =
    with_runs(GemmBf16Kernels{"neon_bfmmla", gemm_bf16_neon_bfmmla::kMR, gemm_bf16_neon_bfmmla::kNR,
                              kBf16MC, kBf16KC, kBf16NC, &gemm_bf16_neon_bfmmla::Entries::ukernel,
                              &gemm_bf16_neon_bfmmla::Entries::ukernel_rows,
                              &bf16_neon::round_rows<gemm_bf16_neon_bfmmla::neon_bfmmla_tag>,
                              &bf16_pack::pack_a_groups<gemm_bf16_neon_bfmmla::neon_bfmmla_tag,
                                                        gemm_bf16_neon_bfmmla::kMR>,
                              &bf16_pack::pack_b_groups<gemm_bf16_neon_bfmmla::neon_bfmmla_tag,
                                                        gemm_bf16_neon_bfmmla::kNR>,
                              /*flush=*/true,
                              /*ukernel_row1=*/nullptr,
                              /*a_bytes=*/2,
                              /*a_row_pairs=*/nullptr,
                              /*k_group=*/4},
              &gemm_bf16_neon_bfmmla::Entries::ukernel_runs);

}  // namespace mha::detail
