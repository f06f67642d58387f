// The bf16 packers of GemmBf16Kernels (layouts in gemm_bf16.hpp), written
// once and instantiated by each table's TU with its own Tag, so each ISA's
// copy is a distinct symbol that the linker can never merge with another.
//
// Each reads its source in memory order: a pair along k that is adjacent in
// memory (A's rows, Bᵀ's rows) is one 32-bit copy, and two rows of pairs
// across memory rows are interleaved a row at a time. An element-by-element
// loop with a bounds test per element (as before) made mha_gemm_bf16 on
// a projection with B packed per call (m128 n768 k768 NT, Zen 4) run at 0.57x
// oneDNN, the packing costing more than the product.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm/gemm_bf16.hpp"

namespace mha::detail::bf16_pack {

// The pair (x[0], x[step]) as one word, the first in the low half; `odd`:
// the last pair of an odd k, its high half zero.
template <class Tag>
std::uint32_t pair_at(const std::uint16_t* x, std::size_t step, bool odd) {
  return x[0] | (odd ? 0u : static_cast<std::uint32_t>(x[step]) << 16);
}

// Packed A in pairs; kWiden: each element widened (exactly) to an fp32
// word, for kernels that read A in fp32 (a_bytes = 4).
template <class Tag, std::size_t MR, bool kWiden = false>
void pack_a(bool trans, std::size_t m, std::size_t k, const std::uint16_t* a, std::size_t lda,
            std::uint32_t* dst) {
  const std::size_t kp = (k + 1) / 2, words = kWiden ? 2 : 1;
  const auto put = [&](std::uint32_t* d, std::uint32_t pair) {
    if constexpr (kWiden) {
      d[0] = pair << 16;
      d[1] = pair & 0xffff0000u;
    } else {
      d[0] = pair;
    }
  };
  for (std::size_t r0 = 0; r0 < m; r0 += MR) {
    const std::size_t rows = m - r0 < MR ? m - r0 : MR;
    std::uint32_t* d = dst + r0 / MR * kp * MR * words;
    if (!trans) {
      // Row i's pairs are adjacent in memory.
      for (std::size_t i = 0; i < rows; ++i) {
        const std::uint16_t* row = a + (r0 + i) * lda;
        for (std::size_t p = 0; p < k / 2; ++p)
          put(d + (p * MR + i) * words, pair_at<Tag>(row + 2 * p, 1, false));
        if (k % 2 != 0) put(d + ((kp - 1) * MR + i) * words, pair_at<Tag>(row + k - 1, 1, true));
      }
    } else {
      // op(A)(i, q) = a[q * lda + r0 + i]: memory rows q and q + 1 give the
      // pairs p = q / 2 of every row.
      for (std::size_t p = 0; p < kp; ++p) {
        const std::uint16_t* lo = a + 2 * p * lda + r0;
        const bool odd = 2 * p + 1 == k;
        for (std::size_t i = 0; i < rows; ++i)
          put(d + (p * MR + i) * words, pair_at<Tag>(lo + i, lda, odd));
      }
    }
    for (std::size_t p = 0; p < kp; ++p) {
      for (std::size_t i = rows; i < MR; ++i) put(d + (p * MR + i) * words, 0);
    }
  }
}

template <class Tag, std::size_t NR>
void pack_b(bool trans, std::size_t k, std::size_t n, const std::uint16_t* b, std::size_t ldb,
            std::uint16_t* dst, std::size_t strip_stride) {
  const std::size_t kp = (k + 1) / 2;
  for (std::size_t j0 = 0; j0 < n; j0 += NR) {
    const std::size_t cols = n - j0 < NR ? n - j0 : NR;
    std::uint16_t* d = dst + j0 / NR * strip_stride;
    if (trans) {
      // op(B)(q, j) = b[(j0 + j) * ldb + q]: column j's pairs are adjacent.
      for (std::size_t j = 0; j < cols; ++j) {
        const std::uint16_t* col = b + (j0 + j) * ldb;
        for (std::size_t p = 0; p < kp; ++p) {
          const std::uint32_t pair = pair_at<Tag>(col + 2 * p, 1, 2 * p + 1 == k);
          std::memcpy(d + (p * NR + j) * 2, &pair, sizeof pair);
        }
      }
    } else {
      // Memory rows q and q + 1 interleaved into pair row q / 2.
      for (std::size_t p = 0; p < kp; ++p) {
        const std::uint16_t* lo = b + 2 * p * ldb + j0;
        std::uint16_t* row = d + p * NR * 2;
        if (2 * p + 1 < k) {
          for (std::size_t j = 0; j < cols; ++j) {
            row[2 * j] = lo[j];
            row[2 * j + 1] = lo[ldb + j];
          }
        } else {
          for (std::size_t j = 0; j < cols; ++j) {
            row[2 * j] = lo[j];
            row[2 * j + 1] = 0;
          }
        }
      }
    }
    if (cols < NR) {
      for (std::size_t p = 0; p < kp; ++p) {
        std::uint16_t* row = d + p * NR * 2;
        for (std::size_t j = cols; j < NR; ++j) row[2 * j] = row[2 * j + 1] = 0;
      }
    }
  }
}

// A's pair past an odd kp in a set with k_group = 4: two bf16 -0. Its
// products with B's zero padding are -0, and acc + -0 is acc for every acc
// (+0 would turn a -0 sum into +0), so the padded group adds nothing.
inline constexpr std::uint32_t kNegZeroPair = 0x80008000u;

// The packers of a set with k_group = 4 (layouts in gemm_bf16.hpp): each
// pair goes where packed_b_pair_at puts it (A as the transpose of a B of mr
// columns), after the strip is filled where k or the columns end early
// (A with kNegZeroPair, B with zeros).
template <class Tag, std::size_t MR>
void pack_a_groups(bool trans, std::size_t m, std::size_t k, const std::uint16_t* a,
                   std::size_t lda, std::uint32_t* dst) {
  const std::size_t kp = (k + 1) / 2, kp4 = (kp + 1) / 2 * 2;
  for (std::size_t r0 = 0; r0 < m; r0 += MR) {
    const std::size_t rows = m - r0 < MR ? m - r0 : MR;
    std::uint32_t* d = dst + r0 / MR * kp4 * MR;
    if (rows < MR || kp < kp4) std::fill_n(d, kp4 * MR, kNegZeroPair);
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t p = 0; p < kp; ++p) {
        const std::uint16_t* x = trans ? a + 2 * p * lda + r0 + i : a + (r0 + i) * lda + 2 * p;
        d[packed_b_pair_at(4, MR, p, i) / 2] = pair_at<Tag>(x, trans ? lda : 1, 2 * p + 1 == k);
      }
    }
  }
}

template <class Tag, std::size_t NR>
void pack_b_groups(bool trans, std::size_t k, std::size_t n, const std::uint16_t* b,
                   std::size_t ldb, std::uint16_t* dst, std::size_t strip_stride) {
  const std::size_t kp = (k + 1) / 2, kp4 = (kp + 1) / 2 * 2;
  for (std::size_t j0 = 0; j0 < n; j0 += NR) {
    const std::size_t cols = n - j0 < NR ? n - j0 : NR;
    std::uint16_t* d = dst + j0 / NR * strip_stride;
    if (cols < NR || kp < kp4) std::memset(d, 0, kp4 * NR * 2 * sizeof *d);
    for (std::size_t p = 0; p < kp; ++p) {
      for (std::size_t j = 0; j < cols; ++j) {
        const std::uint16_t* x = trans ? b + (j0 + j) * ldb + 2 * p : b + 2 * p * ldb + j0 + j;
        const std::uint32_t pair = pair_at<Tag>(x, trans ? 1 : ldb, 2 * p + 1 == k);
        std::memcpy(d + packed_b_pair_at(4, NR, p, j), &pair, sizeof pair);
      }
    }
  }
}

}  // namespace mha::detail::bf16_pack
