// Attention modifiers (mha_mods: causal, sliding window, ALiBi, soft-capping,
// sinks, RoPE, lse) against the double oracle, alone and combined, and their
// properties: off means bit-identical to mha_attention_forward, masked keys
// stay masked under soft-capping, lse merges split keys, KV-cache steps equal
// the whole-sequence forward, thread-count invariance, argument checks.
// Every case runs on every ISA (CTest runs the binary once per MHA_ISA).
//
// Tolerances (scaled_error, as test_attention_oracle.cpp): 1e-5 on outputs
// and weights. RoPE adds one rotation of q and k (cos/sin rounded to float,
// products rounded: a few ulp of |q|, |k|); ALiBi is formed in float from
// exact integer distances (slope·(j - i') rounded once, < 300 · 2^-24 · slope
// here); the soft cap is within 5e-7·cap (kernels.hpp). lse: absolute error <= 1e-5 ·
// max(1, |lse|): it is m + log(sum), the max exact and log(sum) within a few
// ulp of a sum accurate to the softmax's own bound.
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mha/attention.hpp>
#include <mha/isa.hpp>
#include <mha/kv_cache.hpp>
#include <random>
#include <sstream>
#include <string>

#include "attention/attention_case.hpp"
#include "attention/core/core.hpp"
#include "dispatch/dispatch.hpp"

using namespace mha::test;

namespace {

constexpr double kTolerance = 1e-5;
// Largest errors against the oracle in this process, printed after the
// random test so the margin under kTolerance stays visible in the log.
double worst_out = 0, worst_weights = 0, worst_lse = 0;

// Owned modifier arrays and the mha_mods pointing into them.
struct ModsData {
  std::vector<float> slopes, sinks, lse;
  mha_mods mods{};
  ModsData() { mods.struct_size = sizeof(mha_mods); }
  void alibi(std::size_t H) {
    // The ALiBi paper's slopes 2^(-8h/H), h = 1..H.
    slopes.resize(H);
    for (std::size_t h = 0; h < H; ++h)
      slopes[h] = std::exp2(-8.f * static_cast<float>(h + 1) / static_cast<float>(H));
    mods.alibi_slopes = slopes.data();
  }
  void sink(std::size_t H, std::uint64_t seed) {
    sinks = random_vector(H, seed, -2.f, 2.f);
    mods.sinks = sinks.data();
  }
  void want_lse(std::size_t rows, std::size_t H) {
    lse.assign(rows * H, NAN);
    mods.lse = lse.data();
  }
};

std::string describe(const AttentionCase& c, const mha_mods& m) {
  std::ostringstream s;
  s << "E=" << c.config.embed_dim << " H=" << c.config.num_heads
    << " kv_heads=" << c.config.num_kv_heads << " batch=" << c.batch << " q_len=" << c.q_len
    << " kv_len=" << c.kv_len << (c.self ? " self" : " cross") << (c.causal ? " mask.causal" : "")
    << (c.padding ? " padding" : "") << " additive=" << c.additive
    << " weights=" << static_cast<int>(c.weights_out) << " | causal=" << m.causal
    << " window=" << m.window << " alibi=" << (m.alibi_slopes != nullptr)
    << " softcap=" << m.softcap << " sinks=" << (m.sinks != nullptr) << " rope_dim=" << m.rope_dim
    << " theta=" << m.rope_theta << " interleaved=" << m.rope_interleaved << " seed=" << c.seed;
  return s.str();
}

CaseResult run_mods(const mha::MultiheadAttention& attn, const AttentionCase& c, const CaseData& d,
                    const mha_mods* m) {
  CaseResult r;
  r.out.assign(c.batch * c.q_len * c.config.embed_dim, NAN);
  r.weights.assign(weights_size(c), NAN);
  attn.forward_mods(c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(), d.value.data(),
                    d.mask_ptr(), m, r.out.data(), r.weights.empty() ? nullptr : r.weights.data(),
                    c.weights_out == WeightsOut::averaged);
  return r;
}

ReferenceResult run_reference(const AttentionCase& c, const CaseData& d, const mha_mods* m) {
  return reference_attention(c.config, d.w.view(), c.batch, c.q_len, c.kv_len, d.query.data(),
                             d.key.data(), d.value.data(), d.mask_ptr(),
                             c.weights_out != WeightsOut::none,
                             c.weights_out == WeightsOut::averaged, m);
}

// Runs a case with modifiers through the library and the oracle and checks
// out, weights and lse.
void check_against_oracle(const AttentionCase& c, ModsData& md) {
  INFO(describe(c, md.mods));
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  md.want_lse(c.batch * c.q_len, c.config.num_heads);
  const CaseResult ours = run_mods(attn, c, d, &md.mods);
  const ReferenceResult ref = run_reference(c, d, &md.mods);
  const double out_err = scaled_error(ours.out, ref.out), lse_err = lse_error(md.lse, ref.lse);
  worst_out = std::max(worst_out, out_err);
  worst_lse = std::max(worst_lse, lse_err);
  CHECK(out_err <= kTolerance);
  CHECK(lse_err <= kTolerance);
  if (c.weights_out != WeightsOut::none) {
    const double w_err = scaled_error(ours.weights, ref.weights);
    worst_weights = std::max(worst_weights, w_err);
    CHECK(w_err <= kTolerance);
  }
}

AttentionCase base_case(std::size_t E, std::size_t H, std::size_t kvh, std::size_t q_len,
                        std::size_t kv_len, bool self, std::uint64_t seed) {
  AttentionCase c;
  c.config = mha_config{E, H, self ? 0 : E / 2 + 1, self ? 0 : E + 3, kvh};
  c.batch = 2;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.self = self;
  c.seed = seed;
  return c;
}

}  // namespace

