// Paged KV cache (mha_kv_cache_create_paged, mha_attention_step_ragged[_mods]):
// random continuous-batching schedules (requests join, prefill in chunks,
// decode one token at a time, get truncated, finish and free their slot for
// a new request) equal one causal ragged forward over every whole sequence,
// with and without modifiers (lse included); a window returns the blocks it
// no longer sees; pool exhaustion changes nothing; results are bit-identical
// at 1, 2 and 3 threads; bad arguments are rejected.
//
// Bit for bit: a row's bits depend on its own sequence alone (mha.h), not on
// the block size, the schedule or the other slots.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <mha/attention.hpp>
#include <mha/error.hpp>
#include <mha/kv_cache.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "fused/model_weights.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::random_vector;

struct Model : mha::test::ModelWeights {
  std::unique_ptr<mha::MultiheadAttention> attn;
  Model(std::size_t E, std::size_t H, std::size_t kv_heads, std::uint64_t seed)
      : ModelWeights(E, H, kv_heads, 0, seed),
        attn(std::make_unique<mha::MultiheadAttention>(cfg, view())) {}
};

// One request: its tokens (self-attention inputs) and the output row each
// position got when it was stepped.
struct Request {
  std::vector<float> x, out, lse;
  std::size_t len = 0;  // target length
  std::size_t fed = 0;  // tokens in its slot
};

struct Schedule {
  std::size_t slots, block_tokens, num_blocks, requests, max_len;
  std::uint64_t seed;
};

// Runs a random schedule to completion; returns every request, its outputs
// (and lse rows, if mods asks for them) filled. Every step goes through one
// mha_attention_step_ragged_mods call.
std::vector<Request> run_schedule(const Model& m, const Schedule& sc,
                                  const mha_mods* mods = nullptr) {
  const std::size_t E = m.E(), H = m.cfg.num_heads;
  const bool want_lse = mods != nullptr && mods->lse != nullptr;
  std::mt19937_64 rng(sc.seed);
  const auto uniform = [&](std::size_t lo, std::size_t hi) {
    return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
  };
  std::vector<Request> reqs(sc.requests);
  for (std::size_t r = 0; r < reqs.size(); ++r) {
    // Mostly short, some long (at max_len >= 2048, long enough for split-KV
    // decode steps: >= 1024 keys).
    reqs[r].len = r % 5 == 1 ? uniform(sc.max_len / 2, sc.max_len) : uniform(1, 90);
    reqs[r].x = random_vector(reqs[r].len * E, sc.seed * 1000 + r);
    reqs[r].out.assign(reqs[r].len * E, -7.0f);
    reqs[r].lse.assign(want_lse ? reqs[r].len * H : 0, -7.0f);
  }
  mha::PagedKvCache cache(*m.attn, sc.slots, sc.block_tokens, sc.num_blocks);
  std::vector<long> owner(sc.slots, -1);  // request in each slot
  std::size_t next = 0, done = 0;
  while (done < reqs.size()) {
    // Joins: free slots take waiting requests.
    for (std::size_t s = 0; s < sc.slots; ++s) {
      if (owner[s] < 0 && next < reqs.size() && uniform(0, 2) != 0) {
        REQUIRE(cache.slot_length(s) == 0);
        owner[s] = static_cast<long>(next++);
      }
    }
    // A random subset of the active slots, in random order, each with a
    // chunk of its prompt or one token.
    std::vector<std::size_t> slots, q_start{0};
    std::vector<float> x;
    for (std::size_t s = 0; s < sc.slots; ++s) {
      if (owner[s] >= 0 && uniform(0, 3) != 0) slots.push_back(s);
    }
    std::shuffle(slots.begin(), slots.end(), rng);
    for (std::size_t s : slots) {
      Request& r = reqs[static_cast<std::size_t>(owner[s])];
      // Sometimes a rejected speculative tail: truncate and feed new tokens
      // (not under a window, whose dropped blocks the rolled-back queries
      // may need: that case has a test of its own).
      if (r.fed > 4 && uniform(0, 9) == 0 && (mods == nullptr || mods->window == 0)) {
        const std::size_t keep = r.fed - uniform(1, 3);
        cache.truncate_slot(s, keep);
        const auto fresh = random_vector((r.len - keep) * E, rng());
        std::copy(fresh.begin(), fresh.end(), r.x.begin() + static_cast<long>(keep * E));
        r.fed = keep;
      }
      const std::size_t left = r.len - r.fed;
      const std::size_t n =
          uniform(0, 4) == 0 ? 0 : std::min(left, uniform(0, 1) ? 1 : uniform(1, 300));
      x.insert(x.end(), r.x.begin() + static_cast<long>(r.fed * E),
               r.x.begin() + static_cast<long>((r.fed + n) * E));
      q_start.push_back(q_start.back() + n);
    }
    std::vector<float> out(std::max<std::size_t>(1, q_start.back() * E));
    std::vector<float> lse(std::max<std::size_t>(1, q_start.back() * H));
    mha_mods step_mods{};
    if (mods != nullptr) {
      step_mods = *mods;
      if (want_lse) step_mods.lse = lse.data();
    }
    cache.step_mods(slots.size(), slots.data(), q_start.data(), x.data(), x.data(), x.data(),
                    mods != nullptr ? &step_mods : nullptr, out.data());
    for (std::size_t i = 0; i < slots.size(); ++i) {
      const std::size_t s = slots[i];
      Request& r = reqs[static_cast<std::size_t>(owner[s])];
      const std::size_t n = q_start[i + 1] - q_start[i];
      std::copy_n(&out[q_start[i] * E], n * E, &r.out[r.fed * E]);
      if (want_lse) std::copy_n(&lse[q_start[i] * H], n * H, &r.lse[r.fed * H]);
      r.fed += n;
      REQUIRE(cache.slot_length(s) == r.fed);
      // Finished: the slot goes back for the next request.
      if (r.fed == r.len) {
        cache.reset_slot(s);
        owner[s] = -1;
        ++done;
      }
    }
  }
  REQUIRE(cache.free_blocks() == sc.num_blocks);
  return reqs;
}

