// The cost of each attention modifier (mha_mods) on model shapes, against
// the same call without it, and sliding-window attention against full causal
// attention at long sequence length. No baselines: oneDNN and OpenBLAS have
// no such modifiers.
// Names: attention_mods/<config>/<modifier>/threads:<t>.
#include <benchmark/benchmark.h>
#include <mha/mha.h>

#include <cmath>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_common.hpp"

namespace mha::bench {
namespace {

struct Shape {
  const char* name;
  std::size_t embed_dim, heads, len;
  bool causal;
};

struct Modifier {
  const char* name;
  std::size_t window;
  bool alibi, sinks, rope, lse;
  float softcap;
};

const Modifier kModifiers[] = {
    {"none", 0, false, false, false, false, 0.f},
    {"window256", 256, false, false, false, false, 0.f},
    {"alibi", 0, true, false, false, false, 0.f},
    {"softcap50", 0, false, false, false, false, 50.f},
    {"sinks", 0, false, true, false, false, 0.f},
    {"rope", 0, false, false, true, false, 0.f},
    {"lse", 0, false, false, false, true, 0.f},
    {"all", 256, true, true, true, true, 50.f},
};

void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

void bench_mods(benchmark::State& state, const Shape& c, const Modifier& md, int threads) {
  const std::size_t E = c.embed_dim, H = c.heads, S = c.len;
  const std::vector<float> w = random_floats(4 * E * E, 1, -0.05f, 0.05f);
  const std::vector<float> x = random_floats(S * E, 3);
  std::vector<float> out(S * E), lse(S * H);
  std::vector<float> slopes(H), sinks(H, 0.5f);
  for (std::size_t h = 0; h < H; ++h)
    slopes[h] = std::exp2(-8.f * static_cast<float>(h + 1) / static_cast<float>(H));
  const mha_config cfg{E, H, 0, 0, 0};
  const mha_weights wv{
      w.data(), w.data() + E * E, w.data() + 2 * E * E, w.data() + 3 * E * E, nullptr, nullptr,
      nullptr,  nullptr};
  mha_attention* attn = nullptr;
  check(mha_attention_create(&cfg, &wv, &attn));
  std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)> guard(attn,
                                                                         mha_attention_destroy);
  mha_mods mods{};
  mods.struct_size = sizeof(mha_mods);
  mods.causal = c.causal ? 1 : 0;
  mods.window = md.window;
  mods.alibi_slopes = md.alibi ? slopes.data() : nullptr;
  mods.softcap = md.softcap;
  mods.sinks = md.sinks ? sinks.data() : nullptr;
  mods.rope_dim = md.rope ? E / H : 0;
  mods.lse = md.lse ? lse.data() : nullptr;
  mha_set_num_threads(static_cast<std::size_t>(threads));
  for (auto _ : state) {
    check(mha_attention_forward_mods(attn, 1, S, S, x.data(), x.data(), x.data(), nullptr, &mods,
                                     out.data(), nullptr, 0));
    benchmark::DoNotOptimize(out.data());
  }
  mha_set_num_threads(0);
  // Projections plus the score and P·V terms over the keys each row sees.
  const double seen = md.window != 0 ? static_cast<double>(std::min(md.window, S))
                                     : static_cast<double>(S) / (c.causal ? 2.0 : 1.0);
  const double flops =
      8.0 * static_cast<double>(S * E * E) + 4.0 * static_cast<double>(S * E) * seen;
  set_flop_counters(state, flops, threads);
}

const bool registered = [] {
  static const Shape shapes[] = {
      {"bert_b1_s512", 768, 12, 512, false},
      {"gpt2_causal_s1024", 768, 12, 1024, true},
  };
  for (const Shape& c : shapes)
    for (const Modifier& md : kModifiers)
      for (int t : bench_threads())
        register_benchmark(
            "attention_mods", c.name, md.name, t,
            [c, md, t](benchmark::State& s) { bench_mods(s, c, md, t); }, benchmark::kMillisecond);
  // Sliding window w = 4096 against full causal attention at S = 32768
  // (GPT-2 small widths): the window's cost should be ~1/4 of the full
  // causal S²/2 term (4096·S vs S²/2 = 16384·S).
  static const Shape long_shape{"gpt2_causal_s32768", 768, 12, 32768, true};
  static const Modifier full{"full_causal", 0, false, false, false, false, 0.f};
  static const Modifier window{"window4096", 4096, false, false, false, false, 0.f};
  for (const Modifier* md : {&full, &window})
    for (int t : bench_threads())
      register_benchmark(
          "attention_mods", long_shape.name, md->name, t,
          [md, t](benchmark::State& s) { bench_mods(s, long_shape, *md, t); },
          benchmark::kMillisecond);
  return true;
}();

}  // namespace
}  // namespace mha::bench
