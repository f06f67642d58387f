// Hostile sizes and aliasing through the C ABI: sizes whose element or byte
// counts (including the padded and packed layouts the library allocates) wrap
// past SIZE_MAX are MHA_INVALID_ARGUMENT with a message naming the argument;
// every overlap of an output with an input or another output that mha.h does
// not allow is MHA_INVALID_ARGUMENT; and a failing call writes nothing (no
// output element, no handle, no cache length).
#include <dlfcn.h>
#include <mha/mha.h>
#include <pthread.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "common/parallel.hpp"
#include "support/reference.hpp"

// Counts the thread-local destructors registered on one watched thread:
// glibc aborts the process when such a registration runs out of memory, so
// the library must make none.
namespace {
std::atomic<pthread_t> watched{};
std::atomic<bool> watching{false};
std::atomic<int> tls_registrations{0};
}  // namespace

// The library is linked statically into this binary, so its registrations
// call this definition; the real one is libstdc++'s.
extern "C" int __cxa_thread_atexit(void (*dtor)(void*), void* obj, void* dso) noexcept {
  using Impl = int (*)(void (*)(void*), void*, void*);
  static const auto next = reinterpret_cast<Impl>(dlsym(RTLD_NEXT, "__cxa_thread_atexit"));
  if (watching.load() && pthread_equal(pthread_self(), watched.load())) tls_registrations++;
  return next(dtor, obj, dso);
}

namespace {

using mha::test::random_vector;

constexpr float kSentinel = -12345.f;
constexpr std::size_t kMax = SIZE_MAX;

// Expects MHA_INVALID_ARGUMENT with a message containing `what`.
void expect_invalid(mha_status st, const char* what) {
  INFO("mha_last_error: " << mha_last_error());
  CHECK(st == MHA_INVALID_ARGUMENT);
  CHECK(std::string(mha_last_error()).find(what) != std::string::npos);
}

bool untouched(const std::vector<float>& v) {
  for (float x : v) {
    if (x != kSentinel) return false;
  }
  return true;
}

struct Model {
  mha_config cfg{};
  std::vector<float> wq, wk, wv, wo;
  std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)> attn{nullptr,
                                                                        mha_attention_destroy};
  Model(std::size_t E, std::size_t H) {
    cfg.embed_dim = E;
    cfg.num_heads = H;
    wq = random_vector(E * E, 1, -0.3f, 0.3f);
    wk = random_vector(E * E, 2, -0.3f, 0.3f);
    wv = random_vector(E * E, 3, -0.3f, 0.3f);
    wo = random_vector(E * E, 4, -0.3f, 0.3f);
    const mha_weights w{wq.data(), wk.data(), wv.data(), wo.data(),
                        nullptr,   nullptr,   nullptr,   nullptr};
    mha_attention* a = nullptr;
    REQUIRE(mha_attention_create(&cfg, &w, &a) == MHA_OK);
    attn.reset(a);
  }
};

mha_kv_cache* const kNotWritten = reinterpret_cast<mha_kv_cache*>(std::uintptr_t{0x5a5a});

}  // namespace

TEST_CASE("overflow: KV cache whose padded layout wraps (regression)", "[hardening]") {
  // The unpadded count batch*max_len*kv_dim*2 floats fits; the padded V rows
  // (ldv = 16 floats) and K strips do not.
  for (const auto& [E, max_len] : {std::pair<std::size_t, std::size_t>{1, 2170205185142300256u},
                                   {3, 728160950278008672u},
                                   {64, kMax / 64},
                                   {8, kMax - 1}}) {
    Model m(E, 1);
    mha_kv_cache* c = kNotWritten;
    INFO("E " << E << " max_len " << max_len);
    expect_invalid(mha_kv_cache_create(m.attn.get(), 1, max_len, &c), "KV cache");
    CHECK(c == kNotWritten);
  }
  Model m(8, 2);
  mha_kv_cache* c = kNotWritten;
  expect_invalid(mha_kv_cache_create(m.attn.get(), kMax / 2, 4, &c), "KV cache");
  CHECK(c == kNotWritten);
}

