// The amx_bf16 set's products of one row (a decode step's query, its P,
// a GEMV) on the vector unit, with the tiles' bits (bf16_amx.hpp's
// numerics): per C element and group of 16 pairs from the call's first, an
// fp32 chain over the even products and one over the odd, both from 0, then
// C + (even + odd), all in fmas and adds rounded to nearest even. A tile
// product costs as much for one row as for 16: a bf16 decode step at kv
// 8192 (E 768, 12 heads, b1, 1 thread, AMX Xeon) took 1.14-1.19 ms on the
// tiles, 1.06 here. For 4 rows (a GQA group) the tiles were faster:
// Llama-1B-like decode at b1 kv4096 took 1.23 ms on them, 1.27-1.28 here.
//
// Denormals as the tiles treat them: the products run with MXCSR's DAZ and
// FTZ set, so a bf16 denormal operand reads as zero and a result below
// 2^-126 before rounding becomes a zero of its sign, as tdpbf16ps decides
// too. The finish (alpha, beta, the epilogue) is the tiles' own (T::finish,
// bf16_amx.hpp), under the caller's MXCSR.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "common/denormals.hpp"
#include "gemm/bf16_amx.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail::bf16_amx_rows {

constexpr std::size_t kNR = bf16_amx::kNR, kGroup = bf16_amx::kTilePairs;
// Columns per pass between the products' MXCSR and the caller's.
constexpr std::size_t kChunk = 256;

// acc [NS * 32] = a·B over kp pairs for NS strips of B from b (b_strip
// elements apart), a's pair p at a[p * as]; 6 * NS accumulators (a strip's
// two halves, each a sum and two chains), up to 4 strips in the 32 zmm.
// Under DAZ and FTZ. (maskz shifts with every lane set: GCC 12 warns of
// the plain forms' undefined source.)
template <class T, std::size_t NS>
void strips(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
            std::size_t b_strip, float* acc_out) {
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  __m512 acc[NS][2];
  for (auto& s : acc) s[0] = s[1] = _mm512_setzero_ps();
  alignas(64) float even_a[kGroup], odd_a[kGroup];
  for (std::size_t p0 = 0; p0 < kp; p0 += kGroup) {
    const std::size_t pairs = std::min(kGroup, kp - p0);
    __m512i w;
    if (as == 1) {
      w = _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << pairs) - 1u), a + p0);
    } else {
      alignas(64) std::uint32_t words[kGroup] = {};
      for (std::size_t p = 0; p < pairs; ++p) words[p] = a[(p0 + p) * as];
      w = _mm512_load_si512(words);
    }
    _mm512_store_ps(even_a, _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, w, 16)));
    _mm512_store_ps(odd_a, _mm512_castsi512_ps(_mm512_and_si512(w, high)));
    __m512 even[NS][2], odd[NS][2];
    for (std::size_t s = 0; s < NS; ++s) {
      even[s][0] = even[s][1] = odd[s][0] = odd[s][1] = _mm512_setzero_ps();
    }
    for (std::size_t p = 0; p < pairs; ++p) {
      for (std::size_t s = 0; s < NS; ++s) {
        const std::uint16_t* row = b + s * b_strip + (p0 + p) * kNR * 2;
        for (std::size_t h = 0; h < 2; ++h) {
          const __m512i v = _mm512_loadu_si512(row + h * 32);
          const __m512 ve = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, v, 16));
          const __m512 vo = _mm512_castsi512_ps(_mm512_and_si512(v, high));
          even[s][h] = _mm512_fmadd_ps(_mm512_set1_ps(even_a[p]), ve, even[s][h]);
          odd[s][h] = _mm512_fmadd_ps(_mm512_set1_ps(odd_a[p]), vo, odd[s][h]);
        }
      }
    }
    for (std::size_t s = 0; s < NS; ++s) {
      for (std::size_t h = 0; h < 2; ++h) {
        acc[s][h] = _mm512_add_ps(acc[s][h], _mm512_add_ps(even[s][h], odd[s][h]));
      }
    }
  }
  for (std::size_t s = 0; s < NS; ++s) {
    for (std::size_t h = 0; h < 2; ++h) {
      _mm512_storeu_ps(acc_out + s * kNR + h * 16, acc[s][h]);
    }
  }
}

// acc over the strips of n columns (n <= kChunk), 4 at a time.
template <class T, std::size_t NS = 4>
void chunk(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
           std::size_t b_strip, std::size_t n, float* acc) {
  const std::size_t count = (n + kNR - 1) / kNR;
  std::size_t s = 0;
  for (; s + NS <= count; s += NS) {
    strips<T, NS>(kp, a, as, b + s * b_strip, b_strip, acc + s * kNR);
  }
  if constexpr (NS > 1) {
    if (s < count)
      chunk<T, NS - 1>(kp, a, as, b + s * b_strip, b_strip, n - s * kNR, acc + s * kNR);
  }
}

// c [n] = alpha·a·B + beta·c over the strips of B (b_strip elements apart),
// ukernel's bits for one row, then ep (if not null) on the row: as
// bf16_amx::panel_rows on tile backend T does for one row.
template <class T>
void row(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
         std::size_t b_strip, float* c, std::size_t n, float alpha, float beta,
         const Bf16Epilogue* ep) {
  alignas(64) float acc[kChunk];
  for (std::size_t j0 = 0; j0 < n; j0 += kChunk, b += kChunk / kNR * b_strip) {
    const std::size_t cols = std::min(kChunk, n - j0);
    {
      const DenormalsFlushed products(true);
      chunk<T>(kp, a, as, b, b_strip, cols, acc);
    }
    T::finish(acc, kChunk, c + j0, 0, 1, cols, alpha, beta);
    if (ep != nullptr) ep->apply(c + j0, 0, 1, j0, cols);
  }
}

}  // namespace mha::detail::bf16_amx_rows
