// The entry points every bf16 kernel TU builds from its register tile:
// ukernel and ukernel_rows pick, by m and n, the tile instance of exactly
// that many rows and vectors, so edges compute only what they store. Each
// TU instantiates it with its own Tiles (in its anonymous namespace), so no
// two ISAs' copies can be merged by the linker.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "gemm/gemm_bf16.hpp"

namespace mha::detail::bf16_tiles {

// A tile reads B's k groups as runs (Bf16Runs): one run of a packed strip
// for ukernel and ukernel_rows, a paged cache's blocks for ukernel_runs.
using TileFn = void (*)(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c,
                        std::size_t ldc, std::size_t n, float alpha, float beta);

// Tiles::fn<ROWS, NV, kBeta, kRows>: the tile of ROWS rows and NV vectors of
// W lanes (C read only with kBeta; A packed, or rows lda pairs apart with
// kRows), for ROWS <= MR and NV <= MaxNV; a packed strip's k groups are LD
// elements apart.
template <class Tiles, std::size_t MR, std::size_t MaxNV, std::size_t W, std::size_t LD>
struct Dispatch {
  template <bool kBeta, bool kRows, std::size_t NV, std::size_t... R>
  static constexpr std::array<TileFn, MR> rows_of(std::index_sequence<R...>) {
    return {Tiles::template fn<R + 1, NV, kBeta, kRows>...};
  }
  template <bool kBeta, bool kRows, std::size_t... V>
  static constexpr std::array<std::array<TileFn, MR>, MaxNV> table(std::index_sequence<V...>) {
    return {rows_of<kBeta, kRows, V + 1>(std::make_index_sequence<MR>{})...};
  }
  template <bool kRows>
  static void run(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c,
                  std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
    static constexpr auto kPlain = table<false, kRows>(std::make_index_sequence<MaxNV>{});
    static constexpr auto kWithBeta = table<true, kRows>(std::make_index_sequence<MaxNV>{});
    const std::size_t nv = (n + W - 1) / W;
    (beta == 0.f ? kPlain : kWithBeta)[nv - 1][m - 1](a, lda, b, c, ldc, n, alpha, beta);
  }
  static void ukernel(std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, float* c,
                      std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
    const Bf16Run whole{b, kp};
    run<false>(a, 0, Bf16Runs{&whole, 1, LD}, c, ldc, m, n, alpha, beta);
  }
  static void ukernel_rows(std::size_t kp, const std::uint32_t* a, std::size_t lda,
                           const std::uint16_t* b, float* c, std::size_t ldc, std::size_t m,
                           std::size_t n, float alpha, float beta) {
    const Bf16Run whole{b, kp};
    run<true>(a, lda, Bf16Runs{&whole, 1, LD}, c, ldc, m, n, alpha, beta);
  }
  static void ukernel_runs(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c,
                           std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
    run<true>(a, lda, b, c, ldc, m, n, alpha, beta);
  }
};

// ukernel_row1 over Rows::row_strips<S, kBeta>, one row of C against S <= 4
// consecutive strips of NR columns (C read only with kBeta): the instance of
// exactly the strips n spans.
template <class Rows, std::size_t NR>
struct RowDispatch {
  template <bool kBeta>
  static void run(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
                  std::size_t b_strip, float* c, std::size_t n, float alpha, float beta) {
    switch ((n + NR - 1) / NR) {
      case 1:
        return Rows::template row_strips<1, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
      case 2:
        return Rows::template row_strips<2, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
      case 3:
        return Rows::template row_strips<3, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
      default:
        return Rows::template row_strips<4, kBeta>(kp, a, as, b, b_strip, c, n, alpha, beta);
    }
  }
  static void ukernel_row1(std::size_t kp, const std::uint32_t* a, std::size_t as,
                           const std::uint16_t* b, std::size_t b_strip, float* c, std::size_t n,
                           float alpha, float beta) {
    if (beta == 0.f) {
      run<false>(kp, a, as, b, b_strip, c, n, alpha, beta);
    } else {
      run<true>(kp, a, as, b, b_strip, c, n, alpha, beta);
    }
  }
};

}  // namespace mha::detail::bf16_tiles
