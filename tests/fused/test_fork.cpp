// Shared blocks in the paged cache (mha_kv_cache_fork_slot):
//  - random forks, steps, truncates and resets on every KV type, fp32 and
//    bf16 objects, blocks of 16 and 7 keys: every step's rows equal, bit for
//    bit, the same step on a cache where each fork was an unshared copy (a
//    prefill of the same tokens), the pool never loses or doubles a block,
//    and a failed call changes nothing;
//  - 32 slots forked from one 4096-token prompt, each decoding 64 tokens of
//    its own, hold at most 1.1x the blocks of 4096 + 32 x (64 + one block);
//  - bad arguments, and forks and truncates that need a block from an
//    exhausted pool, fail and change nothing;
//  - cascade decode: a step over forked slots computes their shared chunks
//    once (mha_kv_cache_shared_chunks says how many) and gives, bit for bit,
//    the step with cascade off, on unshared copies, and at 1, 2 and 3
//    threads, a prefill chunk of one slot beside the others' decode rows
//    included; with ALiBi or a window it does not run.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "attention/core/core.hpp"
#include "fused/handles.hpp"
#include "fused/model_weights.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::Attn;
using mha::test::make_attn;
using mha::test::make_paged;
using mha::test::Paged;
using mha::test::random_vector;
using mha::test::same_bits;
using mha::test::StepCase;

// One step of n rows on one slot.
mha_status step(const mha_attention* a, mha_paged_kv_cache* c, std::size_t slot, std::size_t n,
                const float* x, float* out) {
  const std::size_t q_start[] = {0, n};
  return mha_attention_step_ragged(a, c, 1, &slot, q_start, x, x, x, out);
}

// A cache's state as a caller sees it.
std::vector<std::size_t> state(const mha_paged_kv_cache* c, std::size_t slots) {
  std::vector<std::size_t> s{mha_kv_cache_free_blocks(c)};
  for (std::size_t i = 0; i < slots; ++i) s.push_back(mha_kv_cache_slot_length(c, i));
  return s;
}

}  // namespace

