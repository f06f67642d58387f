// The non-finite rule of mha.h (next to mha_attention_forward), checked
// exactly on every path of the attention core and on every ISA this CPU runs:
// one NaN or +inf in the query, the key or the additive mask, where a row keeps
// it and where it is masked. A poisoned (query row, head) must give a NaN
// output token row (the output projection mixes the heads), NaN weights at the
// keys it keeps and 0 at the masked ones; every other row must equal, bit for
// bit, the run without the poisoned element (same shapes, so the same plan).
//
// Head dims are 16: a +inf input makes a projected row ±inf in every column,
// and a score sums 16 such terms, which is NaN (mixed signs) or +inf unless all
// 16 are negative, so every kept score of the poisoned row or key is NaN or
// +inf in practice; with fixed seeds the outcome is fixed.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include "support/attention_reference.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::same_bits;

using mha::test::random_vector;
using mha::test::RandomWeights;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Runs fn() once per ISA this CPU supports, forced with mha_set_isa, and then
// restores the ISA in force before (MHA_ISA under CTest).
template <class F>
void for_each_isa(F&& fn) {
  struct Restore {
    std::string isa = mha_isa_name();
    ~Restore() { mha_set_isa(isa.c_str()); }
  } restore;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    if (mha_isa_supported(isa) == 0) continue;
    REQUIRE(mha_set_isa(isa) == MHA_OK);
    INFO("isa " << isa);
    fn();
  }
}

using Attention = std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)>;
using Cache = std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)>;

Attention create(const mha_config& cfg, const RandomWeights& w) {
  mha_attention* a = nullptr;
  const mha_weights view = w.view();
  REQUIRE(mha_attention_create(&cfg, &view, &a) == MHA_OK);
  return Attention(a, mha_attention_destroy);
}

enum class Weights { none, per_head, averaged };

struct Problem {
  std::size_t E = 64, H = 4, kv_heads = 0, kdim = 0, vdim = 0;
  std::size_t batch = 2, q_len = 8, kv_len = 8;
  bool causal = false;
  bool padding = false;    // batch row b pads key j iff j % 7 == 3 + b (key 0 never)
  int additive = 0;        // 0 none, 1 shared [q_len, kv_len], 2 per head
  bool minus_inf = false;  // some additive entries are -inf (never a whole row)
  Weights weights = Weights::none;

  mha_config config() const { return mha_config{E, H, kdim, vdim, kv_heads}; }
  std::size_t key_dim() const { return kdim ? kdim : E; }
  std::size_t value_dim() const { return vdim ? vdim : E; }
  std::size_t planes() const { return additive == 2 ? batch * H : 1; }
  bool padded(std::size_t b, std::size_t j) const { return padding && j % 7 == 3 + b; }
  // Whether query row i of batch row b keeps key j (causal and padding; the
  // additive mask does not decide which scores are read).
  bool kept(std::size_t b, std::size_t i, std::size_t j) const {
    if (causal && j + q_len > i + kv_len) return false;
    return !padded(b, j);
  }
  std::size_t weights_size() const {
    if (weights == Weights::none) return 0;
    return batch * (weights == Weights::averaged ? 1 : H) * q_len * kv_len;
  }
  std::string describe() const {
    std::ostringstream s;
    s << "E=" << E << " H=" << H << " kv_heads=" << kv_heads << " kdim=" << kdim << " vdim=" << vdim
      << " batch=" << batch << " q_len=" << q_len << " kv_len=" << kv_len << " causal=" << causal
      << " padding=" << padding << " additive=" << additive << " minus_inf=" << minus_inf
      << " weights=" << static_cast<int>(weights);
    return s.str();
  }
};

struct Inputs {
  std::vector<float> query, key, value, additive;
  std::vector<unsigned char> padding;

