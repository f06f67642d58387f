// Shared harness for the Google Benchmark suites (bench_gemm, bench_softmax,
// bench_attention). It provides main(): the run's context records the ISA,
// the library version and git revision, the compiler, and the measured fp32
// FMA peak and memory bandwidth the percentages are taken against, so a JSON
// record from one machine can be read next to one from another.
//
// Naming contract (bench/report/mha_bench.py parses it):
//   <suite>/<config>/<impl>/threads:<t>
// suite in {gemm, softmax, reshape, attention}; impl in {mha, onednn, openblas,
// plain, memcpy}. Register with ->UseRealTime(): with worker threads doing the
// work, rates over the main thread's CPU time would be inflated.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mha::bench {

// Measured fp32 FMA-loop peak of the current ISA (mha::current_isa(), so
// MHA_ISA is respected), in GFLOP/s, with `threads` threads busy at once.
// Measured once per (ISA, thread count) and cached.
double peak_gflops(int threads);

// The peak bf16 products run against: the measured vdpbf16ps-loop peak where
// mha_kernel_name(MHA_BF16) is "avx512_bf16", else peak_gflops(threads)
// (bf16 is converted and multiplied in fp32 there). Cached likewise.
double peak_bf16_gflops(int threads);

// Sets the counters every compute benchmark reports; call after the loop.
//   GFLOPS:   GFLOP/s (flops_per_iter * iterations / real time, in units of 1e9)
//   peak_pct: 100 * achieved / peak_gflops(threads), or peak_bf16_gflops for
//             a bf16 product
void set_flop_counters(benchmark::State& s, double flops_per_iter, int threads, bool bf16 = false);

// Sets GBps: GB/s (bytes_per_iter * iterations / real time, in units of 1e9),
// for memory-bound suites (reshape, decode attention).
void set_byte_counters(benchmark::State& s, double bytes_per_iter);

// Thread count for the baselines: openblas_set_num_threads (when OpenBLAS is
// linked) and omp_set_num_threads (oneDNN 2.6 on Debian runs on libgomp).
void set_baseline_threads(int t);

// n uniform floats in [lo, hi), reproducible from `seed`.
std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float lo = -1.0f,
                                 float hi = 1.0f);

// Registers fn as <suite>/<config>/<impl>/threads:<threads> (the naming
// contract above) with real-time rates, reported in `unit`.
void register_benchmark(const std::string& suite, const std::string& config, const char* impl,
                        int threads, std::function<void(benchmark::State&)> fn,
                        benchmark::TimeUnit unit);

// Thread counts to register, from MHA_BENCH_THREADS ("1,2" by default; e.g.
// "1,2,16" on a 16-core host). Under qemu-user use "1": a second guest thread
// hangs there. Invalid entries make the binary exit with a message.
std::vector<int> bench_threads();

}  // namespace mha::bench
