#include "bench_common.hpp"

#include <mha/mha.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mha/error.hpp>
#include <mha/isa.hpp>
#include <mutex>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "bench_git_rev.hpp"  // generated at build time: MHA_BENCH_GIT_REV
#include "peak.hpp"

#ifdef MHA_BENCH_HAVE_OPENMP
#include <omp.h>
#endif

#ifdef MHA_BENCH_HAVE_OPENBLAS
// Declared here rather than through cblas.h, whose declarations clash with
// other BLAS headers a suite may include.
extern "C" void openblas_set_num_threads(int num_threads);
#endif

namespace mha::bench {
namespace {

using Clock = std::chrono::steady_clock;
using FmaLoop = double (*)(std::uint64_t, float*);

FmaLoop fma_loop_for(Isa isa) {
  switch (isa) {
#if MHA_BENCH_BUILD_AVX512
    case Isa::avx512:
      return detail::avx512::fma_loop;
#endif
#if MHA_BENCH_BUILD_AVX2
    case Isa::avx2:
      return detail::avx2::fma_loop;
#endif
#if MHA_BENCH_BUILD_NEON
    case Isa::neon:
      return detail::neon::fma_loop;
#endif
    default:
      return detail::scalar::fma_loop;
  }
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Runs `loop` for `iterations` on `threads` threads at once; returns the
// aggregate GFLOP/s over the wall time of the slowest thread. One thread runs
// inline and starts none (under qemu-user a second guest thread hangs).
double timed_run(FmaLoop loop, std::uint64_t iterations, int threads) {
  std::vector<float> sinks(static_cast<std::size_t>(threads) * 16);  // a cache line each
  double flops = 0.0;
  const auto t0 = Clock::now();
  if (threads == 1) {
    flops = loop(iterations, &sinks[0]);
  } else {
    std::vector<double> per_thread(static_cast<std::size_t>(threads));
    std::vector<std::thread> pool;
    pool.reserve(per_thread.size());
    for (std::size_t t = 0; t < per_thread.size(); ++t) {
      pool.emplace_back([&, t] { per_thread[t] = loop(iterations, &sinks[t * 16]); });
    }
    for (auto& th : pool) th.join();
    for (double f : per_thread) flops += f;
  }
  const double elapsed = seconds_since(t0);
  benchmark::DoNotOptimize(sinks.data());
  return flops / elapsed * 1e-9;
}

double measure_peak(FmaLoop loop, int threads) {
  // Calibrate on one thread until a run takes >= 5 ms, then size each trial
  // to ~25 ms and keep the best of 8. Short trials, many of them: on a shared
  // machine (2 cores, several users) some trial runs undisturbed, while thread
  // start-up and other processes only ever lower a trial. 200 ms per thread
  // count keeps a binary's start well under a second.
  std::uint64_t iterations = 1u << 14;
  for (;;) {
    float sink = 0.0f;
    const auto t0 = Clock::now();
    loop(iterations, &sink);
    const double s = seconds_since(t0);
    if (s >= 5e-3) {
      iterations = static_cast<std::uint64_t>(static_cast<double>(iterations) * 0.025 / s) + 1;
      break;
    }
    iterations *= 4;
  }
  double best = 0.0;
  for (int trial = 0; trial < 8; ++trial)
    best = std::max(best, timed_run(loop, iterations, threads));
  return best;
}

// STREAM triad a = b + s*c on one thread, in GB/s counted as STREAM does
// (two arrays read, one written; write-allocate traffic not counted). Best of
// 5 passes after a first touch, so page faults (expensive in VMs) are excluded.
double measure_triad_gbps() {
  // 3 x 128 MiB: beyond the private caches of any CPU we target and most of
  // a server L3's per-core share.
  constexpr std::size_t n = std::size_t{32} << 20;
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  const float s = 3.0f;
  double best = 0.0;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = Clock::now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (std::size_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    benchmark::ClobberMemory();
    const double elapsed = seconds_since(t0);
    best = std::max(best, 3.0 * sizeof(float) * static_cast<double>(n) / elapsed * 1e-9);
  }
  benchmark::DoNotOptimize(a.data());
  return best;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

bool has_flag(int argc, char** argv, std::string_view flag) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == flag || arg == std::string(flag) + "=true" || arg == std::string(flag) + "=1") {
      return true;
    }
  }
  return false;
}

}  // namespace

double peak_gflops(int threads) {
  static std::mutex mutex;
  static std::map<std::pair<Isa, int>, double> cache;
  const Isa isa = current_isa();
  const std::lock_guard<std::mutex> lock(mutex);
  auto [it, inserted] = cache.try_emplace({isa, threads}, 0.0);
  if (inserted) it->second = measure_peak(fma_loop_for(isa), threads);
  return it->second;
}

// The bf16 kernel set the library runs now (mha_kernel_name).
std::string_view bf16_kernel() {
  return mha_kernel_name(MHA_BF16);
}

// Whether the bf16 products run faster than fp32 FMAs: on tiles or on
// vdpbf16ps, each with its own peak loop; the widening sets run at the FMA
// rate.
bool bf16_dot() {
  return bf16_kernel() == "avx512_bf16" || bf16_kernel() == "amx_bf16";
}