  Inputs(const Problem& p, std::uint64_t seed)
      : query(random_vector(p.batch * p.q_len * p.E, seed)),
        key(random_vector(p.batch * p.kv_len * p.key_dim(), seed + 1)),
        value(random_vector(p.batch * p.kv_len * p.value_dim(), seed + 2)) {
    if (p.additive != 0) {
      additive = random_vector(p.planes() * p.q_len * p.kv_len, seed + 3);
      if (p.minus_inf) {
        for (std::size_t t = 0; t < additive.size(); ++t) {
          const std::size_t i = t / p.kv_len % p.q_len, j = t % p.kv_len;
          if (j != i % p.kv_len && (i + 2 * j) % 11 == 5) additive[t] = -kInf;
        }
      }
    }
    padding.resize(p.batch * p.kv_len);
    for (std::size_t t = 0; t < padding.size(); ++t)
      padding[t] = p.padded(t / p.kv_len, t % p.kv_len) ? 1 : 0;
  }
};

struct Output {
  std::vector<float> out, weights;
};

Output forward(const Problem& p, const Attention& attn, const Inputs& in) {
  mha_mask mask{};
  mask.causal = p.causal ? 1 : 0;
  mask.key_padding = p.padding ? in.padding.data() : nullptr;
  mask.additive = p.additive ? in.additive.data() : nullptr;
  mask.additive_per_head = p.additive == 2 ? 1 : 0;
  const bool masked = p.causal || p.padding || p.additive;
  Output o;
  o.out.assign(p.batch * p.q_len * p.E, -7.f);
  o.weights.assign(p.weights_size(), -7.f);
  REQUIRE(mha_attention_forward(attn.get(), p.batch, p.q_len, p.kv_len, in.query.data(),
                                in.key.data(), in.value.data(), masked ? &mask : nullptr,
                                o.out.data(), o.weights.empty() ? nullptr : o.weights.data(),
                                p.weights == Weights::averaged) == MHA_OK);
  return o;
}

// One element set to NaN or +inf: query (batch b, row i), key (batch b, row
// j), or additive (plane, row i, column j).
struct Poison {
  enum Where { query, key, additive } where;
  std::size_t b = 0, i = 0, j = 0, plane = 0;
  bool masked = false;  // expected to poison nothing (sanity check of the case)
};

std::string describe(const Poison& x, float v) {
  static const char* names[] = {"query", "key", "additive"};
  std::ostringstream s;
  s << v << " in " << names[x.where] << " b=" << x.b << " i=" << x.i << " j=" << x.j
    << " plane=" << x.plane << (x.masked ? " (masked)" : " (kept)");
  return s.str();
}

void apply(const Problem& p, const Poison& x, float v, Inputs& in) {
  switch (x.where) {
    case Poison::query:
      in.query[(x.b * p.q_len + x.i) * p.E + (x.i * 7) % p.E] = v;
      break;
    case Poison::key:
      in.key[(x.b * p.kv_len + x.j) * p.key_dim() + (x.j * 5) % p.key_dim()] = v;
      break;
    case Poison::additive:
      in.additive[(x.plane * p.q_len + x.i) * p.kv_len + x.j] = v;
      break;
  }
}

// bad[(b*H + h)*q_len + i]: whether the rule makes (row i, head h) NaN.
std::vector<char> poisoned_rows(const Problem& p, const Poison& x) {
  std::vector<char> bad(p.batch * p.H * p.q_len, 0);
  for (std::size_t b = 0; b < p.batch; ++b) {
    for (std::size_t h = 0; h < p.H; ++h) {
      for (std::size_t i = 0; i < p.q_len; ++i) {
        bool hit = false;
        switch (x.where) {
          case Poison::query:  // every score of the row, in every head
            for (std::size_t j = 0; j < p.kv_len; ++j)
              hit = hit || (b == x.b && i == x.i && p.kept(b, i, j));
            break;
          case Poison::key:  // key j's score in every row and head that keeps it
            hit = b == x.b && p.kept(b, i, x.j);
            break;
          case Poison::additive:  // one score of every (batch, head) the plane covers
            hit = (p.additive == 1 || x.plane == b * p.H + h) && i == x.i && p.kept(b, i, x.j);
            break;
        }
        bad[(b * p.H + h) * p.q_len + i] = hit ? 1 : 0;
      }
    }
  }
  return bad;
}

