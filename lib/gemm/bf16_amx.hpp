// The AMX-BF16 kernel set, written once over a tile backend: the hardware's
// tile instructions (gemm_bf16_amx_bf16.cpp) or their software model
// (gemm_bf16_amx_emulated.cpp, any CPU), so that the tiling, the edges, the
// packing, the tile configuration and the threading run, and are tested,
// everywhere.
//
// One register tile of C is 32 x 32 fp32 in four 16 x 16 tiles, two A tiles
// (16 rows x 16 pairs) and two B tiles (16 pairs x 16 columns): per 16 pairs
// of k, four tdpbf16ps against four tile loads, oneDNN brgemm's 2 x 2
// blocking. B's packed strips ([kp][32][2], gemm_bf16.hpp) are two B tiles
// side by side (rows of 128 bytes); A is packed row-major, each row's pairs
// padded to whole tiles with zeros (a_row_pairs), so packed A loads whole.
// Rows of A from the attention core and B's last, partial K tile are copied
// to zero-padded tiles on the stack first, so no load reads past an operand.
//
// Numerics (mha.h): per tdpbf16ps, per C element, two fp32 sums from 0, over
// the 16 pairs' even and odd products, then C + (even + odd), each addition
// rounded to nearest even, bf16 denormal inputs read as zero and denormal
// results flushed; the groups of 16 pairs start at each K block's first
// pair, and then alpha·acc + beta·C as the other kernel sets.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm/amx_tiles.hpp"
#include "gemm/bf16_pack.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail::bf16_amx {

constexpr std::size_t kMR = 32, kNR = 32;
constexpr std::size_t kTileRows = amx::kTileRows, kTilePairs = 16, kTileBytes = amx::kTileBytes;
using amx::TileConfig;
// Tiles 0-3: C (C(r, c) is tile 2r + c); 4-5: A (row blocks); 6-7: B
// (column blocks).
using amx::kConfig;

// Pairs per packed A row: kp rounded up to whole tiles. Tag, here and
// below, keeps each TU's copy its own: the TUs are compiled for different
// ISAs, and the linker must never pick one for the other.
template <class Tag>
std::size_t a_row_pairs(std::size_t kp) {
  return (kp + kTilePairs - 1) / kTilePairs * kTilePairs;
}

// Packs op(A) [m x k] in strips of kMR rows of a_row_pairs(kp) pairs, rows
// past m and pairs past k zero.
template <class Tag>
void pack_a(bool trans, std::size_t m, std::size_t k, const std::uint16_t* a, std::size_t lda,
            std::uint32_t* dst) {
  const std::size_t kp = (k + 1) / 2, rp = a_row_pairs<Tag>(kp);
  for (std::size_t r0 = 0; r0 < m; r0 += kMR) {
    const std::size_t rows = m - r0 < kMR ? m - r0 : kMR;
    std::uint32_t* d = dst + r0 / kMR * kMR * rp;
    for (std::size_t i = 0; i < kMR; ++i) {
      std::uint32_t* row = d + i * rp;
      std::size_t p = 0;
      if (i < rows && !trans) {
        const std::uint16_t* src = a + (r0 + i) * lda;  // the row's pairs are adjacent
        for (; p < kp; ++p) row[p] = bf16_pack::pair_at<Tag>(src + 2 * p, 1, 2 * p + 1 == k);
      } else if (i < rows) {
        const std::uint16_t* src = a + r0 + i;  // op(A)(i, q) = a[q * lda + r0 + i]
        for (; p < kp; ++p)
          row[p] = bf16_pack::pair_at<Tag>(src + 2 * p * lda, lda, 2 * p + 1 == k);
      }
      for (; p < rp; ++p) row[p] = 0;
    }
  }
}

// The tile operations a backend T provides, tile numbers as template
// arguments (the hardware's are immediates):
//   T::configure(const TileConfig&): the calling thread's tile
//     configuration, loaded only where it differs (thread_setup);
//   T::template zero<t>(), load<t>(const void*, std::size_t stride),
//   store<t>(void*, std::size_t stride), dp<c, a, b>() (tdpbf16ps);
//   T::finish(const float* acc, std::size_t lda, float* c, std::size_t ldc,
//     std::size_t m, std::size_t n, float alpha, float beta): c = alpha·acc +
//     beta·c over m x n (acc rows lda floats apart, acc == c allowed with
//     beta 0; c read only when beta != 0), each product and the sum rounded
//     apart, as the other kernel sets.
template <class T, std::size_t MT, std::size_t NT>
struct Block {
  // A's row block r from rows `stride` pairs apart, or through a copy of
  // its `rows` x `pairs` valid part in `pad`, whose other rows compute()
  // zeroed once for the block.
  template <int kTile>
  static void load_a(const std::uint32_t* a, std::size_t stride, std::size_t rows,
                     std::size_t pairs, std::uint32_t* pad) {
    if (rows == kTileRows && pairs == kTilePairs) {
      T::template load<kTile>(a, stride * 4);
      return;
    }
    // One row (a decode step's query, a GEMV) read 16 times, stride 0: its
    // C rows past the first are copies the finish never stores. Zeroing and
    // filling a padded tile every 16 pairs cost more than the products.
    if (rows == 1 && pairs == kTilePairs) {
      T::template load<kTile>(a, 0);
      return;
    }
    for (std::size_t i = 0; i < rows; ++i) {
      std::copy_n(a + i * stride, pairs, pad + i * kTilePairs);
      std::fill(pad + i * kTilePairs + pairs, pad + (i + 1) * kTilePairs, 0u);
    }
    T::template load<kTile>(pad, kTileBytes);
  }