TEST_CASE("paged cache: forked slots give the bits of unshared copies, in any order", "[paged]") {
  const mha::test::ModelWeights w(64, 8, 2, 0, 61);
  constexpr std::size_t E = 64, kSlots = 5;
  const std::size_t ops = mha::test::scaled(60, 25);
  for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
    const Attn a = make_attn(w, compute);
    for (mha_kv_dtype dt : {MHA_KV_DEFAULT, MHA_KV_INT8, MHA_KV_FP8_E4M3}) {
      for (std::size_t bt : {std::size_t{16}, std::size_t{7}}) {
        CAPTURE(compute, dt, bt);
        // A small pool, so forks and copies meet an exhausted one; the
        // unshared twin's pool never runs out.
        const std::size_t pool = 400 / bt;
        const Paged shared = make_paged(a.get(), kSlots, bt, pool, dt);
        const Paged twin = make_paged(a.get(), kSlots, bt, 10 * pool, dt);
        std::vector<std::vector<float>> history(kSlots);  // each slot's tokens
        std::mt19937_64 rng(bt * 7 + static_cast<unsigned>(dt) +
                            3 * static_cast<unsigned>(compute));
        const auto uniform = [&](std::size_t lo, std::size_t hi) {
          return std::uniform_int_distribution<std::size_t>(lo, hi)(rng);
        };
        std::vector<float> out_s, out_t, scratch;
        for (std::size_t op = 0; op < ops; ++op) {
          const std::size_t slot = uniform(0, kSlots - 1), len = history[slot].size() / E;
          const std::vector<std::size_t> before = state(shared.get(), kSlots);
          const std::size_t kind = uniform(0, 9);
          CAPTURE(op, kind, slot, len);
          if (kind < 3) {  // fork slot into an empty one
            std::size_t dst = kSlots;
            for (std::size_t s = 0; s < kSlots; ++s) {
              if (s != slot && history[s].empty()) dst = s;
            }
            if (dst == kSlots || len == 0) continue;
            const std::size_t n = uniform(1, len);
            const mha_status st = mha_kv_cache_fork_slot(shared.get(), slot, dst, n);
            if (st == MHA_OUT_OF_MEMORY) {
              REQUIRE(n % bt != 0);
              REQUIRE(state(shared.get(), kSlots) == before);
              continue;
            }
            REQUIRE(st == MHA_OK);
            history[dst].assign(history[slot].begin(), history[slot].begin() + n * E);
            // The twin: an unshared copy of the same tokens, in one prefill.
            scratch.resize(n * E);
            REQUIRE(step(a.get(), twin.get(), dst, n, history[dst].data(), scratch.data()) ==
                    MHA_OK);
            REQUIRE(mha_kv_cache_slot_length(shared.get(), dst) == n);
          } else if (kind < 7) {  // a decode step or a chunk
            const std::size_t n = uniform(0, 2) == 0 ? uniform(2, 40) : 1;
            const std::vector<float> x = random_vector(n * E, 1000 * op + slot);
            out_s.assign(n * E, 0.0f);
            out_t.assign(n * E, 0.0f);
            const mha_status st = step(a.get(), shared.get(), slot, n, x.data(), out_s.data());
            if (st != MHA_OK) {
              // The pool is short (the longest slot finishes), or the slot
              // would outgrow the whole pool (it finishes).
              REQUIRE((st == MHA_OUT_OF_MEMORY || st == MHA_INVALID_ARGUMENT));
              REQUIRE(state(shared.get(), kSlots) == before);
              std::size_t victim = slot;
              if (st == MHA_OUT_OF_MEMORY) {
                for (std::size_t s = 0; s < kSlots; ++s) {
                  if (history[s].size() > history[victim].size()) victim = s;
                }
              }
              REQUIRE(mha_kv_cache_reset_slot(shared.get(), victim) == MHA_OK);
              REQUIRE(mha_kv_cache_reset_slot(twin.get(), victim) == MHA_OK);
              history[victim].clear();
              continue;
            }
            REQUIRE(st == MHA_OK);
            REQUIRE(step(a.get(), twin.get(), slot, n, x.data(), out_t.data()) == MHA_OK);
            REQUIRE(same_bits(out_s.data(), out_t.data(), n * E));
            history[slot].insert(history[slot].end(), x.begin(), x.end());
          } else if (kind < 9) {  // truncate (a kept shared block is copied)
            const std::size_t n = uniform(0, len);
            const mha_status st = mha_kv_cache_truncate_slot(shared.get(), slot, n);
            if (st == MHA_OUT_OF_MEMORY) {
              REQUIRE(state(shared.get(), kSlots) == before);
              continue;
            }
            REQUIRE(st == MHA_OK);
            REQUIRE(mha_kv_cache_truncate_slot(twin.get(), slot, n) == MHA_OK);
            history[slot].resize(n * E);
          } else {
            REQUIRE(mha_kv_cache_reset_slot(shared.get(), slot) == MHA_OK);
            REQUIRE(mha_kv_cache_reset_slot(twin.get(), slot) == MHA_OK);
            history[slot].clear();
          }
          REQUIRE(mha_kv_cache_free_blocks(shared.get()) <= pool);
          for (std::size_t s = 0; s < kSlots; ++s) {
            REQUIRE(mha_kv_cache_slot_length(shared.get(), s) == history[s].size() / E);
          }
        }
        // Every slot decodes one more token on both: the same bits, and
        // then every block is back in the pool exactly once.
        for (std::size_t s = 0; s < kSlots; ++s) {
          if (history[s].empty()) continue;
          const std::vector<float> x = random_vector(E, 77 + s);
          out_s.assign(E, 0.0f);
          out_t.assign(E, 0.0f);
          if (step(a.get(), shared.get(), s, 1, x.data(), out_s.data()) != MHA_OK) continue;
          REQUIRE(step(a.get(), twin.get(), s, 1, x.data(), out_t.data()) == MHA_OK);
          REQUIRE(same_bits(out_s.data(), out_t.data(), E));
        }
        for (std::size_t s = 0; s < kSlots; ++s) {
          REQUIRE(mha_kv_cache_reset_slot(shared.get(), s) == MHA_OK);
        }
        REQUIRE(mha_kv_cache_free_blocks(shared.get()) == pool);
      }
    }
  }
}

