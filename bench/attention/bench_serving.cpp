// Serving shapes (issue 22). Names: serving/<workload>/<impl>.
//   encoder_mix: 32 BERT-base requests, lengths log-normal (median 100,
//     capped at 512, fixed seed), as one ragged batch vs padded to the
//     longest with key_padding. Counter tokens_per_s counts real tokens.
//   decoder_loop: continuous batching, 16 requests in flight (GQA 32/8
//     heads, head_dim 128, E = 4096), 32 requests with prompts of 16..512
//     tokens prefilled in chunks, at most 256 tokens per step (decodes
//     first), requests finishing and new ones joining; through one paged
//     cache vs a one-batch-row mha_kv_cache per request. Counters:
//     tokens_per_s, p50_step_ms, p99_step_ms. decoder_loop_small is the same
//     loop at E = 256 (4 kv heads of 8), quick enough for smoke runs.
//   forked_decode: one decode step of 32 samples of one prompt (4096 or 512
//     tokens), each holding 64 tokens of its own (Llama-3.2-1B-like, GQA
//     32/8, E 2048, blocks of 16), in slots forked from the prompt's, whose
//     shared chunks the step computes once (cascade) or once per sample
//     (shared: cascade turned off, as tests do), vs 32 unshared copies of
//     the same contents (unshared). fp32 and bf16 objects, 1 and 2 threads.
//     Counters: blocks, the pool's blocks in use; shared_chunks, the step's
//     (mha_kv_cache_shared_chunks).
//   tree_verify: one speculative-decoding step at kv 4096 (Llama-3.2-1B-
//     like, blocks of 16): a 60-token EAGLE-2-shaped tree of depth 6
//     (mha_attention_step_tree, then an empty accept) vs a 60-token causal
//     chunk (chain, then truncated back). fp32 and bf16 objects, 1 and 2
//     threads.
#include <benchmark/benchmark.h>
#include <mha/mha.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/core/core.hpp"
#include "bench_common.hpp"
#include "serving.hpp"

