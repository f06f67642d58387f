// Lane policies: the softmax and reshape kernels are written once, against
// this small interface, and instantiated for plain floats (the scalar ISA) and
// for xsimd batches (avx2, avx512, neon).
//
// Everything here lives in an anonymous namespace on purpose: every per-ISA
// translation unit that includes this header gets its own internal copy,
// compiled with that unit's flags, so the linker can never merge an AVX-512
// copy of a helper into code that runs on an older CPU (xsimd#633).
//
// Both policies use a true fused multiply-add (std::fma / vfmadd / vfma), so a
// lane computes exactly the same float as the scalar kernel: exp() results are
// bit-identical across ISAs; only the order of sums differs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#if !defined(MHA_ISA_SCALAR)
#if defined(__AVX512F__) && defined(__GNUC__) && !defined(__clang__)
// GCC 12 false positive: avx512fintrin.h's _mm512_undefined_ps() (used by
// _mm512_max_ps, _mm512_slli_epi32, ...) is a deliberate self-initialisation.
// Set before the intrinsics header so it covers only those locations' checks.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#include <xsimd/xsimd.hpp>
#endif

namespace mha::detail {
namespace {

struct ScalarLanes {
  using V = float;
  static constexpr std::size_t width = 1;

  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V set1(float x) { return x; }
  static V fma(V a, V b, V c) { return std::fma(a, b, c); }
  // Order-independent for non-NaN values; NaN handling is the caller's.
  static V max(V a, V b) { return a < b ? b : a; }
  // bits(p) + (bits(k) << 23): adds k's low integer bits to p's exponent.
  static V add_exponent(V p, V k) {
    std::uint32_t pb, kb;
    std::memcpy(&pb, &p, sizeof pb);
    std::memcpy(&kb, &k, sizeof kb);
    pb += kb << 23;
    std::memcpy(&p, &pb, sizeof pb);
    return p;
  }
  // x < lo ? 0 : (x <= hi ? y : x + inf)   (x + inf is +inf, or NaN for NaN)
  static V exp_fixup(V x, V y, float lo, float hi) {
    if (x < lo) return 0.f;
    return x <= hi ? y : x + std::numeric_limits<float>::infinity();
  }
  static float hsum(V v) { return v; }
  static float hmax(V v) { return v; }
  // Non-temporal (cache-bypassing) stores: none here.
  static constexpr bool has_stream = false;
  static void stream(float* p, V v) { *p = v; }
  static void stream_fence() {}
};

#if !defined(MHA_ISA_SCALAR)
template <class Arch>
struct XsimdLanes {
  using V = xsimd::batch<float, Arch>;
  using I = xsimd::batch<std::int32_t, Arch>;
  static constexpr std::size_t width = V::size;

  static V load(const float* p) { return V::load_unaligned(p); }
  static void store(float* p, const V& v) { v.store_unaligned(p); }
  static V set1(float x) { return V(x); }
  static V fma(const V& a, const V& b, const V& c) {
#if defined(__AVX512F__)
    // xsimd 8.1's fma on avx512f is a*b+c, which -ffp-contract=off keeps
    // unfused (FACTS.md): call the instruction.
    if constexpr (std::is_same_v<Arch, xsimd::avx512f>) return _mm512_fmadd_ps(a, b, c);
#endif
    return xsimd::fma(a, b, c);
  }
  static V max(const V& a, const V& b) {
    return xsimd::max(a, b);
  }
  static V add_exponent(const V& p, const V& k) {
    const I pb = xsimd::bitwise_cast<I>(p);
    const I kb = xsimd::bitwise_cast<I>(k);
    return xsimd::bitwise_cast<V>(pb + (kb << 23));
  }
  static V exp_fixup(const V& x, const V& y, float lo, float hi) {
    const V low = xsimd::select(x < V(lo), V(0.f), y);
    // x <= hi is false for NaN as well as for x > hi; x + inf gives NaN or +inf.
    return xsimd::select(x <= V(hi), low, x + V(std::numeric_limits<float>::infinity()));
  }
  // Horizontal reductions in a fixed tree order: lane i combines with lane
  // i + width/2, then i + width/4, ... Done with shuffles on x86 and NEON (a
  // store and a scalar loop cost ~40 cycles per 64-float row, a third of the
  // row's exp work); the generic path is the same tree through memory.
  template <class Op>
  static float reduce_tree(const V& v, Op op) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<Arch, xsimd::avx512f>) {
      const __m512 z = v;
      const __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(z), 1));
      return reduce_m256(op(_mm512_castps512_ps256(z), hi), op);
    }
