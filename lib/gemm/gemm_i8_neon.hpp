// What the Arm int8 sets share (gemm_i8_neon_dot.cpp, gemm_i8_neon_i8mm.cpp):
// the store of a C row's four columns, and the grouped kernels
// (GemmI8Kernels::ukernel_groups, the arithmetic of I8Strip) on SDOT
// (k_group 4) or SMMLA (k_group 8): each group's integer sums start at the
// group's start (less the zero point times the row's group sum, for uint4)
// and take the group's k steps, int4 codes unpacked in registers (a mask
// and a shift, less the stored 8); then t = fma(float(sum), scale, t), and
// y = t * s_a (+ bias) at the end. Each set's file includes it: its
// functions have internal linkage there, so no set's extension flags reach
// a copy another set calls (check_symbols).
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "gemm/gemm_i8.hpp"

namespace mha::detail {
namespace {  // NOLINT(build/namespaces): one copy per set, under its own flags

namespace neon_i8 {

constexpr std::size_t kW = 4, kNR = 16, kMR = 4;

// y's first `lanes` columns into c, each plus its bias (if any).
inline void store_lanes(float32x4_t y, const float* bias, float* c, std::size_t lanes) {
  float v[kW];
  vst1q_f32(v, y);
  for (std::size_t l = 0; l < lanes; ++l) c[l] = bias != nullptr ? v[l] + bias[l] : v[l];
}

inline int8x16_t quad(const std::uint8_t* row, std::size_t at) {
  std::int32_t q;
  std::memcpy(&q, row + at, 4);
  return vreinterpretq_s8_s32(vdupq_n_s32(q));
}

// Rows r and r + lda's eight codes from byte `at` (the second zero when
// `pair` is false): SMMLA's row operand.
inline int8x16_t row_pair(const std::uint8_t* row, std::size_t lda, std::size_t at, bool pair) {
  const auto* r = reinterpret_cast<const std::int8_t*>(row + at);
  return vcombine_s8(vld1_s8(r), pair ? vld1_s8(r + lda) : vdup_n_s8(0));
}

// An int4 step pair's 16 bytes (four columns) as two int8 vectors: the low
// nibbles (the first step) and the high ones, less the stored 8.
inline void unpack4(const std::int8_t* p, int8x16_t& lo, int8x16_t& hi) {
  const uint8x16_t raw = vld1q_u8(reinterpret_cast<const std::uint8_t*>(p));
  const int8x16_t eight = vdupq_n_s8(8);
  lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(15))), eight);
  hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight);
}

// C columns [kV*4h, kV*4(h + 1)) of the strip for ROWS rows.
template <std::size_t ROWS, std::size_t kV, bool kInt4, bool kMmla>
void tile_groups(const I8Strip& b, std::size_t h, const std::uint8_t* a, std::size_t lda,
                 const float* sa, const float* bias, float* c, std::size_t ldc, std::size_t n) {
  const std::size_t col0 = h * kV * kW;
  float32x4_t t[ROWS][kV];
#pragma GCC unroll 16
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) t[i][v] = vdupq_n_f32(0.0f);
  }
  for (std::size_t g = 0, p0 = 0; p0 < b.kq; ++g, p0 += b.group_kq) {
    const std::size_t p1 = std::min(b.kq, p0 + b.group_kq), at = g * b.stride + col0;
    // Row i's sums for columns 4v .. 4v + 3, as t takes them.
    int32x4_t sum[ROWS][kV];
    if constexpr (!kMmla) {
      int32x4_t acc[ROWS][kV];
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kV; ++v) {
        const int32x4_t s = vld1q_s32(b.start + at + v * kW);
#pragma GCC unroll 16
        for (std::size_t i = 0; i < ROWS; ++i) acc[i][v] = s;
      }
      if constexpr (kInt4) {
        for (std::size_t p = p0; p < p1; p += 2) {
          int8x16_t lo[kV], hi[kV];
#pragma GCC unroll 16
          for (std::size_t v = 0; v < kV; ++v) {
            unpack4(b.codes + (p / 2 * kNR + col0 + v * kW) * 4, lo[v], hi[v]);
          }
#pragma GCC unroll 16
          for (std::size_t i = 0; i < ROWS; ++i) {
            const int8x16_t a0 = quad(a + i * lda, 4 * p), a1 = quad(a + i * lda, 4 * p + 4);
#pragma GCC unroll 16
            for (std::size_t v = 0; v < kV; ++v) {
              acc[i][v] = vdotq_s32(vdotq_s32(acc[i][v], a0, lo[v]), a1, hi[v]);
            }
          }
        }
      } else {
        for (std::size_t p = p0; p < p1; ++p) {
          int8x16_t bv[kV];
#pragma GCC unroll 16
          for (std::size_t v = 0; v < kV; ++v) {
            bv[v] = vld1q_s8(b.codes + (p * kNR + col0 + v * kW) * 4);
          }
#pragma GCC unroll 16
          for (std::size_t i = 0; i < ROWS; ++i) {
            const int8x16_t ai = quad(a + i * lda, 4 * p);
#pragma GCC unroll 16
            for (std::size_t v = 0; v < kV; ++v) acc[i][v] = vdotq_s32(acc[i][v], ai, bv[v]);
          }
        }
      }
#pragma GCC unroll 16
      for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 16
        for (std::size_t v = 0; v < kV; ++v) sum[i][v] = acc[i][v];
      }
    } else {
      // acc[r][u]: rows 2r, 2r + 1 against columns 2u, 2u + 1 of the pass,
      // [r0c0, r0c1, r1c0, r1c1]; an odd last row is a zero row.
      constexpr std::size_t kPairs = (ROWS + 1) / 2;
      int32x4_t acc[kPairs][2 * kV];
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kV; ++v) {
        const int32x4_t s = vld1q_s32(b.start + at + v * kW);
        const int32x4_t s_lo = vcombine_s32(vget_low_s32(s), vget_low_s32(s));
        const int32x4_t s_hi = vcombine_s32(vget_high_s32(s), vget_high_s32(s));
#pragma GCC unroll 16
        for (std::size_t r = 0; r < kPairs; ++r) {
          acc[r][2 * v] = s_lo;
          acc[r][2 * v + 1] = s_hi;
        }
      }
      for (std::size_t p = p0; p < p1; p += 2) {
        int8x16_t bv[2 * kV];
#pragma GCC unroll 16
        for (std::size_t v = 0; v < kV; ++v) {
          if constexpr (kInt4) {
            // Two steps of four columns, zipped into two column pairs' eight.
            int8x16_t lo, hi;
            unpack4(b.codes + (p / 2 * kNR + col0 + v * kW) * 4, lo, hi);
            const int32x4_t l = vreinterpretq_s32_s8(lo), u = vreinterpretq_s32_s8(hi);
            bv[2 * v] = vreinterpretq_s8_s32(vzip1q_s32(l, u));
            bv[2 * v + 1] = vreinterpretq_s8_s32(vzip2q_s32(l, u));
          } else {
            bv[2 * v] = vld1q_s8(b.codes + (p / 2 * kNR + col0 + v * kW) * 8);
            bv[2 * v + 1] = vld1q_s8(b.codes + (p / 2 * kNR + col0 + v * kW + 2) * 8);
          }
        }
#pragma GCC unroll 16
        for (std::size_t r = 0; r < kPairs; ++r) {
          const int8x16_t ar = row_pair(a + 2 * r * lda, lda, 4 * p, 2 * r + 1 < ROWS);
#pragma GCC unroll 16
          for (std::size_t u = 0; u < 2 * kV; ++u) acc[r][u] = vmmlaq_s32(acc[r][u], ar, bv[u]);
        }
      }