// Counts the elements of `got` that break the rule, and describes the first.
struct Mismatches {
  std::size_t count = 0;
  std::string first;
  void add(const char* what, std::size_t at, float got, const char* want, float clean) {
    if (count++ == 0) {
      std::ostringstream s;
      s << what << "[" << at << "] = " << got << ", expected " << want << " (clean " << clean
        << ")";
      first = s.str();
    }
  }
};

void check_row(Mismatches& m, const char* what, const float* got, const float* clean,
               std::size_t at, std::size_t n, bool nan, const std::vector<char>* kept) {
  for (std::size_t t = 0; t < n; ++t) {
    const float g = got[t];
    if (nan && (kept == nullptr || (*kept)[t])) {
      if (!std::isnan(g)) m.add(what, at + t, g, "NaN", clean[t]);
    } else if (nan) {
      if (g != 0.f) m.add(what, at + t, g, "0 (masked key)", clean[t]);
    } else if (!(g == clean[t])) {
      m.add(what, at + t, g, "the clean value", clean[t]);
    }
  }
}

// Checks one poisoned run against the clean one under the rule.
void check_rule(const Problem& p, const Output& got, const Output& clean,
                const std::vector<char>& bad) {
  Mismatches m;
  std::vector<char> kept(p.kv_len);
  for (std::size_t b = 0; b < p.batch; ++b) {
    for (std::size_t i = 0; i < p.q_len; ++i) {
      bool any = false;
      for (std::size_t h = 0; h < p.H; ++h) any = any || bad[(b * p.H + h) * p.q_len + i];
      const std::size_t row = (b * p.q_len + i) * p.E;
      check_row(m, "out", got.out.data() + row, clean.out.data() + row, row, p.E, any, nullptr);
      for (std::size_t j = 0; j < p.kv_len; ++j) kept[j] = p.kept(b, i, j) ? 1 : 0;
      if (p.weights == Weights::averaged) {
        const std::size_t w = (b * p.q_len + i) * p.kv_len;
        check_row(m, "weights", got.weights.data() + w, clean.weights.data() + w, w, p.kv_len, any,
                  &kept);
      } else if (p.weights == Weights::per_head) {
        for (std::size_t h = 0; h < p.H; ++h) {
          const std::size_t w = ((b * p.H + h) * p.q_len + i) * p.kv_len;
          check_row(m, "weights", got.weights.data() + w, clean.weights.data() + w, w, p.kv_len,
                    bad[(b * p.H + h) * p.q_len + i] != 0, &kept);
        }
      }
    }
  }
  INFO("first: " << m.first);
  CHECK(m.count == 0);
}

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float x) { return std::isfinite(x); });
}

// Runs p clean and with each poison (as NaN and as +inf), on every ISA.
void check_poisons(const Problem& p, const std::vector<Poison>& poisons, std::uint64_t seed) {
  INFO(p.describe());
  RandomWeights w(p.config(), true, seed);
  const Inputs clean_in(p, seed * 16);
  for_each_isa([&] {
    const Attention attn = create(p.config(), w);
    const Output clean = forward(p, attn, clean_in);
    REQUIRE(all_finite(clean.out));
    REQUIRE(all_finite(clean.weights));
    for (const Poison& x : poisons) {
      const std::vector<char> bad = poisoned_rows(p, x);
      // The case hits what it claims: some row keeps the element, or none.
      REQUIRE((std::count(bad.begin(), bad.end(), 1) == 0) == x.masked);
      for (float v : {kNaN, kInf}) {
        INFO(describe(x, v));
        Inputs in = clean_in;
        apply(p, x, v, in);
        const Output got = forward(p, attn, in);
        check_rule(p, got, clean, bad);
        // NaN rows too are the same bits at any thread count (where threaded).
        if (mha::test::threads_allowed()) {
          mha_set_num_threads(1);
          const Output one = forward(p, attn, in);
          mha_set_num_threads(0);
          CHECK(same_bits(one.out, got.out));
          CHECK(same_bits(one.weights, got.weights));
        }
      }
    }
  });
}

}  // namespace

