// Quantized KV caches (mha_kv_cache_create_ex, mha_kv_cache_create_paged_ex
// with MHA_KV_INT8 or MHA_KV_FP8_E4M3), on fp32 and bf16 objects:
//  - a step equals the forward computed on the dequantized K and V;
//  - a paged step gives the contiguous cache's bits at every block size, on
//    every KV type (fp32 and bf16 too), with every modifier;
//  - truncate and re-step give the bits of never having stepped;
//  - the bits do not depend on the thread count;
//  - a non-finite key or value follows the non-finite rule;
//  - options are checked, a failed call changes nothing, and the bytes are
//    as mha.h states.
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
#include <string>
#include <vector>

#include "fused/handles.hpp"
#include "fused/model_weights.hpp"
#include "kvquant/format.hpp"
#include "support/reference.hpp"

namespace {

namespace kvq = mha::detail::kvq;
using mha::test::random_vector;

constexpr mha_kv_dtype kQuantized[] = {MHA_KV_INT8, MHA_KV_FP8_E4M3};

kvq::Code code_of(mha_kv_dtype d) {
  return d == MHA_KV_INT8 ? kvq::Code::int8 : kvq::Code::e4m3;
}

using mha::test::Attn;
using mha::test::Cache;
using mha::test::make_attn;
using mha::test::make_cache;
using mha::test::make_paged;
using mha::test::Paged;
using mha::test::same_bits;

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float bf16_round(float x) {
  std::uint32_t b = bits(x);
  b += 0x7FFFu + ((b >> 16) & 1u);
  b &= 0xFFFF0000u;
  float y;
  std::memcpy(&y, &b, sizeof y);
  return y;
}

// Identity projections: Q = x, K and V = x's first kv_heads·d features,
// out = the merged heads, all exact (in bf16 too, for bf16 inputs).
struct Identity {
  mha_config cfg{};
  std::vector<float> wq, wkv, wo;
  Identity(std::size_t E, std::size_t H, std::size_t kv_heads)
      : wq(E * E, 0.0f), wkv(kv_heads * (E / H) * E, 0.0f), wo(E * E, 0.0f) {
    cfg.embed_dim = E;
    cfg.num_heads = H;
    cfg.num_kv_heads = kv_heads;
    for (std::size_t i = 0; i < E; ++i) wq[i * E + i] = wo[i * E + i] = 1.0f;
    for (std::size_t i = 0; i < kv_heads * (E / H); ++i) wkv[i * E + i] = 1.0f;
  }
  mha_weights view() const {
    return {wq.data(), wkv.data(), wkv.data(), wo.data(), nullptr, nullptr, nullptr, nullptr};
  }
};

// x's K/V features (its first kvd columns, rows of E) as the cache stores
// them: quantized per (token, kv head, group) and dequantized.
std::vector<float> dequantized(const std::vector<float>& x, std::size_t rows, std::size_t E,
                               std::size_t kv_heads, std::size_t d, kvq::Code c) {
  std::vector<float> out = x;
  std::vector<std::uint8_t> k(kvq::key_strip_bytes(d)), v(kvq::value_row_bytes(d));
  std::vector<float> kd(d), vd(d);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t g = 0; g < kv_heads; ++g) {
      const float* src = &x[r * E + g * d];
      kvq::put_key(c, d, k.data(), v.data(), 0, src, src);
      kvq::get_key(c, d, k.data(), v.data(), 0, kd.data(), vd.data());
      std::copy(kd.begin(), kd.end(), &out[r * E + g * d]);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("quantized cache: a step equals the forward on the dequantized K and V",
          "[kv_quant][kv_cache]") {
  struct Case {
    std::size_t E, H, kv_heads, B, L;
  };
  // GQA, head sizes that are not multiples of 16 or 32, lengths that cross
  // strips, key tiles (256) and split-KV chunks (>= 1024 keys).
  const Case cases[] = {{8, 2, 2, 1, 5},
                        {40, 2, 1, 2, 37},
                        {128, 2, 1, 1, 300},
                        {96, 3, 3, 2, 70},
                        {64, 1, 1, 1, 1100}};
  for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
    for (mha_kv_dtype dt : kQuantized) {
      std::uint64_t seed = 300;
      for (const Case& c : cases) {
        CAPTURE(compute, dt, c.E, c.H, c.kv_heads, c.B, c.L);
        const std::size_t d = c.E / c.H, rows = c.B * c.L;
        const Identity id(c.E, c.H, c.kv_heads);
        const Attn q = make_attn(id.cfg, id.view(), compute);
        const Attn ref = make_attn(id.cfg, id.view(), MHA_FP32);
        std::vector<float> x = random_vector(rows * c.E, seed++, -2.0f, 2.0f);
        if (compute == MHA_BF16) {
          for (float& f : x) f = bf16_round(f);
        }
        const std::vector<float> kv = dequantized(x, rows, c.E, c.kv_heads, d, code_of(dt));
        std::vector<float> want(x.size());
        mha_mask mask{};
        mask.causal = 1;
        REQUIRE(mha_attention_forward(ref.get(), c.B, c.L, c.L, x.data(), kv.data(), kv.data(),
                                      &mask, want.data(), nullptr, 0) == MHA_OK);
        const Cache cache = make_cache(q.get(), c.B, c.L, dt);
        std::vector<float> got(x.size());
        // A chunked prefill of a third, then chunks of 1..4 tokens.
        for (std::size_t t = 0, n = std::max<std::size_t>(1, c.L / 3); t < c.L;) {
          n = std::min(n, c.L - t);
          std::vector<float> xs(c.B * n * c.E), os(xs.size());
          for (std::size_t b = 0; b < c.B; ++b) {
            std::copy_n(&x[(b * c.L + t) * c.E], n * c.E, &xs[b * n * c.E]);
          }
          REQUIRE(mha_attention_step(q.get(), cache.get(), n, xs.data(), xs.data(), xs.data(),
                                     os.data()) == MHA_OK);
          for (std::size_t b = 0; b < c.B; ++b) {
            std::copy_n(&os[b * n * c.E], n * c.E, &got[(b * c.L + t) * c.E]);
          }
          t += n;
          n = 1 + t % 4;
        }
        // fp32: the two differ only in their sums' order (2e-5·(1 + |x|),
        // as test_kv_cache.cpp). bf16: the merged heads are also rounded to
        // bf16 before the output projection (2^-8 relative), and where the
        // products run on bf16 dot products each p·scale is rounded to bf16
        // (2^-9 relative of each term of P·V, |v| <= 2 here: 2^-8); Q is x,
        // already bf16.
        const float rel = compute == MHA_FP32 ? 2e-5f : 0x1p-8f;
        const float abs = compute == MHA_FP32 ? 2e-5f : 0x1p-8f + 2e-5f;
        std::size_t bad = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          bad += std::fabs(got[i] - want[i]) <= rel * std::fabs(want[i]) + abs ? 0 : 1;
        }
        REQUIRE(bad == 0);
      }
    }
  }
}