TEST_CASE("paged cache: 32 samples of one prompt hold the prompt's blocks once", "[paged]") {
  // Small heads: the block count does not depend on the shape.
  const mha::test::ModelWeights w(32, 4, 2, 0, 62);
  const Attn a = make_attn(w, MHA_FP32);
  constexpr std::size_t E = 32, kSamples = 32, kDecode = 64, bt = 16;
  const std::size_t prompt = mha::test::full_scale() ? 4096 : 1024;
  const std::size_t pool = kSamples * (prompt + kDecode + bt) / bt;  // unshared needs
  const Paged c = make_paged(a.get(), kSamples, bt, pool, MHA_KV_DEFAULT);
  const std::vector<float> x = random_vector(prompt * E, 5);
  std::vector<float> out(prompt * E);
  REQUIRE(step(a.get(), c.get(), 0, prompt, x.data(), out.data()) == MHA_OK);
  for (std::size_t s = 1; s < kSamples; ++s) {
    REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, s, prompt) == MHA_OK);
  }
  REQUIRE(pool - mha_kv_cache_free_blocks(c.get()) == prompt / bt);
  std::vector<std::size_t> slots(kSamples), q_start(kSamples + 1);
  for (std::size_t s = 0; s < kSamples; ++s) slots[s] = s;
  for (std::size_t s = 0; s <= kSamples; ++s) q_start[s] = s;
  for (std::size_t t = 0; t < kDecode; ++t) {
    const std::vector<float> tok = random_vector(kSamples * E, 100 + t);
    REQUIRE(mha_attention_step_ragged(a.get(), c.get(), kSamples, slots.data(), q_start.data(),
                                      tok.data(), tok.data(), tok.data(), out.data()) == MHA_OK);
  }
  const std::size_t used = pool - mha_kv_cache_free_blocks(c.get());
  const double bound = 1.1 * static_cast<double>(prompt + kSamples * (kDecode + bt)) / bt;
  CAPTURE(used, bound);
  REQUIRE(static_cast<double>(used) <= bound);
  for (std::size_t s = 0; s < kSamples; ++s) REQUIRE(mha_kv_cache_reset_slot(c.get(), s) == MHA_OK);
  REQUIRE(mha_kv_cache_free_blocks(c.get()) == pool);
}

