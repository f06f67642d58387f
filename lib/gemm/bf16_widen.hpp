// The widening bf16 kernel sets (avx2_widen in ymm, avx512_widen in zmm),
// written once over a vector type V: B stays bf16 in the K-pair layout of
// gemm_bf16.hpp (half the bytes of fp32, which is what a decode step
// streams) and each pair is widened to fp32 in registers: a 32-bit lane
// (even, odd) gives the even element as lane << 16 and the odd one as
// lane & 0xffff0000, both exact.
//
// A is widened once, when packed or rounded (a_bytes = 4), so each of its
// elements is a plain fp32 broadcast from memory. With A widened in the
// kernel instead (AVX2, 4 x 16, 12 integer ops per 16 FMAs) a BERT s512
// bf16 forward ran 621 M instructions, against 595 M (callgrind).
//
// Per element, the order of vdpbf16ps: acc = fma(a_odd, b_odd, acc), then
// fma(a_even, b_even, acc); each bf16 product is exact in fp32, so each step
// rounds once, as there; unlike there, denormals are kept (IEEE).
//
// V provides: type (the register), kW (lanes), zero(), set1(float),
// broadcast(const float*), fmadd(a, b, c), mul, add, pairs(const uint16_t*)
// (kW pairs as integers), even(pairs), odd(pairs), load(const float*),
// store(float*, x), load_n(const float*, lanes), store_n(float*, x, lanes),
// round(x) (to bf16 as fp32_to_bf16 rounds, kept as fp32). Each TU
// instantiates it with its own V, in its anonymous namespace (bf16_pack.hpp
// says why).
#pragma once

#include <cstddef>
#include <cstdint>

#include "gemm/bf16_pack.hpp"
#include "gemm/bf16_tiles.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail::bf16_widen {

template <class V, std::size_t MR, std::size_t NV>
struct Widen {
  using R = typename V::type;
  static constexpr std::size_t kW = V::kW, kNR = NV * kW;

  // c[0, lanes) = alpha·acc + beta·c (c read only with kBeta), lanes <= kW.
  template <bool kBeta>
  static void store(float* c, R acc, std::size_t lanes, R va, R vb) {
    R x = V::mul(acc, va);
    if (lanes == kW) {
      if constexpr (kBeta) x = V::add(x, V::mul(vb, V::load(c)));
      V::store(c, x);
    } else {
      if constexpr (kBeta) x = V::add(x, V::mul(vb, V::load_n(c, lanes)));
      V::store_n(c, x, lanes);
    }
  }

