// Ragged batches (mha_attention_forward_ragged): sequences packed back to back
// equal the same batch padded to its longest with key_padding on the missing
// rows, and each sequence run alone; the result is bit-identical at any
// thread count; bad offsets are rejected with messages naming them.
//
// Every test case runs once per ISA (mha_test_suite registers it with
// MHA_ISA=<isa>). Tolerance, ragged vs padded: the same formula with
// different blockings (the padded batch tiles its masked keys too, and may
// split KV differently; projection GEMMs see other row counts), so they differ
// only by float rounding in sums of at most kv_len terms: 2e-5·(1 + |x|), as
// in test_kv_cache.cpp, far below the ~1e-2 a wrong offset or mask gives.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <memory>
#include <mha/attention.hpp>
#include <random>
#include <string>
#include <vector>

#include "fused/model_weights.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::random_vector;

struct Model : mha::test::ModelWeights {
  std::unique_ptr<mha::MultiheadAttention> attn;
  Model(std::size_t E, std::size_t H, std::size_t kv_heads, std::size_t kdim, std::uint64_t seed)
      : ModelWeights(E, H, kv_heads, kdim, seed),
        attn(std::make_unique<mha::MultiheadAttention>(cfg, view())) {}
};

std::vector<std::size_t> offsets(const std::vector<std::size_t>& lens) {
  std::vector<std::size_t> start(lens.size() + 1, 0);
  for (std::size_t s = 0; s < lens.size(); ++s) start[s + 1] = start[s] + lens[s];
  return start;
}

// A ragged problem: packed rows and their offsets (kv_start empty: self).
struct Ragged {
  std::vector<std::size_t> q_start, kv_start;
  std::vector<float> query, key, value;
  std::size_t num() const { return q_start.size() - 1; }
  const std::vector<std::size_t>& kv() const { return kv_start.empty() ? q_start : kv_start; }
  std::size_t q_len(std::size_t s) const { return q_start[s + 1] - q_start[s]; }
  std::size_t kv_len(std::size_t s) const { return kv()[s + 1] - kv()[s]; }
  mha_ragged seqs() const {
    return {sizeof(mha_ragged), num(), q_start.data(),
            kv_start.empty() ? nullptr : kv_start.data()};
  }
};

Ragged make_ragged(const Model& m, const std::vector<std::size_t>& q_lens,
                   const std::vector<std::size_t>& kv_lens, std::uint64_t seed) {
  Ragged r;
  r.q_start = offsets(q_lens);
  if (!kv_lens.empty()) r.kv_start = offsets(kv_lens);
  r.query = random_vector(r.q_start.back() * m.E(), seed);
  const bool self = kv_lens.empty() && m.kdim() == m.E();
  r.key = self ? r.query : random_vector(r.kv().back() * m.kdim(), seed + 1);
  r.value = self ? r.query : random_vector(r.kv().back() * m.kdim(), seed + 2);
  return r;
}

std::vector<float> run_ragged(const Model& m, const Ragged& r, bool causal) {
  std::vector<float> out(std::max<std::size_t>(1, r.q_start.back() * m.E()), -7.0f);
  m.attn->forward_ragged(r.seqs(), r.query.data(), r.key.data(), r.value.data(), out.data(),
                         causal);
  return out;
}

// The same batch padded to its longest with key_padding, cut back to the
// ragged rows.
std::vector<float> run_padded(const Model& m, const Ragged& r, bool causal) {
  const std::size_t n = r.num(), E = m.E(), kd = m.kdim();
  std::size_t lq = 1, lk = 1;
  for (std::size_t s = 0; s < n; ++s) {
    lq = std::max(lq, r.q_len(s));
    lk = std::max(lk, r.kv_len(s));
  }
  std::vector<float> q(n * lq * E, 0.0f), k(n * lk * kd, 0.0f), v(n * lk * kd, 0.0f);
  std::vector<unsigned char> pad(n * lk, 1);
  for (std::size_t s = 0; s < n; ++s) {
    std::copy_n(&r.query[r.q_start[s] * E], r.q_len(s) * E, &q[s * lq * E]);
    std::copy_n(&r.key[r.kv()[s] * kd], r.kv_len(s) * kd, &k[s * lk * kd]);
    std::copy_n(&r.value[r.kv()[s] * kd], r.kv_len(s) * kd, &v[s * lk * kd]);
    std::fill_n(&pad[s * lk], r.kv_len(s), 0);
  }
  mha_mask mask{};
  mask.causal = causal ? 1 : 0;
  mask.key_padding = pad.data();
  std::vector<float> out(n * lq * E);
  const bool self = r.kv_start.empty() && kd == E;
  m.attn->forward(n, lq, lk, q.data(), self ? q.data() : k.data(), self ? q.data() : v.data(),
                  &mask, out.data());
  std::vector<float> packed(std::max<std::size_t>(1, r.q_start.back() * E), -7.0f);
  for (std::size_t s = 0; s < n; ++s) {
    std::copy_n(&out[s * lq * E], r.q_len(s) * E, &packed[r.q_start[s] * E]);
  }
  return packed;
}

