// Projection weight formats (mha_attention_options' weight_format and
// activations) on Llama-3.2-1B-like layers (E 2048, 32 query heads over 8
// K/V heads of 64, no biases): a decode step (b1, 1023 cached positions)
// through 32 layer objects in turn, whose weights (1.3 GB in fp32, 336 MB
// in int8) exceed every last-level cache of these machines as a model's do,
// and through one layer alone, whose quantized and bf16 weights stay in L3,
// at b1 and b16 over 1023 cached positions and at b1 over 4095; and prefill
// forwards of one layer: BERT-base (E 768, 12 heads, s512) and the Llama
// layer over 1024 causal positions. Per object:
//   fp32        fp32 weights and products
//   int8        int8 weights (per output row), fp32 products
//   int4_g128   int4 weights (symmetric, groups of 128), fp32 products
//   uint4_g128  uint4 weights (zero points, groups of 128), fp32 products
//   w8a8        int8 weights and int8 activations (per token), fp32 core
//   w8a8_bf16   the same, bf16 core
//   w4a8_g128_bf16  int4 weights (groups of 128) and int8 activations, bf16 core
//   w4a8_uint4_g128_bf16  the same on uint4 weights with zero points (GPTQ,
//                   AWQ)
//   bf16        bf16 weights and products
// each with its default KV cache (bf16 for bf16 compute, fp32 for the
// others).
// Names: weights/<config>/<impl>/threads:<t>; the bytes counter is the
// layers' weights, read once per step.
#include <benchmark/benchmark.h>
#include <mha/mha.h>

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.hpp"

namespace mha::bench {
namespace {

struct Config {
  const char* name;
  std::size_t E, heads, kv_heads, layers, cached, batch = 1;
  // A forward over `cached` positions instead of a step after them.
  bool prefill = false, causal = false;
  std::size_t kv() const { return kv_heads * (E / heads); }
};
// The smallest first: CI's bench smoke runs each suite's first config.
constexpr Config kConfigs[] = {
    {"tiny_e256_decode_b1_kv300_4layers", 256, 8, 2, 4, 299},
    {"llama1b_decode_b1_kv1024_1layer", 2048, 32, 8, 1, 1023},
    {"llama1b_decode_b1_kv4096_1layer", 2048, 32, 8, 1, 4095},
    {"llama1b_decode_b16_kv1024_1layer", 2048, 32, 8, 1, 1023, 16},
    {"llama1b_decode_b1_kv1024_32layers", 2048, 32, 8, 32, 1023},
    {"bert_prefill_b1_s512", 768, 12, 12, 1, 512, 1, true},
    {"llama1b_prefill_b1_s1024", 2048, 32, 8, 1, 1024, 1, true, true},
};

struct Impl {
  const char* name;
  mha_dtype compute;
  mha_weight_format format;
  std::size_t group;
  double bytes_per_weight;  // scales and zero points included, rows of 2048
  mha_activations activations = MHA_ACTIVATIONS_FLOAT;
};
constexpr Impl kImpls[] = {
    {"fp32", MHA_FP32, MHA_WEIGHTS_COMPUTE, 0, 4},
    {"int8", MHA_FP32, MHA_WEIGHTS_INT8, 0, 1 + 4.0 / 2048},
    {"int4_g128", MHA_FP32, MHA_WEIGHTS_INT4, 128, 0.5 + 4.0 / 128},
    {"uint4_g128", MHA_FP32, MHA_WEIGHTS_UINT4, 128, 0.5 + 8.0 / 128},
    {"int8_bf16", MHA_BF16, MHA_WEIGHTS_INT8, 0, 1 + 4.0 / 2048},
    {"int4_g128_bf16", MHA_BF16, MHA_WEIGHTS_INT4, 128, 0.5 + 4.0 / 128},
    {"w8a8", MHA_FP32, MHA_WEIGHTS_INT8, 0, 1 + 8.0 / 2048, MHA_ACTIVATIONS_INT8},
    {"w8a8_bf16", MHA_BF16, MHA_WEIGHTS_INT8, 0, 1 + 8.0 / 2048, MHA_ACTIVATIONS_INT8},
    {"w4a8_g128_bf16", MHA_BF16, MHA_WEIGHTS_INT4, 128, 0.5 + 8.0 / 128, MHA_ACTIVATIONS_INT8},
    {"w4a8_uint4_g128_bf16", MHA_BF16, MHA_WEIGHTS_UINT4, 128, 0.5 + 12.0 / 128,
     MHA_ACTIVATIONS_INT8},
    {"bf16", MHA_BF16, MHA_WEIGHTS_COMPUTE, 0, 2}};

void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

// The layers and their caches holding `cached` positions, built once per
// process.
struct Fixture {
  std::vector<float> x, out;
  std::vector<std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)>> attn;
  std::vector<std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)>> cache;
  double weight_bytes = 0;
  Fixture(const Config& c, const Impl& impl)
      : x(random_floats(c.batch * (c.prefill ? c.cached : 1) * c.E, 3)), out(x.size()) {
    const std::size_t E = c.E, kv = c.kv(), weights = 2 * E * (E + kv);
    const mha_config cfg{E, c.heads, 0, 0, c.kv_heads};
    const mha_attention_options ao{sizeof(mha_attention_options), impl.compute, impl.format,
                                   impl.group, impl.activations};
    mha_set_num_threads(0);
    for (std::size_t l = 0; l < c.layers; ++l) {
      // Each layer's own weights, so that 32 layers read 32 times the bytes.
      const std::vector<float> w =
          random_floats(weights, static_cast<std::uint32_t>(10 + l), -0.05f, 0.05f);
      const mha_weights mw{w.data(),
                           w.data() + E * E,
                           w.data() + E * E + kv * E,
                           w.data() + E * E + 2 * kv * E,
                           nullptr,
                           nullptr,
                           nullptr,
                           nullptr};
      mha_attention* a = nullptr;
      check(mha_attention_create_ex(&cfg, &mw, &ao, &a));
      attn.emplace_back(a, mha_attention_destroy);
      if (c.prefill) continue;
      mha_kv_cache* k = nullptr;
      check(mha_kv_cache_create(a, c.batch, c.cached + 1, &k));
      cache.emplace_back(k, mha_kv_cache_destroy);
      const std::vector<float> h =
          random_floats(c.batch * c.cached * E, static_cast<std::uint32_t>(4 + l));
      std::vector<float> ho(h.size());
      check(mha_attention_step(a, k, c.cached, h.data(), h.data(), h.data(), ho.data()));
    }
    weight_bytes = static_cast<double>(c.layers * weights) * impl.bytes_per_weight;
  }
};