TEST_CASE("quantized cache: steps with modifiers equal the forward on the dequantized K and V",
          "[kv_quant][kv_cache][mods]") {
  // GQA 4/2, head_dim 16, 300 positions (a key tile and a window inside it);
  // the modifiers that leave K and V as they are (RoPE rotates K before it
  // is stored, which the paged-against-contiguous test below covers bit
  // for bit, and the engine does for every KV type).
  const std::size_t E = 64, H = 4, kvh = 2, d = 16, L = 300;
  const Identity id(E, H, kvh);
  const Attn ref = make_attn(id.cfg, id.view(), MHA_FP32);
  const mha::test::ModsCases mods_cases(H, d, 1, 37, 100);
  const std::vector<float> x = random_vector(L * E, 121, -2.0f, 2.0f);
  for (mha_kv_dtype dt : kQuantized) {
    const Attn q = make_attn(id.cfg, id.view(), MHA_FP32);
    const std::vector<float> kv = dequantized(x, L, E, kvh, d, code_of(dt));
    for (const auto& [name, base] : mods_cases.cases) {
      if (base.rope_dim != 0) continue;
      CAPTURE(dt, name);
      std::vector<float> want(L * E), got(L * E), want_lse(L * H), got_lse(L * H);
      mha_mods m = base;
      if (m.lse != nullptr) m.lse = want_lse.data();
      REQUIRE(mha_attention_forward_mods(ref.get(), 1, L, L, x.data(), kv.data(), kv.data(),
                                         nullptr, &m, want.data(), nullptr, 0) == MHA_OK);
      const Cache cache = make_cache(q.get(), 1, L, dt);
      for (std::size_t t = 0, n = 120; t < L; t += n, n = 1 + t % 5) {
        n = std::min(n, L - t);
        m = base;
        if (m.lse != nullptr) m.lse = &got_lse[t * H];
        REQUIRE(mha_attention_step_mods(q.get(), cache.get(), n, &x[t * E], &x[t * E], &x[t * E],
                                        &m, &got[t * E]) == MHA_OK);
      }
      std::size_t bad = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        bad += std::fabs(got[i] - want[i]) <= 2e-5f * (1.0f + std::fabs(want[i])) ? 0 : 1;
      }
      for (std::size_t i = 0; base.lse != nullptr && i < got_lse.size(); ++i) {
        bad +=
            std::fabs(got_lse[i] - want_lse[i]) <= 2e-5f * (1.0f + std::fabs(want_lse[i])) ? 0 : 1;
      }
      REQUIRE(bad == 0);
    }
  }
}