TEST_CASE("overflow: KV cache larger than the machine is out of memory, untouched", "[hardening]") {
  // 2^40 positions x 2 x 16 floats: 128 TiB, representable but never backable.
  Model m(16, 1);
  mha_kv_cache* c = kNotWritten;
  CHECK(mha_kv_cache_create(m.attn.get(), 1, std::size_t{1} << 40, &c) == MHA_OUT_OF_MEMORY);
  CHECK(std::string(mha_last_error()).size() > 0);
  CHECK(c == kNotWritten);
}

TEST_CASE("overflow: sgemm sizes whose bytes wrap (regression)", "[hardening]") {
  std::vector<float> a(64, 1.f), b(64, 1.f), c(64, kSentinel);
  const std::size_t big = std::size_t{1} << 62;
  // 2^62 floats of B and C are 2^64 bytes.
  expect_invalid(
      mha_sgemm('N', 'N', 1, big, 1, 1.f, a.data(), 1, b.data(), big, 0.f, c.data(), big), "b");
  expect_invalid(mha_sgemm('N', 'N', big, 1, 1, 1.f, a.data(), 1, b.data(), 1, 0.f, c.data(), 1),
                 "a");
  // (rows - 1) * ld + cols wraps.
  expect_invalid(
      mha_sgemm('N', 'N', 2, 2, 2, 1.f, a.data(), kMax / 2 + 1, b.data(), 2, 0.f, c.data(), 2),
      "a");
  expect_invalid(
      mha_sgemm('N', 'T', 2, 3, 2, 1.f, a.data(), 2, b.data(), kMax - 1, 0.f, c.data(), 3), "b");
  expect_invalid(mha_sgemm('N', 'N', 3, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), kMax),
                 "c");
  // Above the largest object though representable as bytes.
  expect_invalid(
      mha_sgemm('T', 'N', 2, 2, kMax / 8, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2), "a");
  CHECK(untouched(c));
}

TEST_CASE("overflow: sgemm pack_b and packed sizes that wrap (regression)", "[hardening]") {
  std::vector<float> b(64, 1.f), a(64, 1.f), c(64, kSentinel);
  mha_sgemm_packed_b* const sentinel = reinterpret_cast<mha_sgemm_packed_b*>(std::uintptr_t{0x77});
  mha_sgemm_packed_b* p = sentinel;
  // n rounded up to whole strips wrapped to 0 and the packer wrote past its
  // allocation; B's own bytes already wrap, and the message names b.
  expect_invalid(mha_sgemm_pack_b('T', 1, kMax, b.data(), 1, &p), "b");
  expect_invalid(mha_sgemm_pack_b('T', 1, kMax - 3, b.data(), 1, &p), "b");
  // k x padded n wraps (n = 3 pads to a strip of nr >= 4 columns).
  expect_invalid(mha_sgemm_pack_b('N', kMax / 3, 3, b.data(), 3, &p), "b");
  expect_invalid(mha_sgemm_pack_b('T', 3, kMax / 8, b.data(), 3, &p), "b");
  CHECK(p == sentinel);
  // Representable, but 4 TiB packed: out of memory before B is read.
  const std::size_t t = std::size_t{1} << 20;
  CHECK(mha_sgemm_pack_b('N', t, t, b.data(), t, &p) == MHA_OUT_OF_MEMORY);
  CHECK(p == sentinel);

  REQUIRE(mha_sgemm_pack_b('N', 4, 4, b.data(), 4, &p) == MHA_OK);
  std::unique_ptr<mha_sgemm_packed_b, decltype(&mha_sgemm_packed_b_destroy)> packed(
      p, mha_sgemm_packed_b_destroy);
  const std::size_t big = std::size_t{1} << 62;
  expect_invalid(mha_sgemm_packed('N', big, 1.f, a.data(), 4, p, 0.f, c.data(), 4, nullptr), "a");
  expect_invalid(mha_sgemm_packed('N', 2, 1.f, a.data(), 4, p, 0.f, c.data(), kMax, nullptr), "c");
  CHECK(untouched(c));
}

