// Multi-head Latent Attention (mha_mla_*) at the shapes of
// bench/attention/mla_torch_baseline.py, which times PyTorch on the same ones:
//   decode: one new token per sequence over a latent cache holding 4096
//     (v2lite: DeepSeek-V2-Lite's layer, E 2048, 16 heads, no q_lora, at b1
//     and b8; v3h32: DeepSeek-V3's layer with 32 of its 128 heads, E 7168,
//     q_lora 1536, at b1), r 512, dn 128, dr 64, dv 128;
//   prefill: mha_mla_forward over 1024 tokens of the V2-Lite layer;
//   and a tiny decode first, for CI's smoke run.
// Impls: fp32 and bf16 objects on their default caches (absorbed steps),
// bf16_int8 (an int8 latent cache), and fp32_nonabsorbed / bf16_nonabsorbed:
// our own step in the model's form over a cache of decompressed per-head K
// and V (the prefill engine's, 2·H·192 values a token), the form the
// absorbed one replaces. Caches are filled with random rows (their content
// does not change the work). w8a8_bf16 and w4a8_g128_bf16: bf16 objects
// whose products take int8 activations on int8 weights, or int4 ones in
// groups of 128. Names: mla/<config>/<impl>/threads:<t>.
#include <benchmark/benchmark.h>
#include <mha/mha.h>

#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "attention/cache/kv_cache.hpp"
#include "attention/core/core.hpp"
#include "attention/mla/mla.hpp"
#include "bench_common.hpp"

namespace mha::bench {
namespace {

struct Config {
  const char* name;
  std::size_t E, heads, q_lora, batch, cached, n_new;
  bool prefill() const { return cached == 0; }
};
// The smallest first: CI's bench smoke runs each suite's first config.
constexpr Config kConfigs[] = {
    {"tiny_decode_b1_kv64", 64, 2, 0, 1, 64, 1},
    {"v2lite_decode_b1_kv4096", 2048, 16, 0, 1, 4096, 1},
    {"v2lite_decode_b8_kv4096", 2048, 16, 0, 8, 4096, 1},
    {"v3h32_decode_b1_kv4096", 7168, 32, 1536, 1, 4096, 1},
    {"v2lite_prefill_s1024", 2048, 16, 0, 1, 0, 1024},
};

struct Impl {
  const char* name;
  mha_dtype compute;
  mha_kv_dtype kv;
  bool absorbed;
  mha_weight_format format = MHA_WEIGHTS_COMPUTE;
  std::size_t group = 0;
  mha_activations activations = MHA_ACTIVATIONS_FLOAT;
};
constexpr Impl kImpls[] = {
    {"fp32", MHA_FP32, MHA_KV_DEFAULT, true},
    {"bf16", MHA_BF16, MHA_KV_DEFAULT, true},
    {"bf16_int8", MHA_BF16, MHA_KV_INT8, true},
    {"fp32_nonabsorbed", MHA_FP32, MHA_KV_DEFAULT, false},
    {"bf16_nonabsorbed", MHA_BF16, MHA_KV_DEFAULT, false},
    {"w8a8_bf16", MHA_BF16, MHA_KV_DEFAULT, true, MHA_WEIGHTS_INT8, 0, MHA_ACTIVATIONS_INT8},
    {"w4a8_g128_bf16", MHA_BF16, MHA_KV_DEFAULT, true, MHA_WEIGHTS_INT4, 128, MHA_ACTIVATIONS_INT8},
};

void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

struct Fixture {
  std::vector<float> q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b, o;
  std::vector<float> x, out;
  std::unique_ptr<mha_mla, decltype(&mha_mla_destroy)> mla{nullptr, mha_mla_destroy};
  std::unique_ptr<detail::KvCache> cache;

