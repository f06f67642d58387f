// Multi-head attention on real model shapes: ours vs attention composed from
// oneDNN's primitives (the one to beat) and from OpenBLAS GEMMs, in the same
// binary.
// Names: attention/<config>/<impl>/threads:<t>.
#include <benchmark/benchmark.h>
#include <mha/mha.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
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
  };
  return list;
}

struct Model {
  std::vector<float> weights, biases, x, out;
  explicit Model(const AttentionConfig& c)
      : weights(random_floats(4 * c.embed_dim * c.embed_dim, 1, -0.05f, 0.05f)),
        biases(random_floats(4 * c.embed_dim, 2, -0.1f, 0.1f)),
        x(random_floats(c.batch * c.q_len * c.embed_dim, 3)),
        out(c.batch * c.q_len * c.embed_dim) {}
  mha_weights view() const {
    const std::size_t EE = weights.size() / 4, E = biases.size() / 4;
    const float* w = weights.data();
    const float* b = biases.data();
    return {w, w + EE, w + 2 * EE, w + 3 * EE, b, b + E, b + 2 * E, b + 3 * E};
  }
};

void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

// The bytes a decode step must stream: the whole K and V cache.
double kv_bytes(const AttentionConfig& c) {
  return 2.0 * 4.0 * static_cast<double>(c.batch * c.kv_len * c.embed_dim);
}

// The label carries the shape, from which mha_bench.py times PyTorch on the
// same configurations (bench/report/torch_mha.py).
void report(benchmark::State& state, const AttentionConfig& c, int threads, bool bf16 = false) {
  state.SetLabel("E" + std::to_string(c.embed_dim) + " H" + std::to_string(c.heads) + " B" +
                 std::to_string(c.batch) + " Sq" + std::to_string(c.q_len) + " Skv" +
                 std::to_string(c.kv_len) + (c.causal ? " causal" : "") +
                 (c.decode ? " decode" : ""));
  set_flop_counters(state, c.flops(), threads, bf16);
  if (c.decode) set_byte_counters(state, kv_bytes(c));
}

// Ours; `bf16`: an object with compute = MHA_BF16 (%peak against the bf16 peak).
void bench_mha(benchmark::State& state, const AttentionConfig& c, int threads, bool bf16) {
  Model m(c);
  mha_set_num_threads(static_cast<std::size_t>(threads));
  const mha_config cfg{c.embed_dim, c.heads, 0, 0, 0};
  const mha_weights w = m.view();
  mha_attention_options options{};
  options.struct_size = sizeof(mha_attention_options);
  options.compute = bf16 ? MHA_BF16 : MHA_FP32;
  mha_attention* attn = nullptr;
  check(mha_attention_create_ex(&cfg, &w, &options, &attn));
  std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)> guard(attn,
                                                                         mha_attention_destroy);
  if (c.decode) {
    mha_kv_cache* cache = nullptr;
    check(mha_kv_cache_create(attn, c.batch, c.kv_len, &cache));
    std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)> cguard(cache,
                                                                          mha_kv_cache_destroy);
    const std::size_t prefix = c.kv_len - 1;
    const std::vector<float> history = random_floats(c.batch * prefix * c.embed_dim, 4);
    std::vector<float> history_out(history.size());
    check(mha_attention_step(attn, cache, prefix, history.data(), history.data(), history.data(),
                             history_out.data()));
    for (auto _ : state) {
      check(mha_attention_step(attn, cache, 1, m.x.data(), m.x.data(), m.x.data(), m.out.data()));
      check(mha_kv_cache_truncate(cache, prefix));
      benchmark::DoNotOptimize(m.out.data());
    }
  } else {
    mha_mask mask{};
    mask.causal = c.causal ? 1 : 0;
    for (auto _ : state) {
      check(mha_attention_forward(attn, c.batch, c.q_len, c.kv_len, m.x.data(), m.x.data(),
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
