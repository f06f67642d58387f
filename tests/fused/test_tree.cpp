// Speculative decoding (mha_attention_step_tree, mha_kv_cache_accept_path):
//  - every row of a ragged tree step (two slots, random trees) gives, bit
//    for bit, the output and lse of a plain step whose new tokens are its
//    path, on every KV type, fp32 and bf16 objects, blocks of 16 and 7,
//    with RoPE, soft-cap, sinks, ALiBi or a window, at 1, 2 and 3 threads;
//    the cached chunks its rows share are computed once;
//  - after accepting a path, the slot equals one stepped with that path
//    alone, for a later step, bit for bit;
//  - bad parents, steps, truncates and forks of a slot holding a tree, and
//    bad paths fail and change nothing.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

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

constexpr std::size_t E = 64, H = 8;

// A random tree of n tokens: each a root (-1) or a child of an earlier one.
std::vector<std::int32_t> random_tree(std::size_t n, std::mt19937_64& rng) {
  std::vector<std::int32_t> parent(n);
  for (std::size_t r = 0; r < n; ++r) {
    auto up = std::uniform_int_distribution<std::int64_t>(-1, static_cast<std::int64_t>(r) - 1);
    parent[r] = static_cast<std::int32_t>(r == 0 ? -1 : up(rng));
  }
  return parent;
}

// Token r's path from its root, as indices of the tree.
std::vector<std::size_t> path_to(const std::int32_t* parent, std::size_t r) {
  std::vector<std::size_t> p{r};
  while (parent[p.back()] >= 0) p.push_back(static_cast<std::size_t>(parent[p.back()]));
  std::reverse(p.begin(), p.end());
  return p;
}

}  // namespace