  // The C tiles over kp pairs; A rows `stride` pairs apart, with `padded`
  // rows and pairs (packed A) loaded whole.
  static void compute(std::size_t kp, const std::uint32_t* a, std::size_t stride, bool padded,
                      const std::uint16_t* b, std::size_t m) {
    alignas(64) std::uint32_t apad[2][kTileRows * kTilePairs];
    alignas(64) std::uint16_t bpad[kTilePairs * kNR * 2];
    if (!padded && (m < MT * kTileRows || kp % kTilePairs != 0)) {
      for (std::size_t t = 0; t < MT; ++t) std::fill_n(apad[t], kTileRows * kTilePairs, 0u);
    }
    T::template zero<0>();
    if constexpr (NT == 2) T::template zero<1>();
    if constexpr (MT == 2) T::template zero<2>();
    if constexpr (MT == 2 && NT == 2) T::template zero<3>();
    for (std::size_t p0 = 0; p0 < kp; p0 += kTilePairs) {
      const std::size_t pairs = std::min(kTilePairs, kp - p0);
      const std::size_t rows0 = padded ? kTileRows : std::min(kTileRows, m);
      const std::uint16_t* bp = b + p0 * kNR * 2;
      if (pairs < kTilePairs) {
        std::copy_n(bp, pairs * kNR * 2, bpad);
        std::fill(bpad + pairs * kNR * 2, bpad + kTilePairs * kNR * 2, std::uint16_t{0});
        bp = bpad;
      }
      // Each load just before the first product that reads it: a load
      // waits for the products still reading its tile (tiles are not
      // renamed), so the next step's A0 and B0 start while C(1, *) run.
      load_a<4>(a + p0, stride, rows0, padded ? kTilePairs : pairs, apad[0]);
      T::template load<6>(bp, kNR * 4);
      T::template dp<0, 4, 6>();
      if constexpr (NT == 2) {
        T::template load<7>(bp + 16 * 2, kNR * 4);
        T::template dp<1, 4, 7>();
      }
      if constexpr (MT == 2) {
        const std::size_t rows1 = padded ? kTileRows : m - kTileRows;
        load_a<5>(a + kTileRows * stride + p0, stride, rows1, padded ? kTilePairs : pairs, apad[1]);
        T::template dp<2, 5, 6>();
        if constexpr (NT == 2) T::template dp<3, 5, 7>();
      }
    }
  }
  // The C tiles to acc, rows ld floats apart.
  static void store(float* acc, std::size_t ld) {
    T::template store<0>(acc, ld * 4);
    if constexpr (NT == 2) T::template store<1>(acc + 16, ld * 4);
    if constexpr (MT == 2) T::template store<2>(acc + kTileRows * ld, ld * 4);
    if constexpr (MT == 2 && NT == 2) T::template store<3>(acc + kTileRows * ld + 16, ld * 4);
  }
};

// A block whose tiles are stored and whose finish is still to do: straight
// into C (acc == c, rows ldc apart) or into the panel's acc (rows kNR apart).
struct Pending {
  const float* acc = nullptr;
  float* c = nullptr;
  std::size_t m = 0, n = 0, j0 = 0;
};

