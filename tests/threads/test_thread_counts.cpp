// Bit-identity across real thread counts, beyond the machine's cores.
//
// The [threads] cases of the other suites compare 1, 2 and 4 threads through
// mha_set_num_threads, but the effective count is capped by the caller's
// arena, which oneTBB sizes to the cores: on a 2-core CI machine "4" runs on 2.
// Here oneTBB's global limit is raised (global_control) and every computation
// runs inside a task_arena wide enough for the count under test, so 3, 5, 8,
// 16 and 32 threads really exist (oversubscribed). Two ways of reaching a
// count are covered: mha_set_num_threads(n) inside a 32-wide caller arena
// (the library runs in an arena of its own of n), and a caller arena of 3 or
// 7 with the library's limit at 0 (the library runs in the caller's arena).
// Every ISA this CPU has is swept with mha_set_isa.
//
// The attention core uses at most max(1, flops / 2e6) threads, and no more
// than its tasks (threads_for in lib/common/parallel.cpp, called by
// plan_core in lib/attention/core/plan.cpp), so the shapes below allow about 10
// to 33 threads over 16 to 64 core tasks; higher counts still change which
// thread runs which task, which is what a thread-dependent result would show
// up under.
#include <mha/mha.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::AttentionCase;
using mha::test::CaseData;
using mha::test::random_vector;
using mha::test::WeightsOut;

constexpr int kWidest = 32;

// How a computation is run: a caller arena of `arena` threads with the
// library's limit set to `limit` (0: the arena decides).
struct Setting {
  int arena;
  std::size_t limit;
  std::string name() const {
    return "arena " + std::to_string(arena) + ", mha_set_num_threads(" + std::to_string(limit) +
           ")";
  }
};

// Below MHA_TEST_SCALE 1 (the sanitizer stages, where every call is ~10x
// slower) a subset: one library-arena count below the cores' double, one
// above, and one caller arena.
const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = {{kWidest, 2},  {kWidest, 3},  {kWidest, 5}, {kWidest, 8},
                                           {kWidest, 16}, {kWidest, 32}, {3, 0},       {7, 0}};
  static const std::vector<Setting> reduced = {{kWidest, 3}, {kWidest, 8}, {7, 0}};
  return mha::test::full_scale() ? all : reduced;
}

std::vector<std::string> isas() {
  std::vector<std::string> out;
  for (const char* isa : {"avx512", "avx2", "neon", "scalar"})
    if (mha_isa_supported(isa)) out.emplace_back(isa);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Runs `compute` once single-threaded (the reference bits), then under every
// Setting, on every ISA, and requires the same bits each time. The library's
// ISA and thread limit are restored afterwards.
void check_invariant(const std::function<std::vector<float>()>& compute) {
  tbb::global_control wide(tbb::global_control::max_allowed_parallelism, kWidest);
  for (const std::string& isa : isas()) {
    INFO("ISA " << isa);
    REQUIRE(mha_set_isa(isa.c_str()) == MHA_OK);
    mha_set_num_threads(1);
    const std::vector<float> serial = compute();
    REQUIRE(!serial.empty());
    for (const Setting& s : settings()) {
      INFO(s.name());
      mha_set_num_threads(s.limit);
      tbb::task_arena arena(s.arena);
      std::size_t seen_threads = 0;
      const std::vector<float> got = arena.execute([&] {
        seen_threads = mha_get_num_threads();
        return compute();
      });
      // The library must see the count under test, or this would compare
      // nothing new.
      CHECK(seen_threads == (s.limit != 0 ? s.limit : static_cast<std::size_t>(s.arena)));
      CHECK(same_bits(serial, got));
    }
  }
  mha_set_num_threads(0);
  REQUIRE(mha_set_isa(nullptr) == MHA_OK);
}

// One attention problem created fresh per call, so the object is packed on
// the ISA under test (an object keeps the ISA it was created with).
std::vector<float> forward(const AttentionCase& c) {
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  mha::test::CaseResult r = mha::test::run_library(attn, c, d);
  r.out.insert(r.out.end(), r.weights.begin(), r.weights.end());
  return r.out;
}

AttentionCase make_case(mha_config config, std::size_t batch, std::size_t q_len, std::size_t kv_len,
                        std::uint64_t seed) {
  AttentionCase c;
  c.config = config;
  c.batch = batch;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.seed = seed;
  return c;
}

bool skip_without_threads() {
  if (mha::test::threads_allowed()) return false;
  WARN("skipped: threads are not allowed here (qemu-user, MHA_TEST_SINGLE_THREAD=1)");
  return true;
}

}  // namespace

TEST_CASE("threads: self-attention is bit-identical at 1 to 32 threads and in caller arenas",
          "[threads][invariance]") {
  if (skip_without_threads()) return;
  AttentionCase c = make_case({128, 4, 0, 0, 0}, 2, 256, 256, 11);
  c.self = true;
  c.causal = true;
  c.padding = true;
  check_invariant([&] { return forward(c); });
}

TEST_CASE("threads: cross-attention (kdim, vdim, per-head additive mask) is bit-identical",
          "[threads][invariance]") {
  if (skip_without_threads()) return;
  AttentionCase c = make_case({128, 4, 48, 80, 0}, 2, 200, 300, 12);
  c.additive = 2;
  check_invariant([&] { return forward(c); });
}

TEST_CASE("threads: GQA is bit-identical", "[threads][invariance]") {
  if (skip_without_threads()) return;
  AttentionCase c = make_case({128, 8, 0, 0, 2}, 1, 256, 256, 13);
  c.causal = true;
  check_invariant([&] { return forward(c); });
}

