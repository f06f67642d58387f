// The one SIMD lane layer: every kernel (GEMM, softmax, reshape) is written
// once against Lanes<Arch> and instantiated per ISA in its <op>_<isa>.cpp.
//
// Arch is an xsimd arch tag (avx512f, fma3<avx2>, neon64) or scalar_arch,
// whose "vectors" are single floats. The primary template is xsimd 8.1; what
// xsimd 8.1 lacks or gets wrong on an ISA (FACTS.md: no native fma on
// avx512f, no reduce_add/reduce_max, no masked loads and stores, no
// streaming stores, no transpose) is specialised member by member in that
// ISA's header, lanes_<isa>.hpp, which only that ISA's translation units
// include (selected below by the MHA_ISA_<isa> the build defines for them).
//
// Linkage: everything is a member of Lanes<Arch>, so each ISA's copy is a
// distinct symbol and the linker can never merge code compiled with
// different -m flags (tests/tools/check_symbols.sh checks it).
//
// Arithmetic: fma is a true fused multiply-add on every Arch (one rounding),
// so the softmax lanes compute exactly the floats of the scalar kernel.
// madd is what GEMM accumulates with: the same fma on vector ISAs, but x*y+z
// on scalar_arch, since baseline x86-64 has no FMA instruction and std::fma
// is a libm call per element.
#pragma once

// GCC 12 false positive on AVX-512: avx512fintrin.h's _mm512_undefined_ps()
// (behind _mm512_max_ps, _mm512_slli_epi32, ...) is a deliberate
// self-initialisation. Set before the intrinsics header is first included, so
// it covers only those locations' checks.
#if defined(MHA_ISA_AVX512) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <xsimd/xsimd.hpp>

namespace mha::detail::simd {

// Tag for the portable kernels: "vectors" of one float.
struct scalar_arch {};

// Whether Lanes<Arch>::madd_by_lane exists (lanes_<isa>.hpp sets it).
template <class Arch>
inline constexpr bool kMaddByLane = false;

template <class Arch>
struct Lanes {
  using V = xsimd::batch<float, Arch>;
  using I = xsimd::batch<std::int32_t, Arch>;
  static constexpr std::size_t width = V::size;

  // Unaligned: the same speed on aligned data on every target CPU, and
  // views at any offset work.
  static V load(const float* p) noexcept { return V::load_unaligned(p); }
  static void store(float* p, const V& v) noexcept { v.store_unaligned(p); }
  static V splat(float x) noexcept { return V(x); }

  static V fma(const V& a, const V& b, const V& c) noexcept { return xsimd::fma(a, b, c); }
  // The same operation as fma, not a call to it: one more inline level
  // changed GCC's inlining of the GEMM micro-kernels (AVX2 4 x 24 tile).
  static V madd(const V& a, const V& b, const V& c) noexcept { return xsimd::fma(a, b, c); }
  static V max(const V& a, const V& b) noexcept { return xsimd::max(a, b); }
  // acc[i][j] = madd(a[i], b[j], acc[i][j]) for ROWS (a multiple of 4)
  // consecutive floats of A, multiplying by lane: A then takes ROWS / 4
  // registers, not ROWS broadcasts. Defined where kMaddByLane<Arch> (NEON's
  // fmla by element; the 8 x 12 fp32 tile kept 8 broadcasts and spilled 3
  // accumulators, llvm-mca).
  template <std::size_t ROWS, std::size_t NV>
  [[gnu::always_inline]] static inline void madd_by_lane(const float* a, const V (&b)[NV],
                                                         V (&acc)[ROWS][NV]) noexcept;