// Each sequence alone, batch 1 (the only way to check causal cross-attention,
// which the padded batch aligns to the padded lengths instead).
std::vector<float> run_each(const Model& m, const Ragged& r, bool causal) {
  const std::size_t E = m.E(), kd = m.kdim();
  std::vector<float> packed(std::max<std::size_t>(1, r.q_start.back() * E), -7.0f);
  mha_mask mask{};
  mask.causal = causal ? 1 : 0;
  for (std::size_t s = 0; s < r.num(); ++s) {
    if (r.q_len(s) == 0) continue;
    if (r.kv_len(s) == 0) {
      // No keys: the attention output is zero, so out is the output bias.
      for (std::size_t i = 0; i < r.q_len(s); ++i)
        std::copy_n(m.bo.data(), E, &packed[(r.q_start[s] + i) * E]);
      continue;
    }
    m.attn->forward(1, r.q_len(s), r.kv_len(s), &r.query[r.q_start[s] * E], &r.key[r.kv()[s] * kd],
                    &r.value[r.kv()[s] * kd], &mask, &packed[r.q_start[s] * E]);
  }
  return packed;
}

void require_close(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  std::size_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= 2e-5f * (1.0f + std::fabs(want[i])))) ++bad;
  }
  REQUIRE(bad == 0);
}

std::vector<std::size_t> random_lengths(std::mt19937_64& rng, std::size_t n, std::size_t max) {
  std::vector<std::size_t> lens(n);
  for (auto& l : lens) l = std::uniform_int_distribution<std::size_t>(0, max)(rng);
  // Always an empty sequence and a single-token one.
  lens[0] = 0;
  if (n > 2) lens[n / 2] = 1;
  return lens;
}

struct Config {
  std::size_t E, H, kv_heads, kdim;
};

}  // namespace

TEST_CASE("ragged: equals the padded batch with key_padding", "[ragged]") {
  const Config configs[] = {{64, 4, 4, 0}, {64, 8, 2, 0}, {96, 6, 1, 48}};
  std::mt19937_64 rng(22);
  for (const Config& c : configs) {
    const Model m(c.E, c.H, c.kv_heads, c.kdim, 100 + c.E + c.kv_heads);
    for (int trial = 0; trial < 3; ++trial) {
      const std::size_t n = 2 + trial * 3;
      const auto q_lens = random_lengths(rng, n, trial == 2 ? 300 : 40);
      CAPTURE(c.E, c.H, c.kv_heads, c.kdim, trial);
      // Self-attention (kv_start NULL), causal or not.
      const Ragged self = make_ragged(m, q_lens, {}, rng());
      require_close(run_ragged(m, self, false), run_padded(m, self, false));
      require_close(run_ragged(m, self, true), run_padded(m, self, true));
      // Cross-attention with other key lengths.
      auto kv_lens = random_lengths(rng, n, trial == 2 ? 600 : 70);
      const Ragged cross = make_ragged(m, q_lens, kv_lens, rng());
      require_close(run_ragged(m, cross, false), run_padded(m, cross, false));
    }
  }
}

TEST_CASE("ragged: equals each sequence alone, causal cross-attention and split-KV", "[ragged]") {
  const Config configs[] = {{64, 4, 4, 32}, {64, 8, 2, 0}};
  std::mt19937_64 rng(7);
  for (const Config& c : configs) {
    const Model m(c.E, c.H, c.kv_heads, c.kdim, 200 + c.kv_heads);
    for (bool causal : {false, true}) {
      CAPTURE(c.E, c.kv_heads, c.kdim, causal);
      // Cross lengths with keys both shorter and longer than queries.
      const Ragged r =
          make_ragged(m, random_lengths(rng, 7, 90), random_lengths(rng, 7, 150), rng());
      require_close(run_ragged(m, r, causal), run_each(m, r, causal));
      // Short query sets against long histories: the plan splits KV.
      const Ragged decode = make_ragged(m, {1, 0, 3, 2}, {1500, 7, 1100, 2100}, rng());
      require_close(run_ragged(m, decode, causal), run_each(m, decode, causal));
    }
  }
}

