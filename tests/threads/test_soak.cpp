// Concurrency soak: 16 threads at once. Twelve workers each mix forwards on
// one shared attention object, packed GEMMs on one shared packed B and steps
// on a KV cache of their own; four others create and destroy attention
// objects and caches (running a forward on each), toggle mha_set_num_threads
// and toggle mha_set_isa. Every worker result must equal, bit for bit, the
// same computation run serially beforehand: objects keep the ISA they were
// created with and results do not depend on the thread count, so neither
// toggle may change a bit. A churned object's forward must equal the serial
// result for one of the ISAs this CPU has (the ISA it was created under).
//
// Bounded twice: kIterations rounds per worker, and a deadline (MHA_SOAK_SECONDS,
// default 3) after which workers stop early, so the sanitizer builds stay
// short; every worker completes at least one round either way.
#include <mha/mha.h>
#include <tbb/global_control.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "attention/attention_case.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::AttentionCase;
using mha::test::CaseData;
using mha::test::random_vector;
using Clock = std::chrono::steady_clock;

constexpr int kWorkers = 12, kIterations = 1500;
constexpr std::size_t kCacheLen = 160;

double soak_seconds() {
  const char* v = std::getenv("MHA_SOAK_SECONDS");
  const double s = v != nullptr ? std::strtod(v, nullptr) : 3.0;
  return s > 0 ? s : 3.0;
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

// The shared problems: a masked forward large enough for the core to use more
// than one thread, a small one, and one with attention weights.
std::vector<AttentionCase> shared_cases() {
  std::vector<AttentionCase> cases(3);
  for (auto& c : cases) c.config = mha_config{64, 4, 0, 0, 2};
  cases[0].batch = 2;
  cases[0].q_len = cases[0].kv_len = 128;
  cases[0].causal = cases[0].padding = true;
  cases[0].seed = 41;
  cases[1].q_len = 5;
  cases[1].kv_len = 33;
  cases[1].additive = 2;
  cases[1].seed = 42;
  cases[2].batch = 2;
  cases[2].q_len = 17;
  cases[2].kv_len = 40;
  cases[2].weights_out = mha::test::WeightsOut::per_head;
  cases[2].seed = 43;
  return cases;
}

std::vector<float> run_case(const mha::MultiheadAttention& attn, const AttentionCase& c,
                            const CaseData& d) {
  mha::test::CaseResult r = mha::test::run_library(attn, c, d);
  r.out.insert(r.out.end(), r.weights.begin(), r.weights.end());
  return r.out;
}

// A worker's KV-cache schedule (by worker id): chunked prefill, single steps,
// a truncation and more steps; all outputs concatenated.
std::vector<float> run_cache(const mha_attention* attn, int worker, const std::vector<float>& x) {
  const std::size_t E = 64;
  mha_kv_cache* raw = nullptr;
  if (mha_kv_cache_create(attn, 1, kCacheLen, &raw) != MHA_OK) return {};
  std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)> cache(raw, mha_kv_cache_destroy);
  std::vector<float> all;
  auto step = [&](std::size_t t0, std::size_t n) {
    std::vector<float> out(n * E);
    if (mha_attention_step(attn, cache.get(), n, &x[t0 * E], &x[t0 * E], &x[t0 * E], out.data()) !=
        MHA_OK)
      return false;
    all.insert(all.end(), out.begin(), out.end());
    return true;
  };
  const std::size_t prefill = 20 + 7 * static_cast<std::size_t>(worker % 5);
  bool ok = step(0, prefill);
  for (std::size_t t = prefill; ok && t < prefill + 6; ++t) ok = step(t, 1);
  ok = ok && mha_kv_cache_truncate(cache.get(), prefill + 2) == MHA_OK;
  ok = ok && step(prefill + 2, 9) && step(prefill + 11, 1);
  return ok ? all : std::vector<float>{};
}

}  // namespace

