// The vpdpbusd kernel sets of the int8 GEMM (gemm_i8.hpp), written once over
// a vector V: AVX512_VNNI's zmm (gemm_i8_avx512_vnni.cpp), AVX-VNNI's VEX
// ymm (gemm_i8_avx_vnni.cpp), and the same ymm kernels in EVEX
// (gemm_i8_avx_vnni_evex.cpp), which run on AVX512_VNNI CPUs and so test
// the AVX-VNNI code on CPUs without AVX-VNNI (Zen 4).
//
// vpdpbusd multiplies unsigned bytes by signed ones, so the activation codes
// are stored as q + 128 and each column's sum starts at -128 times its code
// sum (the int32 sums wrap and wrap back, so they stay exact; gemm_i8.hpp).
// A tile is MR rows x NV vectors of columns; per four k, MR * NV vpdpbusd
// against NV loads and MR broadcasts.
//
// V: kW int32 lanes in I, kW floats in F, and
//   load(p), quad(p) (four bytes at p in every lane), splat(x),
//   dp(acc, a, b) (vpdpbusd), sub(a, b) and mullo(a, b) on int32 lanes,
//   nibbles(raw, lo, hi) (the low and high nibbles of every byte, less 8),
//   to_float, load_f, splat_f, zero_f, add, mul, fma, and
//   load_n(p, m), store_n(p, y, m) on the first floats that m = mask(lanes)
//   names (lanes 0 to kW; none touched past them).
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "gemm/gemm_i8.hpp"
#include "gemm/gemm_i8_tiles.hpp"

namespace mha::detail {
namespace {  // NOLINT(build/namespaces): each kernel set's object its own copy

// Shape: kMR rows and kNV vectors per tile; weights in groups or int4 take
// all kNV vectors a pass for up to kWideRows rows (so that a decode step
// streams its weights once: int4 g128 m1 n3072 k2048 from memory, Zen 4,
// 9.1 -> 21.5 GB/s against two passes), else kNarrowV vectors a pass, the
// registers holding more rows' accumulators.
template <class V, std::size_t kMR, std::size_t kNV, std::size_t kWideRows, std::size_t kNarrowV>
struct VnniSet {
  static constexpr std::size_t kW = V::kW, kNR = kNV * kW;
  using I = typename V::I;
  using F = typename V::F;
  using M = typename V::M;

  // The masks of the kV vectors from column col0 of a row of n columns.
  template <std::size_t kV>
  static void masks(std::size_t n, std::size_t col0, M (&m)[kV]) {
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) {
      const std::size_t col = col0 + v * kW;
      m[v] = V::mask(n > col ? std::min(kW, n - col) : 0);
    }
  }

