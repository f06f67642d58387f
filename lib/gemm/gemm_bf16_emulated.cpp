// The portable references of the bf16 dot-product kernels, element by
// element, bit for bit: vdpbf16ps, AMX's tdpbf16ps and Arm's BFDOT
// (FEAT_BF16 without FEAT_EBF16).
//
// vdpbf16ps, checked against the hardware over random pairs mixing normal,
// tiny and denormal values (no mismatch in 3.2M lanes on Zen 4): per pair,
// the odd element's product is added first; bf16 denormal inputs (and a
// denormal accumulator) are read as zero; each product is exact and each
// sum rounded once to nearest even (one fma), even where the product alone
// would be denormal; a sum below 2^-126 before rounding is flushed to zero
// with its sign (2^-126 - 2^-151 - 2^-158, which rounds up to 2^-126, gave 0
// on Zen 4, as tdpbf16ps does on the AMX Xeon). Adding the even product
// first, flushing only at the end, or flushing denormal products all
// mismatched.
//
// tdpbf16ps, as FACTS.md's model checked bit for bit on an Emerald Rapids
// Xeon over 768,000 outputs (denormal inputs, exponents 2^-27 to 2^23):
// per instruction and C element, two sums from 0 over the even and the odd
// products of its 16 pairs in order, each step one rounding (an fma), then
// even + odd, then C + that; denormal inputs read as zero and every result
// below 2^-126 before rounding flushed, the sign kept, as x86's
// flush-to-zero mode decides (a step that rounds up to 2^-126 from below
// gave 0 on the 2-core AMX Xeon; emulated_tdpbf16ps, fma_flushed).
//
// BFDOT, as the Arm ARM's BFDotAdd with FPCR.EBF = 0 and qemu's bfdotadd:
// the pair's two products, their sum, and the accumulator plus that sum,
// each rounded to odd with denormals flushed (bfdot_pair); checked against
// qemu 7.2 through the NEON kernels (tests/gemm/test_gemm_bf16.cpp).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "gemm/bf16_pack.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_emulated {
namespace {

struct emulated_tag {};

float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

float flush_denormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x;
}

// fma(x, y, acc) for bf16 x and y (their product exact in double), a
// result below 2^-126 in magnitude before rounding flushed to a zero of its
// sign. Rounding is monotone and 2^-126 a float, so only a result of
// exactly 2^-126 needs the exact sum s + e (TwoSum in double) to tell.
float fma_flushed(float x, float y, float acc) {
  const float r = std::fma(x, y, acc);
  if (!(std::fabs(r) <= FLT_MIN)) return r;
  if (std::fabs(r) == FLT_MIN) {
    const double p = static_cast<double>(x) * y, s = p + acc, v = s - p;
    const double e = (p - (s - v)) + (acc - v);
    const double mag = std::fabs(s);
    if (mag > FLT_MIN || (mag == FLT_MIN && (e == 0 || (e < 0) == (s < 0)))) return r;
  }
  return std::copysign(0.f, r);
}

// One element's step of vdpbf16ps: acc + x*y, rounded once, denormal
// inputs read as zero and a result below 2^-126 before rounding flushed.
float dot_step(float acc, std::uint16_t x, std::uint16_t y) {
  return fma_flushed(flush_denormal(from_bf16(x)), flush_denormal(from_bf16(y)),
                     flush_denormal(acc));
}

// One pair of vdpbf16ps: the odd elements' product first (a and b hold
// the even element in their low 16 bits).
float vdpbf16ps_pair(float acc, std::uint32_t a, std::uint32_t b) {
  acc = dot_step(acc, static_cast<std::uint16_t>(a >> 16), static_cast<std::uint16_t>(b >> 16));
  return dot_step(acc, static_cast<std::uint16_t>(a & 0xffffu),
                  static_cast<std::uint16_t>(b & 0xffffu));
}

// The exact x = s + e (s: x rounded to nearest double, e: the exact rest)
// rounded as BFDOT rounds (Arm ARM BFAdd/BFMul with FPCR.EBF = 0: FPCR
// ignored): to odd (toward zero, then the last bit set if inexact), a
// magnitude of 2^128 or more to infinity, a result below 2^-126 before
// rounding flushed to a zero of its sign, and any NaN the default NaN.
float round_to_odd(double s, double e) {
  if (std::isnan(s)) {
    const std::uint32_t default_nan = 0x7fc00000u;
    float x;
    std::memcpy(&x, &default_nan, sizeof x);
    return x;
  }
  const double mag = std::fabs(s);
  if (mag > 0x1p128 || (mag == 0x1p128 && !(e * s < 0)))
    return std::signbit(s) ? -INFINITY : INFINITY;
  float f = static_cast<float>(s);  // nearest (infinity just below 2^128)
  // Toward zero: one float back where nearest rounded away from zero, or
  // where s is a float and the rest takes x below it.
  if (std::fabs(f) > mag || (f == s && e != 0 && (e < 0) != (s < 0))) f = std::nextafter(f, 0.f);
  if (std::fabs(f) < FLT_MIN) return std::signbit(s) ? -0.f : 0.f;
  if (f != s || e != 0) {
    std::uint32_t u;
    std::memcpy(&u, &f, sizeof u);
    u |= 1u;
    std::memcpy(&f, &u, sizeof f);
  }
  return f;
}