// C [m x n] = alpha·A·B + beta·C for every block of kMR rows and every B
// strip (b_strip elements apart) in one call, each block with the bits of
// a call per block. A block's finish runs after the next block's tile
// products are issued, so the vector unit works while the tiles do: a
// finish read straight after the tile stores cost as much as the products
// of a 32 x 32 block at head_dim 64 (295 ns a block against 168 with no
// finish), and panels took a BERT s128 bf16 forward from 1.60-1.87 ms to
// 1.29-1.37 (Xeon with AMX, 1 thread). A whole block with beta 0 goes from
// the tiles to C, scaled there if alpha is not 1; the others through acc,
// finished before the next block's tiles are stored there.
// A row block r starts at a + r * a_block words, its rows `stride` apart.
// ep (if not null) runs in the finish too, after alpha and beta: the bf16
// projections' bias and rounding cost a pass of their own over C, 12 % of
// the QKV product's time (BERT s512 bf16, 1 thread, AMX Xeon).
template <class T>
void panel(std::size_t kp, const std::uint32_t* a, std::size_t stride, std::size_t a_block,
           bool padded, const std::uint16_t* b, std::size_t b_strip, float* c, std::size_t ldc,
           std::size_t m, std::size_t n, float alpha, float beta, const Bf16Epilogue* ep) {
  alignas(64) float acc[kMR * kNR];
  Pending pending;
  const auto finish = [&] {
    if (pending.c == nullptr) return;
    if (pending.acc != pending.c || alpha != 1.f) {
      const std::size_t lda = pending.acc == pending.c ? ldc : kNR;
      T::finish(pending.acc, lda, pending.c, ldc, pending.m, pending.n, alpha, beta);
    }
    if (ep != nullptr) ep->apply(pending.c, ldc, pending.m, pending.j0, pending.n);
  };
  for (std::size_t j0 = 0; j0 < n; j0 += kNR, b += b_strip) {
    const std::size_t cols = std::min(kNR, n - j0);
    for (std::size_t i0 = 0; i0 < m; i0 += kMR) {
      const std::size_t rows = std::min(kMR, m - i0);
      float* ci = c + i0 * ldc + j0;
      const bool direct = rows == kMR && cols == kNR && beta == 0.f;
      const auto step = [&]<class B>() {
        B::compute(kp, a + i0 / kMR * a_block, stride, padded, b, rows);
        finish();
        B::store(direct ? ci : acc, direct ? ldc : kNR);
        pending = {direct ? ci : acc, ci, rows, cols, j0};
      };
      if (rows > kTileRows && cols > 16) {
        step.template operator()<Block<T, 2, 2>>();
      } else if (rows > kTileRows) {
        step.template operator()<Block<T, 2, 1>>();
      } else if (cols > 16) {
        step.template operator()<Block<T, 1, 2>>();
      } else {
        step.template operator()<Block<T, 1, 1>>();
      }
    }
  }
  finish();
}

// The GemmBf16Kernels entries.
template <class T, class Tag>
void ukernel(std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, float* c,
             std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
  const std::size_t rp = a_row_pairs<Tag>(kp);
  panel<T>(kp, a, rp, kMR * rp, true, b, 0, c, ldc, m, n, alpha, beta, nullptr);
}

template <class T>
void ukernel_rows(std::size_t kp, const std::uint32_t* a, std::size_t lda, const std::uint16_t* b,
                  float* c, std::size_t ldc, std::size_t m, std::size_t n, float alpha,
                  float beta) {
  panel<T>(kp, a, lda, kMR * lda, false, b, 0, c, ldc, m, n, alpha, beta, nullptr);
}

template <class T, class Tag>
void panel_packed(std::size_t kp, const std::uint32_t* a, const std::uint16_t* b,
                  std::size_t b_strip, float* c, std::size_t ldc, std::size_t m, std::size_t n,
                  float alpha, float beta) {
  const std::size_t rp = a_row_pairs<Tag>(kp);
  panel<T>(kp, a, rp, kMR * rp, true, b, b_strip, c, ldc, m, n, alpha, beta, nullptr);
}

template <class T>
void panel_rows(std::size_t kp, const std::uint32_t* a, std::size_t lda, const std::uint16_t* b,
                std::size_t b_strip, float* c, std::size_t ldc, std::size_t m, std::size_t n,
                float alpha, float beta, const Bf16Epilogue* ep) {
  panel<T>(kp, a, lda, kMR * lda, false, b, b_strip, c, ldc, m, n, alpha, beta, ep);
}

template <class T>
void thread_setup() {
  T::configure(kConfig);
}

// The table of backend T; round_rows rounds as vcvtne2ps2bf16 (denormals
// to zero, as the tiles read them anyway); pack_b writes bf16_pack::pack_b's
// bytes; flop_time as GemmBf16Kernels'.
template <class T, class Tag>
constexpr GemmBf16Kernels kernels(const char* name,
                                  void (*round_rows)(std::size_t, std::size_t, const float*,
                                                     std::size_t, void*, std::size_t),
                                  decltype(GemmBf16Kernels::pack_b) pack_b, double flop_time) {
  GemmBf16Kernels g{name,
                    kMR,
                    kNR,
                    kBf16MC,
                    kBf16KC,
                    kBf16NC,
                    &ukernel<T, Tag>,
                    &ukernel_rows<T>,
                    round_rows,
                    &pack_a<Tag>,
                    pack_b};
  g.a_row_pairs = &a_row_pairs<Tag>;
  g.thread_setup = &thread_setup<T>;
  g.panel = &panel_packed<T, Tag>;
  g.panel_rows = &panel_rows<T>;
  g.flop_time = flop_time;
  return g;
}

}  // namespace mha::detail::bf16_amx