  // bits(p) + (bits(k) << 23): adds k's low integer bits to p's exponent.
  static V add_exponent(const V& p, const V& k) noexcept {
    const I pb = xsimd::bitwise_cast<I>(p);
    const I kb = xsimd::bitwise_cast<I>(k);
    return xsimd::bitwise_cast<V>(pb + (kb << 23));
  }
  // x < lo ? 0 : (x <= hi ? y : x + inf)   (x + inf is +inf, or NaN for NaN)
  static V exp_fixup(const V& x, const V& y, float lo, float hi) noexcept {
    const V low = xsimd::select(x < V(lo), V(0.f), y);
    // x <= hi is false for NaN as well as for x > hi; x + inf gives NaN or +inf.
    return xsimd::select(x <= V(hi), low, x + V(std::numeric_limits<float>::infinity()));
  }
  // exp's last step: exp_fixup(x, p·2^n, lo, hi), where n is integral and
  // k holds it in its low mantissa bits (add_exponent), and p·2^n is a
  // normal float wherever x is in [lo, hi]. Per ISA where one instruction
  // does the scaling (AVX-512's vscalefps).
  static V exp_finish(const V& x, const V& p, const V& /*n*/, const V& k, float lo,
                      float hi) noexcept {
    return exp_fixup(x, add_exponent(p, k), lo, hi);
  }
  // exp_finish for an x known not to overflow (x <= hi, or NaN): x < lo ? 0
  // : p·2^n, one check fewer.
  static V exp_finish_low(const V& x, const V& p, const V& /*n*/, const V& k, float lo) noexcept {
    return xsimd::select(x < V(lo), V(0.f), add_exponent(p, k));
  }

  // Each lane rounded to the nearest bf16 value, as a float: nearest even,
  // a NaN made quiet (its payload's high bits kept), denormals as any other
  // value; fp32_to_bf16 (gemm_bf16.hpp) rounds by the scalar lanes' copy.
  static V round_bf16(const V& v) noexcept {
    const I u = xsimd::bitwise_cast<I>(v);
    const I rounded = u + I(0x7FFF) + ((u >> 16) & I(1));
    const auto nan = (u & I(0x7FFFFFFF)) > I(0x7F800000);
    const I high = I(static_cast<std::int32_t>(0xFFFF0000u));
    return xsimd::bitwise_cast<V>(xsimd::select(nan, u | I(0x400000), rounded) & high);
  }

  // Horizontal sum and max in a fixed tree order: lane i combines with lane
  // i + width/2, then i + width/4, ... (reduce<kMax>, per ISA, with shuffles:
  // a store and a scalar loop cost ~40 cycles per 64-float row, a third of
  // the row's exp work).
  static float hsum(const V& v) noexcept { return reduce<false>(v); }
  static float hmax(const V& v) noexcept { return reduce<true>(v); }
  template <bool kMax>
  static float reduce(const V& v) noexcept;
  // xsimd's own horizontal sum, in its order (not hsum's): what gemv_t's
  // dot products are reduced with, so their bits stay what they were.
  static float hadd(const V& v) noexcept { return xsimd::hadd(v); }

  // The first `lanes` (1 <= lanes <= width) floats at p, the rest zero,
  // reading nothing past them; and the first `lanes` of v stored to p. What
  // GEMM's N edges use: no copies of B, no C tile on the stack. Here through
  // a small array; masked loads and stores where the ISA has them.
  static V load_n(const float* p, std::size_t lanes) noexcept {
    if (lanes == width) return load(p);
    alignas(64) float t[width] = {};
    for (std::size_t i = 0; i < lanes; ++i) t[i] = p[i];
    return load(t);
  }
  static void store_n(float* p, const V& v, std::size_t lanes) noexcept {
    if (lanes == width) return store(p, v);
    alignas(64) float t[width];
    store(t, v);
    for (std::size_t i = 0; i < lanes; ++i) p[i] = t[i];
  }

  // 16 bytes or bf16 scales at p widened to fp32, exactly, into out[0, 16 /
  // width): int8 codes; E4M3 codes (their bits placed in an fp32 and scaled
  // by 2^120, which turns E4M3's subnormals into fp32's); bf16 bits. What the
  // quantized KV cache reads (kvquant/format.hpp). Per vector ISA (the
  // scalar ISA runs format.cpp's emulation instead).
  static void widen_i8x16(const std::uint8_t* p, V* out) noexcept;
  static void widen_e4m3x16(const std::uint8_t* p, V* out) noexcept;
  static void widen_bf16x16(const std::uint16_t* p, V* out) noexcept;
  // The width int8 values at p, exactly (int8 weights, gemm/ukernel.hpp).
  static V widen_i8(const std::int8_t* p) noexcept;
  // The width bytes at p as two nibbles each, exactly: lo the low nibbles,
  // hi the high ones; int4 (two's complement, -8..7) or uint4 (0..15).
  static void widen_s4(const std::int8_t* p, V& lo, V& hi) noexcept;
  static void widen_u4(const std::int8_t* p, V& lo, V& hi) noexcept;

