// The avx512 softmax kernel tables (compiled with this ISA's flags only).
#include <immintrin.h>

#include <cstdint>

#include "softmax/softmax_kernels.hpp"

namespace mha::detail {
namespace {

// bf16 stores by AVX512_BF16's conversions (nearest even, denormal inputs
// read as zero, which exp never makes), written as asm: this file is built
// for AVX-512F alone (one ISA per object, cmake/MhaIsa.cmake), and its
// table that uses them runs only where the CPU has AVX512_BF16
// (softmax_kernels).
struct Avx512Bf16Out {
  static void put2(std::uint16_t* y, const __m512& lo, const __m512& hi) {
    __m512i r;
    asm("vcvtne2ps2bf16 %2, %1, %0" : "=v"(r) : "v"(hi), "v"(lo));
    _mm512_storeu_si512(y, r);
  }
  static void put(std::uint16_t* y, const __m512& v) {
    __m256i r;
    asm("vcvtneps2bf16 %1, %0" : "=v"(r) : "v"(v));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), r);
  }
};

using Impl = SoftmaxImpl<simd::Lanes<xsimd::avx512f>>;

}  // namespace

constinit const SoftmaxKernels softmax_kernels_avx512 = Impl::table();
constinit const SoftmaxKernels softmax_kernels_avx512_bf16 = Impl::table_bf16<Avx512Bf16Out>();

}  // namespace mha::detail