TEST_CASE("threads: attention weights (per head and averaged) are bit-identical",
          "[threads][invariance]") {
  if (skip_without_threads()) return;
  for (WeightsOut wo : {WeightsOut::per_head, WeightsOut::averaged}) {
    AttentionCase c = make_case({128, 4, 0, 0, 2}, 2, 128, 160, 14);
    c.padding = true;
    c.additive = 1;
    c.weights_out = wo;
    check_invariant([&] { return forward(c); });
  }
}

TEST_CASE("threads: split-KV forward (16 queries, 4096 keys) is bit-identical",
          "[threads][invariance]") {
  if (skip_without_threads()) return;
  // 8 heads x 1 query block = 8 tasks, fewer than the 64 the core aims for,
  // and 4096 >= 2 x 512 keys: the keys split into 8 chunks (plan_core). Small
  // kdim and vdim keep the key and value projections cheap.
  AttentionCase c = make_case({256, 8, 16, 16, 0}, 1, 16, 4096, 15);
  c.padding = true;
  c.causal = true;
  check_invariant([&] { return forward(c); });
}

TEST_CASE("threads: KV-cache chunked prefill and decode steps are bit-identical",
          "[threads][invariance]") {
  if (skip_without_threads()) return;
  // Prefill 1100 positions in chunks of 300 (the last one short), then four
  // one-token steps over > 1024 cached keys (split-KV decode), and a
  // truncation followed by a re-step.
  const mha_config cfg{128, 8, 0, 0, 4};
  const mha::test::RandomWeights w(cfg, true, 16);
  const std::size_t batch = 2, len = 1104, E = 128;
  const std::vector<float> x = random_vector(batch * len * E, 17);
  check_invariant([&] {
    const mha_weights wv = w.view();
    mha_attention* raw = nullptr;
    REQUIRE(mha_attention_create(&cfg, &wv, &raw) == MHA_OK);
    std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)> attn(raw,
                                                                          mha_attention_destroy);
    mha_kv_cache* cache_raw = nullptr;
    REQUIRE(mha_kv_cache_create(attn.get(), batch, len, &cache_raw) == MHA_OK);
    std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)> cache(cache_raw,
                                                                         mha_kv_cache_destroy);
    std::vector<float> all;
    auto step = [&](std::size_t t0, std::size_t n) {
      std::vector<float> in(batch * n * E), out(batch * n * E);
      for (std::size_t b = 0; b < batch; ++b)
        std::memcpy(&in[b * n * E], &x[(b * len + t0) * E], n * E * sizeof(float));
      REQUIRE(mha_attention_step(attn.get(), cache.get(), n, in.data(), in.data(), in.data(),
                                 out.data()) == MHA_OK);
      all.insert(all.end(), out.begin(), out.end());
    };
    for (std::size_t t0 = 0; t0 < 1100; t0 += 300) step(t0, std::min<std::size_t>(300, 1100 - t0));
    for (std::size_t t = 1100; t < 1104; ++t) step(t, 1);
    REQUIRE(mha_kv_cache_truncate(cache.get(), 1101) == MHA_OK);
    step(1101, 3);
    return all;
  });
}

TEST_CASE("threads: sgemm and packed sgemm are bit-identical", "[threads][invariance][gemm]") {
  if (skip_without_threads()) return;
  struct Shape {
    char ta, tb;
    std::size_t m, n, k;
  };
  // GEMV, tall-skinny P·V, square odd sizes, a wide projection, transposes.
  const Shape shapes[] = {{'N', 'N', 1, 3000, 500},  {'N', 'N', 700, 64, 600},
                          {'T', 'N', 129, 129, 129}, {'N', 'T', 300, 500, 200},
                          {'T', 'T', 257, 385, 96},  {'N', 'N', 64, 2304, 96}};
  for (const Shape& s : shapes) {
    INFO("transa " << s.ta << " transb " << s.tb << " m " << s.m << " n " << s.n << " k " << s.k);
    const std::size_t lda = s.ta == 'N' ? s.k + 3 : s.m + 1, ldb = s.tb == 'N' ? s.n : s.k + 5;
    const std::vector<float> a = random_vector((s.ta == 'N' ? s.m : s.k) * lda, s.m + 1);
    const std::vector<float> b = random_vector((s.tb == 'N' ? s.k : s.n) * ldb, s.n + 2);
    const std::vector<float> c0 = random_vector(s.m * s.n, s.k + 3);
    const std::vector<float> bias = random_vector(s.n, s.k + 4);
    check_invariant([&] {
      std::vector<float> c = c0;
      REQUIRE(mha_sgemm(s.ta, s.tb, s.m, s.n, s.k, 0.75f, a.data(), lda, b.data(), ldb, 0.5f,
                        c.data(), s.n) == MHA_OK);
      mha_sgemm_packed_b* packed = nullptr;
      REQUIRE(mha_sgemm_pack_b(s.tb, s.k, s.n, b.data(), ldb, &packed) == MHA_OK);
      std::vector<float> cp = c0;
      const mha_status st = mha_sgemm_packed(s.ta, s.m, 1.25f, a.data(), lda, packed, -1.f,
                                             cp.data(), s.n, bias.data());
      mha_sgemm_packed_b_destroy(packed);
      REQUIRE(st == MHA_OK);
      c.insert(c.end(), cp.begin(), cp.end());
      return c;
    });
  }
}
