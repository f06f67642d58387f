// pack_b of the AVX-512 kernel sets with k_group 2 (avx512_bf16, amx_bf16,
// avx512_widen): bf16_pack::pack_b's bytes, 16 columns at a time. op(B)
// transposed (weights as stored, K rows) is a 16 x 16 transpose of pairs in
// registers; op(B) not transposed (V rows) interleaves two memory rows. The
// generic packer moved a pair at a time: packing B per call made
// mha_gemm_bf16 on m128 n2304 k768 NT take 2.4x the prepacked time (AMX
// Xeon, 1 thread).
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace mha::detail::bf16_pack_avx512 {

// r[i][j] -> r[j][i] for 16 x 16 words. (maskz forms with every lane set:
// GCC 12 warns of the plain forms' undefined source.)
inline void transpose16(__m512i r[16]) {
  constexpr __mmask16 k16 = 0xffff;
  constexpr __mmask8 k8 = 0xff;
  __m512i t[16];
  for (std::size_t i = 0; i < 16; i += 2) {
    t[i] = _mm512_maskz_unpacklo_epi32(k16, r[i], r[i + 1]);
    t[i + 1] = _mm512_maskz_unpackhi_epi32(k16, r[i], r[i + 1]);
  }
  // u[4i + m], 128-bit lane l: column 4l + m of rows 4i..4i+3.
  __m512i u[16];
  for (std::size_t i = 0; i < 16; i += 4) {
    u[i] = _mm512_maskz_unpacklo_epi64(k8, t[i], t[i + 2]);
    u[i + 1] = _mm512_maskz_unpackhi_epi64(k8, t[i], t[i + 2]);
    u[i + 2] = _mm512_maskz_unpacklo_epi64(k8, t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_maskz_unpackhi_epi64(k8, t[i + 1], t[i + 3]);
  }
  for (std::size_t m = 0; m < 4; ++m) {
    const __m512i v0 = _mm512_maskz_shuffle_i32x4(k16, u[m], u[4 + m], 0x44);
    const __m512i v1 = _mm512_maskz_shuffle_i32x4(k16, u[m], u[4 + m], 0xee);
    const __m512i v2 = _mm512_maskz_shuffle_i32x4(k16, u[8 + m], u[12 + m], 0x44);
    const __m512i v3 = _mm512_maskz_shuffle_i32x4(k16, u[8 + m], u[12 + m], 0xee);
    r[m] = _mm512_maskz_shuffle_i32x4(k16, v0, v2, 0x88);
    r[4 + m] = _mm512_maskz_shuffle_i32x4(k16, v0, v2, 0xdd);
    r[8 + m] = _mm512_maskz_shuffle_i32x4(k16, v1, v3, 0x88);
    r[12 + m] = _mm512_maskz_shuffle_i32x4(k16, v1, v3, 0xdd);
  }
}

// The first `n` of 16 or 32 lanes.
inline __mmask16 lanes16(std::size_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}
inline __mmask32 lanes32(std::size_t n) {
  return n >= 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << n) - 1u);
}

// Tag: the including TU's own (bf16_pack.hpp says why).
template <class Tag, std::size_t NR>
void pack_b(bool trans, std::size_t k, std::size_t n, const std::uint16_t* b, std::size_t ldb,
            std::uint16_t* dst, std::size_t strip_stride) {
  static_assert(NR % 16 == 0);
  const std::size_t kp = (k + 1) / 2;
  const __m512i zero = _mm512_setzero_si512();
  for (std::size_t j0 = 0; j0 < n; j0 += NR) {
    std::uint16_t* d = dst + j0 / NR * strip_stride;
    for (std::size_t h = 0; h < NR; h += 16) {
      // Columns of this 16-column part that op(B) has (the rest are zero).
      const std::size_t cols = j0 + h >= n ? 0 : n - j0 - h < 16 ? n - j0 - h : 16;
      if (trans) {
        // Column j's pairs are adjacent: 16 pairs of 16 columns, transposed.
        // An odd k's last pair reads its low half only.
        for (std::size_t p0 = 0; p0 < kp; p0 += 16) {
          const __mmask32 m = lanes32(k - 2 * p0);
          __m512i r[16];
          for (std::size_t j = 0; j < 16; ++j) {
            r[j] = j < cols ? _mm512_maskz_loadu_epi16(m, b + (j0 + h + j) * ldb + 2 * p0) : zero;
          }
          transpose16(r);
          const std::size_t rows = kp - p0 < 16 ? kp - p0 : 16;
          for (std::size_t p = 0; p < rows; ++p) {
            _mm512_storeu_si512(d + ((p0 + p) * NR + h) * 2, r[p]);
          }
        }
      } else {
        // Memory rows 2p and 2p + 1 interleaved into pair row p.
        const __mmask16 m = lanes16(cols);
        for (std::size_t p = 0; p < kp; ++p) {
          __m512i w = zero;
          if (cols != 0) {
            const std::uint16_t* lo = b + 2 * p * ldb + j0 + h;
            w = _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(m, lo));
            if (2 * p + 1 < k) {
              const __m512i hi =
                  _mm512_maskz_cvtepu16_epi32(0xffff, _mm256_maskz_loadu_epi16(m, lo + ldb));
              w = _mm512_or_si512(w, _mm512_maskz_slli_epi32(0xffff, hi, 16));
            }
          }
          _mm512_storeu_si512(d + (p * NR + h) * 2, w);
        }
      }
    }
  }
}

}  // namespace mha::detail::bf16_pack_avx512
