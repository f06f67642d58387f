// The vpdpbusd kernels on ymm (i8_vnni.hpp), for AVX-VNNI's VEX encoding
// (gemm_i8_avx_vnni.cpp) and AVX512_VNNI's EVEX one at 256 bits
// (gemm_i8_avx_vnni_evex.cpp): Dp::dp is the one instruction between them.
// Tile 6 x 16: 12 ymm accumulators + 2 B vectors + 1 broadcast of the 16;
// weights in groups or int4 take both vectors a pass for up to 2 rows, one
// for more.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm/gemm_i8.hpp"
#include "gemm/i8_quantize_avx2.hpp"
#include "gemm/i8_vnni.hpp"

namespace mha::detail {
namespace {  // NOLINT(build/namespaces): each kernel set's object its own copy

template <class Dp>
struct Ymm {
  using I = __m256i;
  using F = __m256;
  using M = __m256i;
  static constexpr std::size_t kW = 8;
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const I*>(p)); }
  static I quad(const std::uint8_t* p) {
    std::uint32_t q;
    std::memcpy(&q, p, 4);
    return _mm256_set1_epi32(static_cast<int>(q));
  }
  static I splat(std::int32_t x) { return _mm256_set1_epi32(x); }
  static I dp(I acc, I a, I b) { return Dp::dp(acc, a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static void nibbles(I raw, I& lo, I& hi) {
    const I low = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
    lo = _mm256_sub_epi8(_mm256_and_si256(raw, low), eight);
    hi = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), eight);
  }
  static F to_float(I x) { return _mm256_cvtepi32_ps(x); }
  static F load_f(const float* p) { return _mm256_loadu_ps(p); }
  static F splat_f(float x) { return _mm256_set1_ps(x); }
  static F zero_f() { return _mm256_setzero_ps(); }
  static F add(F a, F b) { return _mm256_add_ps(a, b); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static M mask(std::size_t lanes) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(lanes)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static F load_n(const float* p, M m) { return _mm256_maskload_ps(p, m); }
  static void store_n(float* p, F y, M m) { _mm256_maskstore_ps(p, m, y); }
};

// The set named `name` on Dp's vpdpbusd.
template <class Dp>
constexpr GemmI8Kernels ymm_vnni_kernels(const char* name) {
  using Set = VnniSet<Ymm<Dp>, 6, 2, 2, 1>;
  return {
      name, 6, Set::kNR, 4, 1, 128, Set::Entries::ukernel, quantize_avx2<1>, Set::ukernel_groups};
}

}  // namespace
}  // namespace mha::detail