TEST_CASE(
    "paged cache: every block size gives the contiguous cache's bits, every KV type and "
    "modifier",
    "[kv_quant][paged][mods]") {
  const mha::test::ModelWeights w(64, 8, 2, 0, 51);
  const mha::test::ModsCases mods_cases(8, 8, 1, 37, 300);
  // Blocks of one strip (16 keys), of several, of one key tile and two, and
  // off the strip grid (key by key; in k groups, 2, 6 and 48, which the bf16
  // kernels read in place in narrowed strips): tiles span blocks or start
  // inside one. Each modifier meets two sizes in turn, the 8 modifiers 16
  // in a row, so every size meets a modifier on every KV type and object;
  // at MHA_TEST_SCALE < 1 (qemu, sanitizers) one size each, 8 in a row
  // from 2 further on per KV type, which still meets all 11.
  constexpr std::size_t kBlocks[] = {16, 32, 64, 128, 256, 512, 100, 7, 2, 48, 6};
  const bool full = mha::test::full_scale();
  const mha_kv_dtype dtypes[] = {MHA_KV_DEFAULT, MHA_KV_INT8, MHA_KV_FP8_E4M3};
  for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
    const Attn a = make_attn(w.cfg, w.view(), compute);
    for (std::size_t di = 0; di < std::size(dtypes); ++di) {
      const mha_kv_dtype dt = dtypes[di];
      for (std::size_t c = 0; c < mods_cases.cases.size(); ++c) {
        const auto& [name, base] = mods_cases.cases[c];
        for (std::size_t k = 0; k < (full ? 2 : 1); ++k) {
          const std::size_t bt = kBlocks[(full ? 2 * c + k + di : c + 2 * di) % std::size(kBlocks)];
          CAPTURE(compute, dt, name, bt);
          // Several key tiles: a prefill of half, then steps of 1..7 tokens.
          const std::size_t L = mha::test::scaled(700, 300), E = 64, H = 8;
          const std::vector<float> x = random_vector(L * E, 52);
          const Cache cache = make_cache(a.get(), 1, L, dt);
          const Paged paged = make_paged(a.get(), 3, bt, (L + bt - 1) / bt + 1, dt);
          std::vector<float> lse_c(L * H), lse_p(L * H), out_c(L * E), out_p(L * E);
          for (std::size_t t = 0, n = L / 2; t < L; t += n, n = 1 + t % 7) {
            n = std::min(n, L - t);
            mha_mods m = base;
            if (m.lse != nullptr) m.lse = &lse_c[t * H];
            REQUIRE(mha_attention_step_mods(a.get(), cache.get(), n, &x[t * E], &x[t * E],
                                            &x[t * E], &m, &out_c[t * E]) == MHA_OK);
            if (m.lse != nullptr) m.lse = &lse_p[t * H];
            const std::size_t slot = 1, q_start[] = {0, n};
            REQUIRE(mha_attention_step_ragged_mods(a.get(), paged.get(), 1, &slot, q_start,
                                                   &x[t * E], &x[t * E], &x[t * E], &m,
                                                   &out_p[t * E]) == MHA_OK);
          }
          REQUIRE(same_bits(out_c, out_p));
          REQUIRE(same_bits(lse_c, lse_p));
          // The slot reset and reused (blocks with stale keys and scales) by
          // the same sequence in one prefill: the bits of its last rows again.
          REQUIRE(mha_kv_cache_reset_slot(paged.get(), 1) == MHA_OK);
          std::vector<float> again(L * E), lse_a(L * H);
          mha_mods m = base;
          if (m.lse != nullptr) m.lse = lse_a.data();
          const std::size_t slot = 1, whole[] = {0, L};
          REQUIRE(mha_attention_step_ragged_mods(a.get(), paged.get(), 1, &slot, whole, x.data(),
                                                 x.data(), x.data(), &m, again.data()) == MHA_OK);
          const std::size_t last = L - 1;
          REQUIRE(std::equal(&again[last * E], &again[L * E], &out_c[last * E],
                             [](float u, float v) { return bits(u) == bits(v); }));
        }
      }
    }
  }
}