TEST_CASE("overflow: attention create, forward and step", "[hardening]") {
  std::vector<float> w(64, 0.1f);
  const mha_weights weights{w.data(), w.data(), w.data(), w.data(),
                            nullptr,  nullptr,  nullptr,  nullptr};
  mha_attention* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x99});
  mha_attention* a = sentinel;
  mha_config cfg{};
  // E x E floats are 2^62 bytes each; the three packed input sections are
  // 3 x 2^62 bytes.
  cfg.embed_dim = std::size_t{1} << 30;
  cfg.num_heads = 1;
  expect_invalid(mha_attention_create(&cfg, &weights, &a), "packed weights");
  // E x E floats above the largest object.
  cfg.embed_dim = std::size_t{3} << 30;
  expect_invalid(mha_attention_create(&cfg, &weights, &a), "q_weight");
  // E rounded up to whole strips wraps.
  cfg.embed_dim = kMax;
  expect_invalid(mha_attention_create(&cfg, &weights, &a), "q_weight");
  // Representable, but 12 TiB of packed weights: out of memory before the
  // weights are read.
  cfg.embed_dim = std::size_t{1} << 20;
  CHECK(mha_attention_create(&cfg, &weights, &a) == MHA_OUT_OF_MEMORY);
  CHECK(a == sentinel);

  Model m(8, 2);
  std::vector<float> x(64, 0.5f), out(64, kSentinel), wts(64, kSentinel);
  const std::size_t big = std::size_t{1} << 32;
  // Per-head scores q_len x kv_len wrap.
  expect_invalid(mha_attention_forward(m.attn.get(), 1, big, big, x.data(), x.data(), x.data(),
                                       nullptr, out.data(), nullptr, 0),
                 "scores");
  // The query bytes exceed the largest object.
  expect_invalid(mha_attention_forward(m.attn.get(), kMax / 16, 1, 1, x.data(), x.data(), x.data(),
                                       nullptr, out.data(), wts.data(), 0),
                 "query");
  mha_mask mask{};
  mask.additive = x.data();
  mask.additive_per_head = 1;
  expect_invalid(mha_attention_forward(m.attn.get(), kMax / 4, 2, 2, x.data(), x.data(), x.data(),
                                       &mask, out.data(), nullptr, 0),
                 "query");
  // length + n_new would wrap past SIZE_MAX.
  mha_kv_cache* c = nullptr;
  REQUIRE(mha_kv_cache_create(m.attn.get(), 1, 4, &c) == MHA_OK);
  std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)> cache(c, mha_kv_cache_destroy);
  REQUIRE(mha_attention_step(m.attn.get(), c, 1, x.data(), x.data(), x.data(), wts.data()) ==
          MHA_OK);
  wts.assign(wts.size(), kSentinel);
  expect_invalid(
      mha_attention_step(m.attn.get(), c, kMax, x.data(), x.data(), x.data(), out.data()),
      "max_len");
  CHECK(mha_kv_cache_length(c) == 1);
  // Valid sizes whose working memory (2^36 rows of projections) exceeds the
  // machine: out of memory before any input is read or output written
  // (in place, as the extents are too large for distinct buffers).
  const std::size_t rows = std::size_t{1} << 36;
  const std::vector<float> x0 = x;
  const mha_status huge = mha_attention_forward(m.attn.get(), 1, rows, 1, x.data(), x.data(),
                                                x.data(), nullptr, x.data(), nullptr, 0);
  INFO("mha_last_error: " << mha_last_error());
  CHECK(huge == MHA_OUT_OF_MEMORY);
  CHECK(x == x0);
  CHECK(untouched(out));
  CHECK(untouched(wts));
}

