// The avx512 reshape kernel table (compiled with this ISA's flags only).
#include <immintrin.h>

#include "reshape/reshape_kernels.hpp"

namespace mha::detail {
namespace {

// transpose_pairs in 8 x 8 blocks of units (one zmm a row): each row's
// middle elements swapped by one byte shuffle, then the 64-bit transpose
// of unpacks and 128-bit lane shuffles (24 operations a block). With the
// generic element moves a V2-Lite b8 decode step took 11.6-12.1 ms, with
// this 10.2-10.5 (Zen 4, 1 thread).
// (maskz forms with every lane set: GCC 12 warns of the plain forms'
// undefined source.)
void transpose_pairs_avx512(const std::uint16_t* src, std::size_t src_ld, std::uint16_t* dst,
                            std::size_t dst_ld, std::size_t rows, std::size_t cols) {
  constexpr __mmask8 k8 = 0xff;
  const __m512i swap =
      _mm512_broadcast_i32x4(_mm_setr_epi8(0, 1, 4, 5, 2, 3, 6, 7, 8, 9, 12, 13, 10, 11, 14, 15));
  for (std::size_t i0 = 0; i0 < rows; i0 += 8) {
    const std::size_t ni = rows - i0 < 8 ? rows - i0 : 8;
    for (std::size_t u0 = 0; u0 < cols; u0 += 8) {
      const std::size_t nu = cols - u0 < 8 ? cols - u0 : 8;
      const auto mu = static_cast<__mmask8>((1u << nu) - 1u);
      __m512i a[8];
      for (std::size_t r = 0; r < 8; ++r) {
        a[r] = r < ni ? _mm512_maskz_shuffle_epi8(
                            ~__mmask64{0},
                            _mm512_maskz_loadu_epi64(mu, src + (i0 + r) * src_ld + 4 * u0), swap)
                      : _mm512_setzero_si512();
      }
      // t[2k + e], 128-bit lane l: units 2l + e of rows 2k and 2k + 1.
      __m512i t[8];
      for (std::size_t k = 0; k < 8; k += 2) {
        t[k] = _mm512_maskz_unpacklo_epi64(k8, a[k], a[k + 1]);
        t[k + 1] = _mm512_maskz_unpackhi_epi64(k8, a[k], a[k + 1]);
      }
      // Output row 2l + e, lane q, is lane l of t[2q + e]: a 4 x 4 transpose
      // of lanes for each e.
      __m512i out[8];
      for (std::size_t e = 0; e < 2; ++e) {
        const __m512i v0 = _mm512_maskz_shuffle_i64x2(k8, t[e], t[2 + e], 0x44);
        const __m512i v1 = _mm512_maskz_shuffle_i64x2(k8, t[e], t[2 + e], 0xee);
        const __m512i v2 = _mm512_maskz_shuffle_i64x2(k8, t[4 + e], t[6 + e], 0x44);
        const __m512i v3 = _mm512_maskz_shuffle_i64x2(k8, t[4 + e], t[6 + e], 0xee);
        out[e] = _mm512_maskz_shuffle_i64x2(k8, v0, v2, 0x88);
        out[2 + e] = _mm512_maskz_shuffle_i64x2(k8, v0, v2, 0xdd);
        out[4 + e] = _mm512_maskz_shuffle_i64x2(k8, v1, v3, 0x88);
        out[6 + e] = _mm512_maskz_shuffle_i64x2(k8, v1, v3, 0xdd);
      }
      const auto mi = static_cast<__mmask8>((1u << ni) - 1u);
      for (std::size_t u = 0; u < nu; ++u) {
        _mm512_mask_storeu_epi64(dst + (u0 + u) * dst_ld + 4 * i0, mi, out[u]);
      }
    }
  }
}

constexpr ReshapeKernels table() {
  ReshapeKernels k = ReshapeImpl<simd::Lanes<xsimd::avx512f>>::table();
  k.transpose_pairs = &transpose_pairs_avx512;
  return k;
}

}  // namespace

constinit const ReshapeKernels reshape_kernels_avx512 = table();

}  // namespace mha::detail