TEST_CASE("quantized cache: truncate and re-step give the bits of never having stepped",
          "[kv_quant][kv_cache]") {
  const mha::test::ModelWeights w(48, 4, 2, 0, 61);
  for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
    const Attn a = make_attn(w.cfg, w.view(), compute);
    for (mha_kv_dtype dt : kQuantized) {
      CAPTURE(compute, dt);
      const std::size_t E = 48, B = 2;
      const std::vector<float> head = random_vector(B * 30 * E, 62),
                               bad = random_vector(B * 9 * E, 63, -50.0f, 50.0f),
                               tail = random_vector(B * 9 * E, 64);
      const Cache once = make_cache(a.get(), B, 64, dt), twice = make_cache(a.get(), B, 64, dt);
      std::vector<float> o30(B * 30 * E), o9(B * 9 * E), want(B * 9 * E), got(B * 9 * E);
      REQUIRE(mha_attention_step(a.get(), once.get(), 30, head.data(), head.data(), head.data(),
                                 o30.data()) == MHA_OK);
      REQUIRE(mha_attention_step(a.get(), once.get(), 9, tail.data(), tail.data(), tail.data(),
                                 want.data()) == MHA_OK);
      REQUIRE(mha_attention_step(a.get(), twice.get(), 30, head.data(), head.data(), head.data(),
                                 o30.data()) == MHA_OK);
      // Large rejected tokens (other scales), rolled back mid-strip.
      REQUIRE(mha_attention_step(a.get(), twice.get(), 9, bad.data(), bad.data(), bad.data(),
                                 o9.data()) == MHA_OK);
      REQUIRE(mha_kv_cache_truncate(twice.get(), 30) == MHA_OK);
      REQUIRE(mha_attention_step(a.get(), twice.get(), 9, tail.data(), tail.data(), tail.data(),
                                 got.data()) == MHA_OK);
      REQUIRE(same_bits(want, got));
    }
  }
}