double peak_bf16_gflops(int threads) {
#if MHA_BUILD_AVX512_BF16 && MHA_BUILD_AMX_BF16
  if (bf16_dot()) {
    static std::mutex mutex;
    static std::map<std::pair<std::string, int>, double> cache;
    const std::lock_guard<std::mutex> lock(mutex);
    const std::string set(bf16_kernel());
    auto [it, inserted] = cache.try_emplace({set, threads}, 0.0);
    if (inserted) {
      it->second = measure_peak(
          set == "amx_bf16" ? detail::amx_bf16::tdpbf16_loop : detail::avx512_bf16::dpbf16_loop,
          threads);
    }
    return it->second;
  }
#endif
  return peak_gflops(threads);
}

void set_flop_counters(benchmark::State& s, double flops_per_iter, int threads, bool bf16) {
  using benchmark::Counter;
  s.counters["GFLOPS"] = Counter(flops_per_iter * 1e-9, Counter::kIsIterationInvariantRate);
  // A rate of (percent of peak per iteration) is the percentage of peak.
  const double peak = bf16 ? peak_bf16_gflops(threads) : peak_gflops(threads);
  s.counters["peak_pct"] =
      Counter(100.0 * flops_per_iter * 1e-9 / peak, Counter::kIsIterationInvariantRate);
}

void set_byte_counters(benchmark::State& s, double bytes_per_iter) {
  using benchmark::Counter;
  s.counters["GBps"] = Counter(bytes_per_iter * 1e-9, Counter::kIsIterationInvariantRate);
}

void set_baseline_threads(int t) {
#ifdef MHA_BENCH_HAVE_OPENBLAS
  openblas_set_num_threads(t);
#endif
#ifdef MHA_BENCH_HAVE_OPENMP
  omp_set_num_threads(t);
#endif
  static_cast<void>(t);
}

void register_benchmark(const std::string& suite, const std::string& config, const char* impl,
                        int threads, std::function<void(benchmark::State&)> fn,
                        benchmark::TimeUnit unit) {
  const std::string name =
      suite + "/" + config + "/" + impl + "/threads:" + std::to_string(threads);
  benchmark::RegisterBenchmark(name.c_str(), std::move(fn))->UseRealTime()->Unit(unit);
}

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<int> bench_threads() {
  const char* env = std::getenv("MHA_BENCH_THREADS");
  const std::string spec = env != nullptr && *env != '\0' ? env : "1,2";
  std::vector<int> out;
  std::size_t pos = 0;
  while (pos <= spec.size()) {
    const std::size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string item = spec.substr(pos, comma - pos);
    char* end = nullptr;
    const long t = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || t < 1 || t > 4096) {
      std::fprintf(stderr,
                   "MHA_BENCH_THREADS=\"%s\": expected a comma-separated list of thread "
                   "counts in [1, 4096], e.g. \"1,2\"\n",
                   spec.c_str());
      std::exit(2);
    }
    if (std::find(out.begin(), out.end(), static_cast<int>(t)) == out.end()) {
      out.push_back(static_cast<int>(t));
    }
    pos = comma + 1;
  }
  return out;
}

}  // namespace mha::bench

int main(int argc, char** argv) {
  // Listing needs no context; skipping it keeps `--benchmark_list_tests` instant.
  const bool list_only = mha::bench::has_flag(argc, argv, "--benchmark_list_tests");
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  mha::Isa isa{};
  try {
    isa = mha::current_isa();
  } catch (const mha::Error& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    // A misspelt MHA_ISA is an error; a valid ISA this CPU or build lacks is
    // a skip, with the tests' convention (77), so ISA sweeps can go on.
    const char* requested = std::getenv("MHA_ISA");
    return requested != nullptr && mha::parse_isa(requested) ? 77 : 2;
  }
  if (!list_only) {
    std::string available;
    for (mha::Isa i : mha::supported_isas()) {
      if (!available.empty()) available += ',';
      available += mha::isa_name(i);
    }
    std::string thread_list;
    for (int t : mha::bench::bench_threads()) {
      if (!thread_list.empty()) thread_list += ',';
      thread_list += std::to_string(t);
    }
    benchmark::AddCustomContext("mha_isa", std::string(mha::isa_name(isa)));
    benchmark::AddCustomContext("mha_isas_available", available);
    benchmark::AddCustomContext("mha_version", MHA_BENCH_VERSION);
    benchmark::AddCustomContext("mha_git_rev", MHA_BENCH_GIT_REV);
    benchmark::AddCustomContext("compiler", MHA_BENCH_COMPILER);
    benchmark::AddCustomContext("mha_bench_threads", thread_list);
    // peak_gflops_1t always; then one per requested count.
    std::vector<int> peak_counts{1};
    for (int t : mha::bench::bench_threads()) {
      if (t != 1) peak_counts.push_back(t);
    }
    for (int t : peak_counts) {
      benchmark::AddCustomContext("peak_gflops_" + std::to_string(t) + "t",
                                  mha::bench::format_number(mha::bench::peak_gflops(t)));
    }
    benchmark::AddCustomContext("mha_bf16_kernel", std::string(mha::bench::bf16_kernel()));
    if (mha::bench::bf16_dot()) {
      for (int t : peak_counts) {
        benchmark::AddCustomContext("peak_bf16_gflops_" + std::to_string(t) + "t",
                                    mha::bench::format_number(mha::bench::peak_bf16_gflops(t)));
      }
    }
    benchmark::AddCustomContext("triad_gbps_1t",
                                mha::bench::format_number(mha::bench::measure_triad_gbps()));
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
