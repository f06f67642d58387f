// AVX512_VNNI int8 kernels: the vpdpbusd sets' template (i8_vnni.hpp) on
// zmm (_mm512_dpbusd_epi32). Tile 6 x 64: 24 zmm accumulators + 4 B vectors
// + 1 broadcast; per four k, 24 vpdpbusd (64 multiply-adds each, twice
// vdpbf16ps's 32) against 4 loads and 6 broadcasts from 6 row streams (the
// bf16 set's 14 x 32 was tried first, before tree-PRE was found and
// switched off, and not measured since: 6 x 64 reaches 400-417 GOPS, m512
// n768 k768, Zen 4).
// GCC 12's false positive on the intrinsics' _mm512_undefined_* (as in
// simd/lanes.hpp), set before their header.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "gemm/gemm_i8.hpp"
#include "gemm/i8_vnni.hpp"

namespace mha::detail {
namespace {

struct Zmm {
  using I = __m512i;
  using F = __m512;
  using M = __mmask16;
  static constexpr std::size_t kW = 16;
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static I quad(const std::uint8_t* p) {
    std::uint32_t q;
    std::memcpy(&q, p, 4);
    return _mm512_set1_epi32(static_cast<int>(q));
  }
  static I splat(std::int32_t x) { return _mm512_set1_epi32(x); }
  static I dp(I acc, I a, I b) { return _mm512_dpbusd_epi32(acc, a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static void nibbles(I raw, I& lo, I& hi) {
    const I low = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
    lo = _mm512_sub_epi8(_mm512_and_si512(raw, low), eight);
    hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(raw, 4), low), eight);
  }
  static F to_float(I x) { return _mm512_cvtepi32_ps(x); }
  static F load_f(const float* p) { return _mm512_loadu_ps(p); }
  static F splat_f(float x) { return _mm512_set1_ps(x); }
  static F zero_f() { return _mm512_setzero_ps(); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static M mask(std::size_t lanes) { return static_cast<M>((1u << lanes) - 1u); }
  static F load_n(const float* p, M m) { return _mm512_maskz_loadu_ps(m, p); }
  static void store_n(float* p, F y, M m) { _mm512_mask_storeu_ps(p, m, y); }
};

// Tile 6 x 64 (above); weights in groups or int4 take the 4 vectors a pass
// for up to 2 rows, else 2 (the registers holding twice as many
// accumulators).
using Set = VnniSet<Zmm, 6, 4, 2, 2>;

// The header's rules 16 floats at a time: the division is IEEE's, and
// clamping before the conversion (nearest even, MXCSR's default) gives what
// clamping after rounding does, the bounds being integers.
void quantize(std::size_t k, const float* a, void* codes, float* scale) {
  constexpr std::size_t kW = Zmm::kW;
  const std::size_t full = k / kW * kW;
  __m512 vmax = _mm512_setzero_ps();
  __mmask16 bad = 0;
  for (std::size_t p = 0; p < k; p += kW) {
    const auto mask = static_cast<__mmask16>(p < full ? 0xFFFFu : (1u << (k - p)) - 1u);
    const __m512 x = _mm512_maskz_loadu_ps(mask, a + p);
    bad |= _mm512_fpclass_ps_mask(x, 0x99);  // NaN, +inf, -inf
    vmax = _mm512_max_ps(vmax, _mm512_abs_ps(x));
  }
  const float s = i8_row_scale(_mm512_reduce_max_ps(vmax), bad == 0);
  *scale = s;
  auto* out = static_cast<std::uint8_t*>(codes);
  if (!(s > 0.0f)) {
    std::memset(out, 128, (k + 7) / 8 * 8);
    return;
  }
  const __m512 vs = _mm512_set1_ps(s), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
  for (std::size_t p = 0; p < full; p += kW) {
    const __m512 q =
        _mm512_min_ps(_mm512_max_ps(_mm512_div_ps(_mm512_loadu_ps(a + p), vs), lo), hi);
    const __m128i b = _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(q));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + p), _mm_xor_si128(b, _mm_set1_epi8(-128)));
  }
  quantize_i8_from(1, 128, full, k, a, s, codes);
}

}  // namespace

const GemmI8Kernels gemm_i8_kernels_avx512_vnni = {
    "avx512_vnni", 6, Set::kNR, 4, 1, 128, Set::Entries::ukernel, quantize, Set::ukernel_groups};

}  // namespace mha::detail