TEST_CASE("quantized cache: a split-KV decode is bit-identical at 1, 2 and 3 threads",
          "[kv_quant][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user)");
    return;
  }
  const mha::test::ModelWeights w(64, 2, 1, 0, 71);
  const Attn a = make_attn(w.cfg, w.view(), MHA_FP32);
  const std::size_t L = mha::test::scaled(2500, 1100);
  const std::vector<float> x = random_vector(L * 64, 72);
  for (mha_kv_dtype dt : kQuantized) {
    std::vector<std::vector<float>> results;
    for (std::size_t threads : {1, 2, 3}) {
      mha_set_num_threads(threads);
      const Cache cache = make_cache(a.get(), 1, L, dt);
      std::vector<float> out(x.size());
      REQUIRE(mha_attention_step(a.get(), cache.get(), L - 1, x.data(), x.data(), x.data(),
                                 out.data()) == MHA_OK);
      REQUIRE(mha_attention_step(a.get(), cache.get(), 1, &x[(L - 1) * 64], &x[(L - 1) * 64],
                                 &x[(L - 1) * 64], &out[(L - 1) * 64]) == MHA_OK);
      results.push_back(std::move(out));
    }
    mha_set_num_threads(0);
    REQUIRE(same_bits(results[0], results[1]));
    REQUIRE(same_bits(results[0], results[2]));
  }
}

TEST_CASE("quantized cache: a non-finite key or value follows the non-finite rule",
          "[kv_quant][nonfinite]") {
  const Identity id(32, 2, 1);
  const Attn a = make_attn(id.cfg, id.view(), MHA_FP32);
  const std::size_t E = 32, L = 6;
  for (mha_kv_dtype dt : kQuantized) {
    for (float bad :
         {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      CAPTURE(dt, bad);
      const std::vector<float> x = random_vector(L * E, 81);
      // Token 3's key: rows 3.. keep it and are NaN, rows 0..2 never see it.
      // Token 3's value: the rows that keep it are NaN (others may read it
      // with weight 0, which mha.h leaves open).
      for (bool in_key : {true, false}) {
        std::vector<float> k = x, v = x;
        (in_key ? k : v)[3 * E] = bad;
        const Cache cache = make_cache(a.get(), 1, L, dt);
        std::vector<float> out(L * E);
        REQUIRE(mha_attention_step(a.get(), cache.get(), L, x.data(), k.data(), v.data(),
                                   out.data()) == MHA_OK);
        for (std::size_t i = 0; i < L; ++i) {
          for (std::size_t c = 0; c < E; ++c) {
            INFO("in key " << in_key << " row " << i << " column " << c);
            if (in_key || i >= 3) REQUIRE(std::isnan(out[i * E + c]) == (i >= 3));
          }
        }
      }
    }
  }
}

TEST_CASE("quantized cache: options are checked and a failed call changes nothing",
          "[kv_quant][errors]") {
  const mha::test::ModelWeights w(32, 4, 2, 0, 91);
  const Attn a = make_attn(w.cfg, w.view(), MHA_FP32);
  mha_kv_cache* raw = reinterpret_cast<mha_kv_cache*>(&raw);
  mha_paged_kv_cache* praw = reinterpret_cast<mha_paged_kv_cache*>(&praw);
  mha_kv_cache_options o{sizeof(mha_kv_cache_options) + 8, MHA_KV_INT8};
  CHECK(mha_kv_cache_create_ex(a.get(), 1, 4, &o, &raw) == MHA_INVALID_ARGUMENT);
  CHECK(std::string(mha_last_error()).find("struct_size") != std::string::npos);
  CHECK(mha_kv_cache_create_paged_ex(a.get(), 1, 16, 4, &o, &praw) == MHA_INVALID_ARGUMENT);
  o.struct_size = sizeof o;
  for (long bad : {3L, -1L, 0x7fffffffL}) {
    o.dtype = static_cast<mha_kv_dtype>(bad);
    CHECK(mha_kv_cache_create_ex(a.get(), 1, 4, &o, &raw) == MHA_INVALID_ARGUMENT);
    CHECK(std::string(mha_last_error()).find("dtype") != std::string::npos);
    CHECK(mha_kv_cache_create_paged_ex(a.get(), 1, 16, 4, &o, &praw) == MHA_INVALID_ARGUMENT);
  }
  CHECK(raw == reinterpret_cast<mha_kv_cache*>(&raw));
  CHECK(praw == reinterpret_cast<mha_paged_kv_cache*>(&praw));
  o.dtype = MHA_KV_INT8;
  CHECK(mha_kv_cache_create_ex(a.get(), 1, 4, &o, nullptr) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_create_ex(nullptr, 1, 4, &o, &raw) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_create_ex(a.get(), SIZE_MAX / 2, SIZE_MAX / 2, &o, &raw) ==
        MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_bytes(nullptr) == 0);
  CHECK(mha_paged_kv_cache_bytes(nullptr) == 0);

  // A step past max_len fails and changes nothing: no output, no length,
  // the same bits afterwards.
  const Cache c = make_cache(a.get(), 1, 8, MHA_KV_FP8_E4M3);
  const Cache fresh = make_cache(a.get(), 1, 8, MHA_KV_FP8_E4M3);
  const std::vector<float> x = random_vector(9 * 32, 92);
  std::vector<float> out(9 * 32, 7.0f);
  CHECK(mha_attention_step(a.get(), c.get(), 9, x.data(), x.data(), x.data(), out.data()) ==
        MHA_INVALID_ARGUMENT);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 7.0f; }));
  CHECK(mha_kv_cache_length(c.get()) == 0);
  // A pool too small for the step: MHA_OUT_OF_MEMORY, nothing taken.
  const Paged p = make_paged(a.get(), 2, 4, 3, MHA_KV_INT8);
  const std::size_t slots[] = {1, 0}, first[] = {0, 4}, q_start[] = {0, 9};
  std::vector<float> o4(4 * 32);
  REQUIRE(mha_attention_step_ragged(a.get(), p.get(), 1, &slots[0], first, x.data(), x.data(),
                                    x.data(), o4.data()) == MHA_OK);
  CHECK(mha_attention_step_ragged(a.get(), p.get(), 1, &slots[1], q_start, x.data(), x.data(),
                                  x.data(), out.data()) == MHA_OUT_OF_MEMORY);
  CHECK(mha_kv_cache_free_blocks(p.get()) == 2);
  CHECK(mha_kv_cache_slot_length(p.get(), 0) == 0);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 7.0f; }));
  std::vector<float> o1(8 * 32), o2(8 * 32);
  REQUIRE(mha_attention_step(a.get(), c.get(), 8, x.data(), x.data(), x.data(), o1.data()) ==
          MHA_OK);
  REQUIRE(mha_attention_step(a.get(), fresh.get(), 8, x.data(), x.data(), x.data(), o2.data()) ==
          MHA_OK);
  CHECK(same_bits(o1, o2));
}