// x + y (floats) rounded as BFDOT: its exact sum as s + e (Knuth's TwoSum in
// double, exact for any two floats).
float add_odd(float x, float y) {
  const double s = static_cast<double>(x) + y, yv = s - x;
  return round_to_odd(s, (x - (s - yv)) + (y - yv));
}

// One pair of BFDOT (BFDotAdd, FPCR.EBF = 0): both products and their sum
// rounded to odd, then acc + that sum rounded to odd; denormal inputs
// (acc included) read as zero. The products of two bf16 are exact in
// double, so only their range can round.
float bfdot_pair(float acc, std::uint32_t a, std::uint32_t b) {
  const auto product = [](std::uint32_t x, std::uint32_t y) {
    const double p = static_cast<double>(flush_denormal(from_bf16(static_cast<std::uint16_t>(x)))) *
                     flush_denormal(from_bf16(static_cast<std::uint16_t>(y)));
    return round_to_odd(p, 0.0);
  };
  const float sum = add_odd(product(a & 0xffffu, b & 0xffffu), product(a >> 16, b >> 16));
  return add_odd(flush_denormal(acc), sum);
}

using PairStep = float (*)(float acc, std::uint32_t a, std::uint32_t b);

// 4 x 8: a tile unlike the hardware kernels', so that the tests comparing
// them also show that an element's bits do not depend on the tile.
constexpr std::size_t kMR = 4, kNR = 8;

// One C element's sum over kp pairs of A (pair p at a[p * as]) and a column
// of a packed B strip (pair p at b + p * kNR * 2).
using Dot = float (*)(std::size_t kp, const std::uint32_t* a, std::size_t as,
                      const std::uint16_t* b);

template <PairStep kStep>
float pair_by_pair(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b) {
  float acc = 0.f;
  for (std::size_t p = 0; p < kp; ++p) {
    const std::uint16_t* bp = b + p * kNR * 2;
    acc = kStep(acc, a[p * as], bp[0] | static_cast<std::uint32_t>(bp[1]) << 16);
  }
  return acc;
}

// tdpbf16ps over groups of 16 pairs from the first.
float tile_by_tile(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b) {
  float acc = 0.f;
  for (std::size_t p0 = 0; p0 < kp; p0 += 16) {
    acc = emulated_tdpbf16ps(acc, kp - p0 < 16 ? kp - p0 : 16, a + p0 * as, as, b + p0 * kNR * 2,
                             kNR);
  }
  return acc;
}

// The pair (i, p) of A at a[i * rs + p * ps]: a packed strip or rows.
template <Dot kDot>
void tile(std::size_t kp, const std::uint32_t* a, std::size_t rs, std::size_t ps,
          const std::uint16_t* b, float* c, std::size_t ldc, std::size_t m, std::size_t n,
          float alpha, float beta) {
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const float acc = kDot(kp, a + i * rs, ps, b + j * 2);
      float& cij = c[i * ldc + j];
      const float r = alpha * acc;
      cij = beta == 0.f ? r : r + beta * cij;
    }
  }
}

template <Dot kDot>
void ukernel(std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, float* c,
             std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
  tile<kDot>(kp, a, 1, kMR, b, c, ldc, m, n, alpha, beta);
}

template <Dot kDot>
void ukernel_rows(std::size_t kp, const std::uint32_t* a, std::size_t lda, const std::uint16_t* b,
                  float* c, std::size_t ldc, std::size_t m, std::size_t n, float alpha,
                  float beta) {
  tile<kDot>(kp, a, lda, 1, b, c, ldc, m, n, alpha, beta);
}

}  // namespace
}  // namespace gemm_bf16_emulated

