// avx2_widen: the widening bf16 kernels (bf16_widen.hpp) in ymm, for AVX2 +
// FMA, which has no bf16 arithmetic.
//
// Tile 5 x 16: 10 ymm accumulators, 4 widened B vectors and one A
// broadcast, 15 of the 16 registers; per pair of k, 20 FMAs against 4
// integer ops and 12 loads.
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "gemm/bf16_widen.hpp"

namespace mha::detail {
namespace gemm_bf16_avx2_widen {
namespace {

struct avx2_widen_tag {};

struct V {
  using type = __m256;
  static constexpr std::size_t kW = 8;
  // Lanes [0, lanes) of a store or load mask.
  static __m256i mask(std::size_t lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static __m256 zero() { return _mm256_setzero_ps(); }
  static __m256 set1(float x) { return _mm256_set1_ps(x); }
  static __m256 broadcast(const float* x) { return _mm256_broadcast_ss(x); }
  static __m256 fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
  static __m256 mul(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
  static __m256 add(__m256 a, __m256 b) { return _mm256_add_ps(a, b); }
  static __m256i pairs(const std::uint16_t* b) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b));
  }
  static __m256 even(__m256i p) { return _mm256_castsi256_ps(_mm256_slli_epi32(p, 16)); }
  static __m256 odd(__m256i p) {
    return _mm256_castsi256_ps(_mm256_and_si256(p, _mm256_set1_epi32(-65536)));
  }
  static __m256 load(const float* x) { return _mm256_loadu_ps(x); }
  static void store(float* y, __m256 x) { _mm256_storeu_ps(y, x); }
  static __m256 load_n(const float* x, std::size_t lanes) {
    return _mm256_maskload_ps(x, mask(lanes));
  }
  static void store_n(float* y, __m256 x, std::size_t lanes) {
    _mm256_maskstore_ps(y, mask(lanes), x);
  }
  // fp32_to_bf16's rounding: nearest even, a NaN made quiet, denormals kept.
  static __m256 round(__m256 x) {
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), lsb);
    const __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    const __m256i bits =
        _mm256_blendv_epi8(r, q, _mm256_castps_si256(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)));
    return _mm256_castsi256_ps(_mm256_and_si256(bits, _mm256_set1_epi32(-65536)));
  }
};

using Kernels = bf16_widen::Widen<V, 5, 2>;

}  // namespace
}  // namespace gemm_bf16_avx2_widen

const GemmBf16Kernels gemm_bf16_kernels_avx2_widen =
    gemm_bf16_avx2_widen::Kernels::kernels<gemm_bf16_avx2_widen::avx2_widen_tag>("avx2_widen");

}  // namespace mha::detail