// One causal ragged forward over every whole sequence (with mods), then
// each request's out and lse rows against it.
void require_matches(const Model& m, const std::vector<Request>& reqs,
                     const mha_mods* mods = nullptr) {
  const std::size_t H = m.cfg.num_heads;
  std::vector<std::size_t> start{0};
  std::vector<float> x;
  for (const Request& r : reqs) {
    x.insert(x.end(), r.x.begin(), r.x.end());
    start.push_back(start.back() + r.len);
  }
  std::vector<float> want(x.size()), want_lse(start.back() * H);
  mha_mods whole{};
  whole.struct_size = sizeof(mha_mods);
  if (mods != nullptr) whole = *mods;
  whole.causal = 1;
  const bool lse = whole.lse != nullptr;
  whole.lse = lse ? want_lse.data() : nullptr;
  const mha_ragged seqs{sizeof(mha_ragged), reqs.size(), start.data(), nullptr};
  m.attn->forward_ragged_mods(seqs, x.data(), x.data(), x.data(), &whole, want.data());
  // Bit for bit: any block size gives the contiguous store's bits.
  const auto same = [](float got, float w) { return std::memcmp(&got, &w, sizeof got) == 0; };
  std::size_t at = 0, at_lse = 0, bad = 0;
  for (const Request& r : reqs) {
    for (float got : r.out) bad += same(got, want[at++]) ? 0 : 1;
    for (float got : r.lse) bad += same(got, want_lse[at_lse++]) ? 0 : 1;
  }
  REQUIRE(at == want.size());
  REQUIRE(at_lse == (lse ? want_lse.size() : 0));
  REQUIRE(bad == 0);
}

}  // namespace

TEST_CASE("paged cache: random schedules equal one causal ragged forward", "[paged]") {
  const Model m(64, 8, 2, 41);
  // Blocks shorter than the key tile, not a multiple of the strip width, one
  // key tile, and several key tiles.
  const Schedule schedules[] = {
      {4, 16, 300, 12, 1200, 1},
      {3, 100, 60, 10, 1100, 2},
      {5, 256, 40, 14, 1300, 3},
      {2, 512, 20, 8, 2100, 4},
  };
  for (const Schedule& sc : schedules) {
    CAPTURE(sc.slots, sc.block_tokens, sc.seed);
    require_matches(m, run_schedule(m, sc));
  }
}