float emulated_tdpbf16ps(float c, std::size_t pairs, const std::uint32_t* a, std::size_t a_step,
                         const std::uint16_t* b, std::size_t b_step) {
  using gemm_bf16_emulated::flush_denormal;
  using gemm_bf16_emulated::fma_flushed;
  using gemm_bf16_emulated::from_bf16;
  float even = 0.f, odd = 0.f;
  for (std::size_t p = 0; p < pairs; ++p) {
    const std::uint32_t x = a[p * a_step];
    const std::uint16_t* y = b + 2 * p * b_step;
    const auto in = [](std::uint32_t h) {
      return flush_denormal(from_bf16(static_cast<std::uint16_t>(h)));
    };
    even = fma_flushed(in(x & 0xffffu), in(y[0]), even);
    odd = fma_flushed(in(x >> 16), in(y[1]), odd);
  }
  return flush_denormal(c + flush_denormal(even + odd));
}

void emulated_bfmmla(float* c, const std::uint16_t* a, const std::uint16_t* b) {
  // Pair q (k = 2q, 2q + 1) of row r of a 2 x 4 operand, its even k low, as
  // BFDOT reads a 32-bit lane.
  const auto pair = [](const std::uint16_t* x, std::size_t r, std::size_t q) {
    return x[4 * r + 2 * q] | static_cast<std::uint32_t>(x[4 * r + 2 * q + 1]) << 16;
  };
  for (std::size_t i = 0; i < 2; ++i) {
    for (std::size_t j = 0; j < 2; ++j) {
      float& acc = c[2 * i + j];
      acc = gemm_bf16_emulated::bfdot_pair(acc, pair(a, i, 0), pair(b, j, 0));
      acc = gemm_bf16_emulated::bfdot_pair(acc, pair(a, i, 1), pair(b, j, 1));
    }
  }
}

float emulated_vdpbf16ps_pair(float acc, std::uint32_t a, std::uint32_t b) {
  return gemm_bf16_emulated::vdpbf16ps_pair(acc, a, b);
}

void emulated_round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx,
                         void* out, std::size_t ldy) {
  auto* const y = static_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const float v = gemm_bf16_emulated::flush_denormal(x[i * ldx + j]);
      fp32_to_bf16(1, &v, y + i * ldy + j);
    }
    if (n % 2 != 0) y[i * ldy + n] = 0;
  }
}

const GemmBf16Kernels gemm_bf16_kernels_emulated_vdpbf16ps{
    "emulated_vdpbf16ps",
    gemm_bf16_emulated::kMR,
    gemm_bf16_emulated::kNR,
    kBf16MC,
    kBf16KC,
    kBf16NC,
    &gemm_bf16_emulated::ukernel<
        gemm_bf16_emulated::pair_by_pair<gemm_bf16_emulated::vdpbf16ps_pair>>,
    &gemm_bf16_emulated::ukernel_rows<
        gemm_bf16_emulated::pair_by_pair<gemm_bf16_emulated::vdpbf16ps_pair>>,
    &emulated_round_rows,
    &bf16_pack::pack_a<gemm_bf16_emulated::emulated_tag, gemm_bf16_emulated::kMR>,
    &bf16_pack::pack_b<gemm_bf16_emulated::emulated_tag, gemm_bf16_emulated::kNR>};

const GemmBf16Kernels gemm_bf16_kernels_emulated_bfdot{
    "emulated_bfdot",
    gemm_bf16_emulated::kMR,
    gemm_bf16_emulated::kNR,
    kBf16MC,
    kBf16KC,
    kBf16NC,
    &gemm_bf16_emulated::ukernel<gemm_bf16_emulated::pair_by_pair<gemm_bf16_emulated::bfdot_pair>>,
    &gemm_bf16_emulated::ukernel_rows<
        gemm_bf16_emulated::pair_by_pair<gemm_bf16_emulated::bfdot_pair>>,
    &emulated_round_rows,
    &bf16_pack::pack_a<gemm_bf16_emulated::emulated_tag, gemm_bf16_emulated::kMR>,
    &bf16_pack::pack_b<gemm_bf16_emulated::emulated_tag, gemm_bf16_emulated::kNR>};

}  // namespace mha::detail

namespace mha::detail {

const GemmBf16Kernels gemm_bf16_kernels_emulated_tdpbf16ps{
    "emulated_tdpbf16ps",
    gemm_bf16_emulated::kMR,
    gemm_bf16_emulated::kNR,
    kBf16MC,
    kBf16KC,
    kBf16NC,
    &gemm_bf16_emulated::ukernel<gemm_bf16_emulated::tile_by_tile>,
    &gemm_bf16_emulated::ukernel_rows<gemm_bf16_emulated::tile_by_tile>,
    &emulated_round_rows,
    &bf16_pack::pack_a<gemm_bf16_emulated::emulated_tag, gemm_bf16_emulated::kMR>,
    &bf16_pack::pack_b<gemm_bf16_emulated::emulated_tag, gemm_bf16_emulated::kNR>};

}  // namespace mha::detail
