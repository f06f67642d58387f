// The softmax row kernels, written once against the lane layer
// (simd/lanes.hpp) and instantiated by one translation unit per ISA
// (softmax_<isa>.cpp).
//
// exp(x), for every ISA:
//   n = round(x / ln2) (the "shifter" trick: k = fma(x, log2e, 1.5*2^23), whose
//       low mantissa bits hold n as an integer), r = x - n*ln2 in two FMA steps
//       (Cody-Waite), so |r| <= ln2/2 (+ rounding);
//   exp(r) = 1 + r*(1 + r*q(r)), q of degree 4, Horner with FMA; the
//       coefficients are a relative-error minimax fit (Lawson iterations, numpy)
//       on [-0.3473, 0.3473], rounded to float: max relative error 4.1e-9
//       (0.07 ulp) before evaluation rounding;
//   2^n is applied by adding n to the exponent bits (integer add), or on
//       AVX-512 by vscalefps, which gives the same bits for the normal
//       results it is kept for; no denormal is ever produced or consumed;
//   x < kExpLo (-126 ln2 rounded up) -> 0 (the true result is subnormal:
//       flushed, as documented), x > kExpHi (largest float with exp(x) finite)
//       or +inf -> +inf, NaN -> NaN, -inf -> 0. The exp passes (exp_sum,
//       scale_exp_sum), whose arguments never overflow, leave out the kExpHi
//       check.
// The bf16 P passes (scale_exp2_sum, scale_exp2_sum_bf16) take 2^t instead,
// t = fma(x, s log2e, -shift log2e) (exp2_v): no Cody-Waite steps, a
// polynomial of degree 4, for products that round P to bf16 anyway.
// Measured by bench/tools/exp_ulp.cpp (`build/bench/mha_exp_ulp`) against
// float(exp(double)) for every float in [-87.3, 88.7] (2,237,661,186 inputs):
// max 1 ulp on scalar, avx2 and avx512 (bit-identical results), 10,518,572
// inputs off by 1 ulp, none by 2.
//
// Sums are taken in an order fixed by n alone: 2 vector accumulators over the
// 2-vector main loop, the odd vector into the first, the masked tail into the
// second, then a fixed horizontal tree (Lanes::hsum).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "simd/lanes.hpp"
#include "softmax/kernels.hpp"

namespace mha::detail {
namespace {

constexpr float kLog2e = 1.44269502162933349609375f;
constexpr float kLn2Hi = 0.693147182464599609375f;
constexpr float kLn2Lo = -1.904654212125934e-09f;
// 1.5 * 2^23: adding it rounds to an integer held in the low mantissa bits.
constexpr float kShifter = 12582912.f;
// Smallest float >= -126 ln2: from here up, n >= -126 and r >= 0 at n = -126,
// so the result is a normal float.
constexpr float kExpLo = -87.33654022216796875f;
// Largest float whose correctly rounded exp is finite (ln FLT_MAX rounded down).
constexpr float kExpHi = 88.72283172607421875f;
// exp(r) = 1 + r*(1 + r*(c0 + c1 r + c2 r^2 + c3 r^3 + c4 r^4)).
constexpr float kExpC0 = 0.4999999403953552f;
constexpr float kExpC1 = 0.1666651964187622f;
constexpr float kExpC2 = 0.041668400168418884f;
constexpr float kExpC3 = 0.008368856273591518f;
constexpr float kExpC4 = 0.0013814308913424611f;
// 2^f = 1 + f*(c1 + f*(c2 + f*(c3 + f*c4))): a relative-error minimax fit
// (Lawson iterations, numpy) on [-1/2, 1/2], rounded to float: max relative
// error 2.9e-6 (2^-18.4) evaluated in float, far below bf16's 2^-9.
constexpr float kExp2C1 = 0.6931241750717163f;
constexpr float kExp2C2 = 0.24024099111557007f;
constexpr float kExp2C3 = 0.05590637028217316f;
constexpr float kExp2C4 = 0.009582818485796452f;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

template <class L>
struct SoftmaxImpl {
  using V = typename L::V;
  static constexpr std::size_t W = L::width;