TEST_CASE("non-finite rule: single-chunk forward", "[attention][nonfinite]") {
  using P = Poison;
  // The reported shape: q_len = kv_len = 64, no mask.
  Problem plain;
  plain.q_len = plain.kv_len = 64;
  check_poisons(plain, {{P::query, 1, 5}, {P::key, 0, 0, 17}}, 11);

  // Causal, padding and a shared additive mask with -inf entries. Key 40 is
  // kept by rows 40..63, among them rows 46 and 57 whose additive entry for
  // key 40 is -inf: NaN + -inf is NaN, so they are NaN too (as in mha_softmax).
  Problem masked = plain;
  masked.causal = masked.padding = masked.minus_inf = true;
  masked.additive = 1;
  check_poisons(masked,
                {{P::query, 0, 10},
                 {P::key, 1, 0, 40},
                 {P::key, 1, 0, 63},
                 {P::key, 0, 0, 3, 0, true},          // padded in batch row 0
                 {P::additive, 0, 20, 10},            // padded in row 0, kept in row 1
                 {P::additive, 0, 20, 9},             // replaces a -inf entry
                 {P::additive, 0, 20, 30, 0, true}},  // causal
                12);

  // Cross-attention with GQA (kdim, vdim != E, kv_len != q_len), padding and a
  // per-head additive mask.
  Problem cross;
  cross.kv_heads = 2;
  cross.kdim = 24;
  cross.vdim = 40;
  cross.q_len = 5;
  cross.kv_len = 37;
  cross.padding = true;
  cross.additive = 2;
  check_poisons(cross,
                {{P::query, 1, 4},
                 {P::key, 0, 0, 20},
                 {P::key, 1, 0, 4, 0, true},         // padded in batch row 1
                 {P::additive, 1, 0, 12, 5},         // batch row 1, head 1
                 {P::additive, 1, 3, 11, 6, true}},  // padded in batch row 1
                13);

  // MQA, causal with fewer queries than keys (row i keeps keys <= i + 14).
  Problem mqa;
  mqa.kv_heads = 1;
  mqa.batch = 1;
  mqa.q_len = 6;
  mqa.kv_len = 20;
  mqa.causal = true;
  mqa.additive = 1;
  check_poisons(mqa,
                {{P::key, 0, 0, 19},
                 {P::key, 0, 0, 16},
                 {P::query, 0, 0},
                 {P::additive, 0, 3, 18, 0, true},
                 {P::additive, 0, 3, 17}},
                14);
}

TEST_CASE("non-finite rule: split-KV forward", "[attention][nonfinite]") {
  using P = Poison;
  // The reported shape: one query over 4096 keys (8 chunks).
  Problem one;
  one.batch = 1;
  one.q_len = 1;
  one.kv_len = 4096;
  one.additive = 1;
  check_poisons(one, {{P::query, 0, 0}, {P::key, 0, 0, 3000}, {P::additive, 0, 0, 100}}, 21);

  // GQA, causal (row i keeps keys <= i + 1497), padding, per-head additive
  // with -inf entries; 2 chunks of 768 keys.
  Problem gqa;
  gqa.kv_heads = 2;
  gqa.q_len = 3;
  gqa.kv_len = 1500;
  gqa.causal = gqa.padding = gqa.minus_inf = true;
  gqa.additive = 2;
  check_poisons(gqa,
                {{P::query, 1, 0},
                 {P::key, 0, 0, 1499},  // row 2 only
                 {P::key, 0, 0, 1498},  // rows 1 and 2
                 {P::key, 0, 0, 1000},
                 {P::key, 1, 0, 704, 0, true},  // padded in batch row 1
                 {P::additive, 0, 2, 800, 6},
                 {P::additive, 0, 0, 1499, 3, true},  // causal
                 {P::additive, 0, 1, 3, 1, true}},    // padded in batch row 0
                22);
}

