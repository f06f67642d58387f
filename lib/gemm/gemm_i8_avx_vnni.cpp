// AVX-VNNI int8 kernels (Intel's client cores from Alder Lake, the E-core
// Xeons, Sapphire Rapids on; AMD's Zen 5): vpdpbusd in VEX on ymm
// (i8_vnni_ymm.hpp), for CPUs without AVX512_VNNI, or under MHA_ISA=avx2.
#include <immintrin.h>

#include "gemm/gemm_i8.hpp"
#include "gemm/i8_vnni_ymm.hpp"

namespace mha::detail {
namespace {

struct Vex {
  static __m256i dp(__m256i acc, __m256i a, __m256i b) {
    return _mm256_dpbusd_avx_epi32(acc, a, b);
  }
};

}  // namespace

const GemmI8Kernels gemm_i8_kernels_avx_vnni = ymm_vnni_kernels<Vex>("avx_vnni");

}  // namespace mha::detail
