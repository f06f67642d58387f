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
#include <benchmark/benchmark.h>
#include <mha/mha.h>

#include <algorithm>
#include <vector>

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

}  // namespace
}  // namespace mha::bench