TEST_CASE("each modifier alone and all combined match the double oracle", "[attention][mods]") {
  // Self and cross attention (kdim, vdim != E, q_len != kv_len), MHA and GQA,
  // with and without the causal mask, weights none / per head / averaged.
  for (int shape = 0; shape < 4; ++shape) {
    const bool self = shape % 2 == 0, gqa = shape >= 2;
    AttentionCase c = base_case(32, 4, gqa ? 2 : 0, self ? 37 : 19, 37, self, 100 + shape);
    for (int modifier = 0; modifier < 9; ++modifier) {
      for (int causal = 0; causal < 2; ++causal) {
        ModsData md;
        md.mods.causal = causal;
        const bool all = modifier == 8;
        if (modifier == 1 || all) md.mods.window = 5;
        if (modifier == 2 || all) md.alibi(4);
        if (modifier == 3 || all) md.mods.softcap = 0.7f;  // scores here are O(1): it bites
        if (modifier == 4 || all) md.sink(4, 7 + shape);
        if (modifier == 5 || all) md.mods.rope_dim = 8;
        if (modifier == 6) {
          md.mods.rope_dim = 6;
          md.mods.rope_interleaved = 1;
          md.mods.rope_theta = 500.f;
        }
        if (modifier == 7) {  // additive mask and padding with modifiers
          c.additive = 2;
          c.padding = true;
          md.mods.window = 9;
          md.alibi(4);
        }
        c.weights_out = static_cast<WeightsOut>((modifier + causal) % 3);
        check_against_oracle(c, md);
        c.additive = 0;
        c.padding = false;
      }
    }
  }
}