#pragma GCC unroll 16
      for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 16
        for (std::size_t v = 0; v < kV; ++v) {
          const int64x2_t lo = vreinterpretq_s64_s32(acc[i / 2][2 * v]);
          const int64x2_t hi = vreinterpretq_s64_s32(acc[i / 2][2 * v + 1]);
          sum[i][v] = vreinterpretq_s32_s64(i % 2 == 0 ? vzip1q_s64(lo, hi) : vzip2q_s64(lo, hi));
        }
      }
    }
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) {
      const float32x4_t sc = vld1q_f32(b.scales + at + v * kW);
      // uint4: less z - 8 times the row's group sum, after the sums rather
      // than in their start, so that the multiply stays off the chains (on
      // AVX512_VNNI the term in the start took W4A8 uint4 decode to 1.27x
      // int4's time; here unmeasured).
      const int32x4_t z = b.zeros != nullptr ? vld1q_s32(b.zeros + at + v * kW) : vdupq_n_s32(0);
#pragma GCC unroll 16
      for (std::size_t i = 0; i < ROWS; ++i) {
        if (b.zeros != nullptr) {
          sum[i][v] = vmlsq_s32(sum[i][v], z, vdupq_n_s32(group_sum(a + i * lda, b, g)));
        }
        t[i][v] = vfmaq_f32(t[i][v], vcvtq_f32_s32(sum[i][v]), sc);
      }
    }
  }
#pragma GCC unroll 16
  for (std::size_t i = 0; i < ROWS; ++i) {
    const float32x4_t vsa = vdupq_n_f32(sa[i]);
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) {
      const std::size_t col = col0 + v * kW;
      if (col >= n) break;
      store_lanes(vmulq_f32(t[i][v], vsa), bias != nullptr ? bias + col : nullptr,
                  c + i * ldc + col, std::min(kW, n - col));
    }
  }
}

using GroupFn = void (*)(const I8Strip&, std::size_t, const std::uint8_t*, std::size_t,
                         const float*, const float*, float*, std::size_t, std::size_t);

// Up to 2 rows take the strip's 4 vectors in one pass (a decode step streams
// its weights once); 3 and 4 rows take 2 a pass, in two.
template <bool kInt4, bool kMmla, std::size_t... R>
constexpr std::array<GroupFn, sizeof...(R)> make_tiles(std::index_sequence<R...>) {
  return {&tile_groups<R + 1, (R < 2 ? 4 : 2), kInt4, kMmla>...};
}

template <bool kMmla>
void ukernel_groups(const I8Strip& b, const std::uint8_t* a, std::size_t lda, const float* sa,
                    const float* bias, float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  static constexpr auto kTiles = make_tiles<false, kMmla>(std::make_index_sequence<kMR>());
  static constexpr auto kTiles4 = make_tiles<true, kMmla>(std::make_index_sequence<kMR>());
  const GroupFn fn = (b.int4 ? kTiles4 : kTiles)[m - 1];
  const std::size_t cols = (m <= 2 ? 4 : 2) * kW;
  for (std::size_t h = 0; h * cols < n; ++h) fn(b, h, a, lda, sa, bias, c, ldc, n);
}

}  // namespace neon_i8
}  // namespace
}  // namespace mha::detail