TEST_CASE("quantized cache: default options are the plain cache, and the bytes are as stated",
          "[kv_quant][kv_cache]") {
  for (std::size_t d : {64, 128}) {
    CAPTURE(d);
    const mha::test::ModelWeights w(2 * d, 2, 1, 0, 101);
    for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
      const Attn a = make_attn(w.cfg, w.view(), compute);
      mha_kv_cache* plain = nullptr;
      mha_kv_cache* ex = nullptr;
      REQUIRE(mha_kv_cache_create(a.get(), 1, 40, &plain) == MHA_OK);
      const Cache pc(plain, mha_kv_cache_destroy);
      REQUIRE(mha_kv_cache_create_ex(a.get(), 1, 40, nullptr, &ex) == MHA_OK);
      const Cache ec(ex, mha_kv_cache_destroy);
      const Cache dc = make_cache(a.get(), 1, 40, MHA_KV_DEFAULT);
      CHECK(mha_kv_cache_bytes(plain) == mha_kv_cache_bytes(ex));
      CHECK(mha_kv_cache_bytes(plain) == mha_kv_cache_bytes(dc.get()));
      const std::vector<float> x = random_vector(40 * 2 * d, 102);
      std::vector<float> o1(x.size()), o2(x.size()), o3(x.size());
      REQUIRE(mha_attention_step(a.get(), plain, 40, x.data(), x.data(), x.data(), o1.data()) ==
              MHA_OK);
      REQUIRE(mha_attention_step(a.get(), ex, 40, x.data(), x.data(), x.data(), o2.data()) ==
              MHA_OK);
      REQUIRE(mha_attention_step(a.get(), dc.get(), 40, x.data(), x.data(), x.data(), o3.data()) ==
              MHA_OK);
      CHECK(same_bits(o1, o2));
      CHECK(same_bits(o1, o3));
      // Per token and kv head: d + 2·ceil(d/32) bytes each for K and V.
      const std::size_t blocks = 64, bt = 256;
      for (mha_kv_dtype dt : kQuantized) {
        const Paged q = make_paged(a.get(), 1, bt, blocks, dt);
        CHECK(mha_paged_kv_cache_bytes(q.get()) == blocks * bt * 2 * (d + d / 16));
        const Cache qc = make_cache(a.get(), 3, 512, dt);
        CHECK(mha_kv_cache_bytes(qc.get()) == 3 * 512 * 2 * (d + d / 16));
        if (compute == MHA_BF16) {
          const Paged b = make_paged(a.get(), 1, bt, blocks, MHA_KV_DEFAULT);
          const double ratio = static_cast<double>(mha_paged_kv_cache_bytes(q.get())) /
                               static_cast<double>(mha_paged_kv_cache_bytes(b.get()));
          CHECK(ratio <= 0.56);
        }
      }
    }
  }
}

