// The int8 GEMM (gemm_i8.hpp): every kernel set this CPU runs against the
// test's own emulation of the documented arithmetic (row quantization,
// exact integer sums, the scale and bias roundings), bit for bit, on edge
// shapes, unaligned and strided operands, extreme codes and values, and at
// 1 and 2 threads.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/aligned.hpp"
#include "gemm/gemm_i8.hpp"
#include "support/reference.hpp"

namespace {

namespace d = mha::detail;
using mha::test::same_bits;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// How B is quantized: per column (group 0) or in groups of k rows; int8,
// int4 (-8..7) or uint4 codes (0..15, with zero points 0..16).
struct Format {
  std::size_t group;
  d::QuantCodes type;
  std::size_t groups(std::size_t k) const {
    return group == 0 || group >= k ? 1 : (k + group - 1) / group;
  }
  bool grouped(std::size_t k) const { return type != d::QuantCodes::int8 || groups(k) > 1; }
  bool uint4() const { return type == d::QuantCodes::uint4; }
  int lo() const { return type == d::QuantCodes::int8 ? -128 : uint4() ? 0 : -8; }
  int hi() const { return type == d::QuantCodes::int8 ? 127 : uint4() ? 15 : 7; }
};
constexpr auto kI8 = d::QuantCodes::int8, kI4 = d::QuantCodes::int4, kU4 = d::QuantCodes::uint4;
constexpr Format kPerRow{0, kI8};
constexpr Format kFormats[] = {kPerRow,   {32, kI8}, {128, kI8}, {0, kI4},
                               {32, kI4}, {64, kI4}, {0, kU4},   {32, kU4}};

// The header's rules, written out independently of the library: w [n x k]
// codes, sw [n x groups] scales.
// zw: uint4's zero points [n x groups].
std::vector<float> emulate(std::size_t m, std::size_t n, std::size_t k, const float* a,
                           std::size_t lda, const std::vector<std::int8_t>& w,
                           const std::vector<float>& sw, const float* bias, Format f = kPerRow,
                           const std::vector<float>& zw = {}) {
  const std::size_t groups = f.groups(k), len = groups == 1 ? k : f.group;
  std::vector<float> c(m * n);
  for (std::size_t i = 0; i < m; ++i) {
    const float* row = a + i * lda;
    float amax = 0.0f;
    bool finite = true;
    for (std::size_t p = 0; p < k; ++p) {
      finite = finite && std::isfinite(row[p]);
      amax = std::max(amax, std::fabs(row[p]));
    }
    const float sa = finite ? amax / 127.0f : kNaN;
    std::vector<int> q(k, 0);
    if (sa > 0.0f) {
      for (std::size_t p = 0; p < k; ++p) {
        q[p] = static_cast<int>(std::clamp(std::nearbyint(row[p] / sa), -127.0f, 127.0f));
      }
    }
    for (std::size_t j = 0; j < n; ++j) {
      float y;
      if (!f.grouped(k)) {
        std::int64_t acc = 0;
        for (std::size_t p = 0; p < k; ++p) acc += q[p] * w[j * k + p];
        y = static_cast<float>(acc) * (sa * sw[j]);
      } else {
        float t = 0.0f;
        for (std::size_t g = 0; g < groups; ++g) {
          std::int64_t acc = 0;
          const int z = f.uint4() ? static_cast<int>(zw[j * groups + g]) : 0;
          for (std::size_t p = g * len; p < std::min(k, (g + 1) * len); ++p)
            acc += q[p] * (w[j * k + p] - z);
          t = std::fma(static_cast<float>(acc), sw[j * groups + g], t);
        }
        y = t * sa;
      }
      c[i * n + j] = bias != nullptr ? y + bias[j] : y;
    }
  }
  return c;
}

struct Packed {
  d::AlignedFloats storage;
  d::PackedI8B b;
  Packed(const d::GemmI8Kernels& g, std::size_t k, std::size_t n, const std::vector<std::int8_t>& w,
         const std::vector<float>& sw, Format f = kPerRow, const std::vector<float>& zw = {}) {
    storage = d::alloc_floats(d::packed_i8_b_bytes(g, k, n, f.group, f.type, "B") / 4);
    b = d::pack_i8_b(g, k, n, f.group, f.type, w.data(), k, sw.data(),
                     f.uint4() ? zw.data() : nullptr, storage.get());
  }
};

// C through gemm_i8 on g, ldc = n + 3 with the padding checked untouched.
std::vector<float> run(const d::GemmI8Kernels& g, std::size_t m, std::size_t n, std::size_t k,
                       const float* a, std::size_t lda, const std::vector<std::int8_t>& w,
                       const std::vector<float>& sw, const float* bias, Format f = kPerRow,
                       const std::vector<float>& zw = {}) {
  const Packed p(g, k, n, w, sw, f, zw);
  const std::size_t ldc = n + 3;
  std::vector<float> c(m * ldc, 7.0f);
  d::gemm_i8(m, a, lda, p.b, c.data(), ldc, bias);
  std::vector<float> r(m * n);
  for (std::size_t i = 0; i < m; ++i) {
    std::copy_n(c.data() + i * ldc, n, r.data() + i * n);
    for (std::size_t j = n; j < ldc; ++j) REQUIRE(c[i * ldc + j] == 7.0f);
  }
  return r;
}

void extremes(std::size_t k, Format f) {
  const std::size_t m = 6, n = 33, groups = f.groups(k);
  std::vector<float> a(m * k);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> val(-1.0f, 1.0f);
  for (float& x : a) x = val(rng);
  // Row 0 all at +-max: the codes +-127 against -128 and 127, the largest sums.
  for (std::size_t p = 0; p < k; ++p) a[p] = p % 3 == 0 ? -3.0f : 3.0f;
  std::fill_n(a.data() + 1 * k, k, 0.0f);  // all zero: y = bias
  a[2 * k + k - 2] = kNaN;                 // NaN: the row is NaN
  a[3 * k + 5] = -kInf;                    // inf: the row is NaN
  for (std::size_t p = 0; p < k; ++p) a[4 * k + p] = std::ldexp(val(rng), -140);  // denormal
  a[5 * k + 9] = 1000.0f;  // an outlier channel: the others round to few codes
  std::vector<std::int8_t> w(n * k);
  for (std::size_t i = 0; i < w.size(); ++i) {
    w[i] = static_cast<std::int8_t>(i % 2 == 0 ? f.lo() : f.hi());
  }
  std::vector<float> sw(n * groups, 1.0f / 64), bias(n, 0.5f);
  sw[3 * groups] = 0.0f;
  sw[4 * groups] = 1e30f;  // overflows to inf in the product of the scales
  // uint4: zero points at both ends (16: GPTQ's stored 15 plus one), so
  // code - z spans -16..15.
  std::vector<float> zw(n * groups);
  for (std::size_t i = 0; i < zw.size(); ++i) zw[i] = i % 3 == 0 ? 16.0f : i % 3 == 1 ? 0.0f : 8.0f;
  const std::vector<float> want = emulate(m, n, k, a.data(), k, w, sw, bias.data(), f, zw);
  for (std::size_t j = 0; j < n; ++j) {
    CHECK(want[1 * n + j] == 0.5f);
    CHECK(std::isnan(want[2 * n + j]));
    CHECK(std::isnan(want[3 * n + j]));
  }
  for (const d::GemmI8Kernels* g : d::gemm_i8_kernel_sets()) {
    INFO(g->name);
    CHECK(same_bits(run(*g, m, n, k, a.data(), k, w, sw, bias.data(), f, zw), want));
  }
}

}  // namespace

