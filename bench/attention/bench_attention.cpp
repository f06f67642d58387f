// Multi-head attention on real model shapes: ours vs attention composed from
// oneDNN's primitives (the one to beat) and from OpenBLAS GEMMs, in the same
// binary.
// Names: attention/<config>/<impl>/threads:<t>.
#include <benchmark/benchmark.h>
#include <mha/mha.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.hpp"
#include "composed.hpp"

namespace mha::bench {
namespace {

const std::vector<AttentionConfig>& configs() {
  static const std::vector<AttentionConfig> list = {
      {"tiny_e256_h4_b1_s32", 256, 4, 1, 32, 32},
      {"bert_b1_s128", 768, 12, 1, 128, 128},
      {"bert_b8_s128", 768, 12, 8, 128, 128},
      {"bert_b1_s512", 768, 12, 1, 512, 512},
      {"bert_b1_s2048", 768, 12, 1, 2048, 2048},
      {"bertlarge_b1_s512", 1024, 16, 1, 512, 512},
      {"gpt2_causal_s1024", 768, 12, 1, 1024, 1024, true},
      {"gpt2large_causal_s1024", 1280, 20, 1, 1024, 1024, true},
      {"gpt3_hd128_b1_s256", 4096, 32, 1, 256, 256},
      {"decode_kv128", 768, 12, 1, 1, 128, false, true},
      {"decode_kv2048", 768, 12, 1, 1, 2048, false, true},
      {"decode_kv8192", 768, 12, 1, 1, 8192, false, true},
      {"bert_b16_s128", 768, 12, 16, 128, 128},
      // Llama-3.2-1B-like: E 2048, 32 query heads over 8 K/V heads of 64.
      {"llama1b_gqa_causal_s1024", 2048, 32, 1, 1024, 1024, true, false, 8},
      {"llama1b_decode_b1_kv4096", 2048, 32, 1, 1, 4096, false, true, 8},
      {"llama1b_decode_b16_kv2048", 2048, 32, 16, 1, 2048, false, true, 8},
  };
  return list;
}

// Weights wq [E, E], wk and wv [kv_dim, E], wo [E, E], concatenated (the
// baselines' layout when kv_dim = E), and biases likewise.
struct Model {
  std::size_t E, kv;
  std::vector<float> weights, biases, x, out;
  explicit Model(const AttentionConfig& c)
      : E(c.embed_dim),
        kv(c.kv_dim()),
        weights(random_floats(2 * E * (E + kv), 1, -0.05f, 0.05f)),
        biases(random_floats(2 * (E + kv), 2, -0.1f, 0.1f)),
        x(random_floats(c.batch * c.q_len * E, 3)),
        out(c.batch * c.q_len * E) {}
  mha_weights view() const {
    const float* w = weights.data();
    const float* b = biases.data();
    return {w, w + E * E, w + E * E + kv * E, w + E * E + 2 * kv * E,
            b, b + E,     b + E + kv,         b + E + 2 * kv};
  }
};

void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

// The bytes a decode step must stream: the whole K and V cache.
double kv_bytes(const AttentionConfig& c) {
  return 2.0 * 4.0 * static_cast<double>(c.batch * c.kv_len * c.kv_dim());
}

// The label carries the shape, from which mha_bench.py times PyTorch on the
// same configurations (bench/report/torch_mha.py).
void report(benchmark::State& state, const AttentionConfig& c, int threads, bool bf16 = false) {
  state.SetLabel("E" + std::to_string(c.embed_dim) + " H" + std::to_string(c.heads) +
                 (c.kv_heads != 0 ? " KV" + std::to_string(c.kv_heads) : "") + " B" +
                 std::to_string(c.batch) + " Sq" + std::to_string(c.q_len) + " Skv" +
                 std::to_string(c.kv_len) + (c.causal ? " causal" : "") +
                 (c.decode ? " decode" : ""));
  set_flop_counters(state, c.flops(), threads, bf16);
  if (c.decode) set_byte_counters(state, kv_bytes(c));
}

using AttentionPtr = std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)>;

AttentionPtr make_attention(const AttentionConfig& c, const Model& m, bool bf16) {
  const mha_config cfg{c.embed_dim, c.heads, 0, 0, c.kv_heads};
  const mha_weights w = m.view();
  mha_attention_options options{};
  options.struct_size = sizeof(mha_attention_options);
  options.compute = bf16 ? MHA_BF16 : MHA_FP32;
  mha_attention* attn = nullptr;
  check(mha_attention_create_ex(&cfg, &w, &options, &attn));
  return {attn, mha_attention_destroy};
}

// A decode configuration's object and its cache filled with kv_len - 1
// positions. Built once per process and precision, not per call of the
// benchmark function (Google Benchmark calls it again for each repetition):
// filling the Llama-1B b16 kv2048 cache is a prefill of about 1 TFLOP, seconds
// on one core.
struct DecodeFixture {
  Model m;
  AttentionPtr attn;
  std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)> cache{nullptr,
                                                                       mha_kv_cache_destroy};
  DecodeFixture(const AttentionConfig& c, bool bf16) : m(c), attn(make_attention(c, m, bf16)) {
    mha_kv_cache* raw = nullptr;
    check(mha_kv_cache_create(attn.get(), c.batch, c.kv_len, &raw));
    cache.reset(raw);
    // Chunks of 512 positions keep the history buffers small (b16: 64 MiB, not 512).
    const std::size_t prefix = c.kv_len - 1, chunk = 512;
    for (std::size_t done = 0; done < prefix; done += chunk) {
      const std::size_t n = std::min(chunk, prefix - done);
      const std::vector<float> history =
          random_floats(c.batch * n * c.embed_dim, static_cast<std::uint32_t>(4 + done));
      std::vector<float> history_out(history.size());
      check(mha_attention_step(attn.get(), cache.get(), n, history.data(), history.data(),
                               history.data(), history_out.data()));
    }
  }
};

