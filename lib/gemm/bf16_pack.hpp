// The bf16 packers of GemmBf16Kernels (layouts in gemm_bf16.hpp), written
// once and instantiated by each table's TU with its own Tag, so each ISA's
// copy is a distinct symbol that the linker can never merge with another.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha::detail::bf16_pack {

// Packed A in pairs; kWiden: each element widened (exactly) to an fp32
// word, for kernels that read A in fp32 (a_bytes = 4).
template <class Tag, std::size_t MR, bool kWiden = false>
void pack_a(bool trans, std::size_t m, std::size_t k, const std::uint16_t* a, std::size_t lda,
            std::uint32_t* dst) {
  const std::size_t kp = (k + 1) / 2, words = kWiden ? 2 : 1;
  for (std::size_t r0 = 0; r0 < m; r0 += MR) {
    const std::size_t rows = m - r0 < MR ? m - r0 : MR;
    std::uint32_t* d = dst + r0 / MR * kp * MR * words;
    for (std::size_t i = 0; i < MR; ++i) {
      for (std::size_t p = 0; p < kp; ++p) {
        std::uint32_t lo = 0, hi = 0;
        if (i < rows) {
          const std::size_t r = r0 + i, q = 2 * p;
          lo = trans ? a[q * lda + r] : a[r * lda + q];
          if (q + 1 < k) hi = trans ? a[(q + 1) * lda + r] : a[r * lda + q + 1];
        }
        if constexpr (kWiden) {
          d[(p * MR + i) * 2] = lo << 16;
          d[(p * MR + i) * 2 + 1] = hi << 16;
        } else {
          d[p * MR + i] = lo | hi << 16;
        }
      }
    }
  }
}

template <class Tag, std::size_t NR>
void pack_b(bool trans, std::size_t k, std::size_t n, const std::uint16_t* b, std::size_t ldb,
            std::uint16_t* dst, std::size_t strip_stride) {
  for (std::size_t j0 = 0; j0 < n; j0 += NR) {
    const std::size_t cols = n - j0 < NR ? n - j0 : NR;
    std::uint16_t* d = dst + j0 / NR * strip_stride;
    for (std::size_t q = 0; q < k + k % 2; ++q) {
      std::uint16_t* row = d + q / 2 * NR * 2 + q % 2;
      for (std::size_t j = 0; j < NR; ++j) {
        row[2 * j] = q < k && j < cols ? (trans ? b[(j0 + j) * ldb + q] : b[q * ldb + j0 + j]) : 0;
      }
    }
  }
}

}  // namespace mha::detail::bf16_pack