TEST_CASE("paged cache: bad forks, and forks and truncates with no free block, change nothing",
          "[paged]") {
  const mha::test::ModelWeights w(32, 4, 2, 0, 63);
  const Attn a = make_attn(w, MHA_FP32);
  constexpr std::size_t E = 32;
  const Paged c = make_paged(a.get(), 3, 16, 4, MHA_KV_DEFAULT);
  const std::vector<float> x = random_vector(40 * E, 6);
  std::vector<float> out(40 * E);
  REQUIRE(step(a.get(), c.get(), 0, 40, x.data(), out.data()) == MHA_OK);  // 3 blocks
  const auto message = [] { return std::string(mha_last_error()); };
  const std::vector<std::size_t> before = state(c.get(), 3);
  REQUIRE(mha_kv_cache_fork_slot(nullptr, 0, 1, 8) == MHA_INVALID_ARGUMENT);
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 3, 1, 8) == MHA_INVALID_ARGUMENT);
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, 3, 8) == MHA_INVALID_ARGUMENT);
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, 0, 8) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("differ") != std::string::npos);
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, 1, 41) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("len") != std::string::npos);
  REQUIRE(state(c.get(), 3) == before);
  // Whole blocks: shared, no block taken; a non-empty dst is refused.
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, 1, 32) == MHA_OK);
  REQUIRE(mha_kv_cache_free_blocks(c.get()) == 1);
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, 1, 16) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("empty") != std::string::npos);
  // A partial block takes the last free one; then none is left for another.
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, 2, 20) == MHA_OK);
  REQUIRE(mha_kv_cache_free_blocks(c.get()) == 0);
  REQUIRE(mha_kv_cache_reset_slot(c.get(), 2) == MHA_OK);
  REQUIRE(step(a.get(), c.get(), 2, 16, x.data(), out.data()) == MHA_OK);  // the last block
  const std::vector<std::size_t> full = state(c.get(), 3);
  REQUIRE(mha_kv_cache_reset_slot(c.get(), 2) == MHA_OK);
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 1, 2, 32) == MHA_OK);  // whole blocks again
  REQUIRE(mha_kv_cache_reset_slot(c.get(), 2) == MHA_OK);
  REQUIRE(step(a.get(), c.get(), 2, 16, x.data(), out.data()) == MHA_OK);
  REQUIRE(state(c.get(), 3) == full);
  REQUIRE(mha_kv_cache_fork_slot(c.get(), 0, 2, 20) == MHA_INVALID_ARGUMENT);  // 2 not empty
  REQUIRE(mha_kv_cache_reset_slot(c.get(), 2) == MHA_OK);
  REQUIRE(step(a.get(), c.get(), 2, 16, x.data(), out.data()) == MHA_OK);
  // Slot 1 keeps half of a block it shares with slot 0: it needs a copy,
  // and no block is free.
  REQUIRE(mha_kv_cache_free_blocks(c.get()) == 0);
  REQUIRE(mha_kv_cache_truncate_slot(c.get(), 1, 20) == MHA_OUT_OF_MEMORY);
  CHECK(message().find("shares") != std::string::npos);
  REQUIRE(state(c.get(), 3) == full);
  // Slot 0's partial third block is its own: no copy needed.
  REQUIRE(mha_kv_cache_truncate_slot(c.get(), 0, 36) == MHA_OK);
  // Freed room: slot 1's truncate now copies its block, and slot 0's
  // positions, read through a step, are unchanged (the bits of a fresh
  // slot with the same 36 tokens).
  REQUIRE(mha_kv_cache_reset_slot(c.get(), 2) == MHA_OK);
  REQUIRE(mha_kv_cache_truncate_slot(c.get(), 1, 20) == MHA_OK);
  REQUIRE(mha_kv_cache_free_blocks(c.get()) == 0);
  std::vector<float> got(E), want(E);
  REQUIRE(step(a.get(), c.get(), 0, 1, &x[36 * E], got.data()) == MHA_OK);
  const Paged fresh = make_paged(a.get(), 1, 16, 4, MHA_KV_DEFAULT);
  std::vector<float> pre(37 * E);
  REQUIRE(step(a.get(), fresh.get(), 0, 37, x.data(), pre.data()) == MHA_OK);
  REQUIRE(same_bits(got.data(), &pre[36 * E], E));
}

namespace {

// The cascade test's slots: a prompt in slot 0, forks of it at several
// lengths (one a fork of a fork), and an unrelated prompt.
struct Fork {
  std::size_t src, dst, len;
};
constexpr std::size_t kPrompt = 800, kOther = 500, kCascadeSlots = 7, kOwnTokens = 3;
// Past the first chunk of the key grid (512 keys; 720 on AVX2, 756 on NEON).
constexpr Fork kForks[] = {{0, 1, 800}, {0, 2, 800}, {0, 3, 760}, {0, 4, 600}, {1, 5, 780}};

// A step's mods writing lse to `lse`, the window only on the joint steps
// (so every slot holds its whole history until then).
mha_mods with_lse(const mha_mods& base, float* lse, bool joint) {
  mha_mods r = base;
  r.lse = lse;
  if (!joint) r.window = 0;
  return r;
}

}  // namespace

