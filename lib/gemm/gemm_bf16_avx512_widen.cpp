// avx512_widen: the widening bf16 kernels (bf16_widen.hpp) in zmm, for
// AVX-512 CPUs on which vdpbf16ps is slow or absent: on an Emerald Rapids
// Xeon it runs at 79-83 GFLOP/s per core, half the fp32 FMA rate (153-176),
// so a bf16 GEMM there ran at 0.5x fp32, where widening runs at the fp32
// rate (FACTS.md).
//
// Tile 12 x 32: 24 zmm accumulators and 4 widened B vectors, A broadcast
// from memory; per pair of k, 48 FMAs against 4 integer ops and 2 loads of
// B, the fp32 kernel's 14 x 32 shape less the two rows the B halves take.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "gemm/bf16_pack_avx512.hpp"
#include "gemm/bf16_widen.hpp"

namespace mha::detail {
namespace gemm_bf16_avx512_widen {
namespace {

struct avx512_widen_tag {};

struct V {
  using type = __m512;
  static constexpr std::size_t kW = 16;
  static __mmask16 mask(std::size_t lanes) { return static_cast<__mmask16>((1u << lanes) - 1u); }
  static __m512 zero() { return _mm512_setzero_ps(); }
  static __m512 set1(float x) { return _mm512_set1_ps(x); }
  static __m512 broadcast(const float* x) { return _mm512_set1_ps(*x); }
  static __m512 fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
  static __m512 mul(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
  static __m512 add(__m512 a, __m512 b) { return _mm512_add_ps(a, b); }
  static __m512i pairs(const std::uint16_t* b) { return _mm512_loadu_si512(b); }
  // maskz: GCC 12's _mm512_slli_epi32 warns of its own undefined source.
  static __m512 even(__m512i p) {
    return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xffff, p, 16));
  }
  static __m512 odd(__m512i p) {
    return _mm512_castsi512_ps(_mm512_and_si512(p, _mm512_set1_epi32(-65536)));
  }
  static __m512 load(const float* x) { return _mm512_loadu_ps(x); }
  static void store(float* y, __m512 x) { _mm512_storeu_ps(y, x); }
  static __m512 load_n(const float* x, std::size_t lanes) {
    return _mm512_maskz_loadu_ps(mask(lanes), x);
  }
  static void store_n(float* y, __m512 x, std::size_t lanes) {
    _mm512_mask_storeu_ps(y, mask(lanes), x);
  }
  // fp32_to_bf16's rounding: nearest even, a NaN made quiet, denormals kept.
  static __m512 round(__m512 x) {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb =
        _mm512_and_si512(_mm512_maskz_srli_epi32(0xffff, u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7fff)), lsb);
    const __m512i q = _mm512_or_si512(u, _mm512_set1_epi32(0x400000));
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    const __m512i bits = _mm512_mask_blend_epi32(nan, r, q);
    return _mm512_castsi512_ps(_mm512_and_si512(bits, _mm512_set1_epi32(-65536)));
  }
};

using Kernels = bf16_widen::Widen<V, 12, 2>;

}  // namespace
}  // namespace gemm_bf16_avx512_widen

const GemmBf16Kernels gemm_bf16_kernels_avx512_widen =
    gemm_bf16_avx512_widen::Kernels::kernels<gemm_bf16_avx512_widen::avx512_widen_tag>(
        "avx512_widen", &bf16_pack_avx512::pack_b<gemm_bf16_avx512_widen::avx512_widen_tag,
                                                  gemm_bf16_avx512_widen::Kernels::kNR>);

}  // namespace mha::detail
