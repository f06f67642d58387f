// The avx_vnni set's kernels (i8_vnni_ymm.hpp) on AVX512_VNNI's EVEX
// vpdpbusd at 256 bits: the same code but the one instruction's encoding,
// run on AVX512_VNNI CPUs so that the tests hold the AVX-VNNI kernels to the
// scalar set's bits on CPUs without AVX-VNNI (Zen 4). Not dispatched to
// (avx512_vnni is faster wherever this runs): gemm_i8_kernel_sets lists it.
#include <immintrin.h>

#include "gemm/gemm_i8.hpp"
#include "gemm/i8_vnni_ymm.hpp"

namespace mha::detail {
namespace {

struct Evex {
  static __m256i dp(__m256i acc, __m256i a, __m256i b) { return _mm256_dpbusd_epi32(acc, a, b); }
};

}  // namespace

const GemmI8Kernels gemm_i8_kernels_avx_vnni_evex = ymm_vnni_kernels<Evex>("avx_vnni_evex");

}  // namespace mha::detail
