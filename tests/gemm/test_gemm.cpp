// SGEMM tests, run once per ISA (MHA_ISA picks the kernels; see
// tests/CMakeLists.txt), against a double-precision reference.
//
// Error bound, per element:
//   |c - ref| <= (k + 4) * FLT_EPSILON * (|alpha| * sum_p |a_ip||b_pj| + |beta||c_ij| + |bias_j|)
// Each element is a chain of k multiply-adds (fused or not), then alpha*acc,
// beta*c, their sum and the bias: k + 4 roundings of at most u = 2^-24 each,
// so Higham's gamma_{k+4} = (k+4)u/(1-(k+4)u) bounds the error relative to
// the sum of magnitudes; FLT_EPSILON = 2u leaves a factor-2 margin for the
// 1/(1-(k+4)u) term and for split accumulations (vector lanes reduced at the
// end have shorter chains, which only lowers the bound).
#include <mha/mha.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <mha/gemm.hpp>
#include <mha/isa.hpp>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "dispatch/cpu_features.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/gemm.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::random_vector;
using mha::test::scaled;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Shape {
  char ta = 'N', tb = 'N';
  std::size_t m = 1, n = 1, k = 1;
  float alpha = 1.f, beta = 0.f;
  std::size_t pad_a = 0, pad_b = 0, pad_c = 0;  // ld = width + pad
  std::size_t offset = 0;                       // floats: 1 misaligns every pointer
  bool bias = false;
};

// One problem: operands in the layout Shape asks for, C's initial value, and
// the reference result with its error bound.
struct Problem {
  Shape s;
  std::size_t lda, ldb, ldc;
  std::vector<float> a, b, c0, bias;
  std::vector<double> ref, bound;

  explicit Problem(const Shape& shape, std::uint64_t seed) : s(shape) {
    const std::size_t a_rows = s.ta == 'N' ? s.m : s.k, a_cols = s.ta == 'N' ? s.k : s.m;
    const std::size_t b_rows = s.tb == 'N' ? s.k : s.n, b_cols = s.tb == 'N' ? s.n : s.k;
    lda = a_cols + s.pad_a;
    ldb = b_cols + s.pad_b;
    ldc = s.n + s.pad_c;
    a = random_vector(s.offset + a_rows * lda, seed);
    b = random_vector(s.offset + b_rows * ldb, seed + 1);
    c0 = random_vector(s.offset + s.m * ldc, seed + 2);
    if (s.beta == 0.f) std::fill(c0.begin(), c0.end(), kNaN);  // must never be read
    if (s.bias) bias = random_vector(s.n, seed + 3);
    ref.assign(s.m * s.n, 0.0);
    bound.assign(s.m * s.n, 0.0);
    for (std::size_t i = 0; i < s.m; ++i) {
      for (std::size_t j = 0; j < s.n; ++j) {
        double sum = 0, mag = 0;
        for (std::size_t p = 0; p < s.k; ++p) {
          const double x = s.ta == 'N' ? A()[i * lda + p] : A()[p * lda + i];
          const double y = s.tb == 'N' ? B()[p * ldb + j] : B()[j * ldb + p];
          sum += x * y;
          mag += std::fabs(x * y);
        }
        double r = s.alpha * sum, bnd = std::fabs(s.alpha) * mag;
        if (s.beta != 0.f) {
          const double c = C0()[i * ldc + j];
          r += s.beta * c;
          bnd += std::fabs(s.beta * c);
        }
        if (s.bias) {
          r += bias[j];
          bnd += std::fabs(bias[j]);
        }
        ref[i * s.n + j] = r;
        bound[i * s.n + j] = static_cast<double>(s.k + 4) * FLT_EPSILON * bnd;
      }
    }
  }
  const float* A() const { return a.data() + s.offset; }
  const float* B() const { return b.data() + s.offset; }
  const float* C0() const { return c0.data() + s.offset; }
  std::vector<float> fresh_c() const { return c0; }

  // Checks c (a buffer shaped like c0) against the reference; padding between
  // rows must be untouched.
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
        const float before = C0()[i * ldc + j], after = cc[i * ldc + j];
        if (std::memcmp(&before, &after, sizeof(float)) != 0) {
          UNSCOPED_INFO("padding C(" << i << ", " << j << ") was written");
          return false;
        }
      }
    }
    return true;
  }
};

std::string describe(const Shape& s) {
  return std::string("trans ") + s.ta + s.tb + " m=" + std::to_string(s.m) +
         " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
         " alpha=" + std::to_string(s.alpha) + " beta=" + std::to_string(s.beta) +
         " pads=" + std::to_string(s.pad_a) + "," + std::to_string(s.pad_b) + "," +
         std::to_string(s.pad_c) + " offset=" + std::to_string(s.offset) + (s.bias ? " bias" : "");
}

std::vector<float> run_sgemm(const Problem& p) {
  std::vector<float> c = p.fresh_c();
  const mha_status st = mha_sgemm(p.s.ta, p.s.tb, p.s.m, p.s.n, p.s.k, p.s.alpha, p.A(), p.lda,
                                  p.B(), p.ldb, p.s.beta, c.data() + p.s.offset, p.ldc);
  INFO(mha_last_error());
  REQUIRE(st == MHA_OK);
  return c;
}

std::vector<float> run_packed(const Problem& p) {
  std::vector<float> c = p.fresh_c();
  mha::PackedB packed(p.s.tb, p.s.k, p.s.n, p.B(), p.ldb);
  mha::sgemm(p.s.ta, p.s.m, p.s.alpha, p.A(), p.lda, packed, p.s.beta, c.data() + p.s.offset, p.ldc,
             p.s.bias ? p.bias.data() : nullptr);
  return c;
}

bool bitwise_equal(const std::vector<float>& x, const std::vector<float>& y) {
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(float)) == 0;
}

