// The per-ISA softmax kernel table (lib/softmax/kernels.hpp), run on the ISA
// MHA_ISA selects, against double references and against the scalar table.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dispatch/cpu_features.hpp"
#include "dispatch/dispatch.hpp"
#include "softmax/kernels.hpp"
#include "support/reference.hpp"

namespace {

using mha::detail::SoftmaxKernels;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const SoftmaxKernels& sk() {
  return mha::detail::softmax_kernels(mha::current_isa());
}
const SoftmaxKernels& scalar_sk() {
  return mha::detail::softmax_kernels(mha::Isa::scalar);
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Distance in representable floats between two non-negative finite floats.
std::int64_t ulp_distance(float a, float b) {
  return std::llabs(static_cast<std::int64_t>(bits(a)) - static_cast<std::int64_t>(bits(b)));
}

float exp1(float x) {
  float y;
  sk().exp(&x, &y, 1);
  return y;
}

}  // namespace

TEST_CASE("exp special values", "[softmax][exp]") {
  CHECK(exp1(-kInf) == 0.f);
  CHECK(exp1(kInf) == kInf);
  CHECK(std::isnan(exp1(kNaN)));
  CHECK(std::isnan(exp1(-kNaN)));
  CHECK(exp1(0.f) == 1.f);
  CHECK(exp1(-0.f) == 1.f);
  CHECK(exp1(88.8f) == kInf);
  CHECK(exp1(1e30f) == kInf);
  CHECK(exp1(-1e30f) == 0.f);
  CHECK(exp1(-1e4f) == 0.f);
  // Largest input with a finite result, and the next float up.
  CHECK(std::isfinite(exp1(88.72283172607421875f)));
  CHECK(exp1(std::nextafter(88.72283172607421875f, kInf)) == kInf);
  CHECK(exp1(-87.33654022216796875f) >= std::numeric_limits<float>::min());
}

TEST_CASE("exp never returns a subnormal: underflow goes to zero", "[softmax][exp]") {
  // Every float in [-104, -86] (about 4e5 values): each result is 0 or normal,
  // and 0 only where the true result is below FLT_MIN.
  std::vector<float> x;
  for (float v = -104.f; v <= -86.f; v = std::nextafter(v, kInf)) x.push_back(v);
  std::vector<float> y(x.size());
  sk().exp(x.data(), y.data(), x.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool ok = y[i] == 0.f ? std::exp(double(x[i])) < double(std::numeric_limits<float>::min())
                                : std::fpclassify(y[i]) == FP_NORMAL;
    if (!ok && bad++ < 5) WARN("x=" << x[i] << " y=" << y[i]);
  }
  CHECK(bad == 0);
}

TEST_CASE("exp is within 2 ulp of the correctly rounded result (sampled)", "[softmax][exp]") {
  // The full sweep over every float in [-87.3, 88.7] is bench/tools mha_exp_ulp;
  // here a strided sample plus the neighbourhood of 0 and of the range ends.
  std::vector<float> x;
  const std::uint32_t lo = bits(88.7f);  // positive floats are ordered by bits
  // About 2e6 samples at MHA_TEST_SCALE=1.
  const auto step = static_cast<std::uint32_t>(1000 / mha::test::case_scale());
  for (std::uint32_t b = 0; b <= lo; b += step) {
    float v;
    std::memcpy(&v, &b, sizeof v);
    x.push_back(v);
    if (v <= 87.3f) x.push_back(-v);
  }
  for (float v : {-87.3f, 88.7f, 1e-30f, -1e-30f, 0.5f, -0.5f, 0.34657359f, -0.34657359f}) {
    float w = v;
    for (int i = 0; i < 64; ++i, w = std::nextafter(w, 0.f)) x.push_back(w);
  }
  std::vector<float> y(x.size()), y_scalar(x.size());
  sk().exp(x.data(), y.data(), x.size());
  scalar_sk().exp(x.data(), y_scalar.data(), x.size());
  std::int64_t worst = 0;
  float worst_x = 0;
  std::size_t differs_from_scalar = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float ref = static_cast<float>(std::exp(static_cast<double>(x[i])));
    const std::int64_t d = ulp_distance(y[i], ref);
    if (d > worst) worst = d, worst_x = x[i];
    differs_from_scalar += bits(y[i]) != bits(y_scalar[i]);
  }
  INFO("samples " << x.size() << ", worst " << worst << " ulp at x=" << worst_x);
  CHECK(worst <= 2);
  // Every ISA evaluates the same polynomial with fused multiply-adds.
  CHECK(differs_from_scalar == 0);
}

