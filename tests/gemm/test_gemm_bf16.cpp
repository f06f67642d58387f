// bf16 GEMM tests, run once per ISA (MHA_ISA picks the kernels: avx512 on a
// CPU with AVX512_BF16, avx2, and neon on a CPU with FEAT_BF16 take the dot
// path on their bf16 kernels, the other ISAs the fp32 path),
// against a double-precision reference computed from the same bf16 values.
//
// Error bound, per element:
//   |c - ref| <= (k + 4) * FLT_EPSILON * (|alpha| * sum_p |a_ip||b_pj| + |beta||c_ij|)
// The dot path computes each product exactly (8-bit significands) and rounds
// each of the k sums, then alpha*acc, beta*c and their sum: k + 3 roundings
// of at most u = 2^-24, plus 2 per K block after the first (alpha*acc and
// the sum through C), so fewer than 2(k + 4) for any k; the fp32 path's
// products are exact too, and it has the sgemm bound of k + 4 roundings.
// FLT_EPSILON = 2u covers both with Higham's gamma_{2(k+4)}. BFDOT (neon_bf16)
// rounds to odd, an error below 2u, twice per pair (the pair's sum, then
// the accumulation): 2 * ceil(k/2) roundings of 2u, at most 2(k + 1)u, plus
// the 3 of alpha and beta and 2 per later K block, again below 2(k + 4)u.
// bf16 denormals
// (read as zero, sums flushed) move a result by at most about 2^-126 per
// operation, far below the bound for these operands (|x| >= 2^-20 or 0).
#include <mha/mha.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <mha/gemm.hpp>
#include <mha/isa.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/aligned.hpp"
#include "dispatch/cpu_features.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/gemm_bf16.hpp"
#include "reshape/kernels.hpp"
#include "support/reference.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace {

using mha::detail::Bf16Path;
using mha::test::scaled;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

std::uint16_t bf16(float x) {
  std::uint16_t y;
  mha::detail::fp32_to_bf16(1, &x, &y);
  return y;
}

float fp32(std::uint16_t x) {
  float y;
  mha::detail::bf16_to_fp32(1, &x, &y);
  return y;
}

// Random bf16 in [-1, 1], none of magnitude below 2^-20 but zero.
std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint64_t seed) {
  std::vector<float> x = mha::test::random_vector(n, seed);
  std::vector<std::uint16_t> y(n);
  for (std::size_t i = 0; i < n; ++i) y[i] = bf16(std::fabs(x[i]) < 0x1p-20f ? 0.f : x[i]);
  return y;
}

struct Shape {
  char ta = 'N', tb = 'N';
  std::size_t m = 1, n = 1, k = 1;
  float alpha = 1.f, beta = 0.f;
  std::size_t pad_a = 0, pad_b = 0, pad_c = 0;  // ld = width + pad
  std::size_t offset = 0;                       // elements: 1 misaligns every pointer
};

std::string describe(const Shape& s) {
  return std::string("trans ") + s.ta + s.tb + " m=" + std::to_string(s.m) +
         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " alpha=" + std::to_string(s.alpha) + " beta=" + std::to_string(s.beta) +
         " pads=" + std::to_string(s.pad_a) + "," + std::to_string(s.pad_b) + "," +
         std::to_string(s.pad_c) + " offset=" + std::to_string(s.offset);
}

struct Problem {
  Shape s;
  std::size_t lda, ldb, ldc;
  std::vector<std::uint16_t> a, b;
  std::vector<float> c0;
  std::vector<double> ref, bound;

  Problem(const Shape& shape, std::uint64_t seed) : s(shape) {
    const std::size_t a_rows = s.ta == 'N' ? s.m : s.k, a_cols = s.ta == 'N' ? s.k : s.m;
    const std::size_t b_rows = s.tb == 'N' ? s.k : s.n, b_cols = s.tb == 'N' ? s.n : s.k;
    lda = a_cols + s.pad_a;
    ldb = b_cols + s.pad_b;
    ldc = s.n + s.pad_c;
    a = random_bf16(s.offset + a_rows * lda, seed);
    b = random_bf16(s.offset + b_rows * ldb, seed + 1);
    c0 = mha::test::random_vector(s.offset + s.m * ldc, seed + 2);
    if (s.beta == 0.f) std::fill(c0.begin(), c0.end(), kNaN);  // must never be read
    ref.assign(s.m * s.n, 0.0);
    bound.assign(s.m * s.n, 0.0);
    for (std::size_t i = 0; i < s.m; ++i) {
      for (std::size_t j = 0; j < s.n; ++j) {
        double sum = 0, mag = 0;
        for (std::size_t p = 0; p < s.k; ++p) {
          const double x = fp32(s.ta == 'N' ? A()[i * lda + p] : A()[p * lda + i]);
          const double y = fp32(s.tb == 'N' ? B()[p * ldb + j] : B()[j * ldb + p]);
          sum += x * y;
          mag += std::fabs(x * y);
        }
        double r = s.alpha * sum, bnd = std::fabs(s.alpha) * mag;
        if (s.beta != 0.f) {
          const double c = C0()[i * ldc + j];
          r += s.beta * c;
          bnd += std::fabs(s.beta * c);
        }
        ref[i * s.n + j] = r;
        bound[i * s.n + j] = static_cast<double>(s.k + 4) * FLT_EPSILON * bnd;
      }
    }
  }
  const std::uint16_t* A() const { return a.data() + s.offset; }
  const std::uint16_t* B() const { return b.data() + s.offset; }
  const float* C0() const { return c0.data() + s.offset; }

  // c against the reference; the padding between rows must be untouched.
  bool check(const std::vector<float>& c) const {
    const float* cc = c.data() + s.offset;
    for (std::size_t i = 0; i < s.m; ++i) {
      for (std::size_t j = 0; j < s.n; ++j) {
        const double got = cc[i * ldc + j], want = ref[i * s.n + j];
        if (!(std::fabs(got - want) <= bound[i * s.n + j])) {
          UNSCOPED_INFO("C(" << i << ", " << j << ") = " << got << ", reference " << want
                             << ", bound " << bound[i * s.n + j]);
          return false;
        }
      }
      for (std::size_t j = s.n; j < ldc && i + 1 < s.m; ++j) {
        if (std::memcmp(&C0()[i * ldc + j], &cc[i * ldc + j], sizeof(float)) != 0) {
          UNSCOPED_INFO("padding C(" << i << ", " << j << ") was written");
          return false;
        }
      }
    }
    return true;
  }
};

std::vector<float> run(const Problem& p) {
  std::vector<float> c = p.c0;
  const mha_status st = mha_gemm_bf16(p.s.ta, p.s.tb, p.s.m, p.s.n, p.s.k, p.s.alpha, p.A(), p.lda,
                                      p.B(), p.ldb, p.s.beta, c.data() + p.s.offset, p.ldc);
  INFO(mha_last_error());
  REQUIRE(st == MHA_OK);
  return c;
}

// The internal driver on one kernel table's dot path.
std::vector<float> run_dot(const mha::detail::GemmBf16Kernels& g, const Problem& p) {
  std::vector<float> c = p.c0;
  const mha::detail::GemmKernels& f = mha::detail::gemm_kernels(mha::Isa::scalar);
  mha::detail::gemm_bf16(&g, f, p.s.ta == 'N' ? mha::detail::Trans::N : mha::detail::Trans::T,
                         p.s.tb == 'N' ? mha::detail::Trans::N : mha::detail::Trans::T, p.s.m,
                         p.s.n, p.s.k, p.s.alpha, p.A(), p.lda, p.B(), p.ldb, p.s.beta,
                         c.data() + p.s.offset, p.ldc);
  return c;
}

bool bitwise_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

std::size_t uniform(std::mt19937_64& rng, std::size_t lo, std::size_t hi) {
  return lo + rng() % (hi - lo + 1);
}

Shape random_shape(std::mt19937_64& rng, std::size_t m, std::size_t n, std::size_t k) {
  static constexpr float kAlphas[] = {0.75f, -1.5f, 2.f, 1.f};
  static constexpr float kBetas[] = {0.f, 1.f, -0.5f};
  Shape s;
  s.m = m;
  s.n = n;
  s.k = k;
  s.ta = rng() % 2 ? 'T' : 'N';
  s.tb = rng() % 2 ? 'T' : 'N';
  s.alpha = kAlphas[rng() % 4];
  s.beta = kBetas[rng() % 3];
  s.pad_a = rng() % 3 == 0 ? rng() % 5 : 0;
  s.pad_b = rng() % 3 == 0 ? rng() % 5 : 0;
  s.pad_c = rng() % 3 == 0 ? rng() % 5 : 0;
  s.offset = rng() % 2;
  return s;
}

