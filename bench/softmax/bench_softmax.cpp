// Softmax benchmarks: mha::softmax against a plain max-subtract + std::exp
// loop and oneDNN's softmax primitive (created once, outside the timed loop),
// on rows as attention sees them: B1, H12, q rows per head, k columns.
//
// Names: softmax/h12_q<Q>_k<K>/<impl>/threads:<t>, rows = 12*Q, cols = K,
//   Q = min(K, 256) (larger K only appear with a limited query block, as in
//   the fused attention), out of place, scale 1 (oneDNN 2.6 has no scale).
// Counters: GBps (bytes read + written), elements_per_ns.
// The plain loop is single-threaded and registered at threads:1 only.
#include "bench_softmax.hpp"

#include <algorithm>
#include <cmath>
#include <mha/isa.hpp>
#include <mha/softmax.hpp>
#include <string>
#include <vector>

#include "bench_common.hpp"

#if MHA_BENCH_HAVE_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace {

struct Config {
  std::string name;
  std::size_t rows, cols;
};

std::vector<Config> configs() {
  std::vector<Config> r;
  for (std::size_t k : {64, 128, 256, 512, 1024, 2048, 4096, 8192}) {
    const std::size_t q = std::min<std::size_t>(k, 256);
    r.push_back({"h12_q" + std::to_string(q) + "_k" + std::to_string(k), 12 * q, k});
  }
  return r;
}

struct Buffers {
  std::vector<float> x, y;
  explicit Buffers(const Config& c)
      : x(mha::bench::random_floats(c.rows * c.cols, 3, -10.f, 10.f)), y(c.rows * c.cols, 0.f) {}
};

void finish(benchmark::State& state, const Config& c) {
  const double elements = static_cast<double>(c.rows) * static_cast<double>(c.cols);
  mha::bench::set_byte_counters(state, 2 * sizeof(float) * elements);
  state.counters["elements_per_ns"] =
      benchmark::Counter(elements * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void bench_mha(benchmark::State& state, const Config& c, int threads) {
  Buffers b(c);
  mha::set_num_threads(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    mha::softmax(c.rows, c.cols, b.x.data(), c.cols, b.y.data(), c.cols);
    benchmark::DoNotOptimize(b.y.data());
    benchmark::ClobberMemory();
  }
  mha::set_num_threads(0);
  finish(state, c);
}

// What a straightforward implementation does: per row, the max, std::exp of
// the shifted values with their sum, then a multiply by 1/sum.
void bench_plain(benchmark::State& state, const Config& c, int) {
  Buffers b(c);
  for (auto _ : state) {
    for (std::size_t i = 0; i < c.rows; ++i) {
      const float* x = b.x.data() + i * c.cols;
      float* y = b.y.data() + i * c.cols;
      float m = x[0];
      for (std::size_t j = 1; j < c.cols; ++j) m = std::max(m, x[j]);
      float sum = 0.f;
      for (std::size_t j = 0; j < c.cols; ++j) sum += (y[j] = std::exp(x[j] - m));
      const float inv = 1.f / sum;
      for (std::size_t j = 0; j < c.cols; ++j) y[j] *= inv;
    }
    benchmark::DoNotOptimize(b.y.data());
    benchmark::ClobberMemory();
  }
  finish(state, c);
}

#if MHA_BENCH_HAVE_DNNL
void bench_onednn(benchmark::State& state, const Config& c, int threads) {
  Buffers b(c);
  mha::bench::set_baseline_threads(threads);
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc md({static_cast<memory::dim>(c.rows), static_cast<memory::dim>(c.cols)},
                        memory::data_type::f32, memory::format_tag::ab);
  const dnnl::softmax_forward::primitive_desc pd(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, 1), engine);
  const dnnl::softmax_forward softmax(pd);
  memory src(md, engine, b.x.data()), dst(md, engine, b.y.data());
  for (auto _ : state) {
    softmax.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
    stream.wait();
    benchmark::DoNotOptimize(b.y.data());
    benchmark::ClobberMemory();
  }
  finish(state, c);
}
#endif

void register_softmax() {
  for (const Config& c : configs()) {
    for (int t : mha::bench::bench_threads()) {
      auto add = [&](const char* impl, void (*fn)(benchmark::State&, const Config&, int)) {
        mha::bench::register_benchmark(
            "softmax", c.name, impl, t, [fn, c, t](benchmark::State& st) { fn(st, c, t); },
            benchmark::kMicrosecond);
      };
      add("mha", bench_mha);
#if MHA_BENCH_HAVE_DNNL
      add("onednn", bench_onednn);
#endif
      if (t == 1) add("plain", bench_plain);
    }
  }
}

// Registered before main() (which bench/common provides) parses the flags;
// softmax first, then reshape (bench_reshape.cpp), in one fixed order.
const bool registered = (register_softmax(), mha::bench::register_reshape(), true);

}  // namespace