TEST_CASE("exp over arrays of every length, in place and out of place", "[softmax][exp]") {
  for (std::size_t n = 1; n <= 70; ++n) {
    auto x = mha::test::random_vector(n, 100 + n, -90.f, 90.f);
    x[n / 2] = -kInf;
    std::vector<float> y(n + 1, -7.f);
    sk().exp(x.data(), y.data(), n);
    CHECK(y[n] == -7.f);  // nothing written past n
    for (std::size_t i = 0; i < n; ++i) {
      const float ref = static_cast<float>(std::exp(double(x[i])));
      INFO("n=" << n << " i=" << i << " x=" << x[i]);
      if (ref == 0.f || ref == kInf || ref < std::numeric_limits<float>::min()) {
        CHECK((y[i] == 0.f || y[i] == kInf) == true);
        CHECK(y[i] == (ref == kInf ? kInf : 0.f));
      } else {
        CHECK(ulp_distance(y[i], ref) <= 2);
      }
    }
    sk().exp(x.data(), x.data(), n);
    for (std::size_t i = 0; i < n; ++i) CHECK(bits(x[i]) == bits(y[i]));
  }
}

TEST_CASE("reduce_max", "[softmax]") {
  for (std::size_t n = 1; n <= 300; n += (n < 40 ? 1 : 7)) {
    auto x = mha::test::random_vector(n, 200 + n, -1e4f, 1e4f);
    const std::size_t at = (n * 7) % n;
    x[at] = 2e4f;
    CHECK(sk().reduce_max(x.data(), n) == 2e4f);
    for (float& v : x) v = -kInf;
    CHECK(sk().reduce_max(x.data(), n) == -kInf);
    x[n - 1] = -3.f;
    CHECK(sk().reduce_max(x.data(), n) == -3.f);
  }
}

TEST_CASE("exp_sum and scale_exp_sum against double", "[softmax]") {
  for (std::size_t n = 1; n <= 300; n += (n < 40 ? 1 : 5)) {
    auto x = mha::test::random_vector(n, 300 + n, -20.f, 20.f);
    if (n > 3) x[1] = -kInf;
    const float s = 0.37f, shift = 3.25f;
    std::vector<float> y(n + 1, -7.f), e = x;
    const float sum = sk().scale_exp_sum(x.data(), y.data(), n, s, shift);
    const float sum1 = sk().exp_sum(e.data(), n, shift);
    CHECK(y[n] == -7.f);
    double ref_sum = 0, ref_sum1 = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const double r = std::exp(double(x[i]) * s - shift), r1 = std::exp(double(x[i]) - shift);
      ref_sum += r;
      ref_sum1 += r1;
      if (x[i] == -kInf) {
        CHECK(y[i] == 0.f);
        CHECK(e[i] == 0.f);
        continue;
      }
      // exp's 2 ulp plus the rounding of x*s - shift (relative |x*s - shift| eps/2).
      const double arg = std::fabs(double(x[i]) * s - shift),
                   arg1 = std::fabs(double(x[i]) - shift);
      CHECK(std::fabs(y[i] - r) <= r * (3e-7 + arg * 6e-8));
      CHECK(std::fabs(e[i] - r1) <= r1 * (3e-7 + arg1 * 6e-8));
    }
    INFO("n=" << n);
    CHECK(std::fabs(sum - ref_sum) <= ref_sum * (2e-6 + 25 * 6e-8));
    CHECK(std::fabs(sum1 - ref_sum1) <= ref_sum1 * (2e-6 + 25 * 6e-8));
    // Fixed order: the same input gives the same bits.
    std::vector<float> y2(n);
    CHECK(bits(sk().scale_exp_sum(x.data(), y2.data(), n, s, shift)) == bits(sum));
    // Same bits as scale_add then exp_sum.
    std::vector<float> z2(n);
    sk().scale_add(x.data(), nullptr, z2.data(), n, s);
    CHECK(bits(sk().exp_sum(z2.data(), n, shift)) == bits(sum));
    CHECK(std::memcmp(z2.data(), y.data(), n * sizeof(float)) == 0);
    // In place equals out of place.
    std::vector<float> z = x;
    CHECK(bits(sk().scale_exp_sum(z.data(), z.data(), n, s, shift)) == bits(sum));
    CHECK(std::memcmp(z.data(), y.data(), n * sizeof(float)) == 0);
  }
}