  // kOverflow false: x <= kExpHi or NaN is known (the exp passes, whose
  // callers shift by the row's max), and the overflow check is left out:
  // the same bits with two instructions fewer of about 19 per vector.
  template <bool kOverflow = true>
  static V exp_v(const V& x) {
    const V k = L::fma(x, L::splat(kLog2e), L::splat(kShifter));
    const V n = k - L::splat(kShifter);
    V r = L::fma(n, L::splat(-kLn2Hi), x);
    r = L::fma(n, L::splat(-kLn2Lo), r);
    V q = L::fma(L::splat(kExpC4), r, L::splat(kExpC3));
    q = L::fma(q, r, L::splat(kExpC2));
    q = L::fma(q, r, L::splat(kExpC1));
    q = L::fma(q, r, L::splat(kExpC0));
    q = L::fma(q, r, L::splat(1.f));
    const V p = L::fma(q, r, L::splat(1.f));
    if constexpr (kOverflow) return L::exp_finish(x, p, n, k, kExpLo, kExpHi);
    return L::exp_finish_low(x, p, n, k, kExpLo);
  }

  // Loads the tail [0, m) of a row (m < W) into a full vector, padding with `pad`.
  static V load_tail(const float* x, std::size_t m, float pad) {
    alignas(64) float buf[W];
    for (std::size_t j = 0; j < W; ++j) buf[j] = j < m ? x[j] : pad;
    return L::load(buf);
  }
  static void store_tail(float* y, std::size_t m, const V& v) {
    alignas(64) float buf[W];
    L::store(buf, v);
    for (std::size_t j = 0; j < m; ++j) y[j] = buf[j];
  }

  static void exp(const float* x, float* y, std::size_t n) {
    std::size_t i = 0;
    for (; i + W <= n; i += W) L::store(y + i, exp_v(L::load(x + i)));
    if (i < n) store_tail(y + i, n - i, exp_v(load_tail(x + i, n - i, 0.f)));
  }

  static float reduce_max(const float* x, std::size_t n) {
    // Four accumulators: max has a 2-4 cycle latency and loads issue 2/cycle.
    V m0 = L::splat(kNegInf), m1 = m0, m2 = m0, m3 = m0;
    std::size_t i = 0;
    for (; i + 4 * W <= n; i += 4 * W) {
      m0 = L::max(m0, L::load(x + i));
      m1 = L::max(m1, L::load(x + i + W));
      m2 = L::max(m2, L::load(x + i + 2 * W));
      m3 = L::max(m3, L::load(x + i + 3 * W));
    }
    for (; i + W <= n; i += W) m0 = L::max(m0, L::load(x + i));
    if (i < n) m1 = L::max(m1, load_tail(x + i, n - i, kNegInf));
    return L::hmax(L::max(L::max(m0, m1), L::max(m2, m3)));
  }

  // Stores of exp_sum_impl's fp32 results.
  struct Fp32Out {
    static void put(float* y, const V& v) { L::store(y, v); }
    static void put2(float* y, const V& a, const V& b) {
      L::store(y, a);
      L::store(y + W, b);
    }
  };