TEST_CASE("internal gemm_i8: every kernel set gives the emulation's bits", "[gemm][i8]") {
  std::mt19937 rng(41);
  std::uniform_real_distribution<float> val(-2.0f, 2.0f);
  const auto sets = d::gemm_i8_kernel_sets();
  for (std::size_t threads : {1, 2}) {
    mha_set_num_threads(threads);
    for (const Format f : kFormats) {
      std::uniform_int_distribution<int> code(f.lo(), f.hi()), zero(0, 16);
      for (std::size_t m : {1, 2, 5, 15, 33, 130}) {
        for (std::size_t n : {1, 3, 17, 40, 70}) {
          for (std::size_t k : {1, 3, 4, 7, 70, 301}) {
            const std::size_t lda = k + 5, groups = f.groups(k);
            // One float past an aligned start: unaligned rows.
            std::vector<float> abuf(m * lda + 1);
            for (float& x : abuf) x = val(rng);
            const float* a = abuf.data() + 1;
            std::vector<std::int8_t> w(n * k);
            for (auto& x : w) x = static_cast<std::int8_t>(code(rng));
            std::vector<float> sw(n * groups), bias(n), zw(n * groups);
            for (float& z : zw) z = static_cast<float>(zero(rng));
            for (std::size_t j = 0; j < sw.size(); ++j) {
              sw[j] = std::ldexp(1.0f + val(rng) / 4, -8 + static_cast<int>(j % 5));
            }
            for (float& x : bias) x = val(rng);
            const float* bp = m % 2 == 0 ? bias.data() : nullptr;
            const std::vector<float> want = emulate(m, n, k, a, lda, w, sw, bp, f, zw);
            for (const d::GemmI8Kernels* g : sets) {
              INFO(g->name << " group " << f.group << " codes " << static_cast<int>(f.type)
                           << " threads " << threads << " m " << m << " n " << n << " k " << k);
              CHECK(same_bits(run(*g, m, n, k, a, lda, w, sw, bp, f, zw), want));
            }
          }
        }
      }
    }
  }
  mha_set_num_threads(0);
}

TEST_CASE("internal gemm_i8: extreme codes and values", "[gemm][i8]") {
  // k 21: the NaN below falls in the quantizers' scalar tail.
  for (const std::size_t k : {2000, 21}) {
    for (const Format f : kFormats) {
      CAPTURE(k, f.group, static_cast<int>(f.type));
      extremes(k, f);
    }
  }
}

TEST_CASE("internal gemm_i8: the packed layout, and k past exact int32 sums", "[gemm][i8]") {
  for (const d::GemmI8Kernels* g : d::gemm_i8_kernel_sets()) {
    INFO(g->name);
    const std::size_t k = 6, n = g->nr + 1;
    std::vector<std::int8_t> w(n * k);
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int8_t>(i % 50 - 25);
    std::vector<float> sw(n, 2.0f);
    const Packed p(*g, k, n, w, sw);
    const std::size_t nr = g->nr;
    for (std::size_t col = 0; col < 2 * nr; ++col) {
      int sum = 0;
      for (std::size_t q = 0; q < 8; ++q) {
        const std::size_t kg = g->k_group;
        const std::int8_t got =
            p.b.codes[col / nr * p.b.strip_stride + (q / kg * nr + col % nr) * kg + q % kg];
        const std::int8_t want = col < n && q < k ? w[col * k + q] : 0;
        CHECK(got == want);
        sum += want;
      }
      CHECK(p.b.start[col] == -g->a_offset * sum);
      CHECK(p.b.scales[col] == (col < n ? 2.0f : 0.0f));
    }
    CHECK_NOTHROW(d::packed_i8_b_bytes(*g, d::kI8MaxK, 1, 0, kI8, "B"));
    CHECK_THROWS(d::packed_i8_b_bytes(*g, d::kI8MaxK + 1, 1, 0, kI8, "B"));
  }
}
