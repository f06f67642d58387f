// mha::split_heads / merge_heads / split_qkv and their C API, on the ISA
// MHA_ISA selects: exact index-by-index checks, round trips, threads, errors.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <mha/isa.hpp>
#include <mha/reshape.hpp>
#include <string>
#include <vector>

#include "support/reference.hpp"

namespace {

struct Dims {
  std::size_t b, s, h, d;
  std::size_t n() const { return b * s * h * d; }
};

std::vector<Dims> shapes() {
  std::vector<Dims> v = {{1, 1, 1, 1},
                         {2, 3, 4, 5},
                         {1, 7, 3, 16},
                         {2, 5, 2, 17},
                         {1, 9, 12, 64},
                         {3, 4, 2, 33},
                         {1, 2, 5, 80},
                         {2, 3, 1, 128},
                         // Several token blocks with a partial last one (85
                         // tokens a block at this row width, 28 for split_qkv),
                         // and rows so wide that a block is its minimum 8.
                         {2, 300, 12, 64},
                         {1, 20, 1, 9000}};
  if (mha::test::full_scale()) {
    v.push_back({2, 90, 12, 64});  // above the threading threshold (128K floats)
  }
  return v;
}

// Elements of y = split_heads(x) that are not where they belong.
std::size_t split_errors(const Dims& t, const float* x, const float* y) {
  std::size_t wrong = 0;
  for (std::size_t b = 0; b < t.b; ++b)
    for (std::size_t s = 0; s < t.s; ++s)
      for (std::size_t h = 0; h < t.h; ++h)
        for (std::size_t e = 0; e < t.d; ++e)
          wrong += y[((b * t.h + h) * t.s + s) * t.d + e] != x[((b * t.s + s) * t.h + h) * t.d + e];
  return wrong;
}

// The same for q, k, v = split_qkv(qkv).
std::size_t qkv_errors(const Dims& t, const float* qkv, const float* q, const float* k,
                       const float* v) {
  const std::size_t row = 3 * t.h * t.d;
  std::size_t wrong = 0;
  for (std::size_t b = 0; b < t.b; ++b)
    for (std::size_t s = 0; s < t.s; ++s)
      for (std::size_t h = 0; h < t.h; ++h)
        for (std::size_t e = 0; e < t.d; ++e) {
          const std::size_t out = ((b * t.h + h) * t.s + s) * t.d + e;
          const std::size_t in = (b * t.s + s) * row + h * t.d + e;
          wrong += q[out] != qkv[in];
          wrong += k[out] != qkv[in + t.h * t.d];
          wrong += v[out] != qkv[in + 2 * t.h * t.d];
        }
  return wrong;
}

// n floats at `misalign` floats past a 64-byte boundary inside `storage`,
// filled with `fill`.
float* aligned_floats(std::vector<float>& storage, std::size_t n, std::size_t misalign,
                      float fill) {
  storage.assign(n + 16 + misalign, fill);
  const auto addr = reinterpret_cast<std::uintptr_t>(storage.data());
  return storage.data() + (64 - addr % 64) % 64 / sizeof(float) + misalign;
}

}  // namespace

TEST_CASE("split_heads and merge_heads move every element to its place", "[reshape]") {
  for (const Dims& t : shapes()) {
    INFO("B" << t.b << " S" << t.s << " H" << t.h << " d" << t.d);
    const auto x = mha::test::random_vector(t.n(), t.n());
    std::vector<float> y(t.n(), -7.f), back(t.n(), -7.f);
    mha::split_heads(t.b, t.s, t.h, t.d, x.data(), y.data());
    CHECK(split_errors(t, x.data(), y.data()) == 0);
    mha::merge_heads(t.b, t.s, t.h, t.d, y.data(), back.data());
    CHECK(back == x);
  }
}

TEST_CASE("split_qkv splits a packed projection in one call", "[reshape]") {
  for (const Dims& t : shapes()) {
    INFO("B" << t.b << " S" << t.s << " H" << t.h << " d" << t.d);
    const auto qkv = mha::test::random_vector(3 * t.n(), 3 * t.n());
    std::vector<float> q(t.n(), -7.f), k(t.n(), -7.f), v(t.n(), -7.f);
    const mha_status st =
        mha_split_qkv(t.b, t.s, t.h, t.d, qkv.data(), q.data(), k.data(), v.data());
    INFO(mha_last_error());
    REQUIRE(st == MHA_OK);
    CHECK(qkv_errors(t, qkv.data(), q.data(), k.data(), v.data()) == 0);
  }
}