  // y = ex(x) elementwise, ex one of the passes' vector functions below;
  // returns the sum of y. Out stores y's vectors (put, put2): Fp32Out as
  // floats, the bf16 passes' rounded to bf16 (the sum still of the
  // unrounded values).
  template <class Out, class T, class Ex>
  static float exp_sum_impl(const float* x, T* y, std::size_t n, const Ex& ex) {
    V s0 = L::splat(0.f), s1 = s0;
    std::size_t i = 0;
    // Four vectors per step, summed into s0, s1, s0, s1: the order of two
    // steps of two. Each exp is a ~14-deep chain of 4-cycle operations, and
    // four independent ones keep the FMA pipes fed (AVX-512, 256-float rows
    // in L1, Zen5: 0.147 -> 0.132 ns per element with the multiply by 1 of
    // exp_sum gone too).
    for (; i + 4 * W <= n; i += 4 * W) {
      const V e0 = ex(L::load(x + i));
      const V e1 = ex(L::load(x + i + W));
      const V e2 = ex(L::load(x + i + 2 * W));
      const V e3 = ex(L::load(x + i + 3 * W));
      Out::put2(y + i, e0, e1);
      Out::put2(y + i + 2 * W, e2, e3);
      s0 = s0 + e0;
      s1 = s1 + e1;
      s0 = s0 + e2;
      s1 = s1 + e3;
    }
    for (; i + 2 * W <= n; i += 2 * W) {
      const V e0 = ex(L::load(x + i));
      const V e1 = ex(L::load(x + i + W));
      Out::put2(y + i, e0, e1);
      s0 = s0 + e0;
      s1 = s1 + e1;
    }
    if (i + W <= n) {
      const V e = ex(L::load(x + i));
      Out::put(y + i, e);
      s0 = s0 + e;
      i += W;
    }
    if (i < n) {
      const std::size_t m = n - i;
      const V e = ex(load_tail(x + i, m, 0.f));
      alignas(64) T part[W];
      Out::put(part, e);
      for (std::size_t j = 0; j < m; ++j) y[i + j] = part[j];
      // The padded lanes' exp(-shift) must not enter the sum. Vector v goes
      // to s0 or s1 by its parity, as in the loops above, so trailing zeros
      // (masked keys past a row's last) change no bit of the sum: a row's
      // sum does not depend on how far its key tile reaches.
      alignas(64) float buf[W];
      L::store(buf, e);
      for (std::size_t j = m; j < W; ++j) buf[j] = 0.f;
      V& acc = i / W % 2 == 0 ? s0 : s1;
      acc = acc + L::load(buf);
    }
    return L::hsum(s0 + s1);
  }

  // exp(fl(x*s) - shift): the same bits as scale_add without a mask
  // followed by exp_sum, so a row's max element gives exactly exp(0) = 1.
  static float scale_exp_sum(const float* x, float* y, std::size_t n, float s, float shift) {
    const V vs = L::splat(s), vshift = L::splat(shift);
    return exp_sum_impl<Fp32Out>(x, y, n,
                                 [&](const V& v) { return exp_v<false>(v * vs - vshift); });
  }
  // In place, exp(x - shift): scale_exp_sum's bits at s = 1 (fl(x*1) = x)
  // without the multiply.
  static float exp_sum(float* x, std::size_t n, float shift) {
    const V vshift = L::splat(shift);
    return exp_sum_impl<Fp32Out>(x, x, n, [&](const V& v) { return exp_v<false>(v - vshift); });
  }

  // 2^t, t <= 0 or NaN (no overflow): n = round(t) by the shifter, f = t - n
  // exactly (|f| <= 1/2), 2^f by a degree-4 polynomial, 2^n as exp's; t
  // below -126 -> 0, so every result is 0 or a normal float. With its
  // argument's fma, 10 vector instructions per 16 results on AVX-512, where
  // scale_exp_sum's argument and exp_v<false> take 14.
  static V exp2_v(const V& t) {
    const V k = t + L::splat(kShifter);
    const V n = k - L::splat(kShifter);
    const V f = t - n;
    V p = L::fma(L::splat(kExp2C4), f, L::splat(kExp2C3));
    p = L::fma(p, f, L::splat(kExp2C2));
    p = L::fma(p, f, L::splat(kExp2C1));
    p = L::fma(p, f, L::splat(1.f));
    return L::exp_finish_low(t, p, n, k, -126.f);
  }
  // SoftmaxKernels::scale_exp2_sum into Out's elements.
  template <class Out, class T>
  static float exp2_sum_impl(const float* x, T* y, std::size_t n, float s, float shift) {
    const V a = L::splat(s * kLog2e), b = L::splat(-(shift * kLog2e));
    return exp_sum_impl<Out>(x, y, n, [&](const V& v) { return exp2_v(L::fma(v, a, b)); });
  }
  static float scale_exp2_sum(const float* x, float* y, std::size_t n, float s, float shift) {
    return exp2_sum_impl<Fp32Out>(x, y, n, s, shift);
  }
  // SoftmaxKernels::scale_exp2_sum_bf16 with Bf16Out's conversions to bf16
  // (put, put2 of std::uint16_t, nearest even).
  template <class Bf16Out>
  static float scale_exp2_sum_bf16(const float* x, std::uint16_t* y, std::size_t n, float s,
                                   float shift) {
    const float sum = exp2_sum_impl<Bf16Out>(x, y, n, s, shift);
    if (n % 2 != 0) y[n] = 0;
    return sum;
  }