// Every m, n and k in 1..40 (the other two random), random shapes up to 40,
// and shapes crossing the blocks (MC 336, KC 1024 with an odd k in the last
// block, NC 768, several tile rows and columns, and B in two slabs of
// columns and of rows: kSlabMaxPairs in gemm_bf16.cpp). Those are most of
// the work, 95M products per transpose pair: below MHA_TEST_SCALE 1 each
// takes one of the four pairs, in turn.
constexpr std::size_t kBlockShapes = 6;
std::size_t block_pairs() {
  return mha::test::full_scale() ? 4 : 1;
}
std::vector<Shape> reference_shapes() {
  std::mt19937_64 rng(20261125);
  std::vector<Shape> shapes;
  for (std::size_t v = 1; v <= 40; ++v) {
    shapes.push_back(random_shape(rng, v, uniform(rng, 1, 40), uniform(rng, 1, 40)));
    shapes.push_back(random_shape(rng, uniform(rng, 1, 40), v, uniform(rng, 1, 40)));
    shapes.push_back(random_shape(rng, uniform(rng, 1, 40), uniform(rng, 1, 40), v));
  }
  const std::size_t total = scaled(1500, shapes.size() + 20);
  while (shapes.size() < total) {
    shapes.push_back(
        random_shape(rng, uniform(rng, 1, 40), uniform(rng, 1, 40), uniform(rng, 1, 40)));
  }
  constexpr std::array<std::array<std::size_t, 3>, kBlockShapes> kBlocks = {{{700, 90, 31},
                                                                             {301, 50, 1101},
                                                                             {37, 800, 257},
                                                                             {2, 513, 2049},
                                                                             {97, 129, 600},
                                                                             {3, 2400, 8201}}};
  for (std::size_t b = 0; b < kBlockShapes; ++b) {
    for (std::size_t t = 0; t < block_pairs(); ++t) {
      const std::size_t pair = block_pairs() == 4 ? t : b % 4;
      Shape s = random_shape(rng, kBlocks[b][0], kBlocks[b][1], kBlocks[b][2]);
      s.ta = pair / 2 != 0 ? 'T' : 'N';
      s.tb = pair % 2 != 0 ? 'T' : 'N';
      shapes.push_back(s);
    }
  }
  return shapes;
}

void check_reference(const std::vector<Shape>& shapes) {
  std::size_t failures = 0;
  for (std::size_t i = 0; i < shapes.size() && failures < 5; ++i) {
    const Problem p(shapes[i], 3000 + i);
    if (!p.check(run(p))) {
      ++failures;
      FAIL_CHECK(describe(shapes[i]));
    }
  }
  CHECK(failures == 0);
}

// Forces one bf16 path for the scope (the plan's own choice again after).
struct ForcedBf16Path {
  explicit ForcedBf16Path(Bf16Path p) { mha::detail::set_gemm_bf16_path_override(p); }
  ~ForcedBf16Path() { mha::detail::set_gemm_bf16_path_override(std::nullopt); }
  ForcedBf16Path(const ForcedBf16Path&) = delete;
  ForcedBf16Path& operator=(const ForcedBf16Path&) = delete;
};

// The kernel set of that name, where this build has it and the CPU runs it.
const mha::detail::GemmBf16Kernels* named(const char* name) {
  return mha::detail::gemm_bf16_kernels_named(name);
}

// Forces a kernel set for the scope.
struct ForcedKernels {
  explicit ForcedKernels(const mha::detail::GemmBf16Kernels* g) {
    mha::detail::set_gemm_bf16_kernels_override(g);
  }
  ~ForcedKernels() { mha::detail::set_gemm_bf16_kernels_override(nullptr); }
  ForcedKernels(const ForcedKernels&) = delete;
  ForcedKernels& operator=(const ForcedKernels&) = delete;
};

}  // namespace

TEST_CASE("gemm_bf16 matches the reference on every m, n, k in 1..40 and random shapes",
          "[gemm][bf16]") {
  INFO("kernels: " << mha_kernel_name(MHA_BF16));
  check_reference(reference_shapes());
}