// From 4M floats moved on, the copies stream their stores when every head
// row starts a cache line of the output, and use plain stores otherwise
// (lib/reshape/reshape.cpp): both, for each operation, at 1 and 2 threads.
TEST_CASE("out-of-cache reshapes are exact into aligned and misaligned outputs", "[reshape]") {
  const Dims t{1, 2731, 12, 128};  // 4.19M floats: past the streaming threshold
  const Dims tq{1, 911, 12, 128};  // split_qkv moves 3 x 1.4M
  const auto x = mha::test::random_vector(t.n(), 11);
  const auto qkv = mha::test::random_vector(3 * tq.n(), 12);
  std::vector<float> ys, backs, qs, ks, vs;
  for (std::size_t misalign : {0, 1}) {
    for (std::size_t threads : {1, 2}) {
      if (threads > 1 && !mha::test::threads_allowed()) continue;
      INFO("misaligned by " << misalign << " floats, " << threads << " threads");
      mha::set_num_threads(threads);
      float* y = aligned_floats(ys, t.n(), misalign, -7.f);
      float* back = aligned_floats(backs, t.n(), misalign, -7.f);
      mha::split_heads(t.b, t.s, t.h, t.d, x.data(), y);
      CHECK(split_errors(t, x.data(), y) == 0);
      mha::merge_heads(t.b, t.s, t.h, t.d, y, back);
      CHECK(std::equal(x.begin(), x.end(), back));
      float* q = aligned_floats(qs, tq.n(), misalign, -7.f);
      float* k = aligned_floats(ks, tq.n(), misalign, -7.f);
      float* v = aligned_floats(vs, tq.n(), misalign, -7.f);
      mha::split_qkv(tq.b, tq.s, tq.h, tq.d, qkv.data(), q, k, v);
      CHECK(qkv_errors(tq, qkv.data(), q, k, v) == 0);
    }
  }
  mha::set_num_threads(0);
}

TEST_CASE("reshape is identical at every thread count", "[reshape][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  const Dims t{2, 130, 12, 64};
  const auto x = mha::test::random_vector(t.n(), 5);
  std::vector<float> ref(t.n()), got(t.n());
  std::vector<float> ref_m(t.n()), got_m(t.n());
  mha::set_num_threads(1);
  mha::split_heads(t.b, t.s, t.h, t.d, x.data(), ref.data());
  mha::merge_heads(t.b, t.s, t.h, t.d, x.data(), ref_m.data());
  for (std::size_t n : {2, 0}) {
    mha::set_num_threads(n);
    mha::split_heads(t.b, t.s, t.h, t.d, x.data(), got.data());
    mha::merge_heads(t.b, t.s, t.h, t.d, x.data(), got_m.data());
    CHECK(got == ref);
    CHECK(got_m == ref_m);
  }
  mha::set_num_threads(0);
}

TEST_CASE("reshape C API rejects bad arguments", "[reshape]") {
  std::vector<float> x(96, 1.f), y(96, 0.f);
  auto expect_invalid = [&](mha_status st, const char* text) {
    CHECK(st == MHA_INVALID_ARGUMENT);
    CHECK(std::string(mha_last_error()).find(text) != std::string::npos);
    CHECK(y == std::vector<float>(96, 0.f));
  };
  expect_invalid(mha_split_heads(1, 2, 3, 4, nullptr, y.data()), "null");
  expect_invalid(mha_merge_heads(1, 2, 3, 4, x.data(), nullptr), "null");
  expect_invalid(mha_split_heads(1, 2, 3, 4, x.data(), x.data() + 5), "overlaps");
  expect_invalid(mha_split_heads(SIZE_MAX / 2, 2, 3, 4, x.data(), y.data()), "overflows");
  expect_invalid(mha_split_qkv(1, 2, 2, 4, x.data(), y.data(), y.data() + 8, y.data() + 40),
                 "overlap each other");
  expect_invalid(mha_split_qkv(1, 2, 2, 4, x.data(), x.data() + 40, y.data(), y.data() + 16),
                 "overlaps qkv");
  CHECK(mha_split_heads(0, 2, 3, 4, nullptr, nullptr) == MHA_OK);  // empty: nothing to do
}