  // acc[i][v] += step p's products: b the step's kV vectors of codes, row
  // i's four codes at a + i * lda + 4p.
  template <std::size_t ROWS, std::size_t kV>
  [[gnu::always_inline]] static inline void step(const std::int8_t* b, const std::uint8_t* a,
                                                 std::size_t lda, std::size_t p,
                                                 I (&acc)[ROWS][kV]) {
    I bv[kV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kV; ++v) bv[v] = V::load(b + v * kW * 4);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) {
      const I ai = V::quad(a + i * lda + 4 * p);
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kV; ++v) acc[i][v] = V::dp(acc[i][v], ai, bv[v]);
    }
  }

  template <std::size_t ROWS>
  MHA_NO_TREE_PRE static void tile(std::size_t kq, const std::uint8_t* a, std::size_t lda,
                                   const std::int8_t* b, const std::int32_t* start, const float* sa,
                                   const float* sb, const float* bias, float* c, std::size_t ldc,
                                   std::size_t n) {
    I acc[ROWS][kNV];
#pragma GCC unroll 16
    for (std::size_t v = 0; v < kNV; ++v) {
      const I s = V::load(start + v * kW);
#pragma GCC unroll 16
      for (std::size_t i = 0; i < ROWS; ++i) acc[i][v] = s;
    }
    for (std::size_t p = 0; p < kq; ++p, b += kNR * 4) step(b, a, lda, p, acc);
    M m[kNV];
    masks(n, 0, m);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) {
      const F vsa = V::splat_f(sa[i]);
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kNV; ++v) {
        const F s = V::mul(vsa, V::load_f(sb + v * kW));
        F y = V::mul(V::to_float(acc[i][v]), s);
        if (bias != nullptr) y = V::add(y, V::load_n(bias + v * kW, m[v]));
        V::store_n(c + i * ldc + v * kW, y, m[v]);
      }
    }
  }

  struct Tiles {
    template <std::size_t ROWS>
    static constexpr i8_tiles::TileFn fn = &tile<ROWS>;
  };
  using Entries = i8_tiles::Dispatch<Tiles, kMR>;

  // ukernel_groups on columns [kV*kW*h, kV*kW*(h + 1)) of the strip: the
  // integer sums of each group as tile's, then each FMA'd into an fp32
  // accumulator by its scale. int4 codes: each load holds two k steps.
  template <std::size_t ROWS, std::size_t kV, bool kInt4>
  MHA_NO_TREE_PRE static void tile_groups(const I8Strip& b, std::size_t h, const std::uint8_t* a,
                                          std::size_t lda, const float* sa, const float* bias,
                                          float* c, std::size_t ldc, std::size_t n) {
    F t[ROWS][kV];
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kV; ++v) t[i][v] = V::zero_f();
    }
    for (std::size_t g = 0, p0 = 0; p0 < b.kq; ++g, p0 += b.group_kq) {
      const std::size_t p1 = std::min(b.kq, p0 + b.group_kq);
      I acc[ROWS][kV];
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kV; ++v) {
        const I s = V::load(b.start + g * b.stride + (kV * h + v) * kW);
#pragma GCC unroll 16
        for (std::size_t i = 0; i < ROWS; ++i) acc[i][v] = s;
      }
      if constexpr (kInt4) {
        // Pairs of steps; a group's odd last step pairs with a zero code.
        for (std::size_t p = p0; p < p1; p += 2) {
          const std::int8_t* bp = b.codes + (p / 2 * kNR + kV * h * kW) * 4;
          I lo[kV], hi[kV];
#pragma GCC unroll 16
          for (std::size_t v = 0; v < kV; ++v) V::nibbles(V::load(bp + v * kW * 4), lo[v], hi[v]);
#pragma GCC unroll 16
          for (std::size_t i = 0; i < ROWS; ++i) {
            const I a0 = V::quad(a + i * lda + 4 * p), a1 = V::quad(a + i * lda + 4 * p + 4);
#pragma GCC unroll 16
            for (std::size_t v = 0; v < kV; ++v) {
              acc[i][v] = V::dp(acc[i][v], a0, lo[v]);
              acc[i][v] = V::dp(acc[i][v], a1, hi[v]);
            }
          }
        }
      } else {
        for (std::size_t p = p0; p < p1; ++p) {
          step(b.codes + (p * kNR + kV * h * kW) * 4, a, lda, p, acc);
        }
      }
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kV; ++v) {
        const std::size_t at = g * b.stride + (kV * h + v) * kW;
        const F s = V::load_f(b.scales + at);
        // uint4: less z - 8 times the row's group sum, after the sums rather
        // than in their start, so that vpmulld's latency stays off the chain.
        const I z = b.zeros != nullptr ? V::load(b.zeros + at) : I{};
#pragma GCC unroll 16
        for (std::size_t i = 0; i < ROWS; ++i) {
          if (b.zeros != nullptr) {
            acc[i][v] = V::sub(acc[i][v], V::mullo(z, V::splat(group_sum(a + i * lda, b, g))));
          }
          t[i][v] = V::fma(V::to_float(acc[i][v]), s, t[i][v]);
        }
      }
    }
    M m[kV];
    masks(n, kV * h * kW, m);
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) {
      const F vsa = V::splat_f(sa[i]);
#pragma GCC unroll 16
      for (std::size_t v = 0; v < kV; ++v) {
        const std::size_t col = (kV * h + v) * kW;
        F y = V::mul(t[i][v], vsa);
        if (bias != nullptr) y = V::add(y, V::load_n(bias + col, m[v]));
        V::store_n(c + i * ldc + col, y, m[v]);
      }
    }
  }

  using GroupFn = void (*)(const I8Strip&, std::size_t, const std::uint8_t*, std::size_t,
                           const float*, const float*, float*, std::size_t, std::size_t);

  template <bool kInt4, std::size_t... R>
  static constexpr auto make_group_tiles(std::index_sequence<R...>) {
    return std::array<GroupFn, sizeof...(R)>{
        &tile_groups<R + 1, (R < kWideRows ? kNV : kNarrowV), kInt4>...};
  }
  static constexpr auto kGroupTiles = make_group_tiles<false>(std::make_index_sequence<kMR>());
  static constexpr auto kGroupTiles4 = make_group_tiles<true>(std::make_index_sequence<kMR>());

  static void ukernel_groups(const I8Strip& b, const std::uint8_t* a, std::size_t lda,
                             const float* sa, const float* bias, float* c, std::size_t ldc,
                             std::size_t m, std::size_t n) {
    const GroupFn fn = (b.int4 ? kGroupTiles4 : kGroupTiles)[m - 1];
    const std::size_t cols = (m <= kWideRows ? kNV : kNarrowV) * kW;
    for (std::size_t h = 0; h * cols < n; ++h) fn(b, h, a, lda, sa, bias, c, ldc, n);
  }
};

}  // namespace
}  // namespace mha::detail