TEST_CASE("paged cache: random schedules with modifiers equal one ragged forward with them",
          "[paged][mods]") {
  // GQA 8/2, head_dim 8: RoPE on all of it or on half, interleaved or not.
  const Model m(64, 8, 2, 45);
  const mha::test::ModsCases mods_cases(8, 8, 0, 37, 300);
  // Blocks shorter than the key tile (so windows drop blocks often) and one
  // key tile; long requests reach split-KV decode steps.
  // Below full scale (CI's sanitizer and qemu runs, where this took 50 and
  // 110 s) each modifier runs one schedule, in turn, so each schedule still
  // meets half of them.
  const Schedule schedules[] = {{4, 16, 300, 10, 1200, 5}, {3, 256, 40, 8, 2100, 6}};
  const bool every = mha::test::full_scale();
  for (std::size_t c = 0; c < mods_cases.cases.size(); ++c) {
    const auto& [name, mods] = mods_cases.cases[c];
    for (std::size_t s = 0; s < std::size(schedules); ++s) {
      if (!every && s != c % std::size(schedules)) continue;
      const Schedule& sc = schedules[s];
      CAPTURE(name, sc.block_tokens, sc.seed);
      require_matches(m, run_schedule(m, sc, &mods), &mods);
    }
  }
}

TEST_CASE("paged cache: a window returns the blocks it no longer sees", "[paged][mods]") {
  const Model m(32, 4, 2, 46);
  const std::size_t E = 32, window = 40, bt = 16, n = 500, pool = 24;
  // A windowed slot holds at most window + 256 + bt positions (mha.h), in
  // blocks of 16 that need not start on one, and one more fills while a
  // step runs.
  const std::size_t most = (window + 256) / bt + 3;
  mha::PagedKvCache cache(*m.attn, 1, bt, pool);
  const auto seq = random_vector(n * E, 4);
  mha_mods mods{};
  mods.struct_size = sizeof(mha_mods);
  mods.window = window;
  std::vector<float> got(n * E);
  const std::size_t slot = 0, prompt[] = {0, 30}, one[] = {0, 1};
  cache.step_mods(1, &slot, prompt, seq.data(), seq.data(), seq.data(), &mods, got.data());
  for (std::size_t t = 30; t < n; ++t) {
    cache.step_mods(1, &slot, one, &seq[t * E], &seq[t * E], &seq[t * E], &mods, &got[t * E]);
    REQUIRE(pool - cache.free_blocks() <= most);
  }
  REQUIRE(cache.slot_length(0) == n);
  std::vector<float> want(n * E);
  mods.causal = 1;
  m.attn->forward_mods(1, n, n, seq.data(), seq.data(), seq.data(), nullptr, &mods, want.data());
  REQUIRE(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);

  // The positions before the first one held, 192 = (500 + 1 - 40 - 256)
  // rounded down to a block, are gone: a step without the window, or with
  // one reaching back within 256 of them, and a truncation below 192 are
  // rejected and change nothing.
  const auto message = [] { return std::string(mha_last_error()); };
  const std::size_t free_before = cache.free_blocks();
  std::vector<float> sentinel(E, 3.0f);
  REQUIRE(mha_attention_step_ragged(m.attn->handle(), cache.handle(), 1, &slot, one, seq.data(),
                                    seq.data(), seq.data(),
                                    sentinel.data()) == MHA_INVALID_ARGUMENT);
  const std::string said = message();
  CHECK(said.find("dropped") != std::string::npos);
  const std::size_t at = said.find("positions from ");
  REQUIRE(at != std::string::npos);
  const std::size_t first = std::stoul(said.substr(at + 15));
  CAPTURE(said);
  REQUIRE(first == 192);
  mods.window = 60;  // reaches back to 441, and 441 - 256 < 192
  REQUIRE(mha_attention_step_ragged_mods(m.attn->handle(), cache.handle(), 1, &slot, one,
                                         seq.data(), seq.data(), seq.data(), &mods,
                                         sentinel.data()) == MHA_INVALID_ARGUMENT);
  mods.window = static_cast<std::size_t>(-1);  // first + window would wrap
  REQUIRE(mha_attention_step_ragged_mods(m.attn->handle(), cache.handle(), 1, &slot, one,
                                         seq.data(), seq.data(), seq.data(), &mods,
                                         sentinel.data()) == MHA_INVALID_ARGUMENT);
  REQUIRE(mha_kv_cache_truncate_slot(cache.handle(), 0, first - 1) == MHA_INVALID_ARGUMENT);
  CHECK(message().find(std::to_string(first)) != std::string::npos);
  REQUIRE(std::all_of(sentinel.begin(), sentinel.end(), [](float v) { return v == 3.0f; }));
  REQUIRE(cache.slot_length(0) == n);
  REQUIRE(cache.free_blocks() == free_before);
  // Truncating to a held position, and resetting, work.
  REQUIRE(mha_kv_cache_truncate_slot(cache.handle(), 0, first + 12) == MHA_OK);
  REQUIRE(mha_kv_cache_reset_slot(cache.handle(), 0) == MHA_OK);
  REQUIRE(cache.free_blocks() == pool);
  REQUIRE(mha_attention_step_ragged(m.attn->handle(), cache.handle(), 1, &slot, prompt, seq.data(),
                                    seq.data(), seq.data(), got.data()) == MHA_OK);
}