TEST_CASE("random modifier combinations match the double oracle", "[attention][mods]") {
  std::mt19937_64 rng(2024);
  auto any = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  for (int n = 0; n < 120; ++n) {
    static const std::size_t heads[] = {1, 2, 4};
    static const std::size_t head_dims[] = {2, 4, 8, 16, 24};
    const std::size_t H = heads[any(3)], dh = head_dims[any(5)];
    const bool self = any(2) == 0;
    const std::size_t kv_len = 1 + any(300);
    const std::size_t q_len = self ? kv_len : 1 + any(300);
    AttentionCase c = base_case(H * dh, H, any(2) ? 1 : 0, q_len, kv_len, self, 5000 + n);
    c.causal = any(4) == 0;
    c.padding = any(4) == 0;
    c.weights_out = static_cast<WeightsOut>(any(3));
    ModsData md;
    md.mods.causal = any(2);
    if (any(2)) md.mods.window = 1 + any(static_cast<int>(kv_len) + 2);
    if (any(2)) md.alibi(H);
    if (any(2)) md.mods.softcap = 0.25f + static_cast<float>(any(40)) / 4.f;
    if (any(2)) md.sink(H, 9000 + n);
    if (any(2)) {
      md.mods.rope_dim = 2 * (1 + any(static_cast<int>(dh / 2)));
      md.mods.rope_interleaved = any(2);
      md.mods.rope_theta = any(2) ? 0.f : 100.f;
    }
    check_against_oracle(c, md);
  }
  std::printf("mods vs oracle, worst so far: out %.2g, weights %.2g, lse %.2g (tolerance %.0e)\n",
              worst_out, worst_weights, worst_lse, kTolerance);
}

// Non-causal rows see keys after their position, where slope·(j - i')
// grows with the distance: at slope 0.9 and 1100 keys the keys that carry
// the weight have terms near 1000, held in float to 1000·u, unless the
// library forms them against the row's favoured key (tile_math.cpp's
// alibi_ref). Steep, shallow and negative slopes (products that float
// rounds), with sinks, soft-cap and lse, the weights path and a window.
TEST_CASE("ALiBi over long non-causal rows matches the oracle", "[attention][mods]") {
  for (int variant = 0; variant < 4; ++variant) {
    AttentionCase c = base_case(28, 4, 0, 1100, 1100, true, 700 + variant);
    c.batch = 1;
    if (variant == 1) c.weights_out = WeightsOut::per_head;
    ModsData md;
    md.slopes = {0.9137f, 0.3331f, -0.6173f, 0.0039f};
    md.mods.alibi_slopes = md.slopes.data();
    md.sink(4, 70 + variant);
    md.mods.softcap = variant == 2 ? 10.f : 0.f;
    md.mods.window = variant == 3 ? 600 : 0;
    check_against_oracle(c, md);
  }
}

TEST_CASE("window and sinks across split-KV chunks match the oracle", "[attention][mods]") {
  // Few tasks and long keys: the core splits the keys into chunks (those
  // the window reaches, from plan.key_begin), and the window skips tiles.
  const auto& g = mha::detail::gemm_kernels(mha::current_isa());
  for (std::size_t window : {1, 100, 700, 1500, 5000}) {
    const std::size_t kv_len = window == 1500 ? 3000 : 1500;
    AttentionCase c = base_case(16, 2, 0, 3, kv_len, false, 77 + window);
    c.batch = 1;
    const mha::detail::AttentionShape shape{16, 2, 16, 16, 2, 8};
    const mha::detail::CoreArrays arr = mha::detail::CoreArrays::take(1);
    arr.q_start[0] = arr.kv_start[0] = 0;
    arr.q_start[1] = 3;
    arr.kv_start[1] = kv_len;
    mha::detail::AttentionMods windowed;
    windowed.window = window;
    const mha::detail::CorePlan plan =
        mha::detail::plan_core(*mha::detail::make_kv_fp32(g), g, shape,
                               {1, arr.q_start, arr.kv_start}, 0, false, false, windowed, arr);
    INFO("window " << window << ": key_begin " << plan.key_begin << ", chunks " << plan.chunks);
    if (window == 1500) CHECK((plan.key_begin > 0 && plan.chunks > 1));
    if (window == 5000) CHECK((plan.key_begin == 0 && plan.chunks > 1));
    if (window <= 700) CHECK(plan.key_begin >= kv_len - 3 - window + 1 - plan.key_tile);
    ModsData md;
    md.mods.window = window;
    md.mods.causal = 1;
    md.sink(2, 3);
    md.alibi(2);
    md.mods.rope_dim = 8;
    check_against_oracle(c, md);
  }
}