TEST_CASE("non-finite rule: attention weights per head and averaged", "[attention][nonfinite]") {
  using P = Poison;
  // Row i keeps keys j <= i + 21 that are not padded.
  Problem p;
  p.q_len = 9;
  p.kv_len = 30;
  p.causal = p.padding = p.minus_inf = true;
  p.additive = 2;
  p.weights = Weights::per_head;
  const std::vector<Poison> poisons{{P::query, 0, 4},
                                    {P::key, 1, 0, 12},
                                    {P::key, 1, 0, 29},           // row 8 only
                                    {P::key, 0, 0, 10, 0, true},  // padded in batch row 0
                                    {P::additive, 0, 2, 0, 2},
                                    {P::additive, 0, 2, 25, 5, true}};  // causal
  check_poisons(p, poisons, 31);
  p.weights = Weights::averaged;
  check_poisons(p, poisons, 32);
  p.additive = 1;
  check_poisons(p, {{P::query, 1, 8}, {P::additive, 0, 3, 7}, {P::additive, 0, 3, 25, 0, true}},
                33);

  // More queries than keys, causal: rows 0..3 keep no key, so their weights
  // and outputs are zero, even with a NaN or +inf query.
  Problem tall;
  tall.batch = 1;
  tall.q_len = 10;
  tall.kv_len = 6;
  tall.causal = true;
  tall.weights = Weights::per_head;
  check_poisons(tall, {{P::query, 0, 2, 0, 0, true}, {P::query, 0, 4}, {P::key, 0, 0, 5}}, 35);

  // Long rows (weights never split the keys), GQA.
  Problem wide;
  wide.kv_heads = 2;
  wide.q_len = 2;
  wide.kv_len = 1100;
  wide.padding = true;
  wide.weights = Weights::per_head;
  check_poisons(wide, {{P::key, 1, 0, 1050}, {P::query, 0, 1}, {P::key, 0, 0, 1053, 0, true}}, 34);
}

namespace {

// A poisoned query or key of token t of batch row b in step `step`.
struct StepPoison {
  std::size_t step, b, t;
  bool query;
};

// Steps a KV cache through steps[s] tokens per step (query, key and value
// distinct arrays), clean and with each poison (NaN and +inf), on every ISA.
// A poisoned query makes its own row NaN; a poisoned key at position P makes
// NaN every later row (position >= P) of its batch row; all else is clean.
void check_cache_poisons(const Problem& p, const std::vector<std::size_t>& steps,
                         const std::vector<StepPoison>& poisons, std::uint64_t seed) {
  INFO("E=" << p.E << " H=" << p.H << " kv_heads=" << p.kv_heads << " batch=" << p.batch << ", "
            << steps.size() << " steps, the first of " << steps[0] << " tokens");
  RandomWeights w(p.config(), true, seed);
  std::vector<std::size_t> start{0};
  std::vector<std::vector<float>> q, k, v;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    const std::size_t n = p.batch * steps[s] * p.E;
    q.push_back(random_vector(n, seed * 16 + 3 * s));
    k.push_back(random_vector(n, seed * 16 + 3 * s + 1));
    v.push_back(random_vector(n, seed * 16 + 3 * s + 2));
    start.push_back(start.back() + steps[s]);
  }
  auto run = [&](const Attention& attn, const std::vector<std::vector<float>>& qs,
                 const std::vector<std::vector<float>>& ks) {
    mha_kv_cache* c = nullptr;
    REQUIRE(mha_kv_cache_create(attn.get(), p.batch, start.back(), &c) == MHA_OK);
    const Cache cache(c, mha_kv_cache_destroy);
    std::vector<std::vector<float>> outs;
    for (std::size_t s = 0; s < steps.size(); ++s) {
      outs.emplace_back(qs[s].size(), -7.f);
      REQUIRE(mha_attention_step(attn.get(), cache.get(), steps[s], qs[s].data(), ks[s].data(),
                                 v[s].data(), outs.back().data()) == MHA_OK);
    }
    return outs;
  };
  for_each_isa([&] {
    const Attention attn = create(p.config(), w);
    const auto clean = run(attn, q, k);
    for (const auto& o : clean) REQUIRE(all_finite(o));
    for (const StepPoison& x : poisons) {
      for (float val : {kNaN, kInf}) {
        INFO(val << " in the " << (x.query ? "query" : "key") << " of step " << x.step
                 << ", batch row " << x.b << ", token " << x.t);
        auto qs = q, ks = k;
        const std::size_t at = (x.b * steps[x.step] + x.t) * p.E + (x.t * 7) % p.E;
        (x.query ? qs : ks)[x.step][at] = val;
        const auto got = run(attn, qs, ks);
        if (mha::test::threads_allowed()) {  // the prefill of 1030 tokens runs threaded
          mha_set_num_threads(1);
          const auto one = run(attn, qs, ks);
          mha_set_num_threads(0);
          for (std::size_t s = 0; s < steps.size(); ++s) CHECK(same_bits(one[s], got[s]));
        }
        Mismatches m;
        std::size_t nan_rows = 0;
        for (std::size_t s = 0; s < steps.size(); ++s) {
          for (std::size_t b = 0; b < p.batch; ++b) {
            for (std::size_t t = 0; t < steps[s]; ++t) {
              const bool bad = x.query ? s == x.step && b == x.b && t == x.t
                                       : b == x.b && start[s] + t >= start[x.step] + x.t;
              nan_rows += bad;
              const std::size_t row = (b * steps[s] + t) * p.E;
              check_row(m, "out", got[s].data() + row, clean[s].data() + row, row, p.E, bad,
                        nullptr);
            }
          }
        }
        INFO("first: " << m.first << " (rows expected NaN: " << nan_rows << ")");
        CHECK(m.count == 0);
      }
    }
  });
}

}  // namespace

