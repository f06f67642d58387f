// A sequence's output bits depend on its own tokens and the object alone
// (mha.h, "Results"): not on the other sequences of a call, not on how its
// prefill is cut into steps, and not on whether the core splits its keys
// across tasks (set_core_split_override forces each variant). Long enough
// that the rows cross chunks of the key grid (512 keys) and, at full scale,
// that a decode step splits them by the plan's own rule (1024 keys); at
// MHA_TEST_SCALE 0.1 (sanitizers, qemu) 600 keys, split only when forced.
// fp32 and bf16 objects.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstddef>
#include <optional>
#include <vector>

#include "attention/core/core.hpp"
#include "support/reference.hpp"

using mha::test::random_vector;
using mha::test::same_bits;

namespace {

constexpr std::size_t E = 64, H = 4, KVH = 2;

struct Object {
  std::vector<float> w = random_vector(4 * E * E, 71, -0.3f, 0.3f);
  std::vector<float> bias = random_vector(3 * E, 72, -0.1f, 0.1f);
  mha_attention* attn = nullptr;
  explicit Object(mha_dtype dtype) {
    const mha_config config{E, H, 0, 0, KVH};
    const std::size_t kv = KVH * (E / H);
    const mha_weights weights{
        w.data(),    w.data() + E * E, w.data() + 2 * E * E, w.data() + 3 * E * E,
        bias.data(), bias.data() + E,  bias.data() + E + kv, nullptr};
    const mha_attention_options options{sizeof(mha_attention_options), dtype, MHA_WEIGHTS_COMPUTE,
                                        0};
    REQUIRE(mha_attention_create_ex(&config, &weights, &options, &attn) == MHA_OK);
  }
  ~Object() { mha_attention_destroy(attn); }
};

// RoPE and lse on, so the cache holds rotated keys and the fold's state shows.
struct Mods {
  mha_mods m{};
  explicit Mods(float* lse) {
    m.struct_size = sizeof(mha_mods);
    m.rope_dim = E / H;
    m.lse = lse;
  }
};

// Out and lse of tokens [0, len) of x, prefilled through a contiguous cache
// in steps of the given sizes (cycled).
std::vector<float> cache_steps(const Object& o, const std::vector<float>& x, std::size_t len,
                               const std::vector<std::size_t>& steps) {
  mha_kv_cache* cache = nullptr;
  REQUIRE(mha_kv_cache_create(o.attn, 1, len, &cache) == MHA_OK);
  std::vector<float> out(len * E), lse(len * H);
  for (std::size_t t = 0, s = 0; t < len; ++s) {
    const std::size_t n = std::min(steps[s % steps.size()], len - t);
    const Mods mods(lse.data() + t * H);
    const float* xt = x.data() + t * E;
    REQUIRE(mha_attention_step_mods(o.attn, cache, n, xt, xt, xt, &mods.m, out.data() + t * E) ==
            MHA_OK);
    t += n;
  }
  mha_kv_cache_destroy(cache);
  out.insert(out.end(), lse.begin(), lse.end());
  return out;
}

// The same through slot 1 of a paged cache, each step shared with a
// batch-mate in slot 0 (its own tokens y, its own lengths) when `mate`.
std::vector<float> paged_steps(const Object& o, const std::vector<float>& x,
                               const std::vector<float>& y, std::size_t len,
                               const std::vector<std::size_t>& steps, bool mate) {
  mha_paged_kv_cache* cache = nullptr;
  REQUIRE(mha_kv_cache_create_paged(o.attn, 2, 16, 2 * (len / 16 + 2), &cache) == MHA_OK);
  std::vector<float> out(len * E), lse(len * H);
  std::vector<float> in, res, lse_all;
  std::size_t mate_t = 0;
  for (std::size_t t = 0, s = 0; t < len; ++s) {
    const std::size_t n = std::min(steps[s % steps.size()], len - t);
    const std::size_t m = mate ? std::min<std::size_t>(1 + s % 5, len - mate_t) : 0;
    in.assign(y.begin() + mate_t * E, y.begin() + (mate_t + m) * E);
    in.insert(in.end(), x.begin() + t * E, x.begin() + (t + n) * E);
    res.assign((m + n) * E, 0.f);
    lse_all.assign((m + n) * H, 0.f);
    const Mods mods(lse_all.data());
    const std::size_t slots[2] = {0, 1};
    const std::size_t q_start[3] = {0, m, m + n};
    const std::size_t num = m != 0 ? 2 : 1;
    REQUIRE(mha_attention_step_ragged_mods(o.attn, cache, num, m != 0 ? slots : slots + 1,
                                           m != 0 ? q_start : q_start + 1, in.data(), in.data(),
                                           in.data(), &mods.m, res.data()) == MHA_OK);
    std::copy_n(res.begin() + m * E, n * E, out.begin() + t * E);
    std::copy_n(lse_all.begin() + m * H, n * H, lse.begin() + t * H);
    t += n;
    mate_t += m;
  }
  mha_paged_kv_cache_destroy(cache);
  out.insert(out.end(), lse.begin(), lse.end());
  return out;
}

// Tokens [0, len) of x as sequence 1 of a ragged forward, between
// batch-mates (or alone), causal.
std::vector<float> ragged(const Object& o, const std::vector<float>& x, const std::vector<float>& y,
                          std::size_t len, bool mates) {
  const std::size_t before = mates ? std::min<std::size_t>(700, len) : 0, after = mates ? 3 : 0;
  std::vector<float> in(y.begin(), y.begin() + before * E);
  in.insert(in.end(), x.begin(), x.begin() + len * E);
  in.insert(in.end(), y.begin(), y.begin() + after * E);
  const std::size_t rows = before + len + after;
  const std::size_t starts[4] = {0, before, before + len, rows};
  const mha_ragged seqs{sizeof(mha_ragged), 3, starts, nullptr};
  std::vector<float> res(rows * E), lse(rows * H);
  Mods mods(lse.data());
  mods.m.causal = 1;
  REQUIRE(mha_attention_forward_ragged(o.attn, &seqs, in.data(), in.data(), in.data(), &mods.m,
                                       res.data()) == MHA_OK);
  std::vector<float> out(res.begin() + before * E, res.begin() + (before + len) * E);
  out.insert(out.end(), lse.begin() + before * H, lse.begin() + (before + len) * H);
  return out;
}

// Tokens [0, len) of x through a causal mha_attention_forward_mods.
std::vector<float> forward(const Object& o, const std::vector<float>& x, std::size_t len) {
  std::vector<float> out(len * E), lse(len * H);
  const Mods mods(lse.data());
  mha_mask causal{};
  causal.causal = 1;
  REQUIRE(mha_attention_forward_mods(o.attn, 1, len, len, x.data(), x.data(), x.data(), &causal,
                                     &mods.m, out.data(), nullptr, 0) == MHA_OK);
  out.insert(out.end(), lse.begin(), lse.end());
  return out;
}

}  // namespace