TEST_CASE("concurrent soak: forwards, cache steps, object churn and ISA/thread toggles",
          "[threads][soak]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user, MHA_TEST_SINGLE_THREAD=1)");
    return;
  }
  tbb::global_control wide(tbb::global_control::max_allowed_parallelism, 32);
  const std::vector<std::string> all_isas = isas();
  REQUIRE(mha_set_isa(nullptr) == MHA_OK);
  mha_set_num_threads(1);

  // Serial expectations.
  const std::vector<AttentionCase> cases = shared_cases();
  std::vector<CaseData> data;
  data.reserve(cases.size());  // each CaseData's mask points into its own vectors
  for (const auto& c : cases) data.emplace_back(c);
  const mha::MultiheadAttention shared(cases[0].config, data[0].w.view());
  std::vector<std::vector<float>> expect_forward;
  for (std::size_t i = 0; i < cases.size(); ++i)
    expect_forward.push_back(run_case(shared, cases[i], data[i]));
  const std::vector<float> tokens = random_vector(kCacheLen * 64, 44);
  std::vector<std::vector<float>> expect_cache;
  for (int w = 0; w < kWorkers; ++w) expect_cache.push_back(run_cache(shared.handle(), w, tokens));
  for (const auto& e : expect_cache) REQUIRE(!e.empty());

  const std::size_t m = 37, n = 70, k = 50;
  const std::vector<float> a = random_vector(m * k, 45), b = random_vector(k * n, 46);
  mha_sgemm_packed_b* packed_raw = nullptr;
  REQUIRE(mha_sgemm_pack_b('N', k, n, b.data(), n, &packed_raw) == MHA_OK);
  std::unique_ptr<mha_sgemm_packed_b, decltype(&mha_sgemm_packed_b_destroy)> packed(
      packed_raw, mha_sgemm_packed_b_destroy);
  auto gemm = [&] {
    std::vector<float> c(m * n, 1.f);
    if (mha_sgemm_packed('N', m, 1.f, a.data(), k, packed.get(), 0.5f, c.data(), n, nullptr) !=
        MHA_OK)
      c.clear();
    return c;
  };
  const std::vector<float> expect_gemm = gemm();

  // A churned object: the small case's config, its forward once per ISA.
  const AttentionCase& churn_case = cases[1];
  std::vector<std::vector<float>> expect_churn;
  for (const std::string& isa : all_isas) {
    REQUIRE(mha_set_isa(isa.c_str()) == MHA_OK);
    const mha::MultiheadAttention fresh(churn_case.config, data[1].w.view());
    expect_churn.push_back(run_case(fresh, churn_case, data[1]));
  }
  REQUIRE(mha_set_isa(nullptr) == MHA_OK);
  mha_set_num_threads(0);

  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(soak_seconds()));
  std::atomic<int> workers_left{kWorkers};
  std::vector<int> rounds(kWorkers, 0), mismatches(kWorkers, 0);
  std::atomic<int> churned{0}, churn_mismatches{0}, toggle_failures{0};
  std::vector<std::thread> pool;
  for (int w = 0; w < kWorkers; ++w)
    pool.emplace_back([&, w] {
      // A caller arena wider than the cores, so the thread toggle matters.
      tbb::task_arena arena(4);
      arena.execute([&] {
        for (int r = 0; r < kIterations && (r == 0 || Clock::now() < deadline); ++r) {
          const std::size_t i = static_cast<std::size_t>(w + r) % cases.size();
          try {
            if (!same_bits(run_case(shared, cases[i], data[i]), expect_forward[i])) ++mismatches[w];
          } catch (...) {
            ++mismatches[w];
          }
          if (!same_bits(run_cache(shared.handle(), w, tokens), expect_cache[w])) ++mismatches[w];
          if (!same_bits(gemm(), expect_gemm)) ++mismatches[w];
          ++rounds[w];
        }
      });
      --workers_left;
    });
  for (int t = 0; t < 2; ++t)
    pool.emplace_back([&] {
      while (workers_left.load() > 0) {
        try {
          const mha::MultiheadAttention fresh(churn_case.config, data[1].w.view());
          mha_kv_cache* cache = nullptr;
          if (mha_kv_cache_create(fresh.handle(), 2, 64, &cache) != MHA_OK) ++churn_mismatches;
          const std::vector<float> got = run_case(fresh, churn_case, data[1]);
          bool any = false;
          for (const auto& e : expect_churn) any = any || same_bits(got, e);
          if (!any) ++churn_mismatches;
          mha_kv_cache_destroy(cache);
          ++churned;
        } catch (...) {
          ++churn_mismatches;
        }
      }
    });
  pool.emplace_back([&] {
    const std::size_t counts[] = {0, 1, 2, 3, 8};
    for (unsigned i = 0; workers_left.load() > 0; ++i) {
      mha_set_num_threads(counts[i % 5]);
      std::this_thread::yield();
    }
  });
  pool.emplace_back([&] {
    for (unsigned i = 0; workers_left.load() > 0; ++i) {
      const char* isa = i % (all_isas.size() + 1) == all_isas.size()
                            ? nullptr
                            : all_isas[i % (all_isas.size() + 1)].c_str();
      if (mha_set_isa(isa) != MHA_OK) ++toggle_failures;
      std::this_thread::yield();
    }
  });
  for (auto& th : pool) th.join();
  mha_set_num_threads(0);
  REQUIRE(mha_set_isa(nullptr) == MHA_OK);

  for (int w = 0; w < kWorkers; ++w) {
    INFO("worker " << w << ": " << rounds[w] << " rounds");
    CHECK(rounds[w] >= 1);
    CHECK(mismatches[w] == 0);
  }
  INFO(churned.load() << " objects churned");
  CHECK(churned.load() >= 1);
  CHECK(churn_mismatches.load() == 0);
  CHECK(toggle_failures.load() == 0);
}