TEST_CASE("paged cache: bit-identical at 1, 2 and 3 threads", "[paged]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  const Model m(64, 8, 2, 43);
  const Schedule sc{4, 64, 100, 8, 1100, 9};
  // With the modifiers that add work per key tile and per split-KV merge.
  const float sinks[8] = {0.3f, -1.0f, 2.0f, 0.0f, 1.5f, -0.5f, 0.7f, 3.0f};
  mha_mods mods{};
  mods.struct_size = sizeof(mha_mods);
  mods.rope_dim = 8;
  mods.sinks = sinks;
  mods.softcap = 4.0f;
  mha_set_num_threads(1);
  const auto one = run_schedule(m, sc, &mods);
  for (std::size_t t : {2, 3}) {
    mha_set_num_threads(t);
    const auto many = run_schedule(m, sc, &mods);
    for (std::size_t r = 0; r < one.size(); ++r) {
      REQUIRE(std::memcmp(one[r].out.data(), many[r].out.data(),
                          one[r].out.size() * sizeof(float)) == 0);
    }
  }
  mha_set_num_threads(0);
}

TEST_CASE("paged cache: an exhausted pool fails the step and changes nothing", "[paged]") {
  const Model m(32, 4, 4, 47);
  const std::size_t E = 32;
  mha::PagedKvCache cache(*m.attn, 3, 16, 4);
  const auto seq0 = random_vector(40 * E, 1), seq1 = random_vector(40 * E, 2);
  std::vector<float> out(40 * E);
  // Slot 0: 20 tokens (2 blocks); slot 1: 16 tokens (1 block); 1 block free.
  std::size_t s0 = 0, q20[] = {0, 20}, s1 = 1, q16[] = {0, 16};
  cache.step(1, &s0, q20, seq0.data(), seq0.data(), seq0.data(), out.data());
  cache.step(1, &s1, q16, seq1.data(), seq1.data(), seq1.data(), out.data());
  REQUIRE(cache.free_blocks() == 1);

  // Slot 0 + 13 tokens (needs 1 more block) and slot 1 + 17 (needs 2): 3 > 1.
  const std::size_t slots[] = {0, 1}, q_start[] = {0, 13, 30};
  std::vector<float> x(30 * E);
  std::copy_n(&seq0[20 * E], 13 * E, x.begin());
  std::copy_n(&seq1[16 * E], 17 * E, x.begin() + 13 * E);
  std::vector<float> sentinel(30 * E, 3.0f);
  const mha_status st =
      mha_attention_step_ragged(m.attn->handle(), cache.handle(), 2, slots, q_start, x.data(),
                                x.data(), x.data(), sentinel.data());
  REQUIRE(st == MHA_OUT_OF_MEMORY);
  CHECK(std::string(mha_last_error()).find("blocks") != std::string::npos);
  REQUIRE(cache.slot_length(0) == 20);
  REQUIRE(cache.slot_length(1) == 16);
  REQUIRE(cache.free_blocks() == 1);
  REQUIRE(std::all_of(sentinel.begin(), sentinel.end(), [](float v) { return v == 3.0f; }));

  // Slot 1 finishes; the retry of slot 0 alone succeeds, its history intact:
  // it equals one causal forward over seq0's first 33 tokens.
  cache.reset_slot(1);
  REQUIRE(cache.free_blocks() == 2);
  const std::size_t q13[] = {0, 13};
  std::vector<float> got(13 * E);
  cache.step(1, &s0, q13, x.data(), x.data(), x.data(), got.data());
  REQUIRE(cache.slot_length(0) == 33);
  std::vector<float> want(33 * E);
  mha_mask causal{};
  causal.causal = 1;
  m.attn->forward(1, 33, 33, seq0.data(), seq0.data(), seq0.data(), &causal, want.data());
  for (std::size_t i = 0; i < 13 * E; ++i) {
    REQUIRE(std::fabs(got[i] - want[20 * E + i]) <= 2e-5f * (1.0f + std::fabs(want[20 * E + i])));
  }
}

