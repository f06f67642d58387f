// GemmI8Kernels::ukernel over a kernel set's register tiles, one per row
// count: the set's Tiles names them (template <std::size_t ROWS> static
// constexpr TileFn fn), and the entry picks the one for m rows.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>

// On a tile function: GCC 12's tree-PRE kept a stack copy of every
// accumulator of these loops, stored on each k step (m512 n2304 k768, Zen 4:
// 171 against 331 GOPS); without it they stay in registers.
#if defined(__GNUC__) && !defined(__clang__)
#define MHA_NO_TREE_PRE __attribute__((optimize("no-tree-pre")))
#else
#define MHA_NO_TREE_PRE
#endif

namespace mha::detail::i8_tiles {

// ukernel's arguments but m: C [ROWS x n].
using TileFn = void (*)(std::size_t kq, const std::uint8_t* a, std::size_t lda,
                        const std::int8_t* b, const std::int32_t* start, const float* sa,
                        const float* sb, const float* bias, float* c, std::size_t ldc,
                        std::size_t n);

template <class Tiles, std::size_t MR>
struct Dispatch {
  template <std::size_t... R>
  static constexpr std::array<TileFn, MR> make(std::index_sequence<R...>) {
    return {Tiles::template fn<R + 1>...};
  }
  static constexpr std::array<TileFn, MR> kTiles = make(std::make_index_sequence<MR>());

  static void ukernel(std::size_t kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
                      const std::int32_t* start, const float* sa, const float* sb,
                      const float* bias, float* c, std::size_t ldc, std::size_t m, std::size_t n) {
    kTiles[m - 1](kq, a, lda, b, start, sa, sb, bias, c, ldc, n);
  }
};

}  // namespace mha::detail::i8_tiles