  static void scale(float* x, std::size_t n, float s) {
    const V vs = L::splat(s);
    std::size_t i = 0;
    for (; i + W <= n; i += W) L::store(x + i, L::load(x + i) * vs);
    if (i < n) store_tail(x + i, n - i, load_tail(x + i, n - i, 0.f) * vs);
  }

  // y = fma(x, s, add) (add null: x*s); returns max(y) if `want_max`.
  template <bool want_max>
  static float scale_add_impl(const float* x, const float* add, float* y, std::size_t n, float s) {
    const V vs = L::splat(s);
    V m0 = L::splat(kNegInf), m1 = m0;
    std::size_t i = 0;
    auto one = [&](std::size_t at, V& m) {
      const V z = add ? L::fma(L::load(x + at), vs, L::load(add + at)) : L::load(x + at) * vs;
      L::store(y + at, z);
      if constexpr (want_max) m = L::max(m, z);
    };
    for (; i + 2 * W <= n; i += 2 * W) {
      one(i, m0);
      one(i + W, m1);
    }
    if (i + W <= n) {
      one(i, m0);
      i += W;
    }
    if (i < n) {
      const std::size_t m = n - i;
      const V xv = load_tail(x + i, m, 0.f);
      const V z = add ? L::fma(xv, vs, load_tail(add + i, m, 0.f)) : xv * vs;
      store_tail(y + i, m, z);
      if constexpr (want_max) {
        alignas(64) float buf[W];
        L::store(buf, z);
        for (std::size_t j = m; j < W; ++j) buf[j] = kNegInf;
        m1 = L::max(m1, L::load(buf));
      }
    }
    if constexpr (want_max) return L::hmax(L::max(m0, m1));
    return 0.f;
  }

  static void scale_add(const float* x, const float* add, float* y, std::size_t n, float s) {
    scale_add_impl<false>(x, add, y, n, s);
  }
  static float scale_add_max(const float* x, const float* add, float* y, std::size_t n, float s) {
    return scale_add_impl<true>(x, add, y, n, s);
  }

  // cap·(1 - 2/(exp(2x/cap) + 1)): no cancellation problem for the softmax,
  // which needs absolute accuracy of the score (the 1 - ... loses the
  // relative accuracy of tiny scores only); exp's overflow to +inf and
  // underflow to 0 give exactly +-cap, and NaN stays NaN.
  static V soft_cap_v(const V& x, const V& two_over_cap, const V& cap) {
    const V one = L::splat(1.f);
    return cap * (one - L::splat(2.f) / (exp_v(x * two_over_cap) + one));
  }
  static void soft_cap(float* x, std::size_t n, float cap) {
    const V k = L::splat(2.f / cap), c = L::splat(cap);
    std::size_t i = 0;
    for (; i + W <= n; i += W) L::store(x + i, soft_cap_v(L::load(x + i), k, c));
    if (i < n) store_tail(x + i, n - i, soft_cap_v(load_tail(x + i, n - i, 0.f), k, c));
  }

  static constexpr SoftmaxKernels table() {
    return SoftmaxKernels{&exp,           &reduce_max,    &exp_sum,  &scale,         &scale_add,
                          &scale_exp_sum, &scale_add_max, &soft_cap, &scale_exp2_sum};
  }
  // table() with scale_exp2_sum_bf16 on Bf16Out's conversions.
  template <class Bf16Out>
  static constexpr SoftmaxKernels table_bf16() {
    SoftmaxKernels k = table();
    k.scale_exp2_sum_bf16 = &scale_exp2_sum_bf16<Bf16Out>;
    return k;
  }
};

}  // namespace
}  // namespace mha::detail