TEST_CASE("modifiers off are bit-identical to mha_attention_forward", "[attention][mods]") {
  for (WeightsOut wo : {WeightsOut::none, WeightsOut::per_head, WeightsOut::averaged}) {
    AttentionCase c = base_case(24, 3, 0, 70, 70, true, 3);
    c.causal = true;
    c.additive = 1;
    c.weights_out = wo;
    const CaseData d(c);
    const mha::MultiheadAttention attn(c.config, d.w.view());
    const CaseResult plain = run_library(attn, c, d);
    ModsData md;
    for (const mha_mods* m :
         {static_cast<const mha_mods*>(nullptr), static_cast<const mha_mods*>(&md.mods)}) {
      const CaseResult with = run_mods(attn, c, d, m);
      CHECK(mha::test::same_bits(plain.out, with.out));
      CHECK(mha::test::same_bits(plain.weights, with.weights));
    }
    // mods.causal is mask.causal.
    c.causal = false;
    const CaseData d2(c);
    md.mods.causal = 1;
    const CaseResult via_mods = run_mods(attn, c, d2, &md.mods);
    CHECK(mha::test::same_bits(plain.out, via_mods.out));
  }
}

TEST_CASE("a step with modifiers off is bit-identical to mha_attention_step",
          "[attention][mods][kv_cache]") {
  AttentionCase c = base_case(24, 3, 1, 9, 9, true, 17);
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  mha::KvCache plain(attn, c.batch, 16), with(attn, c.batch, 16);
  ModsData md;
  for (int round = 0; round < 2; ++round) {
    std::vector<float> a(c.batch * 9 * 24), b(a.size());
    plain.step_self(9 - 8 * round, d.query.data(), a.data());
    with.step_mods(9 - 8 * round, d.query.data(), d.query.data(), d.query.data(),
                   round == 0 ? &md.mods : nullptr, b.data());
    CHECK(mha::test::same_bits(a, b));
  }
}

TEST_CASE("a window covering every key is no window, up to SIZE_MAX", "[attention][mods]") {
  AttentionCase c = base_case(16, 2, 0, 30, 40, false, 23);
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  ModsData none;
  none.mods.causal = 1;
  const CaseResult want = run_mods(attn, c, d, &none.mods);
  for (std::size_t window : {std::size_t{40}, std::size_t{41}, std::size_t{1} << 40, SIZE_MAX}) {
    ModsData md;
    md.mods.causal = 1;
    md.mods.window = window;
    const CaseResult got = run_mods(attn, c, d, &md.mods);
    INFO("window " << window);
    CHECK(mha::test::same_bits(want.out, got.out));
    check_against_oracle(c, md);
  }
}

TEST_CASE("soft-capping keeps masked keys masked", "[attention][mods]") {
  // A tiny cap makes every kept score nearly equal; masked keys must still
  // get weight exactly 0 (tanh(-inf) would give them -cap otherwise).
  AttentionCase c = base_case(16, 2, 0, 20, 20, true, 11);
  c.causal = true;
  c.padding = true;
  c.additive = 1;
  c.weights_out = WeightsOut::per_head;
  ModsData md;
  md.mods.softcap = 0.01f;
  md.mods.window = 6;
  check_against_oracle(c, md);
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  const CaseResult r = run_mods(attn, c, d, &md.mods);
  for (std::size_t b = 0; b < c.batch; ++b)
    for (std::size_t h = 0; h < 2; ++h)
      for (std::size_t i = 0; i < c.q_len; ++i)
        for (std::size_t j = 0; j < c.kv_len; ++j) {
          const bool masked = j > i || j + 6 <= i || d.padding[b * c.kv_len + j] != 0;
          const float w = r.weights[((b * 2 + h) * c.q_len + i) * c.kv_len + j];
          if (masked) REQUIRE(w == 0.f);
        }
}