TEST_CASE("ragged: bit-identical at 1, 2 and 3 threads", "[ragged]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  const Model m(64, 8, 2, 0, 31);
  std::mt19937_64 rng(3);
  const Ragged big = make_ragged(m, random_lengths(rng, 9, 200), {}, rng());
  const Ragged split = make_ragged(m, {2, 1, 0, 4}, {1300, 2000, 5, 1024}, rng());
  for (const Ragged* r : {&big, &split}) {
    mha_set_num_threads(1);
    const auto one = run_ragged(m, *r, true);
    for (std::size_t t : {2, 3}) {
      mha_set_num_threads(t);
      const auto many = run_ragged(m, *r, true);
      REQUIRE(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
    }
  }
  mha_set_num_threads(0);
}

TEST_CASE("ragged: empty batches and sequences", "[ragged]") {
  const Model m(32, 4, 4, 0, 5);
  const std::size_t zeros[] = {0, 0, 0};
  const mha_ragged none{sizeof(mha_ragged), 2, zeros, nullptr};
  // No rows at all: nothing is read or written.
  REQUIRE(mha_attention_forward_ragged(m.attn->handle(), &none, nullptr, nullptr, nullptr, nullptr,
                                       nullptr) == MHA_OK);
  const mha_ragged no_seqs{sizeof(mha_ragged), 0, zeros, nullptr};
  REQUIRE(mha_attention_forward_ragged(m.attn->handle(), &no_seqs, nullptr, nullptr, nullptr,
                                       nullptr, nullptr) == MHA_OK);
  // Queries but no keys anywhere: the attention output is zero.
  const Ragged r = make_ragged(m, {2, 3}, {0, 0}, 9);
  require_close(run_ragged(m, r, false), run_each(m, r, false));
}

TEST_CASE("ragged: bad arguments are rejected with a message", "[ragged]") {
  const Model m(32, 4, 4, 0, 5);
  std::vector<float> x(10 * 32, 0.5f), out(10 * 32, 3.0f);
  const auto call = [&](const mha_ragged* seqs, const mha_mods* mods = nullptr) {
    return mha_attention_forward_ragged(m.attn->handle(), seqs, x.data(), x.data(), x.data(), mods,
                                        out.data());
  };
  const auto message = [] { return std::string(mha_last_error()); };
  const std::size_t not_zero[] = {1, 3, 5};
  const std::size_t decreasing[] = {0, 4, 2, 6};
  const std::size_t good[] = {0, 4, 4, 6};
  const std::size_t huge[] = {0, 4, static_cast<std::size_t>(-1) / 8};

  REQUIRE(call(nullptr) == MHA_INVALID_ARGUMENT);
  mha_ragged r{sizeof(mha_ragged), 2, not_zero, nullptr};
  REQUIRE(call(&r) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("q_start[0]") != std::string::npos);
  r = {sizeof(mha_ragged), 3, decreasing, nullptr};
  REQUIRE(call(&r) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("q_start[2]") != std::string::npos);
  r = {sizeof(mha_ragged), 3, good, decreasing};
  REQUIRE(call(&r) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("kv_start[2]") != std::string::npos);
  r = {sizeof(mha_ragged), 2, huge, nullptr};
  REQUIRE(call(&r) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("query [q_start[num_seqs], E]") != std::string::npos);
  r = {0, 3, good, nullptr};
  REQUIRE(call(&r) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("struct_size") != std::string::npos);
  r = {sizeof(mha_ragged), 3, nullptr, nullptr};
  REQUIRE(call(&r) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("q_start") != std::string::npos);
  r = {sizeof(mha_ragged), 3, good, nullptr};
  // Modifiers are checked as in mha_attention_forward_mods; lse must not
  // overlap out.
  mha_mods mods{};
  mods.struct_size = sizeof(mha_mods);
  mods.rope_dim = 3;
  REQUIRE(call(&r, &mods) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("rope_dim") != std::string::npos);
  mods.rope_dim = 0;
  mods.lse = out.data() + 5;
  REQUIRE(call(&r, &mods) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("lse") != std::string::npos);
  mods.lse = nullptr;
  mods.struct_size = 0;
  REQUIRE(call(&r, &mods) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("struct_size") != std::string::npos);
  // out overlapping an input other than in place.
  REQUIRE(mha_attention_forward_ragged(m.attn->handle(), &r, x.data(), x.data(), x.data(), nullptr,
                                       x.data() + 1) == MHA_INVALID_ARGUMENT);
  CHECK(message().find("overlaps") != std::string::npos);
  // Nothing was written by the failed calls.
  REQUIRE(std::all_of(out.begin(), out.end(), [](float v) { return v == 3.0f; }));
  REQUIRE(call(&r) == MHA_OK);
}

namespace {

// Ragged with mods against each sequence alone through forward_mods with the
// same mods (positions from 0 in each), lse rows included.
void require_mods_match(const Model& m, const Ragged& r, const mha_mods& mods) {
  const std::size_t E = m.E(), kd = m.kdim(), H = m.cfg.num_heads, rows = r.q_start.back();
  std::vector<float> got(std::max<std::size_t>(1, rows * E), -7.0f), want = got;
  std::vector<float> got_lse(std::max<std::size_t>(1, rows * H), -7.0f), want_lse = got_lse;
  mha_mods mg = mods, mw = mods;
  if (mods.lse != nullptr) {
    mg.lse = got_lse.data();
    mw.lse = want_lse.data();
  }
  m.attn->forward_ragged_mods(r.seqs(), r.query.data(), r.key.data(), r.value.data(), &mg,
                              got.data());
  for (std::size_t s = 0; s < r.num(); ++s) {
    if (r.q_len(s) == 0) continue;
    mha_mods one = mw;
    if (one.lse != nullptr) one.lse = &want_lse[r.q_start[s] * H];
    m.attn->forward_mods(1, r.q_len(s), r.kv_len(s), &r.query[r.q_start[s] * E],
                         &r.key[r.kv()[s] * kd], &r.value[r.kv()[s] * kd], nullptr, &one,
                         &want[r.q_start[s] * E]);
  }
  require_close(got, want);
  if (mods.lse != nullptr) require_close(got_lse, want_lse);
}

}  // namespace

TEST_CASE("ragged: every modifier, alone and together, equals each sequence alone",
          "[ragged][mods]") {
  const mha::test::ModsCases plain(8, 8, 0, 9, 300), causal(8, 8, 1, 9, 300);
  // Self-attention with MHA, cross-attention with GQA (8 heads over 2, kdim
  // 24), lengths around the query block and key tile, an empty sequence and
  // one long enough to split KV (>= 1024 keys against few queries).
  const Model self(64, 8, 8, 0, 21), cross(64, 8, 2, 24, 22);
  const Ragged rs = make_ragged(self, {70, 1, 0, 130, 5}, {}, 31);
  const Ragged rc = make_ragged(cross, {3, 0, 64, 2}, {300, 4, 65, 1100}, 32);
  for (const mha::test::ModsCases* set : {&plain, &causal}) {
    for (const auto& [name, mods] : set->cases) {
      CAPTURE(name, mods.causal);
      require_mods_match(self, rs, mods);
      require_mods_match(cross, rc, mods);
    }
  }
}

TEST_CASE("ragged: mods->causal through the C call equals the C++ causal flag", "[ragged]") {
  const Model m(32, 4, 2, 0, 7);
  const Ragged r = make_ragged(m, {5, 0, 9, 1}, {7, 3, 9, 4}, 11);
  mha_mods mods{};
  mods.struct_size = sizeof(mha_mods);
  mods.causal = 1;
  std::vector<float> via_c(std::max<std::size_t>(1, r.q_start.back() * m.E()), -7.0f);
  const mha_ragged seqs = r.seqs();
  REQUIRE(mha_attention_forward_ragged(m.attn->handle(), &seqs, r.query.data(), r.key.data(),
                                       r.value.data(), &mods, via_c.data()) == MHA_OK);
  const std::vector<float> via_cxx = run_ragged(m, r, true);
  REQUIRE(std::memcmp(via_c.data(), via_cxx.data(), via_c.size() * sizeof(float)) == 0);
}