TEST_CASE("a sequence's bits do not depend on batch-mates, steps or the split",
          "[fused][invariance]") {
  using mha::detail::CoreSplit;
  const std::size_t len = mha::test::scaled(1300, 600);
  const std::vector<float> x = random_vector(len * E, 81);
  const std::vector<float> y = random_vector(len * E, 82);
  for (mha_dtype dtype : {MHA_FP32, MHA_BF16}) {
    if (dtype == MHA_FP32 && mha::test::bf16_kernels_forced()) continue;
    const Object o(dtype);
    INFO("dtype " << (dtype == MHA_BF16 ? "bf16" : "fp32") << ", kernels " << mha_kernel_name(dtype)
                  << ", len " << len);
    // One step; prefill chunks then decode; token by token near the end.
    const std::vector<float> whole = cache_steps(o, x, len, {len});
    CHECK(same_bits(whole, cache_steps(o, x, len, {37, 1, 600, 1, 1, 300})));
    CHECK(same_bits(whole, cache_steps(o, x, len, {len - 40, 1})));
    // Paged (its own key tile, so its own bits): batch-mates and steps.
    const std::vector<float> paged = paged_steps(o, x, y, len, {len}, false);
    CHECK(same_bits(paged, paged_steps(o, x, y, len, {len}, true)));
    CHECK(same_bits(paged, paged_steps(o, x, y, len, {512, 3, 1, 200}, true)));
    CHECK(same_bits(paged, paged_steps(o, x, y, len, {len - 20, 1}, false)));
    // A ragged forward alone and between batch-mates, and a padded one, as
    // the cache's one step (the same key grid).
    const std::vector<float> alone = ragged(o, x, y, len, false);
    CHECK(same_bits(alone, ragged(o, x, y, len, true)));
    CHECK(same_bits(alone, whole));
    CHECK(same_bits(forward(o, x, len), whole));
    // Each core variant forced: the same bits.
    for (CoreSplit forced : {CoreSplit::split, CoreSplit::unsplit}) {
      INFO("forced " << (forced == CoreSplit::split ? "split" : "unsplit"));
      mha::detail::set_core_split_override(forced);
      CHECK(same_bits(whole, cache_steps(o, x, len, {len - 40, 1})));
      CHECK(same_bits(whole, cache_steps(o, x, len, {len})));
      CHECK(same_bits(paged, paged_steps(o, x, y, len, {300, 1, 5}, true)));
      CHECK(same_bits(alone, ragged(o, x, y, len, true)));
      mha::detail::set_core_split_override(std::nullopt);
    }
  }
}