TEST_CASE("overflow: softmax and reshape", "[hardening]") {
  std::vector<float> x(64, 1.f), y(64, kSentinel);
  expect_invalid(mha_softmax(2, 1, x.data(), kMax / 2, y.data(), 1, nullptr), "x");
  expect_invalid(mha_softmax(3, 1, x.data(), 1, y.data(), kMax / 4, nullptr), "y");
  mha_softmax_options o{};
  o.additive = x.data();
  o.additive_ld = kMax / 2;
  expect_invalid(mha_softmax(2, 1, x.data(), 1, y.data(), 1, &o), "additive");
  // 2^61 floats: representable bytes, above the largest object.
  const std::size_t h = std::size_t{1} << 30;
  expect_invalid(mha_split_heads(h, h, 1, 2, x.data(), y.data()), "split_heads");
  expect_invalid(mha_merge_heads(h, h, 2, 1, x.data(), y.data()), "merge_heads");
  expect_invalid(mha_split_qkv(h, h, 1, 1, x.data(), y.data(), y.data() + 1, y.data() + 2),
                 "split_qkv");
  CHECK(untouched(y));
}

TEST_CASE("overlap: sgemm output overlapping an input (regression)", "[hardening]") {
  const std::size_t n = 200;
  std::vector<float> a = random_vector(n * n, 1), b = random_vector(n * n, 2);
  const std::vector<float> a0 = a, b0 = b;
  // C == B, C == A (wrong at 200^3 before), and partial overlaps.
  expect_invalid(mha_sgemm('N', 'N', 8, 8, 8, 1.f, a.data(), 8, b.data(), 8, 0.f, b.data(), 8),
                 "c overlaps b");
  expect_invalid(mha_sgemm('N', 'N', n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, a.data(), n),
                 "c overlaps a");
  expect_invalid(mha_sgemm('N', 'T', 4, 4, 4, 1.f, a.data(), 4, b.data(), 4, 1.f, b.data() + 15, 4),
                 "c");
  expect_invalid(mha_sgemm('N', 'N', 4, 4, 4, 1.f, a.data() + 3, 4, b.data(), 4, 0.f, a.data(), 4),
                 "c overlaps a");
  CHECK(a == a0);
  CHECK(b == b0);
  // Adjacent but disjoint ranges are fine: C right after A's last element.
  std::vector<float> buf(32, 0.5f);
  CHECK(mha_sgemm('N', 'N', 4, 4, 4, 1.f, buf.data(), 4, b.data(), 4, 0.f, buf.data() + 16, 4) ==
        MHA_OK);
}

TEST_CASE("overlap: sgemm_packed output overlapping A or bias (regression)", "[hardening]") {
  const std::size_t n = 64;
  std::vector<float> a = random_vector(n * n, 1), b = random_vector(n * n, 2);
  std::vector<float> bias = random_vector(n, 3);
  mha_sgemm_packed_b* p = nullptr;
  REQUIRE(mha_sgemm_pack_b('N', n, n, b.data(), n, &p) == MHA_OK);
  std::unique_ptr<mha_sgemm_packed_b, decltype(&mha_sgemm_packed_b_destroy)> packed(
      p, mha_sgemm_packed_b_destroy);
  const std::vector<float> a0 = a, bias0 = bias;
  expect_invalid(mha_sgemm_packed('N', n, 1.f, a.data(), n, p, 0.f, a.data(), n, nullptr),
                 "c overlaps a");
  expect_invalid(mha_sgemm_packed('T', 8, 1.f, a.data(), 8, p, 0.f, a.data() + 100, n, nullptr),
                 "c overlaps a");
  expect_invalid(mha_sgemm_packed('N', 1, 1.f, a.data(), n, p, 0.f, bias.data(), n, bias.data()),
                 "c overlaps bias");
  CHECK(a == a0);
  CHECK(bias == bias0);
}