  template <std::size_t ROWS, std::size_t NVT, bool kBeta, bool kRows>
  static void tile(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c,
                   std::size_t ldc, std::size_t n, float alpha, float beta) {
    const auto* af = reinterpret_cast<const float*>(a);
    R acc[ROWS][NVT];
    for (std::size_t i = 0; i < ROWS; ++i) {
      for (std::size_t v = 0; v < NVT; ++v) acc[i][v] = V::zero();
    }
    for (std::size_t r = 0; r < b.count; ++r) {
      const std::uint16_t* bp = b.run[r].b;
      for (std::size_t p = 0; p < b.run[r].pairs; ++p, bp += b.ld, af += (kRows ? 1 : MR) * 2) {
        R be[NVT], bo[NVT];
#pragma GCC unroll 4
        for (std::size_t v = 0; v < NVT; ++v) {
          const auto x = V::pairs(bp + v * kW * 2);
          be[v] = V::even(x);
          bo[v] = V::odd(x);
        }
#pragma GCC unroll 16
        for (std::size_t i = 0; i < ROWS; ++i) {
          const float* ap = af + (kRows ? i * lda : i) * 2;
          const R ao = V::broadcast(ap + 1);
#pragma GCC unroll 4
          for (std::size_t v = 0; v < NVT; ++v) acc[i][v] = V::fmadd(ao, bo[v], acc[i][v]);
          const R ae = V::broadcast(ap);
#pragma GCC unroll 4
          for (std::size_t v = 0; v < NVT; ++v) acc[i][v] = V::fmadd(ae, be[v], acc[i][v]);
        }
      }
    }
    const R va = V::set1(alpha), vb = V::set1(beta);
    // Unrolled, or GCC 12 keeps acc in memory and stores every accumulator
    // on every pair of k (AVX2, a BERT s128 bf16 forward: 117.7 M
    // instructions then, 97.3 M unrolled, callgrind).
#pragma GCC unroll 16
    for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 4
      for (std::size_t v = 0; v < NVT; ++v) {
        const std::size_t j = v * kW;
        store<kBeta>(c + i * ldc + j, acc[i][v], n - j < kW ? n - j : kW, va, vb);
      }
    }
  }

  struct Tiles {
    template <std::size_t ROWS, std::size_t NVT, bool kBeta, bool kRows>
    static constexpr bf16_tiles::TileFn fn = &tile<ROWS, NVT, kBeta, kRows>;
  };
  using Entries = bf16_tiles::Dispatch<Tiles, MR, NV, kW, 2 * kNR>;

  // One row against S strips: 2S independent chains instead of ukernel's 2.
  template <std::size_t S, bool kBeta>
  static void row_strips(std::size_t kp, const std::uint32_t* a, std::size_t as,
                         const std::uint16_t* b, std::size_t b_strip, float* c, std::size_t n,
                         float alpha, float beta) {
    const auto* af = reinterpret_cast<const float*>(a);
    R acc[S][NV];
    for (std::size_t s = 0; s < S; ++s) {
      for (std::size_t v = 0; v < NV; ++v) acc[s][v] = V::zero();
    }
    for (std::size_t p = 0; p < kp; ++p) {
      const R ae = V::broadcast(af + p * as * 2);
      const R ao = V::broadcast(af + p * as * 2 + 1);
      for (std::size_t s = 0; s < S; ++s) {
        for (std::size_t v = 0; v < NV; ++v) {
          const auto x = V::pairs(b + s * b_strip + (p * kNR + v * kW) * 2);
          acc[s][v] = V::fmadd(ao, V::odd(x), acc[s][v]);
          acc[s][v] = V::fmadd(ae, V::even(x), acc[s][v]);
        }
      }
    }
    const R va = V::set1(alpha), vb = V::set1(beta);
    for (std::size_t s = 0; s < S; ++s) {
      for (std::size_t v = 0; v < NV; ++v) {
        const std::size_t j = s * kNR + v * kW;
        if (j >= n) return;
        store<kBeta>(c + j, acc[s][v], n - j < kW ? n - j : kW, va, vb);
      }
    }
  }

  static void round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx,
                         void* out, std::size_t ldy) {
    auto* const y = static_cast<float*>(out);
    for (std::size_t i = 0; i < rows; ++i) {
      const float* xi = x + i * ldx;
      float* yi = y + i * ldy;
      std::size_t j = 0;
      for (; j + kW <= n; j += kW) V::store(yi + j, V::round(V::load(xi + j)));
      if (j < n) V::store_n(yi + j, V::round(V::load_n(xi + j, n - j)), n - j);
      if (n % 2 != 0) yi[n] = 0.f;
    }
  }

  // The table, named `name`; Tag as V's TU's own; pack_b writes
  // bf16_pack::pack_b's bytes.
  template <class Tag>
  static constexpr GemmBf16Kernels kernels(
      const char* name, decltype(GemmBf16Kernels::pack_b) pack_b = &bf16_pack::pack_b<Tag, kNR>) {
    return with_runs(
        GemmBf16Kernels{name, MR, kNR, kBf16MC, kBf16KC, kBf16NC, &Entries::ukernel,
                        &Entries::ukernel_rows, &round_rows, &bf16_pack::pack_a<Tag, MR, true>,
                        pack_b, false, &bf16_tiles::RowDispatch<Widen, kNR>::ukernel_row1, 4},
        &Entries::ukernel_runs);
  }
};

}  // namespace mha::detail::bf16_widen