// A random shape with the given sizes; the other parameters cover the
// transposes, alpha not in {0, 1}, beta in {0, 1, other}, padded leading
// dimensions and misaligned pointers.
Shape random_shape(std::mt19937_64& rng, std::size_t m, std::size_t n, std::size_t k) {
  static constexpr float kAlphas[] = {0.75f, -1.5f, 2.f, 0.3f};
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

std::size_t uniform(std::mt19937_64& rng, std::size_t lo, std::size_t hi) {
  return lo + rng() % (hi - lo + 1);
}

// A table shaped like AVX-512's (14 x 32 packed and 6 x 64 unpacked tiles,
// 336 / 1024 / 768 blocks for a 1 MiB L2, KC 512 for a large one); the
// kernels themselves do not matter.
mha::detail::GemmKernels avx512_like_table() {
  mha::detail::GemmKernels isa{};
  isa.mr = 14;
  isa.nr = 32;
  isa.mr_u = 6;
  isa.nr_u = 64;
  isa.mc = 336;
  isa.kc = 1024;
  isa.nc = 768;
  isa.l2_kc = 512;
  return isa;
}

}  // namespace

TEST_CASE("sgemm matches the reference on every m, n, k in 1..65 and random shapes", "[gemm]") {
  std::mt19937_64 rng(20261123);
  std::vector<Shape> shapes;
  // Every size 1..65 in each of the three dimensions (with the other two
  // random), so each edge-tile width and depth of every ISA's MR x NR is hit.
  const std::size_t rounds = scaled(3, 1);
  for (std::size_t r = 0; r < rounds; ++r) {
    for (std::size_t v = 1; v <= 65; ++v) {
      shapes.push_back(random_shape(rng, v, uniform(rng, 1, 65), uniform(rng, 1, 65)));
      shapes.push_back(random_shape(rng, uniform(rng, 1, 65), v, uniform(rng, 1, 65)));
      shapes.push_back(random_shape(rng, uniform(rng, 1, 65), uniform(rng, 1, 65), v));
    }
  }
  // Random small shapes up to 10,000 cases in all (at scale 1).
  const std::size_t total = scaled(10000, shapes.size() + 50);
  while (shapes.size() < total) {
    shapes.push_back(
        random_shape(rng, uniform(rng, 1, 40), uniform(rng, 1, 40), uniform(rng, 1, 40)));
  }
  // Shapes that cross the cache blocks (KC = 256 on AVX2, and 1024 on
  // AVX-512 or 512 on a large L2; MC up to 336, several MC, column and
  // thread blocks), one strip of columns over several K blocks (the small
  // path's row-strip order), B read in place by the packed kernel with a
  // packed last strip (130 x 150 x 140; over two K blocks, 60 x 100 x 600)
  // and the GEMV path.
  for (const auto& [m, n, k] : std::vector<std::array<std::size_t, 3>>{{700, 90, 30},
                                                                       {301, 50, 1100},
                                                                       {130, 150, 140},
                                                                       {60, 100, 600},
                                                                       {37, 300, 530},
                                                                       {1, 1000, 300},
                                                                       {1, 37, 1100},
                                                                       {2, 513, 257},
                                                                       {97, 129, 600},
                                                                       {40, 450, 1100},
                                                                       {30, 800, 2100}}) {
    for (char ta : {'N', 'T'}) {
      for (char tb : {'N', 'T'}) {
        Shape s = random_shape(rng, m, n, k);
        s.ta = ta;
        s.tb = tb;
        shapes.push_back(s);
      }
    }
  }

  // A B packed in slabs of fewer rows than k, on every ISA, on one thread or
  // two (each of two column blocks is still 550 wide); beta neither 0 nor 1,
  // since each slab after the first adds to C. Once, NT: the shape is large.
  Shape deep = random_shape(rng, 45, 1100, 4200);
  deep.tb = 'T';
  deep.beta = -0.5f;
  shapes.push_back(deep);
  // P·V at n <= 64 with enough rows that, on AVX-512, whole 14-row strips
  // read A in place against a packed B (23 strips, then 9 rows in the
  // in-place tile; a partial last B strip; K blocks of 512 or 1024). beta
  // neither 0 nor 1 (each K block after the first adds to C), lda odd, A
  // unaligned.
  Shape pv = random_shape(rng, 331, 40, 1100);
  pv.ta = 'N';
  pv.tb = 'N';
  pv.beta = -0.5f;
  pv.pad_a = 3;
  pv.offset = 1;
  shapes.push_back(pv);

  std::size_t failures = 0;
  for (std::size_t i = 0; i < shapes.size() && failures < 5; ++i) {
    const Problem p(shapes[i], 1000 + i);
    if (!p.check(run_sgemm(p))) {
      ++failures;
      FAIL_CHECK(describe(shapes[i]));
    }
  }
  CHECK(failures == 0);
}

TEST_CASE("prepacked B gives the same bits as sgemm, and the bias is added", "[gemm]") {
  std::mt19937_64 rng(77);
  const std::size_t cases = scaled(400, 40);
  for (std::size_t i = 0; i < cases; ++i) {
    Shape s = random_shape(rng, uniform(rng, 2, 80), uniform(rng, 1, 80), uniform(rng, 1, 300));
    const Problem p(s, 5000 + i);
    INFO(describe(s));
    const std::vector<float> plain = run_sgemm(p);
    const std::vector<float> packed = run_packed(p);
    REQUIRE(bitwise_equal(plain, packed));

    s.bias = true;
    const Problem pb(s, 5000 + i);
    INFO(describe(s));
    REQUIRE(pb.check(run_packed(pb)));
  }
  // Op(B) = B up to 512 columns is read in place (the unpacked small path,
  // in column blocks sized to L2; on a 1 MiB L2) by sgemm: still the packed
  // path's bits,
  // across several KC and column blocks and at the width limit either side.
  // Past it, an A of one block is packed once and viewed per K block against
  // L2-sized panels of B (the last shape: 2 K blocks, 10 panels on AVX-512).
  for (const auto& [m, n, k] : std::vector<std::array<std::size_t, 3>>{{300, 512, 600},
                                                                       {150, 450, 300},
                                                                       {61, 513, 520},
                                                                       {7, 64, 1000},
                                                                       {20, 400, 2100},
                                                                       {100, 1200, 1100}}) {
    for (char ta : {'N', 'T'}) {
      Shape s = random_shape(rng, m, n, k);
      s.ta = ta;
      s.tb = 'N';
      const Problem p(s, m * n + k);
      INFO(describe(s));
      REQUIRE(bitwise_equal(run_sgemm(p), run_packed(p)));
      REQUIRE(p.check(run_packed(p)));
    }
  }
}