TEST_CASE("overlap: attention forward outputs and inputs (regression)", "[hardening]") {
  const std::size_t E = 16, H = 2, B = 2, L = 5;
  Model m(E, H);
  std::vector<float> x = random_vector(B * L * E, 7);
  const std::vector<float> x0 = x;
  std::vector<float> out(B * L * E, kSentinel), w(B * H * L * L, kSentinel);
  std::vector<float> add(B * H * L * L, 0.f);
  mha_mask mask{};
  mask.additive = add.data();
  const float* q = x.data();
  // attn_weights == out.
  std::vector<float> both(std::max(out.size(), w.size()), kSentinel);
  expect_invalid(
      mha_attention_forward(m.attn.get(), B, L, L, q, q, q, nullptr, both.data(), both.data(), 0),
      "attn_weights overlaps out");
  CHECK(untouched(both));
  // Averaged weights over the additive mask.
  expect_invalid(
      mha_attention_forward(m.attn.get(), B, L, L, q, q, q, &mask, out.data(), add.data(), 1),
      "attn_weights overlaps mask->additive");
  CHECK(add == std::vector<float>(add.size(), 0.f));
  // Weights over an input, out over the mask, out partially over an input.
  expect_invalid(
      mha_attention_forward(m.attn.get(), 1, 1, 1, q, q, q, nullptr, out.data(), x.data() + 3, 0),
      "attn_weights overlaps query");
  expect_invalid(
      mha_attention_forward(m.attn.get(), B, L, L, q, q, q, &mask, add.data(), nullptr, 0),
      "out overlaps mask->additive");
  expect_invalid(mha_attention_forward(m.attn.get(), B, L - 1, L - 1, q, q, q, nullptr,
                                       x.data() + 1, nullptr, 0),
                 "out overlaps query");
  std::vector<unsigned char> pad(B * L, 0);
  mha_mask padmask{};
  padmask.key_padding = pad.data();
  expect_invalid(mha_attention_forward(m.attn.get(), 1, 1, 1, q, q, q, &padmask,
                                       reinterpret_cast<float*>(pad.data()), nullptr, 0),
                 "out overlaps mask->key_padding");
  CHECK(x == x0);
  CHECK(untouched(out));
  CHECK(untouched(w));

  // In place (out == query == key == value) stays allowed and equals the
  // out-of-place result.
  REQUIRE(mha_attention_forward(m.attn.get(), B, L, L, q, q, q, nullptr, out.data(), nullptr, 0) ==
          MHA_OK);
  REQUIRE(mha_attention_forward(m.attn.get(), B, L, L, x.data(), x.data(), x.data(), nullptr,
                                x.data(), nullptr, 0) == MHA_OK);
  CHECK(x == out);
}

TEST_CASE("overlap: attention step, softmax", "[hardening]") {
  const std::size_t E = 8, H = 2;
  Model m(E, H);
  mha_kv_cache* c = nullptr;
  REQUIRE(mha_kv_cache_create(m.attn.get(), 1, 8, &c) == MHA_OK);
  std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)> cache(c, mha_kv_cache_destroy);
  std::vector<float> x = random_vector(2 * E, 5);
  const std::vector<float> x0 = x;
  expect_invalid(mha_attention_step(m.attn.get(), c, 1, x.data(), x.data(), x.data(), x.data() + 1),
                 "out overlaps query");
  CHECK(x == x0);
  CHECK(mha_kv_cache_length(c) == 0);
  std::vector<float> ref(E);
  REQUIRE(mha_attention_step(m.attn.get(), c, 1, x.data(), x.data(), x.data(), ref.data()) ==
          MHA_OK);
  REQUIRE(mha_kv_cache_truncate(c, 0) == MHA_OK);
  REQUIRE(mha_attention_step(m.attn.get(), c, 1, x.data(), x.data(), x.data(), x.data()) == MHA_OK);
  CHECK(std::vector<float>(x.begin(), x.begin() + E) == ref);

  std::vector<float> s = random_vector(16, 6), y(16, kSentinel);
  mha_softmax_options o{};
  o.additive = s.data();
  o.additive_ld = 4;
  const std::vector<float> s0 = s;
  expect_invalid(mha_softmax(4, 4, y.data(), 4, s.data(), 4, &o), "y overlaps additive");
  CHECK(s == s0);
  std::vector<std::size_t> valid(4, 4);
  o.additive = nullptr;
  o.valid_len = valid.data();
  expect_invalid(mha_softmax(1, 4, s.data(), 4, reinterpret_cast<float*>(valid.data()), 4, &o),
                 "y overlaps valid_len");
  CHECK(valid == std::vector<std::size_t>(4, 4));
}