namespace mha::bench {
namespace {

struct Weights {
  std::vector<float> w, b;
  Weights(std::size_t E, std::size_t kv)
      : w(random_floats(2 * E * E + 2 * kv * E, 1, -0.05f, 0.05f)),
        b(random_floats(2 * E + 2 * kv, 2, -0.1f, 0.1f)) {}
  mha_weights view(std::size_t E, std::size_t kv) const {
    const float* p = w.data();
    const float* q = b.data();
    return {p, p + E * E, p + E * E + kv * E, p + E * E + 2 * kv * E,
            q, q + E,     q + E + kv,         q + E + 2 * kv};
  }
};

constexpr std::size_t kBertE = 768, kBertH = 12, kRequests = 32;

void encoder_mix(benchmark::State& state, bool ragged) {
  const auto lens = lognormal_lengths(kRequests, 100, 512, 22);
  const std::size_t longest = *std::max_element(lens.begin(), lens.end());
  std::vector<std::size_t> start{0};
  for (std::size_t l : lens) start.push_back(start.back() + l);
  const Weights w(kBertE, kBertE);
  const mha_config cfg{kBertE, kBertH, 0, 0, 0};
  const MultiheadAttention attn(cfg, w.view(kBertE, kBertE));
  const std::size_t rows = ragged ? start.back() : kRequests * longest;
  const std::vector<float> x = random_floats(rows * kBertE, 3);
  std::vector<float> out(rows * kBertE);
  std::vector<unsigned char> pad(kRequests * longest, 1);
  for (std::size_t s = 0; s < kRequests; ++s) std::fill_n(&pad[s * longest], lens[s], 0);
  mha_mask mask{};
  mask.key_padding = pad.data();
  const mha_ragged seqs{sizeof(mha_ragged), kRequests, start.data(), nullptr};
  for (auto _ : state) {
    if (ragged) {
      attn.forward_ragged(seqs, x.data(), x.data(), x.data(), out.data());
    } else {
      attn.forward(kRequests, longest, longest, x.data(), x.data(), x.data(), &mask, out.data());
    }
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(start.back()), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["longest"] = static_cast<double>(longest);
}

struct DecoderShape {
  std::size_t E, H, kv_heads;
};

void decoder_loop(benchmark::State& state, const DecoderShape& d, bool paged) {
  const std::size_t slots = 16, chunk = 256, block_tokens = 256;
  const std::size_t prompt_max = 512, gen_max = 64;
  const auto reqs = decoder_requests(32, 16, prompt_max, 16, gen_max, 7);
  const std::size_t kv = d.kv_heads * (d.E / d.H), max_len = prompt_max + gen_max;
  const Weights w(d.E, kv);
  const mha_config cfg{d.E, d.H, 0, 0, d.kv_heads};
  const MultiheadAttention attn(cfg, w.view(d.E, kv));
  const std::vector<float> x = random_floats(chunk * d.E, 3);
  std::vector<float> out(chunk * d.E);
  // A pool with room for every slot at its longest: the loop never runs out.
  const std::size_t blocks = slots * ((max_len + block_tokens - 1) / block_tokens);
  LoopStats last;
  double tokens = 0, seconds = 0;
  for (auto _ : state) {
    last = paged ? paged_loop(attn, reqs, slots, chunk, block_tokens, blocks, x.data(), out.data())
                 : per_request_loop(attn, reqs, slots, chunk, max_len, x.data(), out.data());
    tokens += static_cast<double>(last.tokens);
    seconds += last.seconds;
  }
  state.counters["tokens_per_s"] = tokens / seconds;
  state.counters["p50_step_ms"] = 1e3 * last.percentile(0.5);
  state.counters["p99_step_ms"] = 1e3 * last.percentile(0.99);
}

const DecoderShape kLlama{4096, 32, 8}, kSmall{256, 8, 4};

// How forked_decode's slots hold the prompt and attend it.
enum class Forked {
  cascade,   // forked, shared chunks computed once (the default)
  shared,    // forked, each sample reading the prompt itself (cascade off)
  unshared,  // 32 copies
};

// Args: the prompt's tokens, a bf16 object (0/1), threads.
void forked_decode(benchmark::State& state, Forked mode) {
  constexpr std::size_t E = 2048, H = 32, KVH = 8, kv = KVH * (E / H);
  constexpr std::size_t kSamples = 32, kOwn = 64, bt = 16;
  const std::size_t prompt_len = static_cast<std::size_t>(state.range(0));
  const bool bf16 = state.range(1) != 0;
  mha_set_num_threads(static_cast<std::size_t>(state.range(2)));
  const Weights w(E, kv);
  const mha_config cfg{E, H, 0, 0, KVH};
  const mha_attention_options options{sizeof(mha_attention_options), bf16 ? MHA_BF16 : MHA_FP32};
  const MultiheadAttention attn(cfg, w.view(E, kv), options);
  const std::size_t pool = kSamples * (prompt_len + kOwn + 2 * bt) / bt;
  PagedKvCache cache(attn, kSamples, bt, pool);
  const std::vector<float> prompt = random_floats(prompt_len * E, 4);
  std::vector<float> out(prompt_len * E);
  std::vector<std::size_t> slots(kSamples), q_start(kSamples + 1);
  for (std::size_t s = 0; s < kSamples; ++s) slots[s] = s;
  const std::size_t whole[] = {0, prompt_len};
  for (std::size_t s = 0; s < kSamples; ++s) {
    if (mode != Forked::unshared && s > 0) {
      cache.fork_slot(0, s, prompt_len);
    } else {
      cache.step(1, &slots[s], whole, prompt.data(), prompt.data(), prompt.data(), out.data());
    }
  }
  // Each sample's own tokens, all slots at once.
  const std::vector<float> own = random_floats(kSamples * kOwn * E, 5);
  out.resize(own.size());
  for (std::size_t s = 0; s <= kSamples; ++s) q_start[s] = s * kOwn;
  cache.step(kSamples, slots.data(), q_start.data(), own.data(), own.data(), own.data(),
             out.data());
  for (std::size_t s = 0; s <= kSamples; ++s) q_start[s] = s;
  const std::vector<float> x = random_floats(kSamples * E, 6);
  detail::set_core_cascade(mode != Forked::shared);
  for (auto _ : state) {
    cache.step(kSamples, slots.data(), q_start.data(), x.data(), x.data(), x.data(), out.data());
    for (std::size_t s : slots) cache.truncate_slot(s, prompt_len + kOwn);
    benchmark::DoNotOptimize(out.data());
  }
  detail::set_core_cascade(true);
  mha_set_num_threads(0);
  state.counters["blocks"] = static_cast<double>(pool - cache.free_blocks());
  state.counters["shared_chunks"] = static_cast<double>(cache.shared_chunks());
}

void forked_args(benchmark::internal::Benchmark* b) {
  for (long prompt : {4096, 512}) {
    for (long bf16 : {0, 1}) {
      for (long threads : {1, 2}) b->Args({prompt, bf16, threads});
    }
  }
  b->ArgNames({"prompt", "bf16", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

// Args: a bf16 object (0/1), threads.
void tree_verify(benchmark::State& state, bool tree) {
  constexpr std::size_t E = 2048, H = 32, KVH = 8, kv = KVH * (E / H);
  constexpr std::size_t kHistory = 4096, kDraft = 60, kWidth = 10, bt = 16;
  const bool bf16 = state.range(0) != 0;
  mha_set_num_threads(static_cast<std::size_t>(state.range(1)));
  const Weights w(E, kv);
  const mha_config cfg{E, H, 0, 0, KVH};
  const mha_attention_options options{sizeof(mha_attention_options), bf16 ? MHA_BF16 : MHA_FP32};
  const MultiheadAttention attn(cfg, w.view(E, kv), options);
  PagedKvCache cache(attn, 1, bt, (kHistory + kDraft) / bt + 2);
  const std::vector<float> history = random_floats(kHistory * E, 7);
  std::vector<float> out(kHistory * E);
  const std::size_t slot = 0, whole[] = {0, kHistory}, draft[] = {0, kDraft};
  cache.step(1, &slot, whole, history.data(), history.data(), history.data(), out.data());
  // EAGLE-2's shape: 6 levels of 10 candidates, each a child of one of
  // the 10 before (the top-k of its parents' children).
  std::vector<std::int32_t> parent(kDraft);
  for (std::size_t r = 0; r < kDraft; ++r) {
    const std::size_t level = r / kWidth;
    parent[r] = level == 0 ? -1 : static_cast<std::int32_t>((level - 1) * kWidth + r % 3);
  }
  const std::vector<float> x = random_floats(kDraft * E, 8);
  for (auto _ : state) {
    if (tree) {
      cache.step_tree(1, &slot, draft, parent.data(), x.data(), x.data(), x.data(), nullptr,
                      out.data());
      cache.accept_path(slot, 0, nullptr);
    } else {
      cache.step(1, &slot, draft, x.data(), x.data(), x.data(), out.data());
      cache.truncate_slot(slot, kHistory);
    }
    benchmark::DoNotOptimize(out.data());
  }
  mha_set_num_threads(0);
  state.counters["shared_chunks"] = static_cast<double>(cache.shared_chunks());
}

void tree_args(benchmark::internal::Benchmark* b) {
  for (long bf16 : {0, 1}) {
    for (long threads : {1, 2}) b->Args({bf16, threads});
  }
  b->ArgNames({"bf16", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_CAPTURE(encoder_mix, ragged, true)->Name("serving/encoder_mix/ragged")->UseRealTime();
BENCHMARK_CAPTURE(encoder_mix, padded, false)->Name("serving/encoder_mix/padded")->UseRealTime();
BENCHMARK_CAPTURE(decoder_loop, paged, kLlama, true)
    ->Name("serving/decoder_loop/paged")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(decoder_loop, per_request, kLlama, false)
    ->Name("serving/decoder_loop/per_request")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(decoder_loop, small_paged, kSmall, true)
    ->Name("serving/decoder_loop_small/paged")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(decoder_loop, small_per_request, kSmall, false)
    ->Name("serving/decoder_loop_small/per_request")
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK_CAPTURE(forked_decode, cascade, Forked::cascade)
    ->Name("serving/forked_decode/cascade")
    ->Apply(forked_args);
BENCHMARK_CAPTURE(forked_decode, shared, Forked::shared)
    ->Name("serving/forked_decode/shared")
    ->Apply(forked_args);
BENCHMARK_CAPTURE(forked_decode, unshared, Forked::unshared)
    ->Name("serving/forked_decode/unshared")
    ->Apply(forked_args);

BENCHMARK_CAPTURE(tree_verify, tree, true)->Name("serving/tree_verify/tree")->Apply(tree_args);
BENCHMARK_CAPTURE(tree_verify, chain, false)->Name("serving/tree_verify/chain")->Apply(tree_args);

}  // namespace
}  // namespace mha::bench