TEST_CASE("a sequence's bits do not depend on verifying it in a tree step", "[paged][tree]") {
  const mha::test::ModelWeights w(E, H, 2, 0, 64);
  // Slot 0 past a chunk of the key grid (512 keys; 720 on AVX2, 756 on NEON), slot 1 not.
  constexpr std::size_t kLen[] = {800, 300}, kTree[] = {12, 5}, kScratch = 2;
  const std::vector<float> history[] = {random_vector(kLen[0] * E, 1),
                                        random_vector(kLen[1] * E, 2)};
  mha::test::for_each_step_config(
      {StepCase::rope_cap_sinks, StepCase::window},
      [&](mha_dtype compute, mha_kv_dtype dt, std::size_t bt, StepCase mc) {
        CAPTURE(compute, dt, bt, static_cast<int>(mc));
        const Attn a = make_attn(w, compute);
        const mha::test::StepMods mods(mc, H, 8, 300);
        std::mt19937_64 rng(bt + 10 * static_cast<unsigned>(dt) + static_cast<unsigned>(mc));
        const std::size_t pool = 3 * (kLen[0] + kLen[1]) / bt;
        const Paged c = make_paged(a.get(), 3, bt, pool, dt);
        // Plain steps of x's rows on one slot: out and lse.
        std::vector<float> out, lse;
        const auto plain = [&](mha_paged_kv_cache* cache, std::size_t slot, std::size_t n,
                               const float* x) {
          out.assign(n * E, 0.0f);
          lse.assign(n * H, 0.0f);
          mha_mods m = mods.m;
          m.lse = lse.data();
          const std::size_t q_start[] = {0, n};
          return mha_attention_step_ragged_mods(a.get(), cache, 1, &slot, q_start, x, x, x, &m,
                                                out.data());
        };
        for (std::size_t s = 0; s < 2; ++s) {
          REQUIRE(plain(c.get(), s, kLen[s], history[s].data()) == MHA_OK);
        }
        // The tree step: both slots' trees, packed.
        const std::vector<std::int32_t> t0 = random_tree(kTree[0], rng),
                                        t1 = random_tree(kTree[1], rng);
        std::vector<std::int32_t> parent(t0);
        parent.insert(parent.end(), t1.begin(), t1.end());
        const std::size_t rows = kTree[0] + kTree[1];
        const std::size_t slots[] = {0, 1}, q_start[] = {0, kTree[0], rows};
        const std::vector<float> x = random_vector(rows * E, 3);
        std::vector<float> tree_out, tree_lse;
        // (One thread under qemu-user, where a second one hangs: 0 would
        // restore the default of one per core.)
        for (std::size_t threads : {1, 2, 3}) {
          if (threads > 1 && !mha::test::threads_allowed()) break;
          CAPTURE(threads);
          mha_set_num_threads(threads);
          for (std::size_t s = 0; s < 2; ++s) {  // drops a tree the last round left
            REQUIRE(mha_kv_cache_truncate_slot(c.get(), s, kLen[s]) == MHA_OK);
          }
          out.assign(rows * E, 0.0f);
          lse.assign(rows * H, 0.0f);
          mha_mods m = mods.m;
          m.lse = lse.data();
          REQUIRE(mha_attention_step_tree(a.get(), c.get(), 2, slots, q_start, parent.data(),
                                          x.data(), x.data(), x.data(), &m, out.data()) == MHA_OK);
          if (threads > 1) {
            REQUIRE(same_bits(out.data(), tree_out.data(), out.size()));
            REQUIRE(same_bits(lse.data(), tree_lse.data(), lse.size()));
          }
          tree_out = out;
          tree_lse = lse;
        }
        if (mha::test::threads_allowed()) mha_set_num_threads(0);
        const bool shares = mods.cascades();
        CHECK((mha_kv_cache_shared_chunks(c.get()) > 0) == shares);
        for (std::size_t s = 0; s < 2; ++s) {
          REQUIRE(mha_kv_cache_slot_length(c.get(), s) == kLen[s] + kTree[s]);
        }
        // Each row against a plain step of its path on a fork of its slot.
        std::vector<float> path_x;
        for (std::size_t r = 0; r < rows; ++r) {
          const std::size_t s = r < kTree[0] ? 0 : 1, r0 = q_start[s];
          const std::vector<std::size_t> path = path_to(parent.data() + r0, r - r0);
          CAPTURE(r, path.size());
          path_x.clear();
          for (std::size_t j : path) {
            path_x.insert(path_x.end(), x.begin() + (r0 + j) * E, x.begin() + (r0 + j + 1) * E);
          }
          REQUIRE(mha_kv_cache_fork_slot(c.get(), s, kScratch, kLen[s]) == MHA_OK);
          REQUIRE(plain(c.get(), kScratch, path.size(), path_x.data()) == MHA_OK);
          const std::size_t last = path.size() - 1;
          REQUIRE(same_bits(out.data() + last * E, tree_out.data() + r * E, E));
          REQUIRE(same_bits(lse.data() + last * H, tree_lse.data() + r * H, H));
          REQUIRE(mha_kv_cache_reset_slot(c.get(), kScratch) == MHA_OK);
        }
        // Accept slot 0's path to its last token, none of slot 1's; then
        // a plain step on each equals one on a slot stepped with the
        // path alone (slot 2, a fork of the history).
        const std::vector<std::size_t> keep = path_to(t0.data(), kTree[0] - 1);
        REQUIRE(mha_kv_cache_accept_path(c.get(), 0, keep.size(), keep.data()) == MHA_OK);
        REQUIRE(mha_kv_cache_accept_path(c.get(), 1, 0, nullptr) == MHA_OK);
        REQUIRE(mha_kv_cache_slot_length(c.get(), 0) == kLen[0] + keep.size());
        REQUIRE(mha_kv_cache_slot_length(c.get(), 1) == kLen[1]);
        path_x.clear();
        for (std::size_t j : keep) {
          path_x.insert(path_x.end(), x.begin() + j * E, x.begin() + (j + 1) * E);
        }
        const std::vector<float> next = random_vector(3 * E, 4);
        for (std::size_t s = 0; s < 2; ++s) {
          CAPTURE(s);
          const Paged twin = make_paged(a.get(), 1, bt, pool, dt);
          REQUIRE(plain(twin.get(), 0, kLen[s], history[s].data()) == MHA_OK);
          if (s == 0) REQUIRE(plain(twin.get(), 0, keep.size(), path_x.data()) == MHA_OK);
          REQUIRE(plain(twin.get(), 0, 3, next.data()) == MHA_OK);
          const std::vector<float> want = out, want_lse = lse;
          REQUIRE(plain(c.get(), s, 3, next.data()) == MHA_OK);
          REQUIRE(same_bits(out.data(), want.data(), out.size()));
          REQUIRE(same_bits(lse.data(), want_lse.data(), lse.size()));
        }
      });
}