TEST_CASE("lse merges attention over split keys into the whole", "[attention][mods]") {
  // One head, so mha's out rows merge directly (mha.h, mha_mods.lse). The
  // sink joins the first part only; soft-capping and padding apply per key.
  for (std::size_t split : {1, 40, 99}) {
    AttentionCase c = base_case(8, 1, 0, 7, 100, false, 21 + split);
    c.padding = true;
    const CaseData d(c);
    const mha::MultiheadAttention attn(c.config, d.w.view());
    const std::size_t E = 8, kdim = CaseData::kdim(c), vdim = CaseData::vdim(c);
    const std::size_t rows = c.batch * c.q_len;
    ModsData whole;
    whole.sink(1, 5);
    whole.mods.softcap = 2.f;
    whole.want_lse(rows, 1);
    std::vector<float> out(rows * E);
    mha_mask mask{};
    mask.key_padding = d.padding.data();
    attn.forward_mods(c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(), d.value.data(),
                      &mask, &whole.mods, out.data());
    std::vector<float> outs[2], lses[2];
    for (int part = 0; part < 2; ++part) {
      const std::size_t k0 = part == 0 ? 0 : split, n = part == 0 ? split : c.kv_len - split;
      std::vector<float> key, value;
      std::vector<unsigned char> pad;
      for (std::size_t b = 0; b < c.batch; ++b) {
        const std::size_t r0 = b * c.kv_len + k0;
        key.insert(key.end(), d.key.begin() + r0 * kdim, d.key.begin() + (r0 + n) * kdim);
        value.insert(value.end(), d.value.begin() + r0 * vdim, d.value.begin() + (r0 + n) * vdim);
        pad.insert(pad.end(), d.padding.begin() + r0, d.padding.begin() + r0 + n);
      }
      ModsData md;
      if (part == 0) md.sink(1, 5);
      md.mods.softcap = 2.f;
      md.want_lse(rows, 1);
      mha_mask pm{};
      pm.key_padding = pad.data();
      outs[part].resize(rows * E);
      attn.forward_mods(c.batch, c.q_len, n, d.query.data(), key.data(), value.data(), &pm,
                        &md.mods, outs[part].data());
      lses[part] = md.lse;
    }
    std::vector<double> merged(rows * E), merged_lse(rows);
    for (std::size_t r = 0; r < rows; ++r) {
      const double l1 = lses[0][r], l2 = lses[1][r], m = std::max(l1, l2);
      const double w1 = std::exp(l1 - m), w2 = std::exp(l2 - m);
      merged_lse[r] = m + std::log(w1 + w2);
      for (std::size_t e = 0; e < E; ++e)
        merged[r * E + e] = (w1 * outs[0][r * E + e] + w2 * outs[1][r * E + e]) / (w1 + w2);
    }
    INFO("split " << split);
    CHECK(scaled_error(out, merged) <= kTolerance);
    CHECK(lse_error(whole.lse, merged_lse) <= kTolerance);
  }
}

TEST_CASE("KV-cache steps with modifiers equal the forward over the whole sequence",
          "[attention][mods][kv_cache]") {
  for (int variant = 0; variant < 6; ++variant) {
    const bool self = variant % 2 == 0;
    AttentionCase c = base_case(32, 4, variant >= 2 ? 2 : 0, 23, 23, self, 300 + variant);
    const CaseData d(c);
    const mha::MultiheadAttention attn(c.config, d.w.view());
    ModsData md;
    md.mods.causal = 1;
    md.mods.rope_dim = variant >= 4 ? 4 : 8;
    md.mods.rope_interleaved = variant % 3 == 1;
    md.alibi(4);
    md.sink(4, 8);
    md.mods.window = variant == 5 ? 1 : 7;
    md.mods.softcap = variant >= 3 ? 1.5f : 0.f;
    const std::size_t E = 32, H = 4, rows = c.batch * c.q_len;
    const std::size_t kdim = CaseData::kdim(c), vdim = CaseData::vdim(c);
    md.want_lse(rows, H);
    std::vector<float> whole(rows * E);
    attn.forward_mods(c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(), d.value.data(),
                      nullptr, &md.mods, whole.data());
    const ReferenceResult ref = run_reference(c, d, &md.mods);
    CHECK(scaled_error(whole, ref.out) <= kTolerance);

    mha::KvCache cache(attn, c.batch, c.q_len);
    std::size_t t0 = 0;
    for (std::size_t n : {1, 3, 1, 6, 2, 10}) {
      std::vector<float> q, k, v;
      for (std::size_t b = 0; b < c.batch; ++b) {
        const std::size_t r0 = b * c.q_len + t0;
        q.insert(q.end(), d.query.begin() + r0 * E, d.query.begin() + (r0 + n) * E);
        k.insert(k.end(), d.key.begin() + r0 * kdim, d.key.begin() + (r0 + n) * kdim);
        v.insert(v.end(), d.value.begin() + r0 * vdim, d.value.begin() + (r0 + n) * vdim);
      }
      ModsData sm;
      sm.mods = md.mods;
      sm.mods.causal = 0;  // implied by a step
      sm.want_lse(c.batch * n, H);
      std::vector<float> out(c.batch * n * E);
      cache.step_mods(n, q.data(), k.data(), v.data(), &sm.mods, out.data());
      std::vector<float> want;
      std::vector<double> want_lse;
      for (std::size_t b = 0; b < c.batch; ++b) {
        const std::size_t r0 = b * c.q_len + t0;
        want.insert(want.end(), whole.begin() + r0 * E, whole.begin() + (r0 + n) * E);
        want_lse.insert(want_lse.end(), ref.lse.begin() + r0 * H, ref.lse.begin() + (r0 + n) * H);
      }
      INFO("variant " << variant << " step at " << t0 << " of " << n);
      CHECK(scaled_error(out, std::vector<double>(want.begin(), want.end())) <= kTolerance);
      CHECK(lse_error(sm.lse, want_lse) <= kTolerance);
      t0 += n;
    }
    REQUIRE(t0 == c.q_len);
  }
}