DecodeFixture& decode_fixture(const AttentionConfig& c, bool bf16) {
  static std::map<std::pair<std::string, bool>, std::unique_ptr<DecodeFixture>> fixtures;
  auto& slot = fixtures[{c.name, bf16}];
  if (!slot) slot = std::make_unique<DecodeFixture>(c, bf16);
  return *slot;
}

// Ours; `bf16`: an object with compute = MHA_BF16 (%peak against the bf16 peak).
void bench_mha(benchmark::State& state, const AttentionConfig& c, int threads, bool bf16) {
  mha_set_num_threads(static_cast<std::size_t>(threads));
  if (c.decode) {
    DecodeFixture& f = decode_fixture(c, bf16);
    const std::size_t prefix = c.kv_len - 1;
    for (auto _ : state) {
      check(mha_attention_step(f.attn.get(), f.cache.get(), 1, f.m.x.data(), f.m.x.data(),
                               f.m.x.data(), f.m.out.data()));
      check(mha_kv_cache_truncate(f.cache.get(), prefix));
      benchmark::DoNotOptimize(f.m.out.data());
    }
  } else {
    Model m(c);
    const AttentionPtr attn = make_attention(c, m, bf16);
    mha_mask mask{};
    mask.causal = c.causal ? 1 : 0;
    for (auto _ : state) {
      check(mha_attention_forward(attn.get(), c.batch, c.q_len, c.kv_len, m.x.data(), m.x.data(),
                                  m.x.data(), &mask, m.out.data(), nullptr, 0));
      benchmark::DoNotOptimize(m.out.data());
    }
  }
  mha_set_num_threads(0);
  report(state, c, threads, bf16);
}

#if MHA_BENCH_HAVE_DNNL
// `bf16`: the bf16 composition, skipped where oneDNN has no bf16 matmul.
void bench_onednn(benchmark::State& state, const AttentionConfig& c, int threads, bool bf16) {
  Model m(c);
  set_baseline_threads(threads);
  std::unique_ptr<AttentionBaseline> attn;
  try {
    attn = make_onednn_attention(c, m.weights, m.biases, bf16);
  } catch (const std::runtime_error& e) {
    state.SkipWithError(e.what());
    return;
  }
  for (auto _ : state) {
    attn->forward(m.x.data(), m.out.data());
    benchmark::DoNotOptimize(m.out.data());
  }
  report(state, c, threads, bf16);
}
#endif

void bench_composed(benchmark::State& state, const AttentionConfig& c, int threads,
                    std::unique_ptr<GemmBackend> (*backend)()) {
  Model m(c);
  set_baseline_threads(threads);
  ComposedAttention attn(c, backend(), m.weights, m.biases, threads);
  for (auto _ : state) {
    attn.forward(m.x.data(), m.out.data());
    benchmark::DoNotOptimize(m.out.data());
  }
  report(state, c, threads);
}

const bool registered = [] {
  for (const AttentionConfig& c : configs()) {
    for (int t : bench_threads()) {
      const auto add = [&](const char* impl, std::function<void(benchmark::State&)> fn) {
        register_benchmark("attention", c.name, impl, t, std::move(fn), benchmark::kMillisecond);
      };
      add("mha", [c, t](benchmark::State& s) { bench_mha(s, c, t, false); });
      add("mha_bf16", [c, t](benchmark::State& s) { bench_mha(s, c, t, true); });
      if (c.kv_heads != 0) continue;
#if MHA_BENCH_HAVE_DNNL
      add("onednn", [c, t](benchmark::State& s) { bench_onednn(s, c, t, false); });
      add("onednn_bf16", [c, t](benchmark::State& s) { bench_onednn(s, c, t, true); });
#endif
#if MHA_BENCH_HAVE_OPENBLAS
      add("openblas",
          [c, t](benchmark::State& s) { bench_composed(s, c, t, make_openblas_backend); });
#endif
    }
  }
  return true;
}();

}  // namespace
}  // namespace mha::bench