TEST_CASE("paged cache: bad trees, paths and steps on a slot holding a tree change nothing",
          "[paged][tree]") {
  const mha::test::ModelWeights w(E, H, 2, 0, 65);
  const Attn a = make_attn(w, MHA_FP32);
  const Paged c = make_paged(a.get(), 3, 16, 64, MHA_KV_DEFAULT);
  const std::vector<float> x = random_vector(40 * E, 5);
  std::vector<float> out(40 * E, 0.0f);
  const std::size_t s0 = 0, s1 = 1, whole[] = {0, 20};
  REQUIRE(mha_attention_step_ragged(a.get(), c.get(), 1, &s0, whole, x.data(), x.data(), x.data(),
                                    out.data()) == MHA_OK);
  REQUIRE(mha_attention_step_ragged(a.get(), c.get(), 1, &s1, whole, x.data(), x.data(), x.data(),
                                    out.data()) == MHA_OK);
  const auto state = [&] {
    return std::vector<std::size_t>{
        mha_kv_cache_free_blocks(c.get()), mha_kv_cache_slot_length(c.get(), 0),
        mha_kv_cache_slot_length(c.get(), 1), mha_kv_cache_slot_length(c.get(), 2)};
  };
  const std::size_t four[] = {0, 4};
  const auto tree = [&](std::vector<std::int32_t> parent) {
    std::fill(out.begin(), out.end(), 0.0f);
    return mha_attention_step_tree(a.get(), c.get(), 1, &s0, four, parent.data(), x.data(),
                                   x.data(), x.data(), nullptr, out.data());
  };
  const auto untouched = [&] {
    return std::all_of(out.begin(), out.end(), [](float v) { return v == 0.0f; });
  };
  const std::vector<std::size_t> before = state();
  // A forward reference, a self-reference, a cycle and an out-of-range value.
  for (const std::vector<std::int32_t>& bad : std::vector<std::vector<std::int32_t>>{
           {-1, 2, 0, 1}, {-1, 1, 0, 1}, {1, 0, -1, 2}, {-1, 0, -2, 0}, {-1, 0, 7, 0}}) {
    CHECK(tree(bad) == MHA_INVALID_ARGUMENT);
    CHECK(untouched());
    CHECK(state() == before);
  }
  CHECK(mha_attention_step_tree(a.get(), c.get(), 1, &s0, four, nullptr, x.data(), x.data(),
                                x.data(), nullptr, out.data()) == MHA_INVALID_ARGUMENT);
  // Accepting without a tree step.
  const std::size_t root[] = {0};
  CHECK(mha_kv_cache_accept_path(c.get(), 0, 1, root) == MHA_INVALID_ARGUMENT);
  REQUIRE(tree({-1, 0, 0, 1}) == MHA_OK);
  const std::vector<std::size_t> held = state();
  REQUIRE(held[1] == 24);
  // Other steps, long truncates and forks of a slot holding a tree.
  const std::size_t one[] = {0, 1};
  CHECK(mha_attention_step_ragged(a.get(), c.get(), 1, &s0, one, x.data(), x.data(), x.data(),
                                  out.data()) == MHA_INVALID_ARGUMENT);
  CHECK(tree({-1, 0, 0, 1}) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_truncate_slot(c.get(), 0, 21) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_fork_slot(c.get(), 0, 2, 22) == MHA_INVALID_ARGUMENT);
  CHECK(state() == held);
  // Bad paths: past the tree, not from a root, a skipped level, a sibling.
  const std::vector<std::vector<std::size_t>> bad_paths{{0, 1, 3, 4}, {1}, {0, 3}, {0, 1, 2}, {9}};
  for (const std::vector<std::size_t>& p : bad_paths) {
    CHECK(mha_kv_cache_accept_path(c.get(), 0, p.size(), p.data()) == MHA_INVALID_ARGUMENT);
    CHECK(state() == held);
  }
  CHECK(mha_kv_cache_accept_path(c.get(), 0, 1, nullptr) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_accept_path(nullptr, 0, 0, nullptr) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_accept_path(c.get(), 3, 0, nullptr) == MHA_INVALID_ARGUMENT);
  // A fork of the history alone is allowed; the accept then keeps 3 tokens.
  CHECK(mha_kv_cache_fork_slot(c.get(), 0, 2, 20) == MHA_OK);
  const std::size_t good[] = {0, 1, 3};
  CHECK(mha_kv_cache_accept_path(c.get(), 0, 3, good) == MHA_OK);
  CHECK(mha_kv_cache_slot_length(c.get(), 0) == 23);
  CHECK(mha_kv_cache_accept_path(c.get(), 0, 0, nullptr) == MHA_INVALID_ARGUMENT);
  // A truncate into the history drops a tree.
  REQUIRE(tree({-1, -1, 0, 2}) == MHA_OK);
  CHECK(mha_kv_cache_truncate_slot(c.get(), 0, 23) == MHA_OK);
  CHECK(mha_kv_cache_accept_path(c.get(), 0, 0, nullptr) == MHA_INVALID_ARGUMENT);
  CHECK(mha_attention_step_ragged(a.get(), c.get(), 1, &s0, one, x.data(), x.data(), x.data(),
                                  out.data()) == MHA_OK);
  for (std::size_t s = 0; s < 3; ++s) REQUIRE(mha_kv_cache_reset_slot(c.get(), s) == MHA_OK);
  CHECK(mha_kv_cache_free_blocks(c.get()) == 64);
}