TEST_CASE("a windowed decode step over a long cache equals the forward",
          "[attention][mods][kv_cache]") {
  // One token after 2999: the step's split-KV covers only the window's keys
  // (plan.key_begin > 0, several chunks), with RoPE at position 2999.
  AttentionCase c = base_case(16, 2, 1, 3000, 3000, true, 91);
  c.batch = 1;
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  ModsData md;
  md.mods.causal = 1;
  md.mods.window = 1500;
  md.mods.rope_dim = 8;
  md.sink(2, 4);
  md.want_lse(3000, 2);
  std::vector<float> whole(3000 * 16);
  attn.forward_mods(1, 3000, 3000, d.query.data(), d.query.data(), d.query.data(), nullptr,
                    &md.mods, whole.data());
  mha::KvCache cache(attn, 1, 3000);
  std::vector<float> prefill(2999 * 16), last(16);
  cache.step_mods(2999, d.query.data(), d.query.data(), d.query.data(), &md.mods, prefill.data());
  ModsData one;
  one.mods = md.mods;
  one.want_lse(1, 2);
  const float* x = d.query.data() + 2999 * 16;
  cache.step_mods(1, x, x, x, &one.mods, last.data());
  const std::vector<double> want(whole.end() - 16, whole.end());
  CHECK(scaled_error(last, want) <= kTolerance);
  CHECK(lse_error(one.lse, {md.lse[2999 * 2], md.lse[2999 * 2 + 1]}) <= kTolerance);
  const std::vector<double> want_prefill(whole.begin(), whole.end() - 16);
  CHECK(scaled_error(prefill, want_prefill) <= kTolerance);
}

TEST_CASE("modifiers give bit-identical results at 1, 2 and 3 threads",
          "[attention][mods][threads]") {
  if (!threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user, MHA_TEST_SINGLE_THREAD=1)");
    return;
  }
  // Split-KV (3 rows, 2100 keys) and a weights case, every modifier on.
  for (int variant = 0; variant < 2; ++variant) {
    AttentionCase c =
        base_case(32, 4, 2, variant == 0 ? 3 : 65, variant == 0 ? 2100 : 130, false, 41 + variant);
    c.weights_out = variant == 0 ? WeightsOut::none : WeightsOut::per_head;
    const CaseData d(c);
    const mha::MultiheadAttention attn(c.config, d.w.view());
    ModsData md;
    md.mods.causal = 1;
    md.mods.window = 900;
    md.alibi(4);
    md.sink(4, 2);
    md.mods.softcap = 3.f;
    md.mods.rope_dim = 8;
    md.want_lse(c.batch * c.q_len, 4);
    std::vector<float> lse1;
    CaseResult one;
    for (std::size_t t : {1, 2, 3}) {
      tbb::task_arena arena(static_cast<int>(t));
      CaseResult r;
      arena.execute([&] {
        mha::set_num_threads(t);
        r = run_mods(attn, c, d, &md.mods);
      });
      if (t == 1) {
        one = r;
        lse1 = md.lse;
        continue;
      }
      CHECK(mha::test::same_bits(one.out, r.out));
      CHECK(mha::test::same_bits(one.weights, r.weights));
      CHECK(mha::test::same_bits(lse1, md.lse));
    }
    mha::set_num_threads(0);
  }
}