// The drivers split a block's rows evenly over its strips (16 rows as 8 + 8
// on AVX-512's 14-row tile), so a row's strip and its place in the tile
// change with m: its bits must not, for fp32 and bf16 prepacked weights.
TEST_CASE("prepacked B: a row's bits do not depend on the rows beside it", "[gemm]") {
  constexpr std::size_t kRows = 45, n = 70, k = 300;
  const std::vector<float> a = random_vector(kRows * k, 31), b = random_vector(n * k, 32);
  std::vector<std::uint16_t> a16(a.size()), b16(b.size());
  mha::fp32_to_bf16(a.size(), a.data(), a16.data());
  mha::fp32_to_bf16(b.size(), b.data(), b16.data());
  const mha::PackedB packed('T', k, n, b.data(), k);
  const mha::PackedBf16B packed16('T', k, n, b16.data(), k);
  std::vector<float> all(kRows * n), all16(kRows * n);
  mha::sgemm('N', kRows, 1.f, a.data(), k, packed, 0.f, all.data(), n);
  mha::gemm_bf16('N', kRows, 1.f, a16.data(), k, packed16, 0.f, all16.data(), n);
  for (std::size_t m = 2; m < kRows; ++m) {
    INFO("rows " << m);
    // The last m rows, so that each row falls at another place in its tile.
    const std::size_t r0 = kRows - m;
    std::vector<float> c(m * n), c16(m * n);
    mha::sgemm('N', m, 1.f, a.data() + r0 * k, k, packed, 0.f, c.data(), n);
    mha::gemm_bf16('N', m, 1.f, a16.data() + r0 * k, k, packed16, 0.f, c16.data(), n);
    CHECK(std::memcmp(c.data(), all.data() + r0 * n, c.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(c16.data(), all16.data() + r0 * n, c16.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("m == 1 (GEMV) through the packed API matches the reference", "[gemm]") {
  std::mt19937_64 rng(78);
  for (std::size_t i = 0; i < scaled(200, 20); ++i) {
    Shape s = random_shape(rng, 1, uniform(rng, 1, 300), uniform(rng, 1, 300));
    s.bias = i % 2 == 0;
    const Problem p(s, 9000 + i);
    INFO(describe(s));
    REQUIRE(p.check(run_packed(p)));
  }
  // A one-row call runs several B strips per micro-kernel call (ukernel_row),
  // then the rest one by one: each column must still get the bits it gets as
  // a row of a two-row call (ukernel_rows<2>), with and without beta and bias.
  for (std::size_t n : {33, 128, 130, 300, 517}) {
    const std::size_t k = 200;
    const auto a = mha::test::random_vector(2 * k, n), b = mha::test::random_vector(k * n, n + 1);
    const auto bias = mha::test::random_vector(n, n + 2),
               c0 = mha::test::random_vector(2 * n, n + 3);
    const mha::PackedB pb('N', k, n, b.data(), n);
    for (float beta : {0.f, 0.75f}) {
      std::vector<float> one(c0.begin(), c0.begin() + n), two = c0;
      mha::sgemm('N', 1, 1.5f, a.data(), k, pb, beta, one.data(), n, bias.data());
      mha::sgemm('N', 2, 1.5f, a.data(), k, pb, beta, two.data(), n, bias.data());
      INFO("n=" << n << " beta=" << beta);
      CHECK(std::memcmp(one.data(), two.data(), n * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("results are bit-identical at 1, 2 and 4 threads", "[gemm][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  std::mt19937_64 rng(79);
  // 700 x 900 x 1100 has A blocks and K blocks enough for the path where
  // each thread block's first A block packs B; 200 x 2100 x 1030 packs B in
  // two slabs at one thread on AVX-512. 'T' forces op(B) = Bᵀ: the first
  // two with widths whose thread column blocks do not line up with the
  // in-place kernel's strips (the transposed path); the last one's Bᵀ is
  // too large to transpose for an A of one block, which is packed once per
  // thread block instead. 'N' forces NN ('-': random transposes): 700 x 64
  // x 600 is P·V, whose thread row blocks (down to 175 rows) read A in
  // place in whole strips of the packed tile on AVX-512, and leave
  // different rows to the in-place tile at each thread count.
  for (const auto& [m, n, k, force] :
       std::vector<std::tuple<std::size_t, std::size_t, std::size_t, char>>{
           {300, 500, 200, '-'},
           {1, 3000, 500, '-'},
           {64, 2304, 96, '-'},
           {1000, 33, 300, '-'},
           {129, 129, 129, '-'},
           {700, 900, 1100, '-'},
           {200, 2100, 1030, '-'},
           {700, 64, 600, 'N'},
           {200, 100, 70, 'T'},
           {45, 1001, 33, 'T'},
           {100, 2000, 300, 'T'}}) {
    Shape s = random_shape(rng, m, n, k);
    if (force == 'T') s.tb = 'T';
    if (force == 'N') s.ta = s.tb = 'N';
    const Problem p(s, m + n + k);
    INFO(describe(s));
    std::vector<std::vector<float>> plain, packed;
    for (std::size_t t : {1, 2, 4}) {
      mha::set_num_threads(t);
      plain.push_back(run_sgemm(p));
      packed.push_back(run_packed(p));
    }
    mha::set_num_threads(0);
    CHECK(p.check(plain[0]));
    CHECK(bitwise_equal(plain[0], plain[1]));
    CHECK(bitwise_equal(plain[0], plain[2]));
    CHECK(bitwise_equal(packed[0], packed[1]));
    CHECK(bitwise_equal(packed[0], packed[2]));
  }
}

TEST_CASE("fit_to_caches keeps the 1 MiB-L2 blocks or keeps B panels in a large L2", "[gemm]") {
  mha::detail::GemmKernels isa = avx512_like_table();
  const std::size_t KiB = 1024, MiB = 1024 * KiB;
  // 1 MiB (Zen5, where these blocks were measured), or unknown: kept, B
  // streamed as one panel up to 8 MiB, the 1 MiB-L2 path limits.
  for (std::size_t l2 : {std::size_t{0}, MiB, 1280 * KiB}) {
    INFO("L2 " << l2);
    const auto g = mha::detail::fit_to_caches(isa, 48 * KiB, l2);
    CHECK(g.kc == 1024);
    CHECK(g.nc == 768);
    CHECK(g.whole_panel_floats == std::size_t{1} << 21);
    CHECK(g.small_max_n == 512);
    CHECK(g.transpose_max_floats == std::size_t{1} << 20);
    CHECK(g.transpose_one_block_max_floats == 256 * KiB);
    CHECK(g.b_in_place_max_floats == 0);
  }
  // 2 MiB (the Xeon): 512 x 512 panels (half the L2) kept in L2, no whole
  // panels, in place only where B fits in L1 (48 KiB = 12288 floats), or
  // up to 256 KiB through the packed kernel.
  auto g = mha::detail::fit_to_caches(isa, 48 * KiB, 2 * MiB);
  CHECK(g.mc == 336);
  CHECK(g.kc == 512);
  CHECK(g.nc == 512);
  CHECK(g.whole_panel_floats == 0);
  CHECK(g.small_max_n == 0);
  CHECK(g.transpose_max_floats == 12 * KiB);
  CHECK(g.transpose_one_block_max_floats == 12 * KiB);
  CHECK(g.b_in_place_max_floats == 64 * KiB);
  // Larger L2s take wider panels, in whole strips; an unknown L1d counts as
  // 32 KiB.
  g = mha::detail::fit_to_caches(isa, 0, 3 * MiB);
  CHECK(g.nc == 768);
  CHECK(g.transpose_max_floats == 8 * KiB);
  // The table calls run on is fitted to the L2 in use: MHA_L2_CACHE_BYTES
  // where set (the avx512/l2-* runs of this suite), else the CPU's.
  const auto& caches = mha::detail::cpu_caches();
  if (const char* forced = std::getenv("MHA_L2_CACHE_BYTES")) {
    CHECK(caches.l2 == mha::detail::parse_cache_size(forced));
  }
  if (mha::current_isa() == mha::Isa::avx512) {
    const auto& used = mha::detail::gemm_kernels(mha::current_isa());
    CHECK(used.kc == (caches.l2 >= 2 * MiB ? 512 : 1024));
    CHECK(used.nc == (caches.l2 >= 2 * MiB ? caches.l2 / 2 / (512 * 4) / 32 * 32 : 768));
  }
  // An ISA with no large-L2 KC keeps its blocks on any L2.
  isa.l2_kc = 0;
  isa.kc = 256;
  g = mha::detail::fit_to_caches(isa, 48 * KiB, 2 * MiB);
  CHECK(g.kc == 256);
  CHECK(g.nc == 768);
  CHECK(g.whole_panel_floats == 0);  // 256 x 768 is held in a 1 MiB L2
  CHECK(g.small_max_n == 512);
  CHECK(g.b_in_place_max_floats == 0);
}

TEST_CASE("zero sizes and alpha == 0 follow BLAS", "[gemm]") {
  std::vector<float> a(64, kNaN), b(64, kNaN), c(64, 2.f);
  // m == 0 or n == 0: nothing happens, NULL operands accepted.
  CHECK(mha_sgemm('N', 'N', 0, 4, 4, 1.f, nullptr, 4, b.data(), 4, 0.f, nullptr, 4) == MHA_OK);
  CHECK(mha_sgemm('N', 'N', 4, 0, 4, 1.f, a.data(), 4, nullptr, 1, 0.f, nullptr, 1) == MHA_OK);
  // k == 0: C = beta * C, A and B not needed.
  CHECK(mha_sgemm('N', 'N', 4, 4, 0, 1.f, nullptr, 1, nullptr, 4, 0.5f, c.data(), 4) == MHA_OK);
  CHECK(c[0] == 1.f);
  CHECK(c[15] == 1.f);
  CHECK(c[16] == 2.f);
  // alpha == 0: A and B (NaN here) are not read; beta == 0 zeroes C.
  CHECK(mha_sgemm('N', 'N', 4, 4, 4, 0.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4) == MHA_OK);
  CHECK(c[5] == 0.f);
}

TEST_CASE("a packed B keeps working after the ISA is switched", "[gemm]") {
  std::mt19937_64 rng(80);
  Shape s = random_shape(rng, 50, 70, 90);
  s.bias = true;
  const Problem p(s, 42);
  const std::vector<float> before = run_packed(p);
  mha::PackedB packed(s.tb, s.k, s.n, p.B(), p.ldb);
  std::vector<float> after = p.fresh_c();
  {
    mha::ScopedIsa scalar(mha::Isa::scalar);
    mha::sgemm(s.ta, s.m, s.alpha, p.A(), p.lda, packed, s.beta, after.data() + s.offset, p.ldc,
               p.bias.data());
  }
  CHECK(bitwise_equal(before, after));
}

TEST_CASE("internal pack_b views: row and column ranges of one packed B", "[gemm]") {
  // The attention code packs K^T / V once and multiplies sub-blocks of it.
  const auto& g = mha::detail::gemm_kernels(mha::current_isa());
  const std::size_t k = 150, n = 7 * g.nr + 5, m = 23;
  const std::vector<float> b = random_vector(k * n, 3);
  const std::vector<float> a = random_vector(m * k, 4);
  std::vector<float> packed(mha::detail::packed_b_floats(g, k, n));
  const auto view = mha::detail::pack_b(g, mha::detail::Trans::N, k, n, b.data(), n, packed.data());
  const std::size_t k0 = 20, k1 = 101, n0 = 2 * g.nr, n1 = n;
  std::vector<float> c((m * (n1 - n0)), kNaN);
  mha::detail::gemm_serial_prepacked_b(g, mha::detail::Trans::N, m, a.data() + k0, k,
                                       view.rows(k0, k1).cols(n0, n1), 1.f, 0.f, c.data(), n1 - n0);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n1 - n0; ++j) {
      double sum = 0, mag = 0;
      for (std::size_t p = k0; p < k1; ++p) {
        sum += double(a[i * k + p]) * b[p * n + n0 + j];
        mag += std::fabs(double(a[i * k + p]) * b[p * n + n0 + j]);
      }
      REQUIRE(std::fabs(c[i * (n1 - n0) + j] - sum) <= (k1 - k0 + 4) * FLT_EPSILON * mag);
    }
  }
}

TEST_CASE("internal in-place products: B in runs or in a narrowed strip gives B whole's bits",
          "[gemm]") {
  // A paged cache's P·V reads V's rows block by block (gemm_serial_unpacked_runs)
  // and its scores read K strips narrowed to a block (gemm_serial_prepacked_a_strip):
  // both must give the bits of the whole operand, across a K block (k past
  // g.kc), on every row and column edge, at unaligned addresses, with
  // denormal, huge, inf and NaN elements; and the reference's bound.
  namespace d = mha::detail;
  const auto& g = d::gemm_kernels(mha::current_isa());
  const std::size_t big_k = g.kc + 37;
  std::mt19937 rng(91);
  for (const std::size_t k : {std::size_t{1}, std::size_t{5}, std::size_t{64}, big_k}) {
    for (const std::size_t m : {std::size_t{1}, g.mr_u, g.mr_u + 1, g.mr + 2}) {
      for (const std::size_t n : {std::size_t{1}, std::size_t{7}, g.nr_u, g.nr_u + 5}) {
        CAPTURE(k, m, n);
        const std::size_t lda = k + 3, ldb = n + 5;
        std::vector<float> a = random_vector(m * lda + 1, 92), b = random_vector(k * ldb + 1, 93);
        if (k > 1) {
          b[1 + ldb + n / 2] = 3e38f;  // inf in its column's sums
          b[1 + (k - 1) * ldb] = kNaN;
          a[1 + k / 2] = 1e-40f;  // denormal
        }
        const float* ap = a.data() + 1;
        const float* bp = b.data() + 1;
        std::vector<double> ref(m * n), mag(m * n);
        for (std::size_t i = 0; i < m; ++i) {
          for (std::size_t j = 0; j < n; ++j) {
            for (std::size_t p = 0; p < k; ++p) {
              ref[i * n + j] += double(ap[i * lda + p]) * bp[p * ldb + j];
              mag[i * n + j] += std::fabs(double(ap[i * lda + p]) * bp[p * ldb + j]);
            }
          }
        }
        const std::vector<float> c0 = random_vector(m * n, 94);
        std::vector<float> want = c0, got = c0;
        d::gemm_serial_unpacked(g, d::Trans::N, m, n, k, 1.0f, ap, lda, bp, ldb, 0.5f, want.data(),
                                n);
        // B's rows copied into runs of 1..40 rows, each its own allocation,
        // one float off its start.
        std::vector<std::vector<float>> blocks;
        std::vector<d::FloatRun> runs;
        for (std::size_t p = 0; p < k;) {
          const std::size_t r = std::min<std::size_t>(1 + rng() % 40, k - p);
          blocks.emplace_back(r * ldb + 1);
          std::copy_n(bp + p * ldb, r * ldb, blocks.back().begin() + 1);
          runs.push_back({blocks.back().data() + 1, r});
          p += r;
        }
        d::gemm_serial_unpacked_runs(g, m, n, k, 1.0f, ap, lda,
                                     d::FloatRuns{runs.data(), 0, ldb, 0}, 0.5f, got.data(), n);
        REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        for (std::size_t i = 0; i < m * n; ++i) {
          if (!std::isfinite(ref[i]) || !std::isfinite(mag[i]) || mag[i] > 1e30) continue;
          REQUIRE(std::fabs(got[i] - (ref[i] + 0.5 * c0[i])) <=
                  (k + 4) * FLT_EPSILON * (mag[i] + 0.5 * std::fabs(c0[i])));
        }
        // Kᵀ's columns as a strip narrowed to `lanes` keys, read from `lane`
        // on: gemm_serial_prepacked_ab's bits on the whole packed B.
        if (n > g.nr) continue;
        std::vector<float> apack(d::packed_a_floats(g, m, k));
        d::pack_a(g, d::Trans::N, m, k, ap, lda, apack.data());
        std::vector<float> bpack(d::packed_b_floats(g, k, n));
        const auto view = d::pack_b(g, d::Trans::N, k, n, bp, ldb, bpack.data());
        std::vector<float> whole(m * n, kNaN), strip(m * n, kNaN);
        d::gemm_serial_prepacked_ab(g, m, apack.data(), view, 0.75f, 0.0f, whole.data(), n);
        const std::size_t lane = 16, lanes = lane + (n + 15) / 16 * 16;
        std::vector<float> narrowed(k * lanes + 1, kNaN);
        for (std::size_t p = 0; p < k; ++p) {
          std::copy_n(bp + p * ldb, n, narrowed.begin() + 1 + p * lanes + lane);
        }
        d::gemm_serial_prepacked_a_strip(g, m, apack.data(), k, narrowed.data() + 1 + lane, lanes,
                                         n, 0.75f, strip.data(), n);
        REQUIRE(std::memcmp(strip.data(), whole.data(), strip.size() * sizeof(float)) == 0);
      }
    }
  }
}

namespace {

// A quantized op(B) [k x n] and its widened values: codes (one per byte, [n
// x k]) of `type` drawn over their whole range, scales and (uint4) zeros
// [n x groups], with a zero scale, a denormal one and one whose products
// overflow to inf among them.
struct QuantB {
  std::vector<std::int8_t> w;
  std::vector<float> scales, zeros, wide;  // wide: op(B) [k x n], (code - zero) * scale
  QuantB(mha::detail::QuantCodes type, std::size_t k, std::size_t n, std::size_t group,
         std::mt19937& rng)
      : w(n * k) {
    using mha::detail::QuantCodes;
    const std::size_t groups = group == 0 || group >= k ? 1 : (k + group - 1) / group;
    const std::size_t len = groups == 1 ? k : group;
    const int lo = type == QuantCodes::int8 ? -128 : type == QuantCodes::int4 ? -8 : 0;
    const int hi = type == QuantCodes::int8 ? 127 : type == QuantCodes::int4 ? 7 : 15;
    std::uniform_int_distribution<int> code(lo, hi);
    for (auto& x : w) x = static_cast<std::int8_t>(code(rng));
    w[0] = static_cast<std::int8_t>(lo);
    w[n * k - 1] = static_cast<std::int8_t>(hi);
    scales = random_vector(n * groups, rng(), 0.0f, 0.05f);
    scales[(n / 2) * groups] = 0.0f;
    if (n > 2) scales[1 * groups] = 1e-42f;
    if (n > 3) scales[(n - 2) * groups] = 3e38f;
    if (type == QuantCodes::uint4) {
      zeros.resize(n * groups);
      for (auto& z : zeros) z = static_cast<float>(code(rng));
    }
    wide.resize(k * n);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t p = 0; p < k; ++p) {
        const std::size_t q = j * groups + p / len;
        const float z = zeros.empty() ? 0.0f : zeros[q];
        wide[p * n + j] = (float(w[j * k + p]) - z) * scales[q];
      }
    }
  }
};

}  // namespace

TEST_CASE("internal quantized B: gemm_quant_b gives gemm_prepacked_b's bits on the widened B",
          "[gemm][quant]") {
  // Every B value is (code - zero) * scale rounded to fp32 (the emulation:
  // widen, then the fp32 kernels, whose bound against the reference the
  // tests above check). int8, int4 and uint4 codes over their whole range,
  // one group per column or groups of 32 and 64 (a short last one among
  // them); rows 1 (the in-register widening, whole strip groups and single
  // strips), 2, a strip and a half, and past an MC block; columns off the
  // strip width; k = 1, odd, and past a K block; A unaligned and its rows
  // padded; extreme scales and NaN in A; with and without a bias.
  namespace d = mha::detail;
  const auto& g = d::gemm_kernels(mha::current_isa());
  const std::size_t group_of_strips = g.row_strips * g.nr;
  std::mt19937 rng(17);
  for (const auto type : {d::QuantCodes::int8, d::QuantCodes::int4, d::QuantCodes::uint4}) {
    for (const std::size_t group : {std::size_t{0}, std::size_t{32}, std::size_t{64}}) {
      for (const std::size_t k : {std::size_t{1}, std::size_t{7}, std::size_t{70}, g.kc + 37}) {
        for (const std::size_t m : {std::size_t{1}, std::size_t{2}, g.mr + g.mr / 2, g.mc + 1}) {
          if (m > g.mc && k > 7) continue;  // the MC edge needs no deep K
          for (const std::size_t n :
               {std::size_t{3}, g.nr, group_of_strips + g.nr + 5, 2 * group_of_strips}) {
            CAPTURE(static_cast<int>(type), group, k, m, n);
            const QuantB q(type, k, n, group, rng);
            const std::size_t lda = k + 3;
            std::vector<float> a = random_vector(m * lda + 1, rng());
            if (m > 1) a[1 + lda + k / 2] = kNaN;
            const float* ap = a.data() + 1;
            std::vector<std::int8_t> codes(d::packed_quant_b_bytes(g, type, k, n, "B"), 99);
            const std::size_t ns = d::packed_quant_b_scales(g, k, n, group, "B");
            std::vector<float> ps(ns, kNaN), pz(ns, kNaN);
            const d::PackedQuantB bq = d::pack_quant_b(
                g, type, k, n, group, q.w.data(), k, q.scales.data(),
                q.zeros.empty() ? nullptr : q.zeros.data(), codes.data(), ps.data(), pz.data());
            std::vector<float> packed(d::packed_b_floats(g, k, n));
            const d::PackedBView b32 =
                d::pack_b(g, d::Trans::N, k, n, q.wide.data(), n, packed.data());
            const std::vector<float> bias = random_vector(n, 20);
            for (const bool with_bias : {false, true}) {
              const float* bp = with_bias ? bias.data() : nullptr;
              const std::size_t ldc = n + 2;
              std::vector<float> cq(m * ldc, 7.0f), c32(m * ldc, 7.0f);
              d::gemm_quant_b(g, m, ap, lda, bq, cq.data(), ldc, bp);
              d::gemm_prepacked_b(g, d::Trans::N, m, ap, lda, b32, 1.0f, 0.0f, c32.data(), ldc, bp);
              REQUIRE(std::memcmp(cq.data(), c32.data(), cq.size() * sizeof(float)) == 0);
              // Nothing written past column n.
              for (std::size_t i = 0; i < m; ++i) REQUIRE(cq[i * ldc + n] == 7.0f);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("internal pack_quant_b: the documented layout, zero codes and scales past n",
          "[gemm][quant]") {
  namespace d = mha::detail;
  const auto& g = d::gemm_kernels(mha::current_isa());
  const std::size_t k = 5, n = g.nr + 3, group = 2, groups = 3;
  std::vector<std::int8_t> w(n * k);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<std::int8_t>(i % 16 - 8);
  const std::vector<float> scales = random_vector(n * groups, 21, 0.5f, 1.0f);
  const std::vector<float> zeros = random_vector(n * groups, 22, 0.0f, 15.0f);
  for (const auto type : {d::QuantCodes::int8, d::QuantCodes::int4}) {
    CAPTURE(static_cast<int>(type));
    const bool pairs = type != d::QuantCodes::int8;
    std::vector<std::int8_t> codes(d::packed_quant_b_bytes(g, type, k, n, "B"), 99);
    REQUIRE(codes.size() == 2 * g.nr * (pairs ? 3 : 5));
    std::vector<float> ps(d::packed_quant_b_scales(g, k, n, group, "B"), kNaN), pz(ps);
    REQUIRE(ps.size() == groups * 2 * g.nr);
    const d::PackedQuantB b = d::pack_quant_b(g, type, k, n, group, w.data(), k, scales.data(),
                                              zeros.data(), codes.data(), ps.data(), pz.data());
    REQUIRE(b.strip_stride == (pairs ? 3 : 5) * g.nr);
    REQUIRE(b.scale_stride == 2 * g.nr);
    for (std::size_t j = 0; j < 2 * g.nr; ++j) {
      CAPTURE(j);
      for (std::size_t q = 0; q < groups; ++q) {
        REQUIRE(ps[q * 2 * g.nr + j] == (j < n ? scales[j * groups + q] : 0.0f));
        REQUIRE(pz[q * 2 * g.nr + j] == (j < n ? zeros[j * groups + q] : 0.0f));
      }
      const std::int8_t* strip = codes.data() + j / g.nr * b.strip_stride + j % g.nr;
      for (std::size_t p = 0; p < k; ++p) {
        const int want = j < n ? w[j * k + p] : 0;
        if (!pairs) {
          REQUIRE(strip[p * g.nr] == want);
        } else {
          const int byte = static_cast<unsigned char>(strip[p / 2 * g.nr]);
          REQUIRE((p % 2 == 0 ? byte & 15 : byte >> 4) == (want & 15));
        }
      }
      if (pairs) REQUIRE((static_cast<unsigned char>(strip[2 * g.nr]) >> 4) == 0);
    }
  }
}

TEST_CASE("internal packers: the documented layouts, nothing written past them", "[gemm]") {
  // Every k up to 3 vectors of AVX-512 + 2 (whole transposed blocks, the
  // block that overlaps packed columns at the end, the scalar rest) and
  // rows and columns around the tiles, both orientations, with a sentinel
  // after the packed floats.
  const auto& g = mha::detail::gemm_kernels(mha::current_isa());
  constexpr float kSentinel = -7.f;
  for (const bool trans : {false, true}) {
    for (std::size_t k = 1; k <= 50; ++k) {
      for (const std::size_t rows : {std::size_t{1}, g.mr - 1, g.mr, 2 * g.mr + 1, g.nr + 3}) {
        CAPTURE(trans, k, rows);
        const std::size_t ld = (trans ? rows : k) + 3;
        const std::vector<float> src = random_vector((trans ? k : rows) * ld, 7);
        auto op = [&](std::size_t r, std::size_t p) {  // op(A)(r, p), op(B)(p, r)
          return trans ? src[p * ld + r] : src[r * ld + p];
        };
        const auto ta = trans ? mha::detail::Trans::T : mha::detail::Trans::N;
        const std::size_t a_floats = mha::detail::packed_a_floats(g, rows, k);
        std::vector<float> pa(a_floats + 16, kSentinel);
        mha::detail::pack_a(g, ta, rows, k, src.data(), ld, pa.data());
        for (std::size_t r = 0; r < a_floats / k; ++r) {
          for (std::size_t p = 0; p < k; ++p) {
            const float want = r < rows ? op(r, p) : 0.f;
            REQUIRE(pa[r / g.mr * k * g.mr + p * g.mr + r % g.mr] == want);
          }
        }
        CHECK(std::all_of(pa.begin() + a_floats, pa.end(), [](float x) { return x == kSentinel; }));
        // op(B) = (the source read as) B [k x rows]: B(p, j) = op(j, p).
        const std::size_t b_floats = mha::detail::packed_b_floats(g, k, rows);
        std::vector<float> pb(b_floats + 16, kSentinel);
        mha::detail::pack_b(g, trans ? mha::detail::Trans::N : mha::detail::Trans::T, k, rows,
                            src.data(), ld, pb.data());
        for (std::size_t j = 0; j < b_floats / k; ++j) {
          for (std::size_t p = 0; p < k; ++p) {
            const float want = j < rows ? op(j, p) : 0.f;
            REQUIRE(pb[j / g.nr * k * g.nr + p * g.nr + j % g.nr] == want);
          }
        }
        CHECK(std::all_of(pb.begin() + b_floats, pb.end(), [](float x) { return x == kSentinel; }));
      }
    }
  }
}

TEST_CASE("bad arguments are rejected with a message naming them", "[gemm]") {
  std::vector<float> a(64, 1.f), b(64, 1.f), c(64, 0.f);
  auto rejects = [](mha_status st, const char* needle) {
    INFO(mha_last_error());
    CHECK(st == MHA_INVALID_ARGUMENT);
    CHECK(std::string(mha_last_error()).find(needle) != std::string::npos);
  };
  rejects(mha_sgemm('X', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4), "transa");
  rejects(mha_sgemm('N', 'C', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4), "transb");
  rejects(mha_sgemm('N', 'N', 4, 4, 4, 1.f, a.data(), 3, b.data(), 4, 0.f, c.data(), 4), "lda");
  rejects(mha_sgemm('T', 'N', 5, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4), "lda");
  rejects(mha_sgemm('N', 'T', 4, 5, 4, 1.f, a.data(), 4, b.data(), 3, 0.f, c.data(), 5), "ldb");
  rejects(mha_sgemm('N', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 3), "ldc");
  rejects(mha_sgemm('N', 'N', 4, 4, 4, 1.f, nullptr, 4, b.data(), 4, 0.f, c.data(), 4),
          "a is NULL");
  rejects(mha_sgemm('N', 'N', 4, 4, 4, 1.f, a.data(), 4, nullptr, 4, 0.f, c.data(), 4),
          "b is NULL");
  rejects(mha_sgemm('N', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, nullptr, 4),
          "c is NULL");
  const std::size_t huge = std::numeric_limits<std::size_t>::max() / 2;
  rejects(mha_sgemm('N', 'N', huge, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 4),
          "overflows");

  mha_sgemm_packed_b* packed = nullptr;
  rejects(mha_sgemm_pack_b('N', 0, 4, b.data(), 4, &packed), "k = 0");
  rejects(mha_sgemm_pack_b('N', 4, 4, b.data(), 4, nullptr), "out");
  rejects(mha_sgemm_pack_b('Q', 4, 4, b.data(), 4, &packed), "transb");
  CHECK(packed == nullptr);
  rejects(mha_sgemm_packed('N', 4, 1.f, a.data(), 4, nullptr, 0.f, c.data(), 4, nullptr), "b:");
  REQUIRE(mha_sgemm_pack_b('N', 4, 4, b.data(), 4, &packed) == MHA_OK);
  CHECK(mha_sgemm_packed_b_k(packed) == 4);
  CHECK(mha_sgemm_packed_b_n(packed) == 4);
  rejects(mha_sgemm_packed('N', 4, 1.f, a.data(), 2, packed, 0.f, c.data(), 4, nullptr), "lda");
  mha_sgemm_packed_b_destroy(packed);

  try {
    mha::sgemm('N', 'N', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 0.f, c.data(), 2);
    FAIL("no exception");
  } catch (const mha::Error& e) {
    CHECK(e.status() == MHA_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("ldc") != std::string::npos);
  }
}

namespace {

constexpr mha::detail::GemmPath kAllPaths[] = {
    mha::detail::GemmPath::gemv,       mha::detail::GemmPath::none,
    mha::detail::GemmPath::b,          mha::detail::GemmPath::a,
    mha::detail::GemmPath::a_b_blocks, mha::detail::GemmPath::both,
    mha::detail::GemmPath::prepacked_b};

// Forces one GEMM path for the scope (the plan's own choice again after).
struct ForcedPath {
  explicit ForcedPath(mha::detail::GemmPath p) { mha::detail::set_gemm_path_override(p); }
  ~ForcedPath() { mha::detail::set_gemm_path_override(std::nullopt); }
  ForcedPath(const ForcedPath&) = delete;
  ForcedPath& operator=(const ForcedPath&) = delete;
};

}  // namespace

TEST_CASE("every GEMM path, forced, matches the reference on the same shapes", "[gemm][paths]") {
  // The same shapes for every path: every size 1..33 in each dimension
  // (each edge of every ISA's tiles), random ones, and shapes that cross
  // the cache blocks (several K blocks, MC blocks, slabs, partial strips).
  std::mt19937_64 rng(20261125);
  std::vector<Shape> shapes;
  for (std::size_t v = 1; v <= 33; ++v) {
    shapes.push_back(random_shape(rng, v, uniform(rng, 1, 70), uniform(rng, 1, 70)));
    shapes.push_back(random_shape(rng, uniform(rng, 1, 70), v, uniform(rng, 1, 70)));
    shapes.push_back(random_shape(rng, uniform(rng, 1, 70), uniform(rng, 1, 70), v));
  }
  while (shapes.size() < scaled(400, 120)) {
    shapes.push_back(
        random_shape(rng, uniform(rng, 1, 90), uniform(rng, 1, 90), uniform(rng, 1, 300)));
  }
  // Below full scale (sanitizers, qemu), one transpose pair per large
  // shape, in turn: these 20 shapes were most of its 60-80 s there.
  const bool every = mha::test::full_scale();
  std::size_t large = 0;
  for (const auto& [m, n, k] : std::vector<std::array<std::size_t, 3>>{
           {331, 40, 1100}, {37, 300, 530}, {2, 513, 257}, {700, 90, 30}, {45, 1100, 1300}}) {
    ++large;
    for (char ta : {'N', 'T'}) {
      for (char tb : {'N', 'T'}) {
        if (!every && (ta == 'T') + 2 * (tb == 'T') != large % 4) continue;
        Shape s = random_shape(rng, m, n, k);
        s.ta = ta;
        s.tb = tb;
        shapes.push_back(s);
      }
    }
  }
  std::vector<std::vector<float>> reference_bits(shapes.size());
  for (const mha::detail::GemmPath path : kAllPaths) {
    const ForcedPath forced(path);
    INFO("path " << mha::detail::gemm_path_name(path));
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const Problem p(shapes[i], 3000 + i);
      INFO(describe(shapes[i]));
      const std::vector<float> c = run_sgemm(p);
      REQUIRE(p.check(c));
      // Every path but GEMV does each element's arithmetic in the same
      // order (ukernel.hpp), so gives the same bits as every other.
      if (path == mha::detail::GemmPath::gemv || shapes[i].m == 1) continue;
      if (reference_bits[i].empty()) {
        reference_bits[i] = c;
      } else {
        REQUIRE(bitwise_equal(c, reference_bits[i]));
      }
    }
  }
}

TEST_CASE("every GEMM path, forced, is bit-identical at 1, 2 and 3 threads",
          "[gemm][paths][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  std::mt19937_64 rng(81);
  for (const mha::detail::GemmPath path : kAllPaths) {
    const ForcedPath forced(path);
    for (const auto& [m, n, k] :
         std::vector<std::array<std::size_t, 3>>{{300, 500, 200}, {700, 64, 600}, {90, 1001, 70}}) {
      const Shape s = random_shape(rng, m, n, k);
      const Problem p(s, m * k + n);
      INFO("path " << mha::detail::gemm_path_name(path) << " " << describe(s));
      std::vector<std::vector<float>> runs;
      for (std::size_t t : {1, 2, 3}) {
        mha::set_num_threads(t);
        runs.push_back(run_sgemm(p));
      }
      mha::set_num_threads(0);
      CHECK(p.check(runs[0]));
      CHECK(bitwise_equal(runs[0], runs[1]));
      CHECK(bitwise_equal(runs[0], runs[2]));
    }
  }
}

TEST_CASE("plan_gemm picks the measured path for the shapes that tuned it", "[gemm][paths]") {
  using mha::detail::GemmPath;
  using mha::detail::Trans;
  const mha::detail::GemmKernels isa = avx512_like_table();
  const std::size_t KiB = 1024, MiB = 1024 * KiB;
  const auto small_l2 = mha::detail::fit_to_caches(isa, 48 * KiB, MiB);
  const auto large_l2 = mha::detail::fit_to_caches(isa, 48 * KiB, 2 * MiB);
  mha::set_num_threads(1);
  auto path = [](const mha::detail::GemmKernels& g, Trans ta, Trans tb, std::size_t m,
                 std::size_t n, std::size_t k) {
    return mha::detail::plan_gemm(g, ta, tb, m, n, k, tb == Trans::N ? n : k).path;
  };
  CHECK(path(small_l2, Trans::N, Trans::N, 1, 3072, 768) == GemmPath::gemv);
  CHECK(path(small_l2, Trans::N, Trans::N, 64, 64, 64) == GemmPath::none);     // sq64
  CHECK(path(small_l2, Trans::N, Trans::N, 512, 512, 512) == GemmPath::none);  // sq512
  CHECK(path(small_l2, Trans::N, Trans::T, 128, 128, 64) == GemmPath::none);   // Q·Kᵀ s128
  CHECK(path(small_l2, Trans::N, Trans::N, 2048, 64, 2048) == GemmPath::b);    // P·V s2048
  CHECK(path(small_l2, Trans::N, Trans::N, 128, 64, 128) == GemmPath::none);   // P·V s128
  CHECK(path(small_l2, Trans::N, Trans::T, 128, 2304, 768) == GemmPath::a_b_blocks);
  CHECK(path(small_l2, Trans::N, Trans::N, 1024, 1024, 1024) == GemmPath::both);
  CHECK(path(large_l2, Trans::N, Trans::N, 128, 128, 128) == GemmPath::a);  // sq128
  CHECK(path(large_l2, Trans::N, Trans::N, 128, 1024, 128) == GemmPath::a_b_blocks);
  mha::set_num_threads(0);
  // The override wins, and is cleared.
  {
    const ForcedPath forced(GemmPath::prepacked_b);
    CHECK(path(small_l2, Trans::N, Trans::N, 64, 64, 64) == GemmPath::prepacked_b);
  }
  CHECK(path(small_l2, Trans::N, Trans::N, 64, 64, 64) == GemmPath::none);
}
