// Head reshape benchmarks: mha::split_heads / merge_heads / split_qkv against
// memcpy of the same bytes (the bandwidth ceiling of a copy).
//
// Names: reshape/<op>_b<B>_s<S>_h<H>_d<d>/<impl>/threads:<t>, op in
//   {split, merge, qkv}, impl in {mha, memcpy}. memcpy at t threads copies t
//   equal parts in parallel (oneTBB, an arena of t).
// Counters: GBps (bytes read + written), elements_per_ns (floats moved).
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mha/isa.hpp>
#include <mha/reshape.hpp>
#include <new>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "bench_softmax.hpp"

namespace {

struct Config {
  std::string op;
  std::size_t b, s, h, d;
  std::string name() const {
    return op + "_b" + std::to_string(b) + "_s" + std::to_string(s) + "_h" + std::to_string(h) +
           "_d" + std::to_string(d);
  }
  std::size_t floats() const { return (op == "qkv" ? 3 : 1) * b * s * h * d; }
};

std::vector<Config> configs() {
  std::vector<Config> r;
  for (const char* op : {"split", "merge", "qkv"}) {
    for (std::size_t d : {16, 32, 64, 128}) r.push_back({op, 1, 512, 768 / d, d});
    r.push_back({op, 4, 2048, 12, 64});  // 25 MB per tensor: from memory
  }
  return r;
}

// Operands in 64-byte-aligned buffers, as tensors from PyTorch's, oneDNN's or
// any SIMD library's allocator are. Out of cache the library streams its
// stores only into whole cache lines (reshape.cpp); std::vector's 16-byte
// alignment would measure its plain-store fallback instead.
struct Buffer {
  std::unique_ptr<float, decltype(&std::free)> p;
  explicit Buffer(const std::vector<float>& init)
      : p(static_cast<float*>(std::aligned_alloc(64, (init.size() * sizeof(float) + 63) / 64 * 64)),
          &std::free) {
    if (!p) throw std::bad_alloc();
    std::memcpy(p.get(), init.data(), init.size() * sizeof(float));
  }
  float* data() const { return p.get(); }
};

void finish(benchmark::State& state, const Config& c) {
  const double n = static_cast<double>(c.floats());
  mha::bench::set_byte_counters(state, 2 * sizeof(float) * n);
  state.counters["elements_per_ns"] =
      benchmark::Counter(n * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void bench_mha(benchmark::State& state, const Config& c, int threads) {
  const Buffer x(mha::bench::random_floats(c.floats(), 5));
  const Buffer y(std::vector<float>(c.floats()));
  const std::size_t part = c.b * c.s * c.h * c.d;
  mha::set_num_threads(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    if (c.op == "split") {
      mha::split_heads(c.b, c.s, c.h, c.d, x.data(), y.data());
    } else if (c.op == "merge") {
      mha::merge_heads(c.b, c.s, c.h, c.d, x.data(), y.data());
    } else {
      mha::split_qkv(c.b, c.s, c.h, c.d, x.data(), y.data(), y.data() + part, y.data() + 2 * part);
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  mha::set_num_threads(0);
  finish(state, c);
}

void bench_memcpy(benchmark::State& state, const Config& c, int threads) {
  const Buffer x(mha::bench::random_floats(c.floats(), 5));
  const Buffer y(std::vector<float>(c.floats()));
  const std::size_t n = c.floats(), parts = static_cast<std::size_t>(threads);
  tbb::task_arena arena(threads);
  for (auto _ : state) {
    if (parts == 1) {
      std::memcpy(y.data(), x.data(), n * sizeof(float));
    } else {
      arena.execute([&] {
        tbb::parallel_for(std::size_t{0}, parts, [&](std::size_t p) {
          const std::size_t lo = n * p / parts, hi = n * (p + 1) / parts;
          std::memcpy(y.data() + lo, x.data() + lo, (hi - lo) * sizeof(float));
        });
      });
    }
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  finish(state, c);
}

}  // namespace

namespace mha::bench {

void register_reshape() {
  for (const Config& c : configs()) {
    for (int t : bench_threads()) {
      auto add = [&](const char* impl, void (*fn)(benchmark::State&, const Config&, int)) {
        register_benchmark(
            "reshape", c.name(), impl, t, [fn, c, t](benchmark::State& st) { fn(st, c, t); },
            benchmark::kMicrosecond);
      };
      add("mha", bench_mha);
      add("memcpy", bench_memcpy);
    }
  }
}

}  // namespace mha::bench