// A block that is no multiple of the kernels' strip of keys (16 in vLLM's
// default, 32-key strips) narrows its K strips rather than padding them, so
// a pool holds what a contiguous cache does per token (block sizes in whole
// groups of 4 keys, BFMMLA's V groups). The bits are test_paged_cache's.
TEST_CASE("plain cache: the fp32 and bf16 pools hold no padding at blocks off the strip",
          "[kv_cache][paged]") {
  for (std::size_t d : {64, 128}) {
    const mha::test::ModelWeights w(2 * d, 2, 1, 0, 103);
    for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
      CAPTURE(d, compute);
      const Attn a = make_attn(w.cfg, w.view(), compute);
      // 768 keys: whole strips of every set's (8 to 48 keys).
      const Cache c = make_cache(a.get(), 1, 768, MHA_KV_DEFAULT);
      const std::size_t per_token = mha_kv_cache_bytes(c.get()) / 768;
      CHECK(per_token * 768 == mha_kv_cache_bytes(c.get()));
      for (std::size_t bt : {16, 48, 100, 256}) {
        CAPTURE(bt);
        const Paged p = make_paged(a.get(), 1, bt, 7, MHA_KV_DEFAULT);
        CHECK(mha_paged_kv_cache_bytes(p.get()) == 7 * bt * per_token);
      }
    }
  }
}

TEST_CASE("quantized cache: the C++ classes take a dtype", "[kv_quant][kv_cache]") {
  const mha::test::ModelWeights w(32, 2, 2, 0, 111);
  const mha::MultiheadAttention attn(w.cfg, w.view());
  const std::vector<float> x = random_vector(10 * 32, 112);
  std::vector<float> a(x.size()), b(x.size());
  mha::KvCache cache(attn, 1, 10, MHA_KV_INT8);
  cache.step_self(10, x.data(), a.data());
  const Cache c = make_cache(attn.handle(), 1, 10, MHA_KV_INT8);
  REQUIRE(mha_attention_step(attn.handle(), c.get(), 10, x.data(), x.data(), x.data(), b.data()) ==
          MHA_OK);
  CHECK(same_bits(a, b));
  CHECK(cache.bytes() == mha_kv_cache_bytes(c.get()));
  // head_dim 16: K 16 + 2 bytes per token, V 2 + 32 (whole groups), per kv head.
  mha::PagedKvCache paged(attn, 2, 32, 4, MHA_KV_FP8_E4M3);
  CHECK(paged.bytes() == 4 * 32 * 2 * (18 + 34));
  CHECK_THROWS_AS(mha::KvCache(attn, 1, 10, static_cast<mha_kv_dtype>(9)), mha::Error);
}