// Nearest even from the two neighbouring bf16 values themselves (not the
// bit trick of the kernels): the nearer, ties to the even pattern.
std::uint16_t bf16_nearest(float y) {
  const std::uint32_t u = bits(y);
  const auto lo = static_cast<std::uint16_t>(u >> 16);
  if ((u & 0xFFFFu) == 0) return lo;
  float down, up;
  const std::uint32_t bd = std::uint32_t{lo} << 16, bu = std::uint32_t{lo + 1u} << 16;
  std::memcpy(&down, &bd, sizeof down);
  std::memcpy(&up, &bu, sizeof up);
  const double dd = std::fabs(double(y) - down), du = std::fabs(double(up) - y);
  if (dd != du) return dd < du ? lo : static_cast<std::uint16_t>(lo + 1);
  return lo % 2 == 0 ? lo : static_cast<std::uint16_t>(lo + 1);
}

// scale_exp2_sum's tolerance (kernels.hpp): the polynomial's 2.9e-6 and
// the argument's roundings, (|x·s| + |shift|)·2^-23 relative.
TEST_CASE("scale_exp2_sum against double, and the scalar table's bits", "[softmax]") {
  for (std::size_t n = 1; n <= 300; n += (n < 40 ? 1 : 5)) {
    auto x = mha::test::random_vector(n, 700 + n, -60.f, 8.f);
    if (n > 3) x[1] = -kInf;
    if (n > 5) x[4] = 8.f;  // the max
    if (n > 7) x[6] = -1e30f;
    if (n > 9) x[8] = 1e-40f;  // a denormal score
    for (const float s : {1.0f, 0.125f, 2.5f}) {
      const float shift = 8.f * s;
      std::vector<float> y(n + 1, -7.f), ys(n + 1, -7.f);
      const float sum = sk().scale_exp2_sum(x.data(), y.data(), n, s, shift);
      INFO("n=" << n << " s=" << s);
      CHECK(y[n] == -7.f);
      double ref_sum = 0;
      for (std::size_t i = 0; i < n; ++i) {
        const double xs = double(x[i]) * s, r = std::exp(xs - shift);
        // Below 2^-126 the result is 0; just above it, 0 or within tolerance.
        const double tol = r * (2.9e-6 + (std::fabs(xs) + shift) * 0x1p-23);
        if (r < 0x1p-126 * 1.01) {
          CHECK((y[i] == 0.f || std::fabs(y[i] - r) <= tol));
        } else {
          CHECK(std::fabs(y[i] - r) <= tol);
        }
        CHECK(y[i] <= 1.f + 1e-5f);
        ref_sum += y[i];
      }
      // The sum of y in some order: n·2^-24 relative at most.
      CHECK(std::fabs(sum - ref_sum) <= ref_sum * n * 0x1p-24);
      // Every ISA gives the scalar table's elements (the sum's order is the
      // vector width's); in place equals out of place.
      scalar_sk().scale_exp2_sum(x.data(), ys.data(), n, s, shift);
      CHECK(std::memcmp(ys.data(), y.data(), n * sizeof(float)) == 0);
      std::vector<float> z = x;
      CHECK(bits(sk().scale_exp2_sum(z.data(), z.data(), n, s, shift)) == bits(sum));
      CHECK(std::memcmp(z.data(), y.data(), n * sizeof(float)) == 0);
    }
  }
  // A row of -inf (shift 0, as the online softmax passes it) gives zeros; a
  // NaN gives NaN there and in the sum.
  std::vector<float> x(37, -kInf), y(37);
  CHECK(sk().scale_exp2_sum(x.data(), y.data(), x.size(), 0.125f, 0.f) == 0.f);
  for (const float v : y) CHECK(v == 0.f);
  x[20] = kNaN;
  CHECK(std::isnan(sk().scale_exp2_sum(x.data(), y.data(), x.size(), 0.125f, 0.f)));
  CHECK(std::isnan(y[20]));
  CHECK(y[19] == 0.f);
}