TEST_CASE("bad modifiers are rejected with messages naming them", "[attention][mods][errors]") {
  const mha_config config{8, 2, 0, 0, 0};
  const RandomWeights rw(config, true, 1);
  const mha_weights w = rw.view();
  mha_attention* attn = nullptr;
  REQUIRE(mha_attention_create(&config, &w, &attn) == MHA_OK);
  const std::vector<float> x = random_vector(2 * 3 * 8, 2);
  std::vector<float> out(x.size(), 42.f), lse(6 * 2, 42.f);
  const float nan = NAN, inf = INFINITY;
  const float bad_slopes[] = {0.5f, nan}, bad_sinks[] = {inf, 0.f};
  auto expect = [&](const mha_mods& m, const std::string& needle) {
    CHECK(mha_attention_forward_mods(attn, 2, 3, 3, x.data(), x.data(), x.data(), nullptr, &m,
                                     out.data(), nullptr, 0) == MHA_INVALID_ARGUMENT);
    const std::string msg = mha_last_error();
    INFO("message: " << msg);
    CHECK(msg.find(needle) != std::string::npos);
    CHECK(msg.find("mha_attention_forward_mods") != std::string::npos);
  };
  mha_mods good{};
  good.struct_size = sizeof(mha_mods);
  good.lse = lse.data();
  mha_mods m = good;
  m.struct_size = 0;
  expect(m, "struct_size");
  m.struct_size = sizeof(mha_mods) + 8;
  expect(m, "struct_size");
  m = good;
  m.rope_dim = 3;
  expect(m, "rope_dim");
  m.rope_dim = 6;  // head_dim is 4
  expect(m, "rope_dim");
  m = good;
  m.rope_dim = 4;
  m.rope_theta = -1.f;
  expect(m, "rope_theta");
  m.rope_theta = nan;
  expect(m, "rope_theta");
  m = good;
  m.rope_interleaved = 2;
  expect(m, "rope_interleaved");
  m = good;
  m.softcap = -1.f;
  expect(m, "softcap");
  m.softcap = inf;
  expect(m, "softcap");
  m = good;
  m.alibi_slopes = bad_slopes;
  expect(m, "alibi_slopes[1]");
  m = good;
  m.sinks = bad_sinks;
  expect(m, "sinks[0]");
  for (float v : out) REQUIRE(v == 42.f);
  for (float v : lse) REQUIRE(v == 42.f);

  // The step checks the same fields, under its own name.
  mha_kv_cache* cache = nullptr;
  REQUIRE(mha_kv_cache_create(attn, 2, 4, &cache) == MHA_OK);
  m = good;
  m.rope_dim = 5;
  CHECK(mha_attention_step_mods(attn, cache, 1, x.data(), x.data(), x.data(), &m, out.data()) ==
        MHA_INVALID_ARGUMENT);
  const std::string msg = mha_last_error();
  CHECK(msg.find("mha_attention_step_mods: mods->rope_dim") != std::string::npos);
  CHECK(mha_kv_cache_length(cache) == 0);
  // NULL mods is the plain step.
  CHECK(mha_attention_step_mods(attn, cache, 1, x.data(), x.data(), x.data(), nullptr,
                                out.data()) == MHA_OK);
  CHECK(mha_kv_cache_length(cache) == 1);
  mha_kv_cache_destroy(cache);
  mha_attention_destroy(attn);
}