#endif
#if defined(__AVX2__)
    if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) return reduce_m256(v, op);
#endif
#if defined(__aarch64__)
    if constexpr (std::is_same_v<Arch, xsimd::neon64>) {
      const float32x4_t q = v;
      const float32x2_t h = op(vget_low_f32(q), vget_high_f32(q));
      return op(vget_lane_f32(h, 0), vget_lane_f32(h, 1));
    }
#endif
    alignas(64) float a[width];
    v.store_aligned(a);
    for (std::size_t half = width / 2; half >= 1; half /= 2) {
      for (std::size_t i = 0; i < half; ++i) a[i] = op(a[i], a[i + half]);
    }
    return a[0];
  }
#if defined(__AVX2__)
  template <class Op>
  static float reduce_m256(__m256 y, Op op) {
    const __m128 q = op(_mm256_castps256_ps128(y), _mm256_extractf128_ps(y, 1));
    const __m128 d = op(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(op(d, _mm_shuffle_ps(d, d, 1)));
  }
#endif

  // Overloads, not is_same on __m256 (GCC warns that its attributes are
  // ignored in a template argument).
  struct Add {
    float operator()(float a, float b) const { return a + b; }
#if defined(__AVX2__)
    __m256 operator()(__m256 a, __m256 b) const {
      return _mm256_add_ps(a, b);
    }
    __m128 operator()(__m128 a, __m128 b) const {
      return _mm_add_ps(a, b);
    }
#endif
#if defined(__aarch64__)
    float32x2_t operator()(float32x2_t a, float32x2_t b) const {
      return vadd_f32(a, b);
    }
#endif
  };
  struct Max {
    float operator()(float a, float b) const { return a < b ? b : a; }
#if defined(__AVX2__)
    __m256 operator()(__m256 a, __m256 b) const {
      return _mm256_max_ps(a, b);
    }
    __m128 operator()(__m128 a, __m128 b) const {
      return _mm_max_ps(a, b);
    }
#endif
#if defined(__aarch64__)
    float32x2_t operator()(float32x2_t a, float32x2_t b) const {
      return vmax_f32(a, b);
    }
#endif
  };
  static float hsum(const V& v) {
    return reduce_tree(v, Add{});
  }
  static float hmax(const V& v) {
    return reduce_tree(v, Max{});
  }

  // Non-temporal stores (x86; xsimd 8.1 has none): p must be aligned to a
  // full vector. Elsewhere a plain store, and has_stream is false.
#if defined(__AVX512F__)
  static constexpr bool has_stream =
      std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>> || std::is_same_v<Arch, xsimd::avx512f>;
#elif defined(__AVX2__)
  static constexpr bool has_stream = std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>;
#else
  static constexpr bool has_stream = false;
#endif
  static void stream(float* p, const V& v) {
#if defined(__AVX512F__)
    if constexpr (std::is_same_v<Arch, xsimd::avx512f>) return _mm512_stream_ps(p, v);
#endif
#if defined(__AVX2__)
    if constexpr (std::is_same_v<Arch, xsimd::fma3<xsimd::avx2>>) return _mm256_stream_ps(p, v);
#endif
    v.store_aligned(p);
  }
  static void stream_fence() {
#if defined(__AVX2__)
    if constexpr (has_stream) _mm_sfence();
#endif
  }
};
#endif

}  // namespace
}  // namespace mha::detail
