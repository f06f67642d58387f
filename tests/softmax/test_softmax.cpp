// mha::softmax / mha_softmax on the ISA MHA_ISA selects, against the double
// reference: random shapes, every mask kind, extreme and special values,
// thread-count bit-identity, bad arguments; and the online-softmax blocks.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <mha/isa.hpp>
#include <mha/softmax.hpp>
#include <random>
#include <string>
#include <vector>

#include "dispatch/dispatch.hpp"
#include "softmax/online.hpp"
#include "softmax_reference.hpp"
#include "support/reference.hpp"

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

struct Case {
  std::size_t rows, cols, ldx, ldy;
  std::vector<float> x, y, additive;
  std::vector<std::size_t> valid;
  mha::SoftmaxOptions o;
};

}  // namespace

TEST_CASE("softmax matches the double reference: cols 1..300, odd strides, every mask",
          "[softmax]") {
  std::mt19937_64 rng(42);
  auto pick = [&](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::size_t step =
      std::max<std::size_t>(1, static_cast<std::size_t>(1 / mha::test::case_scale()));
  const float scales[] = {0.f, 1.f, 0.125f, -0.5f, 3.f};
  for (std::size_t cols = 1; cols <= 300; cols += step) {
    for (int variant = 0; variant < 2; ++variant) {
      const std::size_t rows = 1 + pick(6);
      const std::size_t ldx = cols + pick(4) * 2 + (cols % 2 == 0 ? 1 : 0);  // odd when possible
      const bool in_place = pick(4) == 0;
      const std::size_t ldy = in_place ? ldx : cols + pick(3);
      auto x = mha::test::random_vector(rows * ldx, cols * 7 + variant, -8.f, 8.f);
      for (std::size_t t = 0; t < rows * ldx / 16; ++t) x[pick(rows * ldx)] = -kInf;
      mha::SoftmaxOptions o;
      o.scale = scales[pick(5)];
      std::vector<float> additive;
      const int mask_kind = static_cast<int>(pick(3));  // none, per row, broadcast row
      if (mask_kind != 0) {
        o.additive_ld = mask_kind == 1 ? cols + pick(3) : 0;
        additive = mha::test::random_vector(std::max<std::size_t>(1, rows) * (cols + 3),
                                            cols * 11 + variant, -4.f, 4.f);
        for (std::size_t t = 0; t < additive.size() / 8; ++t)
          additive[pick(additive.size())] = -kInf;
        o.additive = additive.data();
      }
      o.causal = pick(2) == 0;
      o.causal_offset = static_cast<std::ptrdiff_t>(pick(cols + 4)) - 3;
      std::vector<std::size_t> valid(rows);
      for (auto& v : valid) v = pick(cols + 3);
      if (pick(2) == 0) o.valid_len = valid.data();
      std::vector<float> y_store(rows * ldy, -7.f);
      float* y = in_place ? x.data() : y_store.data();
      const std::vector<float> x0 = x;
      INFO("cols " << cols << " rows " << rows << " ldx " << ldx << " ldy " << ldy << " in_place "
                   << in_place << " scale " << o.scale << " mask " << mask_kind << " causal "
                   << o.causal << " offset " << o.causal_offset << " valid "
                   << (o.valid_len != nullptr));
      mha::softmax(rows, cols, x.data(), ldx, y, ldy, o);
      mha::test::check_softmax(rows, cols, x0.data(), ldx, y, ldy, o);
      if (!in_place) {
        CHECK(x == x0);  // input untouched
        for (std::size_t i = 0; i < rows; ++i)
          for (std::size_t j = cols; j < ldy; ++j) CHECK(y_store[i * ldy + j] == -7.f);
      }
    }
  }
}

TEST_CASE("softmax extreme values are exact", "[softmax]") {
  auto run = [](std::vector<float> x, mha::SoftmaxOptions o = {}) {
    std::vector<float> y(x.size(), -7.f);
    mha::softmax(1, x.size(), x.data(), x.size(), y.data(), x.size(), o);
    return y;
  };
  CHECK(run({1e4f, -1e4f}) == std::vector<float>{1.f, 0.f});
  CHECK(run({-1e4f, 1e4f, -1e4f}) == std::vector<float>{0.f, 1.f, 0.f});
  CHECK(run({-kInf, 3.f, -kInf}) == std::vector<float>{0.f, 1.f, 0.f});
  CHECK(run({5.f}) == std::vector<float>{1.f});
  CHECK(run({-1e4f}) == std::vector<float>{1.f});
  CHECK(run({1e4f}, {.scale = 0.125f}) == std::vector<float>{1.f});
  CHECK(run({-kInf}) == std::vector<float>{0.f});
  CHECK(run({-kInf, -kInf, -kInf}) == std::vector<float>(3, 0.f));
  for (std::size_t n : {1, 2, 3, 7, 16, 17, 100, 300}) {
    const auto y = run(std::vector<float>(n, 1e4f));
    CHECK(y == std::vector<float>(n, static_cast<float>(1.0 / double(n))));
  }
  // -inf and finite mixed, large spread: the finite ones get the mass.
  const auto y = run({-kInf, 0.f, -kInf, 0.f});
  CHECK(y == std::vector<float>{0.f, 0.5f, 0.f, 0.5f});
  // Fully masked rows, by every mask kind, are zeros.
  const std::vector<float> add_all(4, -kInf);
  CHECK(run({1, 2, 3, 4}, {.additive = add_all.data()}) == std::vector<float>(4, 0.f));
  const std::size_t zero = 0;
  CHECK(run({1, 2, 3, 4}, {.valid_len = &zero}) == std::vector<float>(4, 0.f));
  CHECK(run({1, 2, 3, 4}, {.causal = true, .causal_offset = -1}) == std::vector<float>(4, 0.f));
  CHECK(run({1, 2, 3, 4}, {.causal = true, .causal_offset = 0}) ==
        std::vector<float>{1.f, 0, 0, 0});
}

TEST_CASE("softmax NaN and +inf rule", "[softmax]") {
  auto run = [](std::vector<float> x, mha::SoftmaxOptions o = {}) {
    std::vector<float> y(x.size(), -7.f);
    mha::softmax(1, x.size(), x.data(), x.size(), y.data(), x.size(), o);
    return y;
  };
  for (std::size_t n : {1, 5, 16, 33}) {
    for (std::size_t at : {std::size_t{0}, n / 2, n - 1}) {
      for (float bad : {kNaN, kInf}) {
        std::vector<float> x(n, 1.f);
        x[at] = bad;
        for (float v : run(x)) CHECK(std::isnan(v));
        // Masked positions are never read: a NaN beyond valid_len is ignored,
        // and the masked columns are 0 even when the kept ones are NaN.
        const std::size_t keep = at;
        const auto y = run(x, {.valid_len = &keep});
        for (std::size_t j = 0; j < n; ++j) {
          if (keep == 0 || j >= keep) {
            CHECK(y[j] == 0.f);
          } else {
            CHECK(y[j] == static_cast<float>(1.0 / double(keep)));
          }
        }
      }
    }
  }
  // x*scale overflowing to +inf, and -inf turned into +inf by a negative scale.
  for (float v : run({3e38f, 1.f}, {.scale = 10.f})) CHECK(std::isnan(v));
  for (float v : run({-kInf, 1.f}, {.scale = -1.f})) CHECK(std::isnan(v));
  // x*scale overflowing to -inf in every column: a fully masked row (zeros),
  // with or without a mask; one finite score takes all the mass.
  const std::vector<float> zero_add{0.f, 0.f};
  for (float v : run({-3e38f, -1e38f}, {.scale = 10.f})) CHECK(v == 0.f);
  for (float v : run({-3e38f, -1e38f}, {.scale = 10.f, .additive = zero_add.data()})) {
    CHECK(v == 0.f);
  }
  CHECK(run({-3e38f, 1.f}, {.scale = 10.f}) == std::vector<float>{0.f, 1.f});
  const std::vector<float> add{0.f, kInf};
  for (float v : run({1.f, 2.f}, {.additive = add.data()})) CHECK(std::isnan(v));
  // -inf in the mask where x is NaN: NaN + -inf is NaN, the row is NaN.
  const std::vector<float> add2{0.f, -kInf};
  for (float v : run({1.f, kNaN}, {.additive = add2.data()})) CHECK(std::isnan(v));
}

TEST_CASE("softmax: a zero mask gives the same bits as no mask", "[softmax]") {
  const std::size_t rows = 7, cols = 133;
  const auto x = mha::test::random_vector(rows * cols, 77, -30.f, 30.f);
  const std::vector<float> zeros(cols, 0.f);
  std::vector<float> a(rows * cols), b(rows * cols);
  for (float s : {1.f, 0.125f, 2.5f}) {
    mha::softmax(rows, cols, x.data(), cols, a.data(), cols, {.scale = s});
    mha::softmax(rows, cols, x.data(), cols, b.data(), cols,
                 {.scale = s, .additive = zeros.data()});
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("softmax is bit-identical at every thread count", "[softmax][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  const std::size_t rows = 700, cols = 257;
  const auto x = mha::test::random_vector(rows * cols, 99, -10.f, 10.f);
  std::vector<std::size_t> valid(rows);
  for (std::size_t i = 0; i < rows; ++i) valid[i] = (i * 37) % (cols + 5);
  const mha::SoftmaxOptions o{
      .scale = 0.3f, .causal = true, .causal_offset = 20, .valid_len = valid.data()};
  std::vector<float> ref(rows * cols), got(rows * cols);
  mha::set_num_threads(1);
  mha::softmax(rows, cols, x.data(), cols, ref.data(), cols, o);
  for (std::size_t t : {2, 3, 0}) {
    mha::set_num_threads(t);
    mha::softmax(rows, cols, x.data(), cols, got.data(), cols, o);
    CHECK(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)) == 0);
  }
  mha::set_num_threads(0);
  mha::test::check_softmax(rows, cols, x.data(), cols, ref.data(), cols, o);
}

TEST_CASE("mha_softmax rejects bad arguments", "[softmax]") {
  std::vector<float> x(64, 1.f), y(64, 0.f);
  auto expect_invalid = [&](mha_status st, const char* names) {
    CHECK(st == MHA_INVALID_ARGUMENT);
    CHECK(std::string(mha_last_error()).find(names) != std::string::npos);
    CHECK(y == std::vector<float>(64, 0.f));  // nothing written
  };
  expect_invalid(mha_softmax(2, 4, nullptr, 4, y.data(), 4, nullptr), "x is null");
  expect_invalid(mha_softmax(2, 4, x.data(), 4, nullptr, 4, nullptr), "y is null");
  expect_invalid(mha_softmax(2, 4, x.data(), 3, y.data(), 4, nullptr), "ldx");
  expect_invalid(mha_softmax(2, 4, x.data(), 4, y.data(), 3, nullptr), "ldy");
  mha_softmax_options o{};
  o.scale = kNaN;
  expect_invalid(mha_softmax(2, 4, x.data(), 4, y.data(), 4, &o), "scale");
  o.scale = kInf;
  expect_invalid(mha_softmax(2, 4, x.data(), 4, y.data(), 4, &o), "scale");
  o = {};
  o.additive = x.data();
  o.additive_ld = 2;
  expect_invalid(mha_softmax(2, 4, x.data(), 4, y.data(), 4, &o), "additive_ld");
  expect_invalid(mha_softmax(2, 4, x.data(), 4, x.data() + 2, 4, nullptr), "overlaps");
  expect_invalid(mha_softmax(2, 4, x.data(), 4, x.data(), 5, nullptr), "overlaps");
  expect_invalid(mha_softmax(SIZE_MAX / 2, 4, x.data(), 4, y.data(), 4, nullptr), "overflows");
  // Empty calls succeed without touching anything; opt NULL is plain softmax.
  CHECK(mha_softmax(0, 4, nullptr, 0, nullptr, 0, nullptr) == MHA_OK);
  CHECK(mha_softmax(2, 0, nullptr, 0, nullptr, 0, nullptr) == MHA_OK);
  CHECK(mha_softmax(2, 4, x.data(), 4, y.data(), 4, nullptr) == MHA_OK);
  CHECK(y[0] == 0.25f);
  CHECK_THROWS_AS(mha::softmax(1, 4, x.data(), 2, y.data(), 4), mha::Error);
}

namespace {

// One row of online softmax over tiles of random width: st gets the state,
// acc the unnormalized sum of weights times v's rows ([n x dv]), probs (if not
// null) the row's unnormalized weights.
void online_tiles(const mha::detail::SoftmaxKernels& k, std::mt19937_64& rng, const float* s,
                  std::size_t n, const float* v, std::size_t dv, mha::detail::OnlineRow& st,
                  float* acc, float* probs) {
  std::vector<float> tile(n);
  for (std::size_t j0 = 0; j0 < n;) {
    const std::size_t w = std::min<std::size_t>(n - j0, 1 + rng() % 64);
    std::copy(s + j0, s + j0 + w, tile.begin());
    const float alpha = mha::detail::online_update(k, st, tile.data(), w);
    mha::detail::online_rescale(k, acc, dv, alpha);
    if (probs) mha::detail::online_rescale(k, probs, j0, alpha);  // the row's weights so far
    for (std::size_t j = 0; j < w; ++j) {
      if (probs) probs[j0 + j] = tile[j];
      for (std::size_t d = 0; d < dv; ++d) acc[d] += tile[j] * v[(j0 + j) * dv + d];
    }
    j0 += w;
  }
}

// Random scores with masked (-inf) stretches, sometimes a whole row, and in
// some cases a NaN or +inf, possibly inside the masked stretch.
std::vector<float> online_scores(std::size_t c, std::size_t n, std::mt19937_64& rng) {
  auto s = mha::test::random_vector(n, 1000 + c, -20.f, 20.f);
  const std::size_t masked = c % 5 == 0 ? n : rng() % (n + 1) / 2;
  for (std::size_t j = 0; j < masked; ++j) s[j] = -kInf;
  if (c % 7 == 3) s[rng() % n] = kNaN;
  if (c % 7 == 5) s[rng() % n] = kInf;
  return s;
}

// Checks acc[0..dv) against p · V (p the one-pass softmax of the row): NaN if
// p is, else within the summation bound.
void check_online_acc(const std::vector<float>& p, const std::vector<float>& v, std::size_t dv,
                      const float* acc) {
  const std::size_t n = p.size();
  for (std::size_t d = 0; d < dv; ++d) {
    if (std::isnan(p[0])) {
      CHECK(std::isnan(acc[d]));
      continue;
    }
    double ref = 0, mag = 0;
    for (std::size_t j = 0; j < n; ++j) {
      ref += double(p[j]) * v[j * dv + d];
      mag += std::fabs(double(p[j]) * v[j * dv + d]);
    }
    CHECK(std::fabs(acc[d] - ref) <= mag * (n / 2.0 + 40) * std::ldexp(1.0, -24) + 1e-30);
  }
}

}  // namespace

TEST_CASE("online softmax over tiles equals one-pass softmax", "[softmax][online]") {
  const auto& k = mha::detail::softmax_kernels(mha::current_isa());
  std::mt19937_64 rng(7);
  const std::size_t cases = mha::test::scaled(70, 14);
  for (std::size_t c = 0; c < cases; ++c) {
    const std::size_t n = 1 + rng() % 300, dv = 1 + rng() % 20;
    const auto s = online_scores(c, n, rng);
    const auto v = mha::test::random_vector(n * dv, 2000 + c);  // values [n x dv]
    // One pass: p = softmax(s), o = p · V, in double.
    std::vector<float> p(n);
    mha::softmax(1, n, s.data(), n, p.data(), n);
    // Online over tiles of random width; acc = running sum of exp(s - max) V.
    mha::detail::OnlineRow st;
    std::vector<float> acc(dv, 0.f), probs(n, 0.f);
    online_tiles(k, rng, s.data(), n, v.data(), dv, st, acc.data(), probs.data());
    mha::detail::online_finalize(k, st, probs.data(), n);
    mha::detail::online_finalize(k, st, acc.data(), dv);
    INFO("case " << c << " n " << n);
    mha::test::check_softmax(1, n, s.data(), n, probs.data(), n, {});
    check_online_acc(p, v, dv, acc.data());
  }
  // NaN in a later tile poisons the row.
  mha::detail::OnlineRow st;
  std::vector<float> t1{1.f, 2.f}, t2{kNaN, 0.f}, acc{1.f};
  mha::detail::online_rescale(k, acc.data(), 1, mha::detail::online_update(k, st, t1.data(), 2));
  mha::detail::online_rescale(k, acc.data(), 1, mha::detail::online_update(k, st, t2.data(), 2));
  mha::detail::online_finalize(k, st, acc.data(), 1);
  CHECK(std::isnan(acc[0]));
  // NaN among -inf scores, before any finite one, poisons the row too.
  mha::detail::OnlineRow st2;
  std::vector<float> t3{-kInf, kNaN, -kInf}, t4{1.f};
  mha::detail::online_update(k, st2, t3.data(), 3);
  mha::detail::online_update(k, st2, t4.data(), 1);
  CHECK(mha::detail::online_poisoned(st2));
}

namespace {

bool same_float(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return std::memcmp(&a, &b, sizeof a) == 0;
}

}  // namespace

// The attention core's tiles of unscaled scores, scaled in the exp pass:
// the state, alpha and the tile's weights are bitwise those of scaling the
// tile first (the kernels' scale) and then online_update, over tiles with
// -inf stretches, NaN, +inf, scores that overflow or underflow when scaled,
// and scales below and above 1.
TEST_CASE("online_update_scaled is scaling, then online_update, bit for bit", "[softmax][online]") {
  const auto& k = mha::detail::softmax_kernels(mha::current_isa());
  std::mt19937_64 rng(17);
  const std::size_t cases = mha::test::scaled(200, 40);
  const float scales[] = {0.125f, 0.088388346f, 1.0f, 3.0f, 1e-30f, 0.5f};
  for (std::size_t c = 0; c < cases; ++c) {
    const std::size_t n = 1 + rng() % 300;
    auto x = online_scores(c, n, rng);
    if (c % 3 == 1) x[rng() % n] = 3e38f;
    if (c % 4 == 2) x[rng() % n] = -1e-44f;
    const float s = scales[c % std::size(scales)];
    mha::detail::OnlineRow a, b;
    INFO("case " << c << " n " << n << " scale " << s);
    for (std::size_t j0 = 0; j0 < n;) {
      const std::size_t w = std::min<std::size_t>(n - j0, 1 + rng() % 64);
      std::vector<float> ta(x.begin() + j0, x.begin() + j0 + w), tb(ta);
      k.scale(ta.data(), w, s);
      const float alpha_a = mha::detail::online_update(k, a, ta.data(), w);
      const float alpha_b = mha::detail::online_update_scaled(k, b, tb.data(), w, s);
      CHECK(same_float(alpha_a, alpha_b));
      CHECK(same_float(a.max, b.max));
      CHECK(same_float(a.sum, b.sum));
      for (std::size_t j = 0; j < w; ++j) CHECK(same_float(ta[j], tb[j]));
      j0 += w;
    }
  }
}

// The attention core's order: a block's rows each begun (online_begin*),
// one exp call for all their alpha exponents, then online_finish; the
// state, alpha and tile bitwise those of online_update per row, over two
// tiles per row (so the max moves), with masked rows, NaN and +inf.
TEST_CASE("online_begin over a block, one exp, online_finish is online_update per row",
          "[softmax][online]") {
  const auto& k = mha::detail::softmax_kernels(mha::current_isa());
  std::mt19937_64 rng(23);
  const std::size_t blocks = mha::test::scaled(40, 8);
  for (std::size_t c = 0; c < blocks; ++c) {
    const std::size_t rows = 1 + rng() % 70, n = 1 + rng() % 300;
    const float s = c % 2 == 0 ? 0.125f : 1.0f;
    std::vector<mha::detail::OnlineRow> a(rows), b(rows);
    for (std::size_t tile = 0; tile < 2; ++tile) {
      std::vector<std::vector<float>> ta(rows), tb(rows);
      std::vector<float> alpha_a(rows), e(rows), sum(rows);
      for (std::size_t r = 0; r < rows; ++r) {
        ta[r] = online_scores(c * 97 + r * 2 + tile, n, rng);
        tb[r] = ta[r];
        alpha_a[r] = mha::detail::online_update_scaled(k, a[r], ta[r].data(), n, s);
        e[r] = s == 1.0f ? mha::detail::online_begin(k, b[r], tb[r].data(), n, &sum[r])
                         : mha::detail::online_begin_scaled(k, b[r], tb[r].data(), n, s, &sum[r],
                                                            k.scale_exp_sum);
      }
      k.exp(e.data(), e.data(), rows);
      for (std::size_t r = 0; r < rows; ++r) {
        mha::detail::online_finish(b[r], e[r], sum[r]);
        INFO("block " << c << " tile " << tile << " row " << r << " n " << n);
        CHECK(same_float(alpha_a[r], e[r]));
        CHECK(same_float(a[r].max, b[r].max));
        CHECK(same_float(a[r].sum, b[r].sum));
        for (std::size_t j = 0; j < n; ++j) CHECK(same_float(ta[r][j], tb[r][j]));
      }
    }
  }
}

TEST_CASE("online softmax merged across key ranges equals one-pass softmax", "[softmax][online]") {
  const auto& k = mha::detail::softmax_kernels(mha::current_isa());
  std::mt19937_64 rng(11);
  const std::size_t cases = mha::test::scaled(70, 14);
  for (std::size_t c = 0; c < cases; ++c) {
    const std::size_t n = 1 + rng() % 600, dv = 1 + rng() % 20;
    const auto s = online_scores(c, n, rng);
    const auto v = mha::test::random_vector(n * dv, 3000 + c);
    std::vector<float> p(n);
    mha::softmax(1, n, s.data(), n, p.data(), n);
    // Parts over consecutive key ranges (some empty of kept scores), each
    // with its own state and accumulator, merged.
    const std::size_t count = 1 + rng() % 6;
    std::vector<std::size_t> cut{0};
    for (std::size_t t = 1; t < count; ++t) cut.push_back(rng() % (n + 1));
    cut.push_back(n);
    std::sort(cut.begin(), cut.end());
    std::vector<mha::detail::OnlineRow> st(count);
    std::vector<std::vector<float>> acc(count, std::vector<float>(dv, 0.f));
    for (std::size_t t = 0; t < count; ++t) {
      if (cut[t] < cut[t + 1]) {
        online_tiles(k, rng, s.data() + cut[t], cut[t + 1] - cut[t], v.data() + cut[t] * dv, dv,
                     st[t], acc[t].data(), nullptr);
      }
      // A part that kept nothing is never read: garbage there changes nothing.
      if (st[t].max == -kInf && !mha::detail::online_poisoned(st[t])) acc[t].assign(dv, kNaN);
    }
    std::vector<float> out(dv, -7.f);
    const auto part = [&](std::size_t t) { return mha::detail::OnlinePart{st[t], acc[t].data()}; };
    mha::detail::online_merge(k, count, part, out.data(), dv);
    INFO("case " << c << " n " << n << " parts " << count);
    check_online_acc(p, v, dv, out.data());
  }
}

TEST_CASE("soft_cap kernel is cap·tanh(x/cap) within 5e-7·cap", "[softmax][soft_cap]") {
  // The bound of kernels.hpp: exp within 1 ulp, then 1 - 2/(e + 1) adds a
  // few roundings of numbers <= 2, all absolute (the softmax needs the
  // capped score's absolute error, not its relative one near 0).
  const auto& k = mha::detail::softmax_kernels(mha::current_isa());
  std::mt19937_64 rng(5);
  double worst = 0;
  for (float cap : {0.5f, 1.f, 30.f, 50.f}) {
    for (std::size_t n = 1; n <= 70; ++n) {
      std::vector<float> x = mha::test::random_vector(n, 100 * n + static_cast<std::size_t>(cap),
                                                      -4.f * cap, 4.f * cap);
      if (n % 3 == 0) x[rng() % n] = 1e-30f;
      if (n % 5 == 0) x[rng() % n] = -1e30f;
      const std::vector<float> in = x;
      k.soft_cap(x.data(), n, cap);
      for (std::size_t i = 0; i < n; ++i) {
        const double want = cap * std::tanh(static_cast<double>(in[i]) / cap);
        const double err = std::abs(x[i] - want) / cap;
        worst = std::max(worst, err);
        INFO("cap " << cap << " x " << in[i] << " got " << x[i] << " want " << want);
        REQUIRE(err <= 5e-7);
      }
    }
    std::vector<float> special{kInf, -kInf, kNaN, 0.f, -0.f};
    k.soft_cap(special.data(), special.size(), cap);
    CHECK(special[0] == cap);
    CHECK(special[1] == -cap);
    CHECK(std::isnan(special[2]));
    CHECK(special[3] == 0.f);
    CHECK(special[4] == 0.f);
  }
  std::printf("soft_cap worst error: %.3g · cap (limit 5e-7)\n", worst);
}