TEST_CASE("atomicity: failed creates write no handle", "[hardening]") {
  Model m(8, 2);
  mha_kv_cache* c = kNotWritten;
  expect_invalid(mha_kv_cache_create(m.attn.get(), 0, 4, &c), "batch");
  expect_invalid(mha_kv_cache_create(nullptr, 1, 4, &c), "attn");
  CHECK(c == kNotWritten);
  mha_attention* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x99});
  mha_attention* a = sentinel;
  mha_config cfg{};
  cfg.embed_dim = 6;
  cfg.num_heads = 4;
  const mha_weights w{};
  expect_invalid(mha_attention_create(&cfg, &w, &a), "embed_dim");
  CHECK(a == sentinel);
}

TEST_CASE("parallel_for: a task that fails on a worker is finished by the caller",
          "[hardening][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: no second thread may be started here");
    return;
  }
  // Tasks that throw std::bad_alloc on any thread but the caller (a worker
  // whose scratch cannot grow), each adding 1 to its own slot when it
  // succeeds: every slot must end at exactly 1 (no task lost, none run
  // twice after succeeding) and nothing may escape to std::terminate.
  constexpr std::size_t kTasks = 64;
  tbb::task_arena arena(4);
  arena.execute([&] {
    const std::thread::id caller = std::this_thread::get_id();
    std::vector<int> runs(kTasks, 0);
    std::atomic<int> worker_failures{0};
    mha::detail::parallel_for(kTasks, 4, [&](std::size_t t) {
      // Keep every thread busy for a moment, so that workers do take tasks.
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      if (std::this_thread::get_id() != caller) {
        worker_failures.fetch_add(1);
        throw std::bad_alloc();
      }
      ++runs[t];
    });
    CHECK(runs == std::vector<int>(kTasks, 1));
    if (worker_failures.load() == 0) WARN("no worker took a task: only the serial path ran");
  });
  // A failure on the calling thread reaches the caller as the exception.
  bool threw = false;
  try {
    mha::detail::parallel_for(kTasks, 4, [&](std::size_t t) {
      if (t == kTasks - 1) throw std::bad_alloc();
    });
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECK(threw);
}

TEST_CASE("per-thread state registers no TLS destructor (regression)", "[hardening]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: no second thread may be started here");
    return;
  }
  // A new thread's first calls: one that grows the scratch and fails with a
  // message, and one that succeeds.
  Model m(16, 2);
  std::vector<float> x = random_vector(4 * 16, 1), out(4 * 16);
  mha_status bad = MHA_OK, good = MHA_INVALID_ARGUMENT;
  mha_set_num_threads(1);
  std::thread t([&] {
    watched.store(pthread_self());
    watching.store(true);
    bad = mha_attention_forward(m.attn.get(), 1, 4, 4, x.data(), x.data(), x.data(), nullptr,
                                nullptr, nullptr, 0);
    good = mha_attention_forward(m.attn.get(), 1, 4, 4, x.data(), x.data(), x.data(), nullptr,
                                 out.data(), nullptr, 0);
    (void)mha_last_error();
    watching.store(false);
  });
  t.join();
  mha_set_num_threads(0);
  CHECK(bad == MHA_INVALID_ARGUMENT);
  CHECK(good == MHA_OK);
  CHECK(tls_registrations.load() == 0);
}