TEST_CASE("scale_exp2_sum_bf16 is scale_exp2_sum rounded to nearest even", "[softmax]") {
  const auto f = sk().scale_exp2_sum_bf16;
  // Where the ISA and CPU have a conversion (avx512 with AVX512_BF16);
  // elsewhere the core rounds P apart.
  CHECK((f != nullptr) ==
        (mha::current_isa() == mha::Isa::avx512 && mha::detail::cpu_features().avx512_bf16));
  if (f == nullptr) return;
  for (std::size_t n = 1; n <= 300; n += (n < 70 ? 1 : 7)) {
    auto x = mha::test::random_vector(n, 900 + n, -30.f, 8.f);
    if (n > 3) x[1] = -kInf;
    if (n > 5) x[4] = 8.f;
    for (const float s : {1.0f, 0.125f, 0.37f}) {
      const float shift = 8.f * s;
      std::vector<float> y(n);
      std::vector<std::uint16_t> p(n + 2, 0xABCD);
      const float sum = sk().scale_exp2_sum(x.data(), y.data(), n, s, shift);
      INFO("n=" << n << " s=" << s);
      CHECK(bits(f(x.data(), p.data(), n, s, shift)) == bits(sum));
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < n; ++i) wrong += p[i] != bf16_nearest(y[i]);
      CHECK(wrong == 0);
      // The pair completed with a zero; nothing written past it.
      CHECK(p[n] == (n % 2 != 0 ? 0 : 0xABCD));
      CHECK(p[n + 1] == 0xABCD);
    }
  }
  // Exact ties: inputs whose 2^x ends in 0x8000, found among consecutive
  // floats below -0.5 (about one in 65536), with both parities of the kept
  // bits (s = ln 2 in float, shift 0: 2^(x·s·log2 e), near 2^x).
  const float s = 0.693147182464599609375f;
  std::vector<float> ties;
  std::size_t odd = 0;
  for (std::uint32_t b = bits(-0.5f); ties.size() < 48 && b < bits(-0.5f) + (1u << 23); ++b) {
    float x, y;
    std::memcpy(&x, &b, sizeof x);
    scalar_sk().scale_exp2_sum(&x, &y, 1, s, 0.f);
    if ((bits(y) & 0xFFFFu) == 0x8000u) {
      ties.push_back(x);
      odd += (bits(y) >> 16) % 2;
    }
  }
  REQUIRE(ties.size() == 48);
  REQUIRE(odd > 0);
  REQUIRE(odd < ties.size());
  std::vector<float> y(ties.size());
  std::vector<std::uint16_t> p(ties.size());
  sk().scale_exp2_sum(ties.data(), y.data(), ties.size(), s, 0.0f);
  f(ties.data(), p.data(), ties.size(), s, 0.0f);
  for (std::size_t i = 0; i < ties.size(); ++i) CHECK(p[i] == bf16_nearest(y[i]));
}

TEST_CASE("scale, scale_add and scale_add_max", "[softmax]") {
  for (std::size_t n = 1; n <= 300; n += (n < 40 ? 1 : 9)) {
    const auto x = mha::test::random_vector(n, 400 + n, -5.f, 5.f);
    auto add = mha::test::random_vector(n, 500 + n, -3.f, 3.f);
    add[0] = -kInf;
    const float s = 0.125f;
    std::vector<float> y(n + 1, -7.f), z(n + 1, -7.f), w(n + 1, -7.f);
    sk().scale_add(x.data(), add.data(), y.data(), n, s);
    const float m = sk().scale_add_max(x.data(), add.data(), z.data(), n, s);
    sk().scale_add(x.data(), nullptr, w.data(), n, s);
    CHECK(y[n] == -7.f);
    CHECK(z[n] == -7.f);
    CHECK(w[n] == -7.f);
    float ref_max = -kInf;
    for (std::size_t i = 0; i < n; ++i) {
      const float ref = std::fma(x[i], s, add[i]);  // one rounding, as documented
      CHECK(bits(y[i]) == bits(ref));
      CHECK(bits(z[i]) == bits(ref));
      CHECK(w[i] == x[i] * s);
      ref_max = std::max(ref_max, ref);
    }
    CHECK(m == ref_max);
    std::vector<float> v = x;
    sk().scale(v.data(), n, 3.f);
    for (std::size_t i = 0; i < n; ++i) CHECK(v[i] == x[i] * 3.f);
    sk().scale_add(v.data(), add.data(), v.data(), n, 1.f);  // in place
    for (std::size_t i = 0; i < n; ++i)
      CHECK(bits(v[i]) == bits(std::fma(x[i] * 3.f, 1.f, add[i])));
  }
}
