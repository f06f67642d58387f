// Quantized KV caches (mha_kv_cache_create_ex) on a Llama-3.2-1B-like layer
// (E 2048, 32 query heads over 8 K/V heads of 64): a decode step at b16 kv4096
// and b1 kv16384, and a chunked prefill of 512 tokens onto 3584 cached ones
// (b1); the b16 decode again in a paged cache of 16-token blocks (vLLM's
// default), filled by 512-token chunks (a slot's blocks run on in the pool
// 32 at a time) or by 16-token ones (the slots' blocks interleaved one by
// one, as decode growth in continuous batching leaves them, every block a
// jump in memory); a decode at b64 kv8192 of a smaller
// layer (E 512, 8 heads of 64, no GQA) whose bf16 cache is 1 GiB; and a
// tiny decode for smoke runs; per object and cache type:
//   fp32        fp32 object, its fp32 cache
//   bf16        bf16 object, its bf16 cache
//   bf16_int8   bf16 object, int8 cache      (fp32_int8: on an fp32 object)
//   bf16_fp8    bf16 object, fp8 E4M3 cache  (fp32_fp8)
// Names: kvquant/<config>/<impl>/threads:<t>; the bytes counter is the
// cache's (mha_kv_cache_bytes), read once per step.
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

namespace mha::bench {
namespace {

struct Config {
  const char* name;
  std::size_t E, heads, kv_heads, batch, cached, n_new;
  std::size_t block_tokens = 0;  // a paged cache's blocks (a slot per batch row), or 0
  std::size_t fill_chunk = 512;  // positions per batch row of each step that fills the cache
  std::size_t kv() const { return kv_heads * (E / heads); }
};
// The smallest first: CI's bench smoke runs each suite's first config.
constexpr Config kConfigs[] = {
    {"tiny_e256_decode_b2_kv300", 256, 8, 2, 2, 299, 1},
    {"llama1b_decode_b16_kv4096", 2048, 32, 8, 16, 4095, 1},
    {"llama1b_decode_b16_kv4096_paged16", 2048, 32, 8, 16, 4095, 1, 16},
    {"llama1b_decode_b16_kv4096_paged16_interleaved", 2048, 32, 8, 16, 4095, 1, 16, 16},
    {"llama1b_decode_b1_kv16384", 2048, 32, 8, 1, 16383, 1},
    {"llama1b_chunk512_kv3584", 2048, 32, 8, 1, 3584, 512},
    // A bf16 cache of 1 GiB, past any of these machines' last-level caches,
    // as a serving batch's is.
    {"e512_decode_b64_kv8192", 512, 8, 8, 64, 8191, 1},
};

struct Impl {
  const char* name;
  mha_dtype compute;
  mha_kv_dtype kv;
};
constexpr Impl kImpls[] = {
    {"fp32", MHA_FP32, MHA_KV_DEFAULT},   {"bf16", MHA_BF16, MHA_KV_DEFAULT},
    {"bf16_int8", MHA_BF16, MHA_KV_INT8}, {"bf16_fp8", MHA_BF16, MHA_KV_FP8_E4M3},
    {"fp32_int8", MHA_FP32, MHA_KV_INT8}, {"fp32_fp8", MHA_FP32, MHA_KV_FP8_E4M3},
};

void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

// The object and its cache holding `cached` positions per batch row, built
// once per process (filling b16 kv4096 is a prefill of about 2.5 TFLOP), on
// every thread the process may use.
struct Fixture {
  std::vector<float> weights;
  std::vector<float> x, out;
  std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)> attn{nullptr,
                                                                        mha_attention_destroy};
  std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)> cache{nullptr,
                                                                       mha_kv_cache_destroy};
  std::unique_ptr<mha_paged_kv_cache, decltype(&mha_paged_kv_cache_destroy)> paged{
      nullptr, mha_paged_kv_cache_destroy};
  std::vector<std::size_t> slots, q_start;  // one slot per batch row; a step's row offsets
  Fixture(const Config& c, const Impl& impl)
      : weights(random_floats(2 * c.E * (c.E + c.kv()), 1, -0.05f, 0.05f)),
        x(random_floats(c.batch * c.n_new * c.E, 3)),
        out(x.size()) {
    const std::size_t E = c.E, kv = c.kv();
    const mha_config cfg{E, c.heads, 0, 0, c.kv_heads};
    const float* w = weights.data();
    const mha_weights mw{
        w,       w + E * E, w + E * E + kv * E, w + E * E + 2 * kv * E, nullptr, nullptr,
        nullptr, nullptr};
    const mha_attention_options ao{sizeof(mha_attention_options), impl.compute};
    mha_attention* a = nullptr;
    check(mha_attention_create_ex(&cfg, &mw, &ao, &a));
    attn.reset(a);
    const mha_kv_cache_options ko{sizeof(mha_kv_cache_options), impl.kv};
    const std::size_t bt = c.block_tokens, len = c.cached + c.n_new;
    if (bt != 0) {
      mha_paged_kv_cache* p = nullptr;
      check(mha_kv_cache_create_paged_ex(a, c.batch, bt, c.batch * ((len + bt - 1) / bt), &ko, &p));
      paged.reset(p);
    } else {
      mha_kv_cache* k = nullptr;
      check(mha_kv_cache_create_ex(a, c.batch, len, &ko, &k));
      cache.reset(k);
    }
    for (std::size_t i = 0; i < c.batch; ++i) slots.push_back(i);
    q_start.resize(c.batch + 1);
    mha_set_num_threads(0);
    for (std::size_t done = 0; done < c.cached;) {
      const std::size_t n = std::min(c.fill_chunk, c.cached - done);
      const std::vector<float> h =
          random_floats(c.batch * n * c.E, static_cast<std::uint32_t>(4 + done));
      std::vector<float> ho(h.size());
      step(n, h.data(), ho.data());
      done += n;
    }
  }
  // n new tokens of every batch row (rows of E, batch-major).
  void step(std::size_t n, const float* in, float* result) {
    if (paged) {
      for (std::size_t i = 0; i < q_start.size(); ++i) q_start[i] = i * n;
      check(mha_attention_step_ragged(attn.get(), paged.get(), slots.size(), slots.data(),
                                      q_start.data(), in, in, in, result));
    } else {
      check(mha_attention_step(attn.get(), cache.get(), n, in, in, in, result));
    }
  }
  // Back to `len` positions per batch row.
  void truncate(std::size_t len) {
    if (paged) {
      for (std::size_t s : slots) check(mha_kv_cache_truncate_slot(paged.get(), s, len));
    } else {
      check(mha_kv_cache_truncate(cache.get(), len));
    }
  }
  std::size_t bytes() const {
    return paged ? mha_paged_kv_cache_bytes(paged.get()) : mha_kv_cache_bytes(cache.get());
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
  for (auto _ : state) {
    f.step(c.n_new, f.x.data(), f.out.data());
    f.truncate(c.cached);
    benchmark::DoNotOptimize(f.out.data());
  }
  mha_set_num_threads(0);
  state.SetLabel("E" + std::to_string(c.E) + " H" + std::to_string(c.heads) + " KV" +
                 std::to_string(c.kv_heads) + " B" + std::to_string(c.batch) + " Sq" +
                 std::to_string(c.n_new) + " Skv" + std::to_string(c.cached + c.n_new) +
                 (c.block_tokens != 0 ? " paged" + std::to_string(c.block_tokens) : "") +
                 " cache_bytes " + std::to_string(f.bytes()));
  set_byte_counters(state, static_cast<double>(f.bytes()));
}

const bool registered = [] {
  for (const Config& c : kConfigs) {
    for (const Impl& impl : kImpls) {
      for (int t : bench_threads()) {
        register_benchmark(
            "kvquant", c.name, impl.name, t,
            [&c, &impl, t](benchmark::State& s) { bench(s, c, impl, t); }, benchmark::kMillisecond);
      }
    }
  }
  return true;
}();

}  // namespace
}  // namespace mha::bench