Fixture& fixture(const Config& c, const Impl& impl) {
  static std::map<std::pair<std::string, std::string>, std::unique_ptr<Fixture>> all;
  auto& slot = all[{c.name, impl.name}];
  if (!slot) slot = std::make_unique<Fixture>(c, impl);
  return *slot;
}

void bench(benchmark::State& state, const Config& c, const Impl& impl, int threads) {
  Fixture& f = fixture(c, impl);
  mha_set_num_threads(static_cast<std::size_t>(threads));
  mha_mask causal{};
  causal.causal = 1;
  for (auto _ : state) {
    for (std::size_t l = 0; c.prefill && l < c.layers; ++l) {
      check(mha_attention_forward(f.attn[l].get(), c.batch, c.cached, c.cached, f.x.data(),
                                  f.x.data(), f.x.data(), c.causal ? &causal : nullptr,
                                  f.out.data(), nullptr, 0));
    }
    for (std::size_t l = 0; !c.prefill && l < c.layers; ++l) {
      check(mha_attention_step(f.attn[l].get(), f.cache[l].get(), 1, f.x.data(), f.x.data(),
                               f.x.data(), f.out.data()));
      check(mha_kv_cache_truncate(f.cache[l].get(), c.cached));
    }
    benchmark::DoNotOptimize(f.out.data());
  }
  mha_set_num_threads(0);
  state.SetLabel("E" + std::to_string(c.E) + " H" + std::to_string(c.heads) + " KV" +
                 std::to_string(c.kv_heads) + " B" + std::to_string(c.batch) + " layers " +
                 std::to_string(c.layers) + " Skv" + std::to_string(c.cached + 1));
  set_byte_counters(state, f.weight_bytes);
}

const bool registered = [] {
  for (const Config& c : kConfigs) {
    for (const Impl& impl : kImpls) {
      for (int t : bench_threads()) {
        register_benchmark(
            "weights", c.name, impl.name, t,
            [&c, &impl, t](benchmark::State& s) { bench(s, c, impl, t); }, benchmark::kMillisecond);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace mha::bench