TEST_CASE("a sequence's bits do not depend on forked slots computing shared chunks once",
          "[paged][cascade]") {
  const mha::test::ModelWeights w(64, 8, 2, 0, 63);
  constexpr std::size_t E = 64, H = 8;
  const std::vector<float> prompt = random_vector(kPrompt * E, 11);
  const std::vector<float> other = random_vector(kOther * E, 12);
  // Slot s's history: its source's first tokens, then its own.
  std::vector<std::vector<float>> history(kCascadeSlots);
  history[0] = prompt;
  for (const Fork& f : kForks) {
    history[f.dst].assign(history[f.src].begin(), history[f.src].begin() + f.len * E);
  }
  history[6] = other;
  for (std::size_t s = 0; s < kCascadeSlots; ++s) {
    const std::vector<float> own = random_vector(kOwnTokens * E, 20 + s);
    history[s].insert(history[s].end(), own.begin(), own.end());
  }
  std::vector<std::size_t> slots(kCascadeSlots), one(kCascadeSlots + 1);
  for (std::size_t s = 0; s < kCascadeSlots; ++s) slots[s] = s;
  for (std::size_t s = 0; s <= kCascadeSlots; ++s) one[s] = s;
  mha::test::for_each_step_config(
      {StepCase::rope_cap_sinks, StepCase::alibi},
      [&](mha_dtype compute, mha_kv_dtype dt, std::size_t bt, StepCase mc) {
        CAPTURE(compute, dt, bt, static_cast<int>(mc));
        const Attn a = make_attn(w, compute);
        const mha::test::StepMods mods(mc, H, 8, 600);
        const std::size_t pool = 4 * (kPrompt + kOther) / bt;
        std::vector<float> lse(kPrompt * H), out(kPrompt * E);
        // A step of n tokens per slot (rows of x per slot in order).
        const auto step_slots = [&](mha_paged_kv_cache* c, std::size_t num,
                                    const std::size_t* which, const std::size_t* q_start,
                                    const float* x, bool joint) {
          out.assign(q_start[num] * E, 0.0f);
          lse.assign(q_start[num] * H, 0.0f);
          const mha_mods m = with_lse(mods.m, lse.data(), joint);
          return mha_attention_step_ragged_mods(a.get(), c, num, which, q_start, x, x, x, &m,
                                                out.data());
        };
        const auto one_slot = [&](mha_paged_kv_cache* c, std::size_t slot, std::size_t from,
                                  std::size_t n) {
          const std::size_t q_start[] = {0, n};
          REQUIRE(step_slots(c, 1, &slot, q_start, history[slot].data() + from * E, false) ==
                  MHA_OK);
        };
        // Forked (shared) or each slot prefilled on its own (the twin);
        // then every slot's own tokens, one step each.
        const auto build = [&](bool forked) {
          Paged c = make_paged(a.get(), kCascadeSlots, bt, pool, dt);
          one_slot(c.get(), 0, 0, kPrompt);
          for (const Fork& f : kForks) {
            if (forked) {
              REQUIRE(mha_kv_cache_fork_slot(c.get(), f.src, f.dst, f.len) == MHA_OK);
            } else {
              one_slot(c.get(), f.dst, 0, f.len);
            }
          }
          one_slot(c.get(), 6, 0, kOther);
          for (std::size_t s = 0; s < kCascadeSlots; ++s) {
            for (std::size_t t = 0; t < kOwnTokens; ++t) {
              one_slot(c.get(), s, mha_kv_cache_slot_length(c.get(), s), 1);
            }
          }
          return c;
        };
        // (At reduced scale, cascade on against off alone: test_fork's random
        // operations hold forked slots to unshared copies.)
        const Paged on = build(true), off = build(true);
        const Paged twin =
            mha::test::full_scale() ? build(false) : Paged(nullptr, mha_paged_kv_cache_destroy);
        const bool cascade = mods.cascades();
        for (std::size_t joint = 0; joint < 2; ++joint) {
          CAPTURE(joint);
          const std::vector<float> x = random_vector(kCascadeSlots * E, 40 + joint);
          const auto lengths = state(on.get(), kCascadeSlots);
          std::vector<float> want_out, want_lse;
          // (Not rewound under a window: its step dropped the blocks
          // that the same step, rewound, would read.)
          // (One thread under qemu-user, where a second one hangs: 0 would
          // restore the default of one per core.)
          const std::size_t rounds =
              mc == StepCase::window || !mha::test::threads_allowed() ? 1 : 3;
          for (std::size_t threads = 1; threads <= rounds; ++threads) {
            CAPTURE(threads);
            mha_set_num_threads(threads);
            if (threads > 1) {  // the same step again
              for (std::size_t s = 0; s < kCascadeSlots; ++s) {
                REQUIRE(mha_kv_cache_truncate_slot(on.get(), s, lengths[s + 1]) == MHA_OK);
              }
            }
            REQUIRE(step_slots(on.get(), kCascadeSlots, slots.data(), one.data(), x.data(), true) ==
                    MHA_OK);
            CHECK((mha_kv_cache_shared_chunks(on.get()) > 0) == cascade);
            if (threads == 1) {
              want_out = out;
              want_lse = lse;
            }
            REQUIRE(same_bits(out.data(), want_out.data(), out.size()));
            REQUIRE(same_bits(lse.data(), want_lse.data(), lse.size()));
          }
          if (mha::test::threads_allowed()) mha_set_num_threads(0);
          mha::detail::set_core_cascade(false);
          REQUIRE(step_slots(off.get(), kCascadeSlots, slots.data(), one.data(), x.data(), true) ==
                  MHA_OK);
          mha::detail::set_core_cascade(true);
          CHECK(mha_kv_cache_shared_chunks(off.get()) == 0);
          REQUIRE(same_bits(out.data(), want_out.data(), out.size()));
          REQUIRE(same_bits(lse.data(), want_lse.data(), lse.size()));
          if (!twin) continue;
          REQUIRE(step_slots(twin.get(), kCascadeSlots, slots.data(), one.data(), x.data(), true) ==
                  MHA_OK);
          CHECK(mha_kv_cache_shared_chunks(twin.get()) == 0);
          REQUIRE(same_bits(out.data(), want_out.data(), out.size()));
          REQUIRE(same_bits(lse.data(), want_lse.data(), lse.size()));
        }
        // A step where slot 0 brings two tokens (a prefill chunk beside the
        // decode rows): the others still share, with the same bits.
        const std::vector<float> x = random_vector((kCascadeSlots + 1) * E, 50);
        std::vector<std::size_t> q_start(one);
        for (std::size_t s = 1; s <= kCascadeSlots; ++s) ++q_start[s];
        REQUIRE(step_slots(on.get(), kCascadeSlots, slots.data(), q_start.data(), x.data(), true) ==
                MHA_OK);
        CHECK((mha_kv_cache_shared_chunks(on.get()) > 0) == cascade);
        const std::vector<float> want_out = out, want_lse = lse;
        for (const Paged* c : {&off, &twin}) {
          if (!*c) continue;
          mha::detail::set_core_cascade(c != &off);
          REQUIRE(step_slots(c->get(), kCascadeSlots, slots.data(), q_start.data(), x.data(),
                             true) == MHA_OK);
          mha::detail::set_core_cascade(true);
          REQUIRE(same_bits(out.data(), want_out.data(), out.size()));
          REQUIRE(same_bits(lse.data(), want_lse.data(), lse.size()));
        }
      });
}