  Fixture(const Config& c, const Impl& impl)
      : x(random_floats(c.batch * c.n_new * c.E, 3)), out(x.size()) {
    const std::size_t E = c.E, H = c.heads, r = 512, dn = 128, dr = 64, dv = 128;
    const std::size_t q_in = c.q_lora != 0 ? c.q_lora : E;
    if (c.q_lora != 0) {
      q_a = random_floats(c.q_lora * E, 4, -0.02f, 0.02f);
      q_a_norm = random_floats(c.q_lora, 5, 0.5f, 1.5f);
    }
    q_b = random_floats(H * (dn + dr) * q_in, 6, -0.02f, 0.02f);
    kv_a = random_floats((r + dr) * E, 7, -0.02f, 0.02f);
    kv_a_norm = random_floats(r, 8, 0.5f, 1.5f);
    kv_b = random_floats(H * (dn + dv) * r, 9, -0.05f, 0.05f);
    o = random_floats(E * H * dv, 10, -0.02f, 0.02f);
    mha_mla_config cfg{};
    cfg.struct_size = sizeof cfg;
    cfg.hidden_size = E;
    cfg.num_heads = H;
    cfg.q_lora_rank = c.q_lora;
    cfg.kv_lora_rank = r;
    cfg.qk_nope_head_dim = dn;
    cfg.qk_rope_head_dim = dr;
    cfg.v_head_dim = dv;
    cfg.yarn_factor = 40;
    cfg.yarn_original_max_position = 4096;
    cfg.yarn_mscale = cfg.yarn_mscale_all_dim = 1;
    mha_mla_weights w{sizeof w};
    if (c.q_lora != 0) {
      w.q_a_proj = q_a.data();
      w.q_a_layernorm = q_a_norm.data();
      w.q_b_proj = q_b.data();
    } else {
      w.q_proj = q_b.data();
    }
    w.kv_a_proj_with_mqa = kv_a.data();
    w.kv_a_layernorm = kv_a_norm.data();
    w.kv_b_proj = kv_b.data();
    w.o_proj = o.data();
    const mha_attention_options ao{sizeof ao, impl.compute, impl.format, impl.group,
                                   impl.activations};
    mha_mla* m = nullptr;
    check(mha_mla_create(&cfg, &w, &ao, &m));
    mla.reset(m);
    if (c.prefill()) return;
    const detail::AttentionEngine& e = impl.absorbed ? m->model->decode() : m->model->prefill();
    cache = std::make_unique<detail::KvCache>(e, e.shape(), e.kv_type(impl.kv), c.batch,
                                              c.cached + c.n_new);
    // Random rows as every batch row's history, stored as a step would.
    std::vector<std::size_t> starts(c.batch + 1);
    for (std::size_t b = 0; b <= c.batch; ++b) starts[b] = b * c.cached;
    const detail::SeqSpans seqs{c.batch, starts.data(), starts.data()};
    const std::size_t width = e.shape().kv_dim();
    const std::vector<float> rows = random_floats(c.batch * c.cached * width, 11);
    std::vector<detail::KvView> views(c.batch);
    cache->append(seqs, starts.data(), rows.data(), rows.data(), width, nullptr, views.data());
    cache->commit(seqs);
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
  const detail::MlaModel& model = *f.mla->model;
  mha_set_num_threads(static_cast<std::size_t>(threads));
  // One call first: a prefill's scratch is hundreds of MB, and a timing
  // that is one call long would otherwise include its page faults.
  if (c.prefill()) {
    check(mha_mla_forward(f.mla.get(), c.batch, c.n_new, 0, f.x.data(), f.out.data()));
  }
  for (auto _ : state) {
    if (c.prefill()) {
      check(mha_mla_forward(f.mla.get(), c.batch, c.n_new, 0, f.x.data(), f.out.data()));
    } else {
      const detail::AttentionEngine& e = impl.absorbed ? model.decode() : model.prefill();
      e.step(*f.cache, c.n_new, f.x.data(), f.x.data(), f.x.data(), f.out.data(), model.mods(0));
      f.cache->truncate(c.cached);
    }
    benchmark::DoNotOptimize(f.out.data());
  }
  mha_set_num_threads(0);
  std::string label = "E" + std::to_string(c.E) + " H" + std::to_string(c.heads) + " B" +
                      std::to_string(c.batch) + " Sq" + std::to_string(c.n_new);
  if (!c.prefill()) {
    label += " Skv" + std::to_string(c.cached + c.n_new) + " cache_bytes " +
             std::to_string(f.cache->bytes());
  }
  state.SetLabel(label);
}

const bool registered = [] {
  for (const Config& c : kConfigs) {
    for (const Impl& impl : kImpls) {
      if (c.prefill() && (impl.kv != MHA_KV_DEFAULT || !impl.absorbed)) continue;
      for (int t : bench_threads()) {
        register_benchmark(
            "mla", c.name, impl.name, t,
            [&c, &impl, t](benchmark::State& s) { bench(s, c, impl, t); }, benchmark::kMillisecond);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace mha::bench
