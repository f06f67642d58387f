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
  // Horizontal reductions in a fixed tree order (lane i + half into lane i).
  static float hsum(const V& v) {
    alignas(64) float a[width];
    v.store_aligned(a);
    for (std::size_t half = width / 2; half >= 1; half /= 2) {
      for (std::size_t i = 0; i < half; ++i) a[i] += a[i + half];
    }
    return a[0];
  }
  static float hmax(const V& v) {
    alignas(64) float a[width];
    v.store_aligned(a);
    for (std::size_t half = width / 2; half >= 1; half /= 2) {
      for (std::size_t i = 0; i < half; ++i) a[i] = a[i] < a[i + half] ? a[i + half] : a[i];
    }
    return a[0];
  }
};
#endif

}  // namespace
}  // namespace mha::detail