  // Transposes the width x width block held in r[0..width) (r[i] = row i) in
  // place; what makes packing a transposed operand run at vector speed
  // (measured on pack_b('T') of 768 x 2304, AVX-512: 0.85 ms with scalar
  // copies). Per ISA.
  static void transpose(V* r) noexcept;

  // Non-temporal (cache-bypassing) stores to a vector-aligned p, where the
  // ISA has them (x86); the thread that made them calls stream_fence() once
  // before the data is read elsewhere. Elsewhere a plain store.
  static constexpr bool has_stream() noexcept { return false; }
  static void stream(float* p, const V& v) noexcept { v.store_aligned(p); }
  static void stream_fence() noexcept {}
};

template <>
struct Lanes<scalar_arch> {
  using V = float;
  static constexpr std::size_t width = 1;

  static V load(const float* p) noexcept { return *p; }
  static void store(float* p, V v) noexcept { *p = v; }
  static V splat(float x) noexcept { return x; }

  static V fma(V a, V b, V c) noexcept { return std::fma(a, b, c); }
  // Unfused on purpose (see the top of this file).
  static V madd(V a, V b, V c) noexcept { return a * b + c; }
  // Order-independent for non-NaN values; NaN handling is the caller's.
  static V max(V a, V b) noexcept { return a < b ? b : a; }

  static V add_exponent(V p, V k) noexcept {
    std::uint32_t pb, kb;
    std::memcpy(&pb, &p, sizeof pb);
    std::memcpy(&kb, &k, sizeof kb);
    pb += kb << 23;
    std::memcpy(&p, &pb, sizeof pb);
    return p;
  }
  static V exp_fixup(V x, V y, float lo, float hi) noexcept {
    if (x < lo) return 0.f;
    return x <= hi ? y : x + std::numeric_limits<float>::infinity();
  }
  static V exp_finish(V x, V p, V /*n*/, V k, float lo, float hi) noexcept {
    return exp_fixup(x, add_exponent(p, k), lo, hi);
  }
  static V exp_finish_low(V x, V p, V /*n*/, V k, float lo) noexcept {
    return x < lo ? 0.f : add_exponent(p, k);
  }

  // Branch-free, so that loops over it vectorize on the baseline ISA
  // (fp32_to_bf16).
  static V round_bf16(V v) noexcept {
    std::uint32_t u;
    std::memcpy(&u, &v, sizeof u);
    const std::uint32_t nan = (u & 0x7FFFFFFFu) > 0x7F800000u ? ~0u : 0u;
    const std::uint32_t rounded = u + 0x7FFFu + (u >> 16 & 1u);
    u = ((nan & (u | 0x400000u)) | (~nan & rounded)) & 0xFFFF0000u;
    std::memcpy(&v, &u, sizeof u);
    return v;
  }

  static float hsum(V v) noexcept { return v; }
  static float hmax(V v) noexcept { return v; }
  static float hadd(V v) noexcept { return v; }

  static V load_n(const float* p, std::size_t) noexcept { return *p; }
  static void store_n(float* p, V v, std::size_t) noexcept { *p = v; }
  static V widen_i8(const std::int8_t* p) noexcept { return static_cast<float>(*p); }
  static void widen_s4(const std::int8_t* p, V& lo, V& hi) noexcept {
    const int v = static_cast<unsigned char>(*p);
    lo = static_cast<float>(((v & 15) ^ 8) - 8);
    hi = static_cast<float>(((v >> 4) ^ 8) - 8);
  }
  static void widen_u4(const std::int8_t* p, V& lo, V& hi) noexcept {
    const int v = static_cast<unsigned char>(*p);
    lo = static_cast<float>(v & 15);
    hi = static_cast<float>(v >> 4);
  }
  static void transpose(V*) noexcept {}

  static constexpr bool has_stream() noexcept { return false; }
  static void stream(float* p, V v) noexcept { *p = v; }
  static void stream_fence() noexcept {}
};

}  // namespace mha::detail::simd

#if defined(MHA_ISA_AVX512)
#include "simd/lanes_avx512.hpp"
#elif defined(MHA_ISA_AVX2)
#include "simd/lanes_avx2.hpp"
#elif defined(MHA_ISA_NEON)
#include "simd/lanes_neon.hpp"
#endif