TEST_CASE("paged cache: bad arguments are rejected and change nothing", "[paged]") {
  const Model m(32, 4, 4, 53);
  const Model other(32, 4, 4, 54);
  const std::size_t E = 32;
  mha::PagedKvCache cache(*m.attn, 2, 16, 4);
  const auto x = random_vector(70 * E, 3);
  std::vector<float> out(70 * E, 3.0f);
  const auto step = [&](const mha_attention* a, std::size_t num, const std::size_t* slots,
                        const std::size_t* q_start) {
    return mha_attention_step_ragged(a, cache.handle(), num, slots, q_start, x.data(), x.data(),
                                     x.data(), out.data());
  };
  const auto message = [] { return std::string(mha_last_error()); };
  const std::size_t two[] = {0, 1}, same[] = {1, 1}, far[] = {0, 2};
  const std::size_t good[] = {0, 2, 3}, decreasing[] = {0, 3, 2}, not_zero[] = {1, 2, 3};
  const std::size_t too_long[] = {0, 65, 66};
  REQUIRE(step(m.attn->handle(), 2, far, good) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("slots[1]") != std::string::npos);
  REQUIRE(step(m.attn->handle(), 2, same, good) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("twice") != std::string::npos);
  REQUIRE(step(m.attn->handle(), 2, two, decreasing) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("q_start[2]") != std::string::npos);
  REQUIRE(step(m.attn->handle(), 2, two, not_zero) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("q_start[0]") != std::string::npos);
  REQUIRE(step(m.attn->handle(), 2, two, too_long) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("whole pool") != std::string::npos);
  REQUIRE(step(other.attn->handle(), 2, two, good) == MHA_INVALID_ARGUMENT);
  REQUIRE(mha_kv_cache_truncate_slot(cache.handle(), 0, 1) == MHA_INVALID_ARGUMENT);
  REQUIRE(mha_kv_cache_reset_slot(cache.handle(), 2) == MHA_INVALID_ARGUMENT);
  REQUIRE(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; }));
  REQUIRE(cache.free_blocks() == 4);
  REQUIRE(step(m.attn->handle(), 2, two, good) == MHA_OK);
  REQUIRE(cache.slot_length(0) == 2);
  REQUIRE(cache.slot_length(1) == 1);
  REQUIRE(mha_kv_cache_slot_length(cache.handle(), 5) == 0);
  REQUIRE(mha_kv_cache_slot_length(nullptr, 0) == 0);
  // A failed create leaves *out as it was.
  auto* const sentinel = reinterpret_cast<mha_paged_kv_cache*>(std::uintptr_t{0x5e7});
  mha_paged_kv_cache* c = sentinel;
  REQUIRE(mha_kv_cache_create_paged(m.attn->handle(), 1, 0, 4, &c) == MHA_INVALID_ARGUMENT);
  REQUIRE(c == sentinel);
  REQUIRE(mha_kv_cache_create_paged(m.attn->handle(), 1, 16, static_cast<std::size_t>(-1) / 4,
                                    &c) == MHA_INVALID_ARGUMENT);
  REQUIRE(mha_kv_cache_create_paged(m.attn->handle(), std::size_t{1} << 61, 16, 4, &c) ==
          MHA_INVALID_ARGUMENT);
  REQUIRE(c == sentinel);
}