TEST_CASE("non-finite rule: KV-cache chunked prefill and decode steps", "[attention][nonfinite]") {
  Problem p;
  p.kv_heads = 2;
  // Chunked prefill (5 + 4 tokens), then two decode steps.
  check_cache_poisons(p, {5, 4, 1, 1},
                      {{0, 1, 2, true}, {0, 0, 3, false}, {1, 1, 1, false}, {3, 0, 0, true}}, 41);
  // A long prefill, then decode steps over 1031 and 1032 keys: split-KV.
  p.kv_heads = 0;
  check_cache_poisons(p, {1030, 1, 1}, {{0, 1, 700, false}, {1, 0, 0, true}, {2, 1, 0, false}}, 42);
}

#if defined(__x86_64__) || defined(__i386__)
// The denormal rule of mha.h: on x86 the core flushes denormal results, and
// the caller's MXCSR is as it was after the call. One head of 2 features,
// identity weights: key 1 scores 0 with value 0, key 2 scores -69.3 (weight
// about 2^-100) with value 2^-30, so out = weight * 2^-30 / sum, about
// 2^-130: a denormal, flushed to 0, where IEEE arithmetic gives 7e-40.
TEST_CASE("the attention core flushes denormal results and restores MXCSR", "[attention]") {
  mha_config cfg{};
  cfg.embed_dim = 2;
  cfg.num_heads = 1;
  const std::vector<float> id = {1.f, 0.f, 0.f, 1.f};
  const mha_weights w{id.data(), id.data(), id.data(), id.data(),
                      nullptr,   nullptr,   nullptr,   nullptr};
  mha_attention* raw = nullptr;
  REQUIRE(mha_attention_create(&cfg, &w, &raw) == MHA_OK);
  const Attention a(raw, &mha_attention_destroy);
  const float b = 69.3f * std::sqrt(2.f) / 8.f;
  const std::vector<float> query = {8.f, 0.f}, key = {0.f, 0.f, -b, 0.f},
                           value = {0.f, 0.f, 0x1p-30f, 0.f};
  for_each_isa([&] {
    for (const unsigned ftz : {0u, 0x8000u}) {
      const unsigned before = (_mm_getcsr() & ~0x8000u) | ftz;
      _mm_setcsr(before);
      std::vector<float> out(2, -1.f);
      REQUIRE(mha_attention_forward(a.get(), 1, 1, 2, query.data(), key.data(), value.data(),
                                    nullptr, out.data(), nullptr, 0) == MHA_OK);
      // The control bits (the low 6 are sticky exception flags).
      CHECK((_mm_getcsr() & ~0x3Fu) == (before & ~0x3Fu));
      CHECK(out[0] == 0.f);
      CHECK(out[1] == 0.f);
    }
    _mm_setcsr(_mm_getcsr() & ~0x8000u);
  });
}
#endif
