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

#include <cfloat>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "gemm/bf16_pack.hpp"
#include "gemm/bf16_tiles.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_neon_bf16 {
namespace {

struct neon_bf16_tag {};

constexpr std::size_t kMR = 8, kNV = 3, kW = 4, kNR = kNV * kW;

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

// Lanes [0, lanes) of c, the others zero; lane by lane, not through a
// buffer, which GCC turns into a memcpy call: a call in the tile makes it
// spill the accumulators in the loop.
inline float32x4_t load_lanes(const float* c, std::size_t lanes) {
  if (lanes == kW) return vld1q_f32(c);
  float32x4_t x = vdupq_n_f32(0.f);
  x = lanes >= 2 ? vcombine_f32(vld1_f32(c), vdup_n_f32(0.f)) : vld1q_lane_f32(c, x, 0);
  return lanes == 3 ? vld1q_lane_f32(c + 2, x, 2) : x;
}

inline void store_lanes(float* c, float32x4_t x, std::size_t lanes) {
  if (lanes == kW) return vst1q_f32(c, x);
  if (lanes >= 2) {
    vst1_f32(c, vget_low_f32(x));
  } else {
    vst1q_lane_f32(c, x, 0);
  }
  if (lanes == 3) vst1q_lane_f32(c + 2, x, 2);
}

// ROWS x NV vectors of C from kp pairs; only the first n columns are
// stored, and C is read only when kBeta. A is a packed strip (two loads
// per pair), or with kRows rows of pairs lda apart (gathered lane by lane
// into the strip's registers, which keeps the tile in 32 registers).
template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
void tile(std::size_t kp, const std::uint32_t* a, std::size_t lda, const std::uint16_t* b, float* c,
          std::size_t ldc, std::size_t n, float alpha, float beta) {
  float32x4_t acc[ROWS][NV];
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 3
    for (std::size_t v = 0; v < NV; ++v) acc[i][v] = vdupq_n_f32(0.f);
  }
  for (std::size_t p = 0; p < kp; ++p) {
    bfloat16x8_t bv[NV];
#pragma GCC unroll 3
    for (std::size_t v = 0; v < NV; ++v) {
      bv[v] = vreinterpretq_bf16_u16(vld1q_u16(b + (p * kNR + v * kW) * 2));
    }
    bfloat16x8_t av[2];
    if constexpr (kRows) {
      uint32x4_t rows[2] = {vdupq_n_u32(0), vdupq_n_u32(0)};
      gather_pairs(a + p, lda, rows, std::make_index_sequence<ROWS>{});
      av[0] = vreinterpretq_bf16_u32(rows[0]);
      av[1] = vreinterpretq_bf16_u32(rows[1]);
    } else {
      av[0] = vreinterpretq_bf16_u32(vld1q_u32(a + p * kMR));
      av[1] = ROWS > 4 ? vreinterpretq_bf16_u32(vld1q_u32(a + p * kMR + 4)) : av[0];
    }
    dot_pair(acc, bv, av, std::make_index_sequence<ROWS>{});
  }
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 3
    for (std::size_t v = 0; v < NV; ++v) {
      const std::size_t lanes = n - v * kW < kW ? n - v * kW : kW;
      float* p = c + i * ldc + v * kW;
      // alpha*acc + beta*c as the emulation: three roundings.
      float32x4_t x = vmulq_n_f32(acc[i][v], alpha);
      if constexpr (kBeta) x = vaddq_f32(x, vmulq_n_f32(load_lanes(p, lanes), beta));
      store_lanes(p, x, lanes);
    }
  }
}

struct Tiles {
  template <std::size_t ROWS, std::size_t NV, bool kBeta, bool kRows>
  static constexpr bf16_tiles::TileFn fn = &tile<ROWS, NV, kBeta, kRows>;
};
using Entries = bf16_tiles::Dispatch<Tiles, kMR, kNV, kW>;

// x with every lane below FLT_MIN in magnitude made a zero of its sign
// (NaN compares false and stays): BFDOT reads such a bf16 as zero anyway.
float32x4_t flush_denormals(float32x4_t x) {
  const uint32x4_t tiny = vcaltq_f32(x, vdupq_n_f32(FLT_MIN));
  return vreinterpretq_f32_u32(
      vbicq_u32(vreinterpretq_u32_f32(x), vandq_u32(tiny, vdupq_n_u32(0x7fffffffu))));
}

// BFCVTN rounds to nearest even under Linux's FPCR (FZ = 0, DN = 0: a NaN
// is made quiet, its payload kept), after denormals are flushed.
void round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx, void* out,
                std::size_t ldy) {
  auto* const y = static_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < rows; ++i) {
    const float* xi = x + i * ldx;
    std::uint16_t* yi = y + i * ldy;
    std::size_t j = 0;
    for (; j + kW <= n; j += kW) {
      const bfloat16x4_t v = vcvt_bf16_f32(flush_denormals(vld1q_f32(xi + j)));
      vst1_u16(yi + j, vreinterpret_u16_bf16(v));
    }
    if (j < n) {
      std::uint16_t u[kW];
      const float32x4_t t = load_lanes(xi + j, n - j);
      vst1_u16(u, vreinterpret_u16_bf16(vcvt_bf16_f32(flush_denormals(t))));
      for (std::size_t l = 0; j + l < n; ++l) yi[j + l] = u[l];
    }
    if (n % 2 != 0) yi[n] = 0;
  }
}

}  // namespace
}  // namespace gemm_bf16_neon_bf16

const GemmBf16Kernels gemm_bf16_kernels_neon_bf16{
    "neon_bf16",
    gemm_bf16_neon_bf16::kMR,
    gemm_bf16_neon_bf16::kNR,
    kBf16MC,
    kBf16KC,
    kBf16NC,
    &gemm_bf16_neon_bf16::Entries::ukernel,
    &gemm_bf16_neon_bf16::Entries::ukernel_rows,
    &gemm_bf16_neon_bf16::round_rows,
    &bf16_pack::pack_a<gemm_bf16_neon_bf16::neon_bf16_tag, gemm_bf16_neon_bf16::kMR>,
    &bf16_pack::pack_b<gemm_bf16_neon_bf16::neon_bf16_tag, gemm_bf16_neon_bf16::kNR>};

}  // namespace mha::detail
