// Serving workloads shared by bench_serving.cpp and serving_memory.cpp: a
// fixed-seed mix of requests and a continuous-batching decoder loop run two
// ways, through one paged cache (mha_attention_step_ragged) or through a
// one-batch-row mha_kv_cache per request (mha_attention_step per request).
#pragma once

#include <mha/mha.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <memory>
#include <mha/attention.hpp>
#include <mha/kv_cache.hpp>
#include <random>
#include <stdexcept>
#include <vector>

namespace mha::bench {

// Encoder requests: lengths from a log-normal with median `median`, capped.
inline std::vector<std::size_t> lognormal_lengths(std::size_t n, double median, std::size_t cap,
                                                  std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::lognormal_distribution<double> dist(std::log(median), 0.7);
  std::vector<std::size_t> lens(n);
  for (auto& l : lens) l = std::clamp<std::size_t>(static_cast<std::size_t>(dist(rng)), 1, cap);
  return lens;
}

struct DecoderRequest {
  std::size_t prompt, generate;
};

// `n` requests with prompts in [prompt_min, prompt_max] and generated lengths
// in [gen_min, gen_max].
inline std::vector<DecoderRequest> decoder_requests(std::size_t n, std::size_t prompt_min,
                                                    std::size_t prompt_max, std::size_t gen_min,
                                                    std::size_t gen_max, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<DecoderRequest> reqs(n);
  for (auto& r : reqs) {
    r.prompt = std::uniform_int_distribution<std::size_t>(prompt_min, prompt_max)(rng);
    r.generate = std::uniform_int_distribution<std::size_t>(gen_min, gen_max)(rng);
  }
  return reqs;
}

struct LoopStats {
  std::size_t tokens = 0;
  std::size_t cache_bytes = 0;  // the paged pool's (mha_paged_kv_cache_bytes)
  std::vector<double> step_seconds;
  double seconds = 0;
  double percentile(double p) const {
    std::vector<double> s = step_seconds;
    if (s.empty()) return 0;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1, static_cast<std::size_t>(p * static_cast<double>(s.size())))];
  }
};

// The scheduler both loops share: up to `slots` requests in flight; a joining
// request prefills in chunks of at most `chunk` tokens, then decodes one
// token per step; a finished one frees its slot for the next. A step carries
// at most `chunk` tokens in all (decodes first, then prefill chunks), as
// servers cap a step's batch, so that its scratch stays that of `chunk` rows
// rather than slots*chunk.
struct Scheduler {
  const std::vector<DecoderRequest>& reqs;
  std::size_t slots, chunk;
  std::vector<long> owner;       // request per slot, -1 if free
  std::vector<std::size_t> fed;  // tokens fed per request
  std::size_t budget = 0;        // tokens left in the current step
  std::size_t next = 0, done = 0;

  Scheduler(const std::vector<DecoderRequest>& r, std::size_t s, std::size_t c)
      : reqs(r), slots(s), chunk(c), owner(s, -1), fed(r.size(), 0) {}
  std::size_t total(std::size_t r) const { return reqs[r].prompt + reqs[r].generate; }
  bool decoding(std::size_t r) const { return fed[r] >= reqs[r].prompt; }
  // Tokens request r brings to this step (taken from the budget): call for
  // every decoding request before the prefilling ones.
  std::size_t take(std::size_t r) {
    const std::size_t n = std::min(budget, decoding(r) ? 1 : reqs[r].prompt - fed[r]);
    budget -= n;
    fed[r] += n;
    return n;
  }
  // Slots in step order: decoding requests, then prefilling ones.
  std::vector<std::size_t> order() const {
    std::vector<std::size_t> s;
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t i = 0; i < slots; ++i) {
        if (owner[i] >= 0 && decoding(static_cast<std::size_t>(owner[i])) == (pass == 0)) {
          s.push_back(i);
        }
      }
    }
    return s;
  }

  template <class Join, class Step, class Finish>
  LoopStats run(Join join, Step step, Finish finish) {
    LoopStats st;
    const auto t0 = std::chrono::steady_clock::now();
    while (done < reqs.size()) {
      for (std::size_t s = 0; s < slots; ++s) {
        if (owner[s] < 0 && next < reqs.size()) {
          owner[s] = static_cast<long>(next);
          join(s, next++);
        }
      }
      budget = chunk;
      const auto a = std::chrono::steady_clock::now();
      st.tokens += step();
      st.step_seconds.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
      for (std::size_t s = 0; s < slots; ++s) {
        if (owner[s] < 0) continue;
        const auto r = static_cast<std::size_t>(owner[s]);
        if (fed[r] == total(r)) {
          finish(s, r);
          owner[s] = -1;
          ++done;
        }
      }
    }
    st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return st;
  }
};

inline void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

// Every request through one paged cache, one mha_attention_step_ragged per
// step over all slots in flight. `x` holds at least chunk rows of E.
inline LoopStats paged_loop(const MultiheadAttention& attn, const std::vector<DecoderRequest>& reqs,
                            std::size_t slots, std::size_t chunk, std::size_t block_tokens,
                            std::size_t num_blocks, const float* x, float* out,
                            mha_kv_dtype dtype = MHA_KV_DEFAULT) {
  PagedKvCache cache(attn, slots, block_tokens, num_blocks, dtype);
  Scheduler sch(reqs, slots, chunk);
  std::vector<std::size_t> ids, q_start;
  LoopStats st = sch.run([](std::size_t, std::size_t) {},
                         [&] {
                           ids.clear();
                           q_start.assign(1, 0);
                           for (std::size_t s : sch.order()) {
                             const std::size_t n = sch.take(static_cast<std::size_t>(sch.owner[s]));
                             ids.push_back(s);
                             q_start.push_back(q_start.back() + n);
                           }
                           cache.step(ids.size(), ids.data(), q_start.data(), x, x, x, out);
                           return q_start.back();
                         },
                         [&](std::size_t s, std::size_t) { cache.reset_slot(s); });
  st.cache_bytes = cache.bytes();
  return st;
}

// The same requests through a one-batch-row mha_kv_cache each (allocated for
// the request's whole length when it joins), one mha_attention_step per
// request per step.
inline LoopStats per_request_loop(const MultiheadAttention& attn,
                                  const std::vector<DecoderRequest>& reqs, std::size_t slots,
                                  std::size_t chunk, std::size_t max_len, const float* x,
                                  float* out, mha_kv_dtype dtype = MHA_KV_DEFAULT) {
  std::vector<std::unique_ptr<KvCache>> caches(slots);
  Scheduler sch(reqs, slots, chunk);
  return sch.run(
      [&](std::size_t s, std::size_t) {
        caches[s] = std::make_unique<KvCache>(attn, 1, max_len, dtype);
      },
      [&] {
        std::size_t tokens = 0;
        for (std::size_t s : sch.order()) {
          const std::size_t n = sch.take(static_cast<std::size_t>(sch.owner[s]));
          if (n != 0) caches[s]->step(n, x, x, x, out);
          tokens += n;
        }
        return tokens;
      },
      [&](std::size_t s, std::size_t) { caches[s].reset(); });
}

}  // namespace mha::bench