TEST_CASE("every bf16 kernel set this CPU runs matches the reference", "[gemm][bf16]") {
  // It forces each set itself, so it runs under the best ISA alone.
  if (std::string(mha_isa_name()) != mha::isa_name(mha::supported_isas().front())) {
    WARN("skipped: runs under the best ISA");
    return;
  }
  // The first shapes of every size plus the blocks' edges, each reference
  // computed once for every set; the emulated tiles (scalar) skip the
  // largest.
  std::vector<Shape> shapes = reference_shapes();
  const std::size_t keep = scaled(240, 30), blocks = kBlockShapes * block_pairs();
  shapes.erase(shapes.begin() + static_cast<std::ptrdiff_t>(keep),
               shapes.end() - static_cast<std::ptrdiff_t>(blocks));
  const std::vector<const mha::detail::GemmBf16Kernels*> sets =
      mha::detail::gemm_bf16_kernel_sets();
  std::size_t failures = 0;
  for (std::size_t i = 0; i < shapes.size() && failures < 5; ++i) {
    const Problem p(shapes[i], 3000 + i);
    for (const mha::detail::GemmBf16Kernels* g : sets) {
      if (std::string(g->name) == "amx_emulated" && (i >= scaled(60, 30) && i < keep)) continue;
      if (std::string(g->name) == "amx_emulated" && i + blocks - block_pairs() >= shapes.size())
        continue;
      const ForcedKernels forced(g);
      if (!p.check(run(p))) {
        ++failures;
        FAIL_CHECK(g->name << ": " << describe(shapes[i]));
      }
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("gemm_bf16's fp32 path, forced, matches the reference", "[gemm][bf16][paths]") {
  ForcedBf16Path forced(Bf16Path::fp32);
  check_reference(reference_shapes());
}

namespace {

// g against its emulation emu, bit for bit, on the first reference shapes plus
// three K blocks with an odd k (Problem seeds from seed0). `denormals`:
// operands of every scale, with denormals, tiny products and sums cancelling
// to the denormal range, where the flushing shows.
void check_emulation_bits(const mha::detail::GemmBf16Kernels& g,
                          const mha::detail::GemmBf16Kernels& emu, std::uint64_t seed,
                          std::uint64_t seed0, bool denormals) {
  REQUIRE(g.kc == emu.kc);
  std::vector<Shape> shapes = reference_shapes();
  shapes.resize(scaled(300, 120));
  std::mt19937_64 rng(seed);
  shapes.push_back(random_shape(rng, 50, 70, 2051));  // three K blocks, odd k
  std::size_t failures = 0;
  for (std::size_t i = 0; i < shapes.size() && failures < 5; ++i) {
    Problem p(shapes[i], seed0 + i);
    for (auto* x : {&p.a, &p.b}) {
      if (!denormals) break;
      for (std::uint16_t& v : *x) {
        const unsigned r = static_cast<unsigned>(rng() % 8);
        if (r == 0) v = static_cast<std::uint16_t>((v & 0x807fu) | ((rng() % 40) << 7));
        if (r == 1) v &= 0x807fu;  // denormal (or zero)
        if (r == 2) v = static_cast<std::uint16_t>((v & 0x807fu) | ((40 + rng() % 30) << 7));
      }
    }
    if (!bitwise_equal(run_dot(g, p), run_dot(emu, p))) {
      ++failures;
      FAIL_CHECK(describe(shapes[i]));
    }
  }
  CHECK(failures == 0);
}

}  // namespace

TEST_CASE("the avx512_bf16 kernels give the bits of emulated_vdpbf16ps", "[gemm][bf16]") {
  const mha::detail::GemmBf16Kernels* hw = named("avx512_bf16");
  if (hw == nullptr) {
    WARN("skipped: this build or CPU has no AVX512_BF16");
    return;
  }
  check_emulation_bits(*hw, mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps, 5, 7000, true);
}

namespace {

// The first kp pairs of A (row 0, a pair's even element first) and B
// (column 0) through g's ukernel, alpha = 1: the bits of one C element.
std::uint32_t dot_bits(const mha::detail::GemmBf16Kernels& g, const std::vector<std::uint16_t>& a,
                       const std::vector<std::uint16_t>& b) {
  const std::size_t k = a.size(), kp = (k + 1) / 2;
  std::vector<std::uint32_t> ap(mha::detail::packed_a_strip_words(g, kp));
  std::vector<std::uint16_t> bp(mha::detail::packed_b_rows(g, k) * g.nr);
  g.pack_a(false, 1, k, a.data(), k, ap.data());
  g.pack_b(false, k, 1, b.data(), 1, bp.data(), bp.size());
  float c = 0.f;
  g.ukernel(kp, ap.data(), bp.data(), &c, 1, 1, 1, 1.f, 0.f);
  std::uint32_t u;
  std::memcpy(&u, &c, sizeof u);
  return u;
}

// A's and B's first pairs and the bits dot_bits must give.
struct DotCase {
  std::vector<std::uint16_t> a, b;
  std::uint32_t want;
};

// Every case on `emulation` and on each set of `hardware` this build and
// CPU run, each prepared for this thread first.
void check_dot_cases(const mha::detail::GemmBf16Kernels& emulation,
                     std::initializer_list<const char*> hardware,
                     const std::vector<DotCase>& cases) {
  std::vector<const mha::detail::GemmBf16Kernels*> sets = {&emulation};
  for (const char* name : hardware) {
    if (const mha::detail::GemmBf16Kernels* g = named(name)) sets.push_back(g);
  }
  for (const mha::detail::GemmBf16Kernels* g : sets) {
    mha::detail::prepare_thread(*g);
    for (const DotCase& t : cases) {
      INFO(g->name << ": A[0] " << std::hex << t.a[0] << " B[0] " << t.b[0] << " k " << std::dec
                   << t.a.size());
      CHECK(dot_bits(*g, t.a, t.b) == t.want);
    }
  }
}

// Every bit pattern, NaN, infinity and the largest exponents included
// (products and sums overflowing), one tile per k, through gemm_bf16 on g
// and on emu: the same bits. k covers odd pair counts (BFMMLA's half
// group) and K-pairs across groups.
void check_full_range_bits(const mha::detail::GemmBf16Kernels& g,
                           const mha::detail::GemmBf16Kernels& emu) {
  std::mt19937_64 rng(8);
  for (std::size_t k : {1, 2, 3, 5, 6, 8, 33}) {
    const std::size_t m = g.mr, n = g.nr;
    std::vector<std::uint16_t> a(m * k), b(k * n);
    for (auto* x : {&a, &b}) {
      for (std::uint16_t& v : *x) {
        v = static_cast<std::uint16_t>(rng());
        if (rng() % 2 == 0)
          v = static_cast<std::uint16_t>((v & 0x807fu) | (0xf0u + rng() % 16) << 7);
      }
    }
    INFO("k " << k);
    std::vector<float> got(m * n), want(m * n);
    for (auto [t, c] : {std::pair{&g, &got}, std::pair{&emu, &want}}) {
      const mha::detail::GemmKernels& f = mha::detail::gemm_kernels(mha::Isa::scalar);
      mha::detail::gemm_bf16(t, f, mha::detail::Trans::N, mha::detail::Trans::N, m, n, k, 1.f,
                             a.data(), k, b.data(), n, 0.f, c->data(), n);
    }
    CHECK(bitwise_equal(got, want));
  }
}

}  // namespace

TEST_CASE("vdpbf16ps: the odd product first, each sum rounded once, flushed below 2^-126",
          "[gemm][bf16]") {
  // bf16 1 = 3f80, 2^-24 = 3380, 2^-63 = 2000, -2^-75 (1 + 2^-7) = 9a01,
  // 2^-76 = 1980, 2^-140 = 1c80.
  const std::vector<DotCase> cases = {
      // Odd first: 2^-24 + 2^-24 = 2^-23, then + 1 gives 1 + 2^-23 exactly;
      // the even product first would make 1 + 2^-24 tie to 1 twice.
      {{0, 0x3380, 0x3f80, 0x3380}, {0, 0x3f80, 0x3f80, 0x3f80}, 0x3f800001u},
      {{0x1c80}, {0x1c80}, 0u},                  // 2^-140: flushed
      {{0x0001, 0x3f80}, {0x3f80, 0x0040}, 0u},  // denormal inputs read as 0
      // 2^-126 from the first pair, then the second's odd product: the sum
      // 2^-126 - 2^-151 - 2^-158 would round up to 2^-126 but is below it
      // before rounding, so it is flushed (Zen 4's hardware gives 0).
      {{0x2000, 0, 0, 0x9a01}, {0x2000, 0, 0, 0x1980}, 0u},
  };
  check_dot_cases(mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps, {"avx512_bf16"}, cases);
}

TEST_CASE("emulated_bfdot (BFDOT) rounds to odd, flushes denormals, gives the default NaN",
          "[gemm][bf16]") {
  // (A, B, the result's bits): bf16 1 = 3f80, 2^-15 = 3800, 2^-30 = 3080,
  // 2^-70 = 1c80, 2^127 = 7f00, 2 = 4000.
  const std::vector<DotCase> cases = {
      {{0x3f80, 0x3f80}, {0x3f80, 0x3f80}, 0x40000000u},  // exact: 2
      // 1 + 2^-30 (the pair's sum): toward zero, then the last bit set.
      {{0x3f80, 0x3800}, {0x3f80, 0x3800}, 0x3f800001u},
      // The accumulation: 1, then + 2^-30 (vdpbf16ps: 1 exactly).
      {{0x3f80, 0, 0x3800, 0}, {0x3f80, 0, 0x3800, 0}, 0x3f800001u},
      // -1 + 2^-30: toward zero is 1 - 2^-24, odd already.
      {{0xbf80, 0x3800}, {0x3f80, 0x3800}, 0xbf7fffffu},
      // 1 + 2^-60 and -1 + 2^-60, beyond a double's 53 bits.
      {{0x3f80, 0x3080}, {0x3f80, 0x3080}, 0x3f800001u},
      {{0xbf80, 0x3080}, {0x3f80, 0x3080}, 0xbf7fffffu},
      {{0x1c80}, {0x1c80}, 0u},                           // 2^-140: flushed
      {{0x9c80}, {0x1c80}, 0u},                           // -2^-140: to -0, and +0 + -0 is +0
      {{0x0001, 0x3f80}, {0x3f80, 0x0040}, 0u},           // denormal inputs read as 0
      {{0x7f00}, {0x4000}, 0x7f800000u},                  // 2^128: infinity
      {{0xff00, 0x7f00}, {0x4000, 0x4000}, 0x7fc00000u},  // -inf + inf
      {{0x7fa1}, {0x3f80}, 0x7fc00000u},                  // NaN: the default NaN
      {{0xffa1, 0x3f80}, {0x3f80, 0x3f80}, 0x7fc00000u},
      {{0x7f80}, {0}, 0x7fc00000u},  // inf * 0
      // 2^-126, then + -1.5 * 2^-126 in the third (last, odd) pair: -2^-127,
      // flushed to -0, which BFMMLA's padded fourth pair must leave -0.
      {{0x2000, 0, 0, 0, 0xa040, 0}, {0x2000, 0, 0, 0, 0x2000, 0}, 0x80000000u},
  };
  check_dot_cases(mha::detail::gemm_bf16_kernels_emulated_bfdot, {"neon_bf16", "neon_bfmmla"},
                  cases);
}

// BFMMLA is two BFDOT steps per output (emulated_bfmmla), so neon_bfmmla
// is held to emulated_bfdot too, its zero-padded last group included.
TEST_CASE("the neon_bf16 and neon_bfmmla kernels give the bits of emulated_bfdot", "[gemm][bf16]") {
  const mha::detail::GemmBf16Kernels& emu = mha::detail::gemm_bf16_kernels_emulated_bfdot;
  for (const char* name : {"neon_bf16", "neon_bfmmla"}) {
    const mha::detail::GemmBf16Kernels* neon = named(name);
    if (neon == nullptr) {
      WARN("skipped: this build or CPU has no FEAT_BF16 (" << name << ")");
      continue;
    }
    INFO(name);
    check_emulation_bits(*neon, emu, 7, 11000, true);
    check_full_range_bits(*neon, emu);
  }
}

namespace {

// Element j of row r of round_rows' output (ldy elements of a_bytes each),
// as bf16 bits.
std::uint16_t row_elem(const mha::detail::GemmBf16Kernels& g, const std::vector<std::uint32_t>& y,
                       std::size_t ldy, std::size_t r, std::size_t j) {
  const std::size_t at = r * ldy + j;
  if (g.a_bytes == 4) return static_cast<std::uint16_t>(y[at] >> 16);
  return static_cast<std::uint16_t>(y[at / 2] >> (16 * (at % 2)));
}

// The attention core's entry points of a kernel table: ukernel_rows on A
// rows (from round_rows) gives the bits of ukernel on the same A packed
// (beta 0 and 1, every m <= mr, n <= nr, odd and even k), as does the one-row
// path over up to four strips (bf16_row, ukernel_row1 where the table has
// it); round_rows rounds as the emulation (nearest even, denormals to signed
// zero, NaN quiet) or, for tables with IEEE denormals, as fp32_to_bf16, and
// completes an odd row with a zero.
void check_core_entries(const mha::detail::GemmBf16Kernels& g, std::uint64_t seed) {
  const mha::detail::GemmBf16Kernels& emu = mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps;
  const std::size_t w = g.pair_words();
  std::mt19937_64 rng(seed);
  for (std::size_t k : {1, 2, 7, 64, 131}) {
    const std::size_t kp = (k + 1) / 2, lda = kp + 3;  // pairs per A row
    for (std::size_t m = 1; m <= g.mr; m += (m < 3 ? 1 : 4)) {
      for (std::size_t n = 1; n <= 4 * g.nr + 5; n += (n < 3 ? 1 : 7)) {
        INFO("k " << k << " m " << m << " n " << n);
        const std::vector<std::uint16_t> a16 = random_bf16(m * k, rng());
        const std::vector<std::uint16_t> b16 = random_bf16(k * n, rng());
        std::vector<float> a32(m * k);
        for (std::size_t i = 0; i < a32.size(); ++i) a32[i] = fp32(a16[i]);
        std::vector<std::uint32_t> rows(m * lda * w, 0xffffffffu),
            packed(mha::detail::packed_a_strip_words(g, kp));
        g.round_rows(m, k, a32.data(), k, rows.data(), 2 * lda);
        g.pack_a(false, m, k, a16.data(), k, packed.data());
        const std::size_t strips = (n + g.nr - 1) / g.nr,
                          strip = mha::detail::packed_b_rows(g, k) * g.nr;
        std::vector<std::uint16_t> bp(strips * strip);
        g.pack_b(false, k, n, b16.data(), n, bp.data(), strip);
        for (float beta : {0.f, 1.f}) {
          std::vector<float> c0(m * n, 0.5f), c1(c0), c2(c0), c3(c0);
          for (std::size_t js = 0; js < strips; ++js) {
            const std::size_t cols = std::min(g.nr, n - js * g.nr);
            g.ukernel(kp, packed.data(), bp.data() + js * strip, c0.data() + js * g.nr, n, m, cols,
                      0.75f, beta);
            g.ukernel_rows(kp, rows.data(), lda, bp.data() + js * strip, c1.data() + js * g.nr, n,
                           m, cols, 0.75f, beta);
          }
          CHECK(bitwise_equal(c0, c1));
          if (m == 1) {
            mha::detail::bf16_row(g, true, kp, packed.data(), bp.data(), strip, c2.data(), n, 0.75f,
                                  beta);
            mha::detail::bf16_row(g, false, kp, rows.data(), bp.data(), strip, c3.data(), n, 0.75f,
                                  beta);
            CHECK(bitwise_equal(c0, c2));
            CHECK(bitwise_equal(c0, c3));
          }
        }
      }
    }
  }
  const float specials[] = {0x1p-130f, -0x1p-140f, 0x1.fffffcp-127f, kNaN,
                            INFINITY,  -INFINITY,  0x1.0101p0f,      0x1.0180p0f,
                            -0.f,      3.0e38f,    0x1.ff8p127f,     1.0f};
  for (std::size_t n : {1, 5, 16, 31, 32, 33, 70}) {
    std::vector<float> x = mha::test::random_vector(2 * n, rng());
    for (std::size_t i = 0; i < x.size(); i += 3) x[i] = specials[rng() % std::size(specials)];
    const std::size_t ldy = n + 3;
    std::vector<std::uint32_t> y(2 * ldy * w, 0x77777777u);
    g.round_rows(2, n, x.data(), n, y.data(), ldy);
    INFO("n " << n);
    for (std::size_t r = 0; r < 2; ++r) {
      for (std::size_t j = 0; j < n; ++j) {
        // The emulation's rounding (denormals to zero) for flushing tables.
        std::uint16_t flushed[2];
        emu.round_rows(1, 1, &x[r * n + j], 1, flushed, 2);
        const std::uint16_t want = g.flush ? flushed[0] : bf16(x[r * n + j]);
        CHECK(row_elem(g, y, ldy, r, j) == want);
      }
      if (n % 2 != 0) CHECK(row_elem(g, y, ldy, r, n) == 0);
    }
  }
}

}  // namespace

TEST_CASE("the attention core's bf16 entries: rows of A and rounding", "[gemm][bf16]") {
  SECTION("emulated_vdpbf16ps") {
    check_core_entries(mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps, 91);
  }
  SECTION("emulated_bfdot") {
    check_core_entries(mha::detail::gemm_bf16_kernels_emulated_bfdot, 94);
  }
  SECTION("emulated_tdpbf16ps") {
    check_core_entries(mha::detail::gemm_bf16_kernels_emulated_tdpbf16ps, 96);
  }
  SECTION("every kernel set this CPU runs") {
    // Independent of the ISA the run forces: under the best one alone.
    if (std::string(mha_isa_name()) != mha::isa_name(mha::supported_isas().front())) return;
    for (const mha::detail::GemmBf16Kernels* g : mha::detail::gemm_bf16_kernel_sets()) {
      INFO("kernels: " << g->name);
      mha::detail::prepare_thread(*g);
      check_core_entries(*g, 92);
    }
  }
}

namespace {

// ukernel_runs gives ukernel_rows' bits on the same k groups, wherever they
// lie: kp split into runs (whole k groups but the last), each at its own
// odd element offset, k groups ld elements apart for strips of `lanes`
// lanes (narrowed below nr, or wider), the lanes past n and the gaps
// between runs NaN. Every m <= mr, n <= nr, beta 0 and 1, odd and even k.
void check_runs(const mha::detail::GemmBf16Kernels& g, std::uint64_t seed) {
  const std::size_t w = g.pair_words(), kg = g.k_group, gp = kg / 2;  // pairs per group
  std::mt19937_64 rng(seed);
  for (std::size_t k : {1, 2, 7, 64, 131}) {
    const std::size_t kp = (k + 1) / 2, lda = kp + 3, groups = (kp + gp - 1) / gp;
    for (std::size_t m = 1; m <= g.mr; m += (m < 3 ? 1 : 4)) {
      for (std::size_t n = 1; n <= g.nr; n += (n < 3 ? 1 : 5)) {
        for (std::size_t lanes : {(n + 1) / 2 * 2, g.nr, g.nr + 6}) {
          INFO("k " << k << " m " << m << " n " << n << " lanes " << lanes);
          const std::vector<std::uint16_t> a16 = random_bf16(m * k, rng());
          const std::vector<std::uint16_t> b16 = random_bf16(k * n, rng());
          std::vector<float> a32(m * k);
          for (std::size_t i = 0; i < a32.size(); ++i) a32[i] = fp32(a16[i]);
          std::vector<std::uint32_t> rows(m * lda * w);
          g.round_rows(m, k, a32.data(), k, rows.data(), 2 * lda);
          const std::size_t strip = mha::detail::packed_b_rows(g, k) * g.nr, ld = kg * lanes;
          std::vector<std::uint16_t> bp(strip);
          g.pack_b(false, k, n, b16.data(), n, bp.data(), strip);
          // Runs of 1 to 5 groups, 3 + 2 * (r % 4) elements apart.
          std::vector<std::uint16_t> scattered(groups * (ld + 9) + 2 * g.nr * kg, 0xffffu);
          std::vector<mha::detail::Bf16Run> runs;
          for (std::size_t q = 0, at = 3; q < groups;) {
            const std::size_t r = std::min<std::size_t>(1 + rng() % 5, groups - q);
            for (std::size_t i = 0; i < r; ++i) {
              std::copy_n(bp.data() + (q + i) * g.nr * kg, std::min(n, lanes) * kg,
                          scattered.data() + at + i * ld);
            }
            runs.push_back({scattered.data() + at, std::min(r * gp, kp - q * gp)});
            at += r * ld + 3 + 2 * (runs.size() % 4);
            q += r;
          }
          for (float beta : {0.f, 1.f}) {
            std::vector<float> want(m * n, 0.5f), got(want);
            g.ukernel_rows(kp, rows.data(), lda, bp.data(), want.data(), n, m, n, 0.75f, beta);
            g.ukernel_runs(rows.data(), lda, mha::detail::Bf16Runs{runs.data(), runs.size(), ld},
                           got.data(), n, m, n, 0.75f, beta);
            CHECK(bitwise_equal(want, got));
          }
        }
      }
    }
  }
}

}  // namespace

TEST_CASE("ukernel_runs reads B's k groups in runs with ukernel_rows' bits", "[gemm][bf16]") {
  // Independent of the ISA the run forces: under the best one alone.
  if (std::string(mha_isa_name()) != mha::isa_name(mha::supported_isas().front())) return;
  std::size_t tested = 0;
  for (const mha::detail::GemmBf16Kernels* g : mha::detail::gemm_bf16_kernel_sets()) {
    if (g->ukernel_runs == nullptr) continue;
    INFO("kernels: " << g->name);
    mha::detail::prepare_thread(*g);
    check_runs(*g, 97);
    ++tested;
  }
  if (tested == 0) WARN("skipped: no kernel set here reads B in runs");
}

// bf16_rows over several row blocks and strips (a table's panel_rows where
// it has one: AMX's, which defers each block's epilogue past the next
// block's products and stores whole beta-0 blocks straight to C) gives, per
// block, the bits of ukernel_rows on that block alone; the same for the
// packed panel against ukernel. Elements past the panel stay untouched.
TEST_CASE("bf16 panels give each block's own bits", "[gemm][bf16]") {
  if (std::string(mha_isa_name()) != mha::isa_name(mha::supported_isas().front())) return;
  std::mt19937_64 rng(93);
  for (const mha::detail::GemmBf16Kernels* gp : mha::detail::gemm_bf16_kernel_sets()) {
    const mha::detail::GemmBf16Kernels& g = *gp;
    if (g.k_group != 2) continue;  // the panels' sets pair k by two
    mha::detail::prepare_thread(g);
    const std::size_t w = g.pair_words();
    for (std::size_t k : {2, 7, 64, 131}) {
      const std::size_t kp = (k + 1) / 2, lda = kp + 3;
      for (std::size_t m : {2, 17, 32, 33, 64, 71}) {
        for (std::size_t n : {1, 31, 64, 100}) {
          INFO(g.name << ": k " << k << " m " << m << " n " << n);
          const std::vector<std::uint16_t> a16 = random_bf16(m * k, rng());
          const std::vector<std::uint16_t> b16 = random_bf16(k * n, rng());
          std::vector<float> a32(m * k);
          for (std::size_t i = 0; i < a32.size(); ++i) a32[i] = fp32(a16[i]);
          std::vector<std::uint32_t> rows(m * lda * w, 0xffffffffu);
          g.round_rows(m, k, a32.data(), k, rows.data(), 2 * lda);
          const std::size_t a_strip = mha::detail::packed_a_strip_words(g, kp);
          std::vector<std::uint32_t> packed((m + g.mr - 1) / g.mr * a_strip);
          g.pack_a(false, m, k, a16.data(), k, packed.data());
          const std::size_t strips = (n + g.nr - 1) / g.nr,
                            strip = mha::detail::packed_b_rows(g, k) * g.nr;
          std::vector<std::uint16_t> bp(strips * strip);
          g.pack_b(false, k, n, b16.data(), n, bp.data(), strip);
          const std::size_t ldc = n + 5;
          for (float alpha : {1.f, 0.75f}) {
            for (float beta : {0.f, 1.f}) {
              std::vector<float> want(m * ldc, 0.5f), rows_c(want), packed_c(want);
              for (std::size_t i0 = 0; i0 < m; i0 += g.mr) {
                for (std::size_t js = 0; js < strips; ++js) {
                  g.ukernel_rows(kp, rows.data() + i0 * lda * w, lda, bp.data() + js * strip,
                                 want.data() + i0 * ldc + js * g.nr, ldc, std::min(g.mr, m - i0),
                                 std::min(g.nr, n - js * g.nr), alpha, beta);
                }
              }
              mha::detail::bf16_rows(g, m, kp, rows.data(), lda, bp.data(), strip, rows_c.data(),
                                     ldc, n, alpha, beta);
              CHECK(bitwise_equal(want, rows_c));
              if (g.panel != nullptr) {
                g.panel(kp, packed.data(), bp.data(), strip, packed_c.data(), ldc, m, n, alpha,
                        beta);
                CHECK(bitwise_equal(want, packed_c));
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("every bf16 set's pack_b puts op(B)'s pairs where packed_b_pair_at says",
          "[gemm][bf16]") {
  // Pure data movement, so any 16-bit pattern (NaNs too) must arrive as is;
  // the source starts one element off alignment and strips are strided.
  std::mt19937_64 rng(71);
  const std::uint16_t kUnset = 0xabcd;
  for (const mha::detail::GemmBf16Kernels* gp : mha::detail::gemm_bf16_kernel_sets()) {
    const mha::detail::GemmBf16Kernels& g = *gp;
    for (bool trans : {false, true}) {
      for (std::size_t k : {1, 2, 3, 15, 16, 17, 31, 32, 33, 63, 64, 65, 130}) {
        for (std::size_t n : {1, 5, 15, 16, 17, 31, 32, 33, 48, 63, 65, 70}) {
          for (std::size_t pad : {0, 3}) {
            INFO(g.name << (trans ? " T" : " N") << ": k " << k << " n " << n << " pad " << pad);
            const std::size_t ldb = (trans ? k : n) + pad;
            const std::vector<std::uint16_t> b = random_bf16(1 + (trans ? n : k) * ldb, rng());
            const auto op_b = [&](std::size_t q, std::size_t j) -> std::uint16_t {
              if (q >= k || j >= n) return 0;
              return b[1 + (trans ? j * ldb + q : q * ldb + j)];
            };
            const std::size_t strips = (n + g.nr - 1) / g.nr,
                              stride = mha::detail::packed_b_rows(g, k) * g.nr + 6;
            std::vector<std::uint16_t> want(strips * stride, kUnset), got(want);
            for (std::size_t s = 0; s < strips; ++s) {
              for (std::size_t p = 0; p < mha::detail::packed_b_rows(g, k) / 2; ++p) {
                for (std::size_t j = 0; j < g.nr; ++j) {
                  std::uint16_t* at = want.data() + s * stride +
                                      mha::detail::packed_b_pair_at(g.k_group, g.nr, p, j);
                  at[0] = op_b(2 * p, s * g.nr + j);
                  at[1] = op_b(2 * p + 1, s * g.nr + j);
                }
              }
            }
            g.pack_b(trans, k, n, b.data() + 1, ldb, got.data(), stride);
            CHECK(want == got);
          }
        }
      }
    }
  }
}

TEST_CASE("the widening kernels give emulated_vdpbf16ps's bits on normal operands",
          "[gemm][bf16]") {
  // Same order and single rounding per step as vdpbf16ps; only denormals
  // differ (kept here, flushed there), and these operands (|x| >= 2^-20 or
  // 0, O(1) sums) produce none.
  for (const char* name : {"avx2_widen", "avx512_widen"}) {
    const mha::detail::GemmBf16Kernels* g = named(name);
    if (g == nullptr) {
      WARN("skipped: this build or CPU does not run " << name);
      continue;
    }
    INFO("kernels: " << name);
    check_emulation_bits(*g, mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps, 6, 9000, false);
  }
}

TEST_CASE("tdpbf16ps: two sums per 16 pairs, then even + odd, then C + that", "[gemm][bf16]") {
  const std::uint16_t one = 0x3f80, tiny = 0x3380;  // 1 and 2^-24
  // 17 pairs: the 17th starts a second instruction.
  std::vector<std::uint16_t> a17(34, 0), b17(34, 0);
  a17[0] = b17[0] = one;          // even sum 1
  a17[31] = tiny, b17[31] = one;  // odd, pair 15: 1 + 2^-24 ties to 1
  a17[33] = tiny, b17[33] = one;  // odd, pair 16, the next instruction: again 1
  std::vector<std::uint16_t> a16 = a17, b16 = b17;
  a16[33] = 0, a16[29] = tiny, b16[29] = one;  // both odd products in one instruction
  const std::vector<DotCase> cases = {
      // vdpbf16ps would give 1 (odd first, each step rounded): here the odd
      // sum 2^-23 is formed first, and 1 + 2^-23 is a float.
      {{one, tiny, 0, tiny}, {one, one, 0, one}, 0x3f800001u},
      {a17, b17, 0x3f800000u},
      {a16, b16, 0x3f800001u},
      {{0x1c80}, {0x1c80}, 0u},                  // 2^-140: flushed
      {{0x0001, 0x3f80}, {0x3f80, 0x0040}, 0u},  // denormal inputs read as 0
      {{0x7f00}, {0x4000}, 0x7f800000u},         // 2^128: infinity
      // 2^-126 - 2^-151 - 2^-158 would round up to 2^-126, but is below it
      // before rounding: flushed, as x86's FTZ does (the hardware's bits).
      {{0x2000, 0, 0x9a01, 0}, {0x2000, 0, 0x1980, 0}, 0u},
  };
  check_dot_cases(mha::detail::gemm_bf16_kernels_emulated_tdpbf16ps, {"amx_emulated", "amx_bf16"},
                  cases);
}

TEST_CASE("amx_emulated's software tiles give emulated_tdpbf16ps's bits", "[gemm][bf16]") {
  check_emulation_bits(*named("amx_emulated"), mha::detail::gemm_bf16_kernels_emulated_tdpbf16ps, 7,
                       11000, true);
}

// The test that ties the hardware to the model: on a CPU with AMX, every
// shape, edge and denormal case gives the software tiles' bits.
TEST_CASE("the amx_bf16 kernels give amx_emulated's bits", "[gemm][bf16]") {
  const mha::detail::GemmBf16Kernels* hw = named("amx_bf16");
  if (hw == nullptr) {
    WARN("skipped: this build or CPU has no usable AMX-BF16");
    return;
  }
  check_emulation_bits(*hw, *named("amx_emulated"), 8, 12000, true);
  check_emulation_bits(*hw, mha::detail::gemm_bf16_kernels_emulated_tdpbf16ps, 9, 13000, true);
}

#if defined(__x86_64__) || defined(__i386__)
namespace {

// A bf16 operand for the one-row test: mostly values near 1, else tiny ones
// whose products and sums fall around 2^-126 (where flushing before or after
// rounding differ), denormals and zeros, and rarely (few enough to leave
// most sums finite) an infinity or NaN.
std::uint16_t one_row_operand(std::mt19937_64& rng) {
  const auto with_exponent = [&](unsigned e) {
    return static_cast<std::uint16_t>((rng() & 0x807fu) | (e << 7));
  };
  if (rng() % 512 == 0) return rng() % 2 == 0 ? std::uint16_t{0x7f80} : std::uint16_t{0x7fc1};
  switch (rng() % 16) {
    case 0:
    case 1:
      return with_exponent(static_cast<unsigned>(60 + rng() % 8));  // 2^-67 .. 2^-60
    case 2:
      return with_exponent(static_cast<unsigned>(40 + rng() % 30));  // 2^-87 .. 2^-58
    case 3:
      return static_cast<std::uint16_t>(rng() & 0x807fu);  // denormal or zero
    default:
      return with_exponent(static_cast<unsigned>(120 + rng() % 12));
  }
}

bool same_or_both_nan(const std::vector<float>& x, const std::vector<float>& y) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) && std::isnan(y[i])) continue;
    if (std::memcmp(&x[i], &y[i], sizeof x[i]) != 0) return false;
  }
  return true;
}

}  // namespace

// amx_bf16's one-row path runs the tiles' arithmetic in zmm, under its own
// MXCSR: every element equals emulated_tdpbf16ps's, per 16 pairs from the
// first, then alpha and beta under the caller's MXCSR (flush-to-zero off
// and on), through panel_rows and bf16_row (ukernel_row1), for partial
// groups and strips, columns across the path's 256-column passes, and
// operands that make sums round up to 2^-126 from below. NaNs are compared
// as NaN (their payload is unspecified).
TEST_CASE("amx_bf16's one-row path gives emulated_tdpbf16ps's bits", "[gemm][bf16]") {
  const mha::detail::GemmBf16Kernels* g = mha::detail::amx_bf16_one_row_for_tests();
  if (g == nullptr) {
    WARN("skipped: this build has no amx_bf16 or the CPU no AVX-512");
    return;
  }
  constexpr std::size_t nr = 32;
  const unsigned saved = _mm_getcsr();
  {
    // Two results of 0 that other flushing rules miss, caller without FTZ:
    // column 0, 2^-126 - 2^-151 - 2^-158, below 2^-126 before rounding
    // (it rounds up to it); column 1, 1.25 * 2^-126 from the first group
    // and -2^-126 from the second, a denormal C flushed.
    const std::size_t kp = 17, b_strip = kp * nr * 2;
    std::vector<std::uint16_t> b(b_strip, 0);
    std::vector<std::uint32_t> a(kp, 0);
    a[0] = 0x2000, a[1] = 0x9a01, a[16] = 0xa000;  // 2^-63, -2^-75 * (1 + 2^-7), -2^-63
    b[0] = 0x2000, b[nr * 2] = 0x1980;             // column 0: 2^-63, 2^-76
    b[2] = 0x2020, b[16 * nr * 2 + 2] = 0x2000;    // column 1: 1.25 * 2^-63, 2^-63
    _mm_setcsr(saved & ~0x8040u);
    std::vector<float> got(2, 1.f);
    g->panel_rows(kp, a.data(), kp, b.data(), b_strip, got.data(), 2, 1, 2, 1.f, 0.f, nullptr);
    _mm_setcsr(saved);
    CHECK(got == std::vector<float>{0.f, 0.f});
  }
  std::mt19937_64 rng(97);
  for (std::size_t kp : {1, 7, 16, 17, 40, 64}) {
    for (std::size_t n : {1, 17, 32, 70, 129, 300}) {
      const std::size_t strips = (n + nr - 1) / nr, b_strip = kp * nr * 2 + 64;
      std::vector<std::uint16_t> b(strips * b_strip);
      for (std::uint16_t& x : b) x = one_row_operand(rng);
      std::vector<std::uint32_t> a(kp);
      for (std::uint32_t& w : a) {
        w = one_row_operand(rng) | static_cast<std::uint32_t>(one_row_operand(rng)) << 16;
      }
      for (unsigned ftz : {0u, 0x8000u}) {
        for (auto [alpha, beta] : {std::pair{1.f, 0.f}, {0.75f, 1.f}, {0x1p-10f, -0.5f}}) {
          INFO("kp " << kp << " n " << n << " ftz " << ftz << " alpha " << alpha << " beta "
                     << beta);
          std::vector<float> want(n);
          for (float& x : want) x = beta == 0.f ? kNaN : std::ldexp(1.f, -120 - int(rng() % 8));
          std::vector<float> got(want), row1(want);
          const unsigned csr = (saved & ~0x8040u) | ftz;
          _mm_setcsr(csr);
          for (std::size_t j = 0; j < n; ++j) {
            const std::uint16_t* col = b.data() + j / nr * b_strip + j % nr * 2;
            float acc = 0.f;
            for (std::size_t p0 = 0; p0 < kp; p0 += 16) {
              acc = mha::detail::emulated_tdpbf16ps(acc, std::min<std::size_t>(16, kp - p0),
                                                    a.data() + p0, 1, col + p0 * nr * 2, nr);
            }
            const float r = alpha * acc;
            want[j] = beta == 0.f ? r : r + beta * want[j];
          }
          g->panel_rows(kp, a.data(), kp, b.data(), b_strip, got.data(), n, 1, n, alpha, beta,
                        nullptr);
          CHECK((_mm_getcsr() & 0xffc0u) == (csr & 0xffc0u));  // control bits as they were
          CHECK(same_or_both_nan(want, got));
          mha::detail::bf16_row(*g, false, kp, a.data(), b.data(), b_strip, row1.data(), n, alpha,
                                beta);
          CHECK(same_or_both_nan(want, row1));
          _mm_setcsr(saved);
        }
      }
    }
  }
}
#endif

namespace {

using mha::detail::GemmBf16Kernels;

const GemmBf16Kernels& emulated() {
  return mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps;
}

// A kernel set with per-thread state (GemmBf16Kernels::thread_setup): the
// emulation's kernels, each counting a call on a thread whose setup has not
// run since the current generation began (each driver call under test
// begins one, so state left by an earlier call does not count).
std::atomic<unsigned> setup_generation{1};
std::atomic<unsigned> setup_calls{0};
std::atomic<unsigned> unprepared_calls{0};
thread_local unsigned prepared_generation = 0;

void record_setup() {
  prepared_generation = setup_generation.load();
  ++setup_calls;
}

void check_prepared() {
  if (prepared_generation != setup_generation.load()) ++unprepared_calls;
}

const GemmBf16Kernels& stateful_kernels() {
  static const GemmBf16Kernels g = [] {
    GemmBf16Kernels k = emulated();
    k.name = "test_stateful";
    k.ukernel = [](std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, float* c,
                   std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
      check_prepared();
      emulated().ukernel(kp, a, b, c, ldc, m, n, alpha, beta);
    };
    k.ukernel_rows = [](std::size_t kp, const std::uint32_t* a, std::size_t lda,
                        const std::uint16_t* b, float* c, std::size_t ldc, std::size_t m,
                        std::size_t n, float alpha, float beta) {
      check_prepared();
      emulated().ukernel_rows(kp, a, lda, b, c, ldc, m, n, alpha, beta);
    };
    k.pack_a = [](bool trans, std::size_t m, std::size_t kk, const std::uint16_t* a,
                  std::size_t lda, std::uint32_t* dst) {
      check_prepared();
      emulated().pack_a(trans, m, kk, a, lda, dst);
    };
    k.pack_b = [](bool trans, std::size_t kk, std::size_t n, const std::uint16_t* b,
                  std::size_t ldb, std::uint16_t* dst, std::size_t strip_stride) {
      check_prepared();
      emulated().pack_b(trans, kk, n, b, ldb, dst, strip_stride);
    };
    k.thread_setup = &record_setup;
    return k;
  }();
  return g;
}

// emulated_vdpbf16ps with packed A in the row-major layout (a_row_pairs):
// rows padded by 2 to 4 pairs more than kp, so strips and rows move if a
// driver assumes [kp][mr]. The kernel is ukernel_rows, as the contract says.
std::size_t padded_row_pairs(std::size_t kp) {
  return (kp + 5) / 4 * 4;
}

const GemmBf16Kernels& row_major_a_kernels() {
  static const GemmBf16Kernels g = [] {
    GemmBf16Kernels k = emulated();
    k.name = "test_row_major_a";
    k.a_row_pairs = &padded_row_pairs;
    k.ukernel = [](std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, float* c,
                   std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
      emulated().ukernel_rows(kp, a, padded_row_pairs(kp), b, c, ldc, m, n, alpha, beta);
    };
    k.pack_a = [](bool trans, std::size_t m, std::size_t kk, const std::uint16_t* a,
                  std::size_t lda, std::uint32_t* dst) {
      const std::size_t mr = emulated().mr, kp = (kk + 1) / 2, rp = padded_row_pairs(kp);
      for (std::size_t r0 = 0; r0 < m; r0 += mr) {
        std::uint32_t* d = dst + r0 / mr * mr * rp;
        for (std::size_t i = 0; i < mr; ++i) {
          for (std::size_t p = 0; p < rp; ++p) {
            std::uint32_t lo = 0, hi = 0;
            const std::size_t r = r0 + i, q = 2 * p;
            if (r < m && p < kp) {
              lo = trans ? a[q * lda + r] : a[r * lda + q];
              if (q + 1 < kk) hi = trans ? a[(q + 1) * lda + r] : a[r * lda + q + 1];
            }
            d[i * rp + p] = lo | hi << 16;
          }
        }
      }
    };
    return k;
  }();
  return g;
}

// C of the packed-B product (pack_bf16_b, then gemm_bf16_packed with A in
// bf16) on g.
std::vector<float> run_packed(const GemmBf16Kernels& g, const Problem& p) {
  using mha::detail::Trans;
  const mha::detail::GemmKernels& f = mha::detail::gemm_kernels(mha::Isa::scalar);
  const Trans tb = p.s.tb == 'N' ? Trans::N : Trans::T;
  const mha::detail::AlignedFloats buf = mha::detail::alloc_floats(
      mha::detail::ceil_div(mha::detail::packed_bf16_b_bytes(&g, f, p.s.k, p.s.n), sizeof(float)));
  ++setup_generation;
  const mha::detail::PackedBf16B b =
      mha::detail::pack_bf16_b(&g, f, tb, p.s.k, p.s.n, p.B(), p.ldb, buf.get());
  std::vector<float> c = p.c0;
  ++setup_generation;
  mha::detail::gemm_bf16_packed(p.s.ta == 'N' ? Trans::N : Trans::T, p.s.m, p.s.alpha, p.A(),
                                nullptr, p.lda, b, p.s.beta, c.data() + p.s.offset, p.ldc);
  return c;
}

}  // namespace

TEST_CASE("the bf16 drivers run a kernel set's thread_setup before its kernels on every thread",
          "[gemm][bf16][threads]") {
  const GemmBf16Kernels& g = stateful_kernels();
  std::mt19937_64 rng(41);
  const bool threads = mha::test::threads_allowed();
  if (!threads) WARN("1 thread only: this run must not start threads (qemu-user)");
  const unsigned calls0 = setup_calls.load();
  for (std::size_t t : {1, 2, 3}) {
    if (t > 1 && !threads) break;
    mha::set_num_threads(t);
    for (const auto& [m, n, k] :
         std::vector<std::array<std::size_t, 3>>{{150, 200, 130}, {1, 70, 33}, {350, 40, 70}}) {
      const Shape s = random_shape(rng, m, n, k);
      const Problem p(s, m + n + k + t);
      INFO(describe(s) << ", threads " << t);
      const std::vector<float> want = run_dot(emulated(), p);
      ++setup_generation;
      CHECK(bitwise_equal(run_dot(g, p), want));
      CHECK(unprepared_calls.load() == 0);
      CHECK(bitwise_equal(run_packed(g, p), run_packed(emulated(), p)));
      CHECK(unprepared_calls.load() == 0);
    }
  }
  mha::set_num_threads(0);
  CHECK(setup_calls.load() > calls0);
}

TEST_CASE("the bf16 drivers honour a kernel set's packed-A layout (row-major strips)",
          "[gemm][bf16]") {
  const GemmBf16Kernels& g = row_major_a_kernels();
  std::vector<Shape> shapes = reference_shapes();
  shapes.resize(scaled(200, 80));
  std::mt19937_64 rng(43);
  shapes.push_back(random_shape(rng, 350, 40, 2051));  // MC and K blocks, odd k
  shapes.push_back(random_shape(rng, 1, 100, 2051));   // one row, packed
  std::size_t failures = 0;
  for (std::size_t i = 0; i < shapes.size() && failures < 5; ++i) {
    const Problem p(shapes[i], 12000 + i);
    if (!bitwise_equal(run_dot(g, p), run_dot(emulated(), p)) ||
        !bitwise_equal(run_packed(g, p), run_packed(emulated(), p))) {
      ++failures;
      FAIL_CHECK(describe(shapes[i]));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("the bf16 thread plan counts a kernel set's flops at its flop_time",
          "[gemm][bf16][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  mha_set_num_threads(2);
  if (mha_get_num_threads() < 2) {
    WARN("skipped: one thread here");
    mha_set_num_threads(0);
    return;
  }
  GemmBf16Kernels fast = emulated();
  fast.flop_time = 0.25;
  // 32 x 768 x 256: 12.6M flops, 6 threads' worth at fp32's time, 1.6 at a
  // quarter of it (B's 786 KiB allow 1.5); 4x the rows take two again.
  CHECK(mha::detail::plan_gemm_bf16(&emulated(), 32, 768, 256).threads == 2);
  CHECK(mha::detail::plan_gemm_bf16(nullptr, 32, 768, 256).threads == 2);
  CHECK(mha::detail::plan_gemm_bf16(&fast, 32, 768, 256).threads == 1);
  CHECK(mha::detail::plan_gemm_bf16(&fast, 128, 768, 256).threads == 2);
  mha_set_num_threads(0);
}

TEST_CASE("gemm_bf16 is bit-identical at 1, 2 and 3 threads", "[gemm][bf16][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  std::mt19937_64 rng(81);
  for (Bf16Path path : {Bf16Path::dot, Bf16Path::fp32}) {
    ForcedBf16Path forced(path);
    for (const auto& [m, n, k] : std::vector<std::array<std::size_t, 3>>{
             {300, 500, 200}, {1000, 33, 301}, {129, 129, 129}, {700, 900, 1100}, {45, 1001, 33}}) {
      const Shape s = random_shape(rng, m, n, k);
      const Problem p(s, m + n + k);
      INFO(describe(s) << ", path " << mha::detail::gemm_bf16_path_name(path));
      std::vector<std::vector<float>> c;
      for (std::size_t t : {1, 2, 3}) {
        mha::set_num_threads(t);
        c.push_back(run(p));
      }
      mha::set_num_threads(0);
      CHECK(p.check(c[0]));
      CHECK(bitwise_equal(c[0], c[1]));
      CHECK(bitwise_equal(c[0], c[2]));
    }
  }
}

TEST_CASE("a packed bf16 B gives the bits of gemm_bf16, with A in bf16 or fp32", "[gemm][bf16]") {
  std::vector<Shape> shapes = reference_shapes();
  shapes.resize(std::min(shapes.size(), scaled(400, 150)));
  std::mt19937_64 rng(17);
  shapes.push_back(random_shape(rng, 301, 50, 1101));
  shapes.push_back(random_shape(rng, 37, 800, 2049));
  const bool dot = mha::detail::gemm_bf16_kernels(mha::detail::active_isa()) != nullptr;
  std::size_t failures = 0;
  for (std::size_t i = 0; i < shapes.size() && failures < 5; ++i) {
    Shape s = shapes[i];
    // m == 1 on the fp32 path: gemm_bf16 takes sgemm's GEMV, which rounds
    // differently (mha.h).
    if (!dot && s.m == 1) s.m = 2;
    const Problem p(s, 9000 + i);
    const std::vector<float> want = run(p);
    const mha::PackedBf16B packed(s.tb, s.k, s.n, p.B(), p.ldb);
    CHECK(packed.k() == s.k);
    CHECK(packed.n() == s.n);
    std::vector<float> c16 = p.c0, c32 = p.c0;
    mha::gemm_bf16(s.ta, s.m, s.alpha, p.A(), p.lda, packed, s.beta, c16.data() + s.offset, p.ldc);
    // fp32 values just below each bf16 in magnitude, which round to it
    // (truncation would not).
    std::vector<float> a32(p.a.size());
    for (std::size_t j = 0; j < a32.size(); ++j) a32[j] = fp32(p.a[j]) * (1.f - 0x1p-12f);
    mha::gemm_bf16(s.ta, s.m, s.alpha, a32.data() + s.offset, p.lda, packed, s.beta,
                   c32.data() + s.offset, p.ldc);
    if (!bitwise_equal(c16, want) || !bitwise_equal(c32, want)) {
      ++failures;
      FAIL_CHECK(describe(s));
    }
  }
  CHECK(failures == 0);

  if (!mha::test::threads_allowed()) {
    WARN("thread counts skipped: this run must not start threads (qemu-user)");
    return;
  }
  // (Below MHA_TEST_SCALE 1 a fifth of the products, still blocks for 3.)
  const Problem p(mha::test::full_scale() ? random_shape(rng, 700, 900, 1100)
                                          : random_shape(rng, 300, 400, 500),
                  99);
  const mha::PackedBf16B packed(p.s.tb, p.s.k, p.s.n, p.B(), p.ldb);
  std::vector<std::vector<float>> c;
  for (std::size_t t : {1, 2, 3}) {
    mha::set_num_threads(t);
    c.push_back(p.c0);
    mha::gemm_bf16(p.s.ta, p.s.m, p.s.alpha, p.A(), p.lda, packed, p.s.beta,
                   c.back().data() + p.s.offset, p.ldc);
  }
  mha::set_num_threads(0);
  CHECK(p.check(c[0]));
  CHECK(bitwise_equal(c[0], c[1]));
  CHECK(bitwise_equal(c[0], c[2]));
}

// The bf16 projections' epilogue (bias, then bf16 rounding from a column
// on) run by gemm_bf16_packed on each block of C, in the AMX panels' finish
// or per thread block: the bits of the plain product followed by
// apply_epilogue_rows, for every kernel set and the fp32 path, A in fp32
// (the panels' rows) and in bf16, one and two K blocks, blocks with and
// without a finish (alpha 1 and beta 0, or not), at 1, 2 and 3 threads.
// MHA_TEST_SCALE < 1 (qemu, sanitizers) keeps the first 4 shapes and the
// first 4 variants, which still take every value.
TEST_CASE("gemm_bf16_packed's epilogue gives the bits of the product, then the epilogue",
          "[gemm][bf16]") {
  using mha::detail::Trans;
  struct Variant {
    int round_from;  // 0: column 0, 1: the middle, 2: none
    bool bias;
    float alpha, beta;
  };
  const Variant variants[] = {{0, true, 1.f, 0.f},   {1, true, 0.5f, 1.f},  {2, false, 1.f, 0.f},
                              {1, false, 0.5f, 1.f}, {0, false, 0.5f, 1.f}, {2, true, 0.5f, 1.f},
                              {1, true, 1.f, 0.f},   {0, true, 0.5f, 1.f},  {2, false, 0.5f, 1.f},
                              {1, false, 1.f, 0.f},  {0, false, 1.f, 0.f},  {2, true, 1.f, 0.f}};
  const std::vector<std::array<std::size_t, 3>> shapes = {
      {1, 40, 64}, {5, 17, 7}, {33, 100, 64}, {33, 40, 1030}, {70, 130, 1100}, {100, 64, 96}};
  const std::size_t num_shapes = scaled(shapes.size(), 4), num_variants = scaled(12, 4);
  const mha::detail::GemmKernels& f = mha::detail::gemm_kernels(mha::detail::active_isa());
  const auto fn = mha::detail::reshape_kernels(mha::detail::active_isa()).bias_round_rows;
  std::vector<const GemmBf16Kernels*> sets = mha::detail::gemm_bf16_kernel_sets();
  sets.push_back(nullptr);  // the fp32 path
  const bool threads = mha::test::threads_allowed();
  for (const GemmBf16Kernels* g : sets) {
    for (std::size_t si = 0; si < num_shapes; ++si) {
      const auto [m, n, k] = shapes[si];
      const std::size_t lda = k + 3, ldc = n + 5;
      auto a32 = mha::test::random_vector(m * lda, m + 7 * n + k, -2.f, 2.f);
      std::vector<std::uint16_t> a16(a32.size()), b16(n * k);
      mha::detail::fp32_to_bf16(a32.size(), a32.data(), a16.data());
      const auto bf = mha::test::random_vector(n * k, 3 * m + n + k, -2.f, 2.f);
      mha::detail::fp32_to_bf16(bf.size(), bf.data(), b16.data());
      const auto bias = mha::test::random_vector(n, 5 * n + k, -1.f, 1.f);
      const auto c0 = mha::test::random_vector(m * ldc, 11 * m + n, -1.f, 1.f);
      const mha::detail::AlignedFloats buf = mha::detail::alloc_floats(
          mha::detail::ceil_div(mha::detail::packed_bf16_b_bytes(g, f, k, n), sizeof(float)));
      const mha::detail::PackedBf16B b =
          mha::detail::pack_bf16_b(g, f, Trans::T, k, n, b16.data(), k, buf.get());
      for (std::size_t vi = 0; vi < num_variants; ++vi) {
        const Variant& v = variants[vi];
        const std::size_t round_from = v.round_from == 0 ? 0 : v.round_from == 1 ? n / 2 + 1 : n;
        const mha::detail::Bf16Epilogue ep{fn, v.bias ? bias.data() : nullptr, round_from};
        for (const bool fp32_a : {true, false}) {
          INFO((g != nullptr ? g->name : "fp32 path")
               << " m " << m << " n " << n << " k " << k << " round_from " << round_from << " bias "
               << v.bias << " alpha " << v.alpha << " fp32 A " << fp32_a);
          const std::uint16_t* a_16 = fp32_a ? nullptr : a16.data();
          const float* a_32 = fp32_a ? a32.data() : nullptr;
          std::vector<float> want = c0;
          mha::detail::gemm_bf16_packed(Trans::N, m, v.alpha, a_16, a_32, lda, b, v.beta,
                                        want.data(), ldc);
          mha::detail::apply_epilogue_rows(ep, want.data(), ldc, m, n);
          for (std::size_t t = 1; t <= (threads ? 3 : 1); ++t) {
            mha::set_num_threads(t);
            std::vector<float> got = c0;
            mha::detail::gemm_bf16_packed(Trans::N, m, v.alpha, a_16, a_32, lda, b, v.beta,
                                          got.data(), ldc, &ep);
            CHECK(bitwise_equal(got, want));
          }
          mha::set_num_threads(0);
        }
      }
    }
  }
}

TEST_CASE("gemm_bf16: zero sizes, k == 0 and alpha == 0 follow BLAS", "[gemm][bf16]") {
  const std::vector<std::uint16_t> nan_ab(16, 0x7fc0);  // NaN: must not be read
  std::vector<float> c(16, 2.f);
  CHECK(mha_gemm_bf16('N', 'N', 0, 4, 4, 1.f, nullptr, 4, nan_ab.data(), 4, 0.f, nullptr, 4) ==
        MHA_OK);
  CHECK(mha_gemm_bf16('N', 'N', 4, 4, 0, 1.f, nullptr, 1, nullptr, 4, 0.5f, c.data(), 4) == MHA_OK);
  CHECK(c == std::vector<float>(16, 1.f));
  CHECK(mha_gemm_bf16('N', 'T', 4, 4, 4, 0.f, nan_ab.data(), 4, nan_ab.data(), 4, 3.f, c.data(),
                      4) == MHA_OK);
  CHECK(c == std::vector<float>(16, 3.f));
  std::fill(c.begin(), c.end(), kNaN);
  CHECK(mha_gemm_bf16('T', 'N', 4, 4, 0, 1.f, nullptr, 4, nullptr, 4, 0.f, c.data(), 4) == MHA_OK);
  CHECK(c == std::vector<float>(16, 0.f));
}

TEST_CASE("gemm_bf16: bad arguments are rejected with a message naming them", "[gemm][bf16]") {
  std::vector<std::uint16_t> a(64, 0x3f80), b(64, 0x3f80);
  std::vector<float> c(64, 0.f);
  auto rejects = [](mha_status st, const char* needle) {
    INFO(mha_last_error());
    CHECK(st == MHA_INVALID_ARGUMENT);
    CHECK(std::string(mha_last_error()).find(needle) != std::string::npos);
  };
  rejects(mha_gemm_bf16('X', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4),
          "transa");
  rejects(mha_gemm_bf16('N', 'C', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4),
          "transb");
  rejects(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, a.data(), 3, b.data(), 4, 0.f, c.data(), 4), "lda");
  rejects(mha_gemm_bf16('T', 'N', 5, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 5), "lda");
  rejects(mha_gemm_bf16('N', 'T', 4, 5, 4, 1.f, a.data(), 4, b.data(), 3, 0.f, c.data(), 5), "ldb");
  rejects(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 3), "ldc");
  rejects(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, nullptr, 4, b.data(), 4, 0.f, c.data(), 4),
          "a is NULL");
  rejects(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, a.data(), 4, nullptr, 4, 0.f, c.data(), 4),
          "b is NULL");
  rejects(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, nullptr, 4),
          "c is NULL");
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  rejects(mha_gemm_bf16('N', 'N', huge, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4),
          "overflows");
  mha_gemm_bf16_packed_b* packed = nullptr;
  rejects(mha_gemm_bf16_pack_b('N', 0, 4, b.data(), 4, &packed), "k = 0");
  rejects(mha_gemm_bf16_pack_b('N', 4, 4, b.data(), 4, nullptr), "out");
  rejects(mha_gemm_bf16_pack_b('Q', 4, 4, b.data(), 4, &packed), "transb");
  rejects(mha_gemm_bf16_pack_b('N', 4, 4, b.data(), 3, &packed), "ldb");
  rejects(mha_gemm_bf16_pack_b('N', huge, huge, b.data(), huge, &packed), "overflows");
  CHECK(packed == nullptr);
  rejects(mha_gemm_bf16_packed('N', 4, 1.f, MHA_BF16, a.data(), 4, nullptr, 0.f, c.data(), 4),
          "b:");
  REQUIRE(mha_gemm_bf16_pack_b('N', 4, 4, b.data(), 4, &packed) == MHA_OK);
  CHECK(mha_gemm_bf16_packed_b_k(packed) == 4);
  CHECK(mha_gemm_bf16_packed_b_n(packed) == 4);
  rejects(mha_gemm_bf16_packed('N', 4, 1.f, static_cast<mha_dtype>(9), a.data(), 4, packed, 0.f,
                               c.data(), 4),
          "a_type");
  rejects(mha_gemm_bf16_packed('N', 4, 1.f, MHA_FP32, a.data(), 2, packed, 0.f, c.data(), 4),
          "lda");
  rejects(mha_gemm_bf16_packed('N', 4, 1.f, MHA_BF16, nullptr, 4, packed, 0.f, c.data(), 4),
          "a is NULL");
  CHECK(mha_gemm_bf16_packed('N', 4, 1.f, MHA_BF16, a.data(), 4, packed, 0.f, c.data(), 4) ==
        MHA_OK);
  CHECK(c[0] == 4.f);
  mha_gemm_bf16_packed_b_destroy(packed);
  rejects(mha_fp32_to_bf16(4, nullptr, a.data()), "x is NULL");
  rejects(mha_bf16_to_fp32(4, a.data(), nullptr), "y is NULL");
  // Outputs overlapping inputs (mha.h): C over A or B, a converted array over
  // its source; the bytes each operand spans count, bf16 being 2 bytes.
  {
    std::vector<float> buf(64, 0.f);
    auto* as_bf16 = reinterpret_cast<std::uint16_t*>(buf.data());
    const std::vector<float> before = buf;
    rejects(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, as_bf16 + 8, 4, b.data(), 4, 0.f, buf.data(), 4),
            "overlaps a");
    rejects(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, a.data(), 4, as_bf16 + 30, 4, 0.f, buf.data(), 4),
            "overlaps b");
    // B spans bytes [64, 96): C from byte 96 on is disjoint.
    CHECK(mha_gemm_bf16('N', 'N', 4, 4, 4, 1.f, a.data(), 4, as_bf16 + 32, 4, 0.f, buf.data() + 24,
                        4) == MHA_OK);
    REQUIRE(mha_gemm_bf16_pack_b('N', 4, 4, b.data(), 4, &packed) == MHA_OK);
    buf = before;
    rejects(
        mha_gemm_bf16_packed('N', 4, 1.f, MHA_FP32, buf.data() + 8, 4, packed, 0.f, buf.data(), 4),
        "overlaps a");
    mha_gemm_bf16_packed_b_destroy(packed);
    rejects(mha_fp32_to_bf16(8, buf.data(), as_bf16 + 2), "overlaps x");
    rejects(mha_bf16_to_fp32(8, as_bf16, buf.data() + 1), "overlaps x");
    CHECK(buf == before);
  }
  try {
    mha::gemm_bf16('N', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 2);
    FAIL("no exception");
  } catch (const mha::Error& e) {
    CHECK(e.status() == MHA_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("ldc") != std::string::npos);
  }
}

TEST_CASE("fp32 <-> bf16 conversions round to nearest even", "[gemm][bf16]") {
  const float inf = std::numeric_limits<float>::infinity();
  // (fp32 bits, bf16 bits): exact, ties to even both ways, above a tie,
  // the sign, a denormal, overflow to infinity, infinity, NaN made quiet.
  const std::vector<std::pair<std::uint32_t, std::uint16_t>> cases = {
      {0x3f800000u, 0x3f80},  // 1
      {0x3f808000u, 0x3f80},  // 1 + 2^-8: a tie, to the even 1
      {0x3f818000u, 0x3f82},  // a tie above an odd bf16: up
      {0x3f808001u, 0x3f81},  // just above a tie: up
      {0x3f807fffu, 0x3f80},  // just below: down
      {0xbf818000u, 0xbf82},  // negative
      {0x00018000u, 0x0002},  // a denormal, kept
      {0x7f7fffffu, 0x7f80},  // FLT_MAX rounds to infinity
      {0x7f800000u, 0x7f80},  // infinity
      {0x7f800001u, 0x7fc0},  // a signalling NaN, made quiet
      {0xffc00000u, 0xffc0},  // a quiet NaN
  };
  for (const auto& [in, want] : cases) {
    float x;
    std::memcpy(&x, &in, sizeof x);
    std::uint16_t y = 0;
    REQUIRE(mha_fp32_to_bf16(1, &x, &y) == MHA_OK);
    INFO("fp32 bits " << std::hex << in);
    CHECK(y == want);
  }
  const std::vector<std::uint16_t> h = {0x3f80, 0xc049, 0x0001, 0xff80};
  std::vector<float> back(h.size());
  REQUIRE(mha_bf16_to_fp32(h.size(), h.data(), back.data()) == MHA_OK);
  CHECK(back == std::vector<float>{1.f, -3.140625f, 0x1p-133f, -inf});
  CHECK(mha_fp32_to_bf16(0, nullptr, nullptr) == MHA_OK);
}

TEST_CASE("mha_kernel_name names the kernels that serve each dtype", "[gemm][bf16]") {
  const std::string isa = mha_isa_name();
  CHECK(mha_kernel_name(MHA_FP32) == isa);
  const mha::detail::CpuFeatures& cpu = mha::detail::cpu_features();
  const char* env = std::getenv("MHA_BF16_KERNEL");
  // By CPU: AMX where the OS grants it, vdpbf16ps on AMD, widening on Intel.
  const std::string by_cpu = isa == "avx512" && cpu.amx_bf16                    ? "amx_bf16"
                             : isa == "avx512" && cpu.avx512_bf16 && !cpu.intel ? "avx512_bf16"
                             : isa == "avx512"                                  ? "avx512_widen"
                             : isa == "avx2"                                    ? "avx2_widen"
                             : isa == "neon" && cpu.neon_bf16                   ? "neon_bfmmla"
                                                                                : isa;
  const std::string want = env != nullptr && *env != '\0' ? env : by_cpu;
  CHECK(mha_kernel_name(MHA_BF16) == want);
  CHECK((mha::detail::gemm_bf16_kernels(mha::detail::active_isa()) != nullptr) == (want != isa));
  CHECK(std::string(mha::kernel_name(MHA_BF16)) == mha_kernel_name(MHA_BF16));
  CHECK(std::string(mha_kernel_name(static_cast<mha_dtype>(7))) == "invalid");
}
