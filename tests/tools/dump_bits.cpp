// dump_bits: one line per attention configuration, "<name> <hash>", the hash
// a 64-bit FNV-1a of the output's bytes (and of the weights or lse where the
// configuration asks for them). Two builds that print the same lines compute
// the same bits on every path listed here; a diff names the path that moved.
//
// Only the public C ABI (mha/mha.h) is used, so the same source builds
// against any version of the library that has this API:
//   g++ -O2 -std=c++20 -I<src>/include dump_bits.cpp <build>/lib/libmha.a -ltbb
//
// Each configuration runs for every ISA this CPU supports (scalar, avx2,
// avx512, neon), for fp32 and bf16 objects, at 1 and 2 threads; the name
// starts "<isa>/<dtype>/t<threads>/". Results are bit-identical at any
// thread count, so the t1 and t2 lines of one configuration must agree.
// Nothing but those lines goes to stdout; an API error is reported on stderr
// and ends the program with status 1.
#include <mha/mha.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

namespace {

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "dump_bits: %s: %s\n", what.c_str(), mha_last_error());
  std::exit(1);
}

void check(mha_status st, const std::string& what) {
  if (st != MHA_OK) die(what + " failed with status " + std::to_string(static_cast<int>(st)));
}

// xorshift64*: the same stream on every compiler and library, unlike the
// std::*_distribution classes, whose algorithms the standard leaves open.
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed) : s(seed == 0 ? 0x9e3779b97f4a7c15ull : seed) {}
  std::uint64_t next() {
    s ^= s >> 12;
    s ^= s << 25;
    s ^= s >> 27;
    return s * 0x2545f4914f6cdd1dull;
  }
  // U(a) from the top 24 bits: t is exact in float, and a * t the one
  // rounding, a product with no sum that a compiler could fuse into an FMA
  // (which would change the inputs between builds that contract and those
  // that do not).
  float symmetric(float a) {
    const auto i = static_cast<std::int32_t>(next() >> 40) - (1 << 23);
    const float t = static_cast<float>(i) * (1.0f / 8388608.0f);
    return a * t;
  }
};

struct Fnv {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(const void* p, std::size_t bytes) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < bytes; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  }
  void add(const std::vector<float>& v) { add(v.data(), v.size() * sizeof(float)); }
  void add_size(std::size_t v) {
    const std::uint64_t x = v;
    add(&x, sizeof(x));
  }
};

std::uint64_t seed_of(const std::string& name) {
  Fnv f;
  f.add(name.data(), name.size());
  return f.h;
}

// n values U(a).
std::vector<float> uniform(Rng& r, std::size_t n, float a) {
  std::vector<float> v(n);
  for (float& x : v) x = r.symmetric(a);
  return v;
}

// Inputs U(-1, 1); weights U(a) with a = 3 / sqrt(fan_in), which makes
// each projected feature's variance about 1 and so the scores' standard
// deviation about 1: softmax rows neither flat nor one-hot, and a softcap
// of 1.5 clips a real share of them.
struct Model {
  mha_config cfg{};
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo;
  mha_attention* attn = nullptr;

  Model(const mha_config& c, mha_dtype dtype, std::uint64_t seed) : cfg(c) {
    const std::size_t E = c.embed_dim, H = c.num_heads;
    const std::size_t kdim = c.kdim ? c.kdim : E, vdim = c.vdim ? c.vdim : E;
    const std::size_t kvh = c.num_kv_heads ? c.num_kv_heads : H, kvE = kvh * (E / H);
    Rng r(seed);
    const auto w = [&](std::size_t rows, std::size_t in) {
      const float a = 3.0f / std::sqrt(static_cast<float>(in));
      return uniform(r, rows * in, a);
    };
    wq = w(E, E);
    wk = w(kvE, kdim);
    wv = w(kvE, vdim);
    wo = w(E, E);
    bq = uniform(r, E, 0.1f);
    bk = uniform(r, kvE, 0.1f);
    bv = uniform(r, kvE, 0.1f);
    bo = uniform(r, E, 0.1f);
    const mha_weights wts{wq.data(), wk.data(), wv.data(), wo.data(),
                          bq.data(), bk.data(), bv.data(), bo.data()};
    mha_attention_options opt{};
    opt.struct_size = sizeof(opt);
    opt.compute = dtype;
    check(mha_attention_create_ex(&cfg, &wts, &opt, &attn), "mha_attention_create_ex");
  }
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() { mha_attention_destroy(attn); }

  std::size_t E() const { return cfg.embed_dim; }
  std::size_t H() const { return cfg.num_heads; }
  std::size_t kdim() const { return cfg.kdim ? cfg.kdim : cfg.embed_dim; }
  std::size_t vdim() const { return cfg.vdim ? cfg.vdim : cfg.embed_dim; }
};

mha_config config(std::size_t E, std::size_t H, std::size_t kv_heads = 0, std::size_t kdim = 0,
                  std::size_t vdim = 0) {
  mha_config c{};
  c.embed_dim = E;
  c.num_heads = H;
  c.kdim = kdim;
  c.vdim = vdim;
  c.num_kv_heads = kv_heads;
  return c;
}

mha_mods no_mods() {
  mha_mods m{};
  m.struct_size = sizeof(m);
  return m;
}

// Slopes 2^(-8(h+1)/H), as ALiBi's paper.
std::vector<float> alibi_slopes(std::size_t H) {
  std::vector<float> s(H);
  for (std::size_t h = 0; h < H; ++h) {
    s[h] = std::exp2(-8.0f * static_cast<float>(h + 1) / static_cast<float>(H));
  }
  return s;
}

// Everything a configuration's modifiers point to, kept alive with them.
struct ModsSpec {
  bool causal = false;
  std::size_t window = 0;
  bool alibi = false;
  float softcap = 0.0f;
  bool sinks = false;
  std::size_t rope_dim = 0;
  float rope_theta = 0.0f;
  int rope_interleaved = 0;
  bool lse = false;
};

struct Mods {
  std::vector<float> slopes, sinks, lse;
  mha_mods m = no_mods();
  bool any = false;
  Mods(const ModsSpec& s, std::size_t H, std::size_t lse_rows) {
    m.causal = s.causal ? 1 : 0;
    m.window = s.window;
    if (s.alibi) {
      slopes = alibi_slopes(H);
      m.alibi_slopes = slopes.data();
    }
    m.softcap = s.softcap;
    if (s.sinks) {
      Rng r(0x51e4);
      sinks = uniform(r, H, 1.0f);
      m.sinks = sinks.data();
    }
    m.rope_dim = s.rope_dim;
    m.rope_theta = s.rope_theta;
    m.rope_interleaved = s.rope_interleaved;
    if (s.lse) {
      lse.assign(lse_rows * H, 0.0f);
      m.lse = lse.data();
    }
  }
  // A step's lse has its own row count; resize before each call.
  void resize_lse(std::size_t rows, std::size_t H) {
    if (m.lse == nullptr) return;
    lse.assign(rows * H, 0.0f);
    m.lse = lse.data();
  }
};

class Dump {
 public:
  explicit Dump(std::string prefix) : prefix_(std::move(prefix)) {}
  void line(const std::string& name, std::uint64_t h) const {
    std::printf("%s%s 0x%016llx\n", prefix_.c_str(), name.c_str(),
                static_cast<unsigned long long>(h));
  }

 private:
  std::string prefix_;
};

// ---- forward -------------------------------------------------------------

struct MaskSpec {
  bool causal = false;
  bool key_padding = false;
  int additive = 0;  // 0: none, 1: shared [q, kv], 2: per head [b*H, q, kv]
};

enum class Weights { none, per_head, averaged };

void forward(const Dump& d, const std::string& name, const Model& m, std::size_t batch,
             std::size_t q_len, std::size_t kv_len, const MaskSpec& ms = {},
             Weights weights = Weights::none, const ModsSpec* mods_spec = nullptr) {
  Rng r(seed_of(name));
  const auto q = uniform(r, batch * q_len * m.E(), 1.0f);
  const auto k = uniform(r, batch * kv_len * m.kdim(), 1.0f);
  const auto v = uniform(r, batch * kv_len * m.vdim(), 1.0f);
  std::vector<unsigned char> pad;
  std::vector<float> add;
  mha_mask mask{};
  mask.causal = ms.causal ? 1 : 0;
  if (ms.key_padding) {
    // Row b drops its last 3b + 2 keys and every seventh key before them.
    pad.assign(batch * kv_len, 0);
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t j = 0; j < kv_len; ++j) {
        pad[b * kv_len + j] = (j + 3 * b + 2 >= kv_len || j % 7 == 3) ? 1 : 0;
      }
    }
    mask.key_padding = pad.data();
  }
  if (ms.additive != 0) {
    const std::size_t planes = ms.additive == 2 ? batch * m.H() : 1;
    add = uniform(r, planes * q_len * kv_len, 1.0f);
    // Every eleventh entry -inf: masked by the additive mask alone.
    for (std::size_t i = 5; i < add.size(); i += 11) add[i] = -INFINITY;
    mask.additive = add.data();
    mask.additive_per_head = ms.additive == 2 ? 1 : 0;
  }
  std::vector<float> out(batch * q_len * m.E());
  std::vector<float> w;
  if (weights != Weights::none) {
    w.assign(batch * (weights == Weights::averaged ? 1 : m.H()) * q_len * kv_len, 0.0f);
  }
  const int avg = weights == Weights::averaged ? 1 : 0;
  Fnv f;
  if (mods_spec != nullptr) {
    Mods mods(*mods_spec, m.H(), batch * q_len);
    check(
        mha_attention_forward_mods(m.attn, batch, q_len, kv_len, q.data(), k.data(), v.data(),
                                   &mask, &mods.m, out.data(), w.empty() ? nullptr : w.data(), avg),
        name);
    f.add(out);
    f.add(w);
    f.add(mods.lse);
  } else {
    check(mha_attention_forward(m.attn, batch, q_len, kv_len, q.data(), k.data(), v.data(), &mask,
                                out.data(), w.empty() ? nullptr : w.data(), avg),
          name);
    f.add(out);
    f.add(w);
  }
  d.line(name, f.h);
}

void forward_cases(const Dump& d, mha_dtype dt) {
  const Model e64(config(64, 4), dt, 1);
  const Model e256(config(256, 4), dt, 2);
  const Model cross(config(64, 4, 0, 48, 80), dt, 3);
  const Model gqa(config(64, 4, 2), dt, 4);
  const Model mqa(config(64, 8, 1), dt, 5);
  const Model e128(config(128, 2), dt, 6);
  const Model e256h2(config(256, 2), dt, 7);

  forward(d, "fwd/e64h4/b2_l37", e64, 2, 37, 37);
  forward(d, "fwd/e64h4/b1_l1", e64, 1, 1, 1);
  forward(d, "fwd/e64h4/b3_q37_kv300", e64, 3, 37, 300);
  forward(d, "fwd/e256h4/b2_l130", e256, 2, 130, 130);
  forward(d, "fwd/e256h2/causal_l130", e256h2, 2, 130, 130, {.causal = true});
  forward(d, "fwd/e64h4/causal_l37", e64, 2, 37, 37, {.causal = true});
  forward(d, "fwd/e64h4/causal_q5_kv37", e64, 2, 5, 37, {.causal = true});
  forward(d, "fwd/e64h4/causal_q37_kv5", e64, 2, 37, 5, {.causal = true});
  forward(d, "fwd/e256h4/causal_l130", e256, 2, 130, 130, {.causal = true});
  forward(d, "fwd/e64h4/key_padding", e64, 2, 37, 37, {.key_padding = true});
  forward(d, "fwd/e256h4/key_padding", e256, 2, 130, 130, {.key_padding = true});
  forward(d, "fwd/e64h4/additive_shared", e64, 2, 37, 37, {.additive = 1});
  forward(d, "fwd/e64h4/additive_per_head", e64, 2, 37, 37, {.additive = 2});
  forward(d, "fwd/e64h4/causal_padding_additive", e64, 2, 37, 37,
          {.causal = true, .key_padding = true, .additive = 2});
  forward(d, "fwd/cross_k48_v80/q17_kv41", cross, 2, 17, 41);
  forward(d, "fwd/cross_k48_v80/padding_q17_kv41", cross, 2, 17, 41, {.key_padding = true});
  forward(d, "fwd/gqa_h4kv2/l37", gqa, 2, 37, 37);
  forward(d, "fwd/gqa_h4kv2/causal_l37", gqa, 2, 37, 37, {.causal = true});
  forward(d, "fwd/mqa_h8kv1/l37", mqa, 2, 37, 37);

  forward(d, "fwd/e64h4/weights_per_head", e64, 2, 37, 37, {}, Weights::per_head);
  forward(d, "fwd/e64h4/weights_averaged", e64, 2, 37, 37, {}, Weights::averaged);
  forward(d, "fwd/e64h4/weights_per_head_causal_padding", e64, 2, 37, 37,
          {.causal = true, .key_padding = true}, Weights::per_head);
  forward(d, "fwd/e64h4/weights_averaged_additive", e64, 2, 37, 37, {.additive = 1},
          Weights::averaged);
  forward(d, "fwd/e256h4/weights_averaged", e256, 2, 130, 130, {}, Weights::averaged);
  forward(d, "fwd/gqa_h4kv2/weights_per_head", gqa, 2, 37, 37, {}, Weights::per_head);
  forward(d, "fwd/cross_k48_v80/weights_averaged", cross, 2, 17, 41, {}, Weights::averaged);

  const ModsSpec window{.causal = true, .window = 8};
  const ModsSpec window_nc{.window = 8};
  const ModsSpec alibi{.alibi = true};
  const ModsSpec alibi_c{.causal = true, .alibi = true};
  const ModsSpec softcap{.softcap = 1.5f};
  const ModsSpec sinks{.sinks = true};
  const ModsSpec rope_neox{.rope_dim = 16};
  const ModsSpec rope_gptj{.rope_dim = 16, .rope_interleaved = 1};
  const ModsSpec rope_partial{.rope_dim = 8, .rope_theta = 500000.0f, .rope_interleaved = 1};
  const ModsSpec lse{.lse = true};
  const ModsSpec all{.causal = true,
                     .window = 16,
                     .alibi = true,
                     .softcap = 1.5f,
                     .sinks = true,
                     .rope_dim = 16,
                     .lse = true};
  const ModsSpec all_gptj{.causal = true,
                          .window = 16,
                          .alibi = true,
                          .softcap = 1.5f,
                          .sinks = true,
                          .rope_dim = 8,
                          .rope_interleaved = 1,
                          .lse = true};
  const ModsSpec none{};
  const ModsSpec alibi_softcap_lse{.alibi = true, .softcap = 1.5f, .lse = true};
  // A window of more than 1024 keys still splits them.
  const ModsSpec all_long{.causal = true,
                          .window = 1500,
                          .alibi = true,
                          .softcap = 1.5f,
                          .sinks = true,
                          .rope_dim = 16,
                          .lse = true};
  forward(d, "mods/e64h4/none", e64, 2, 37, 37, {}, Weights::none, &none);
  forward(d, "mods/e64h4/window8_causal", e64, 2, 37, 37, {}, Weights::none, &window);
  forward(d, "mods/e64h4/window8", e64, 2, 37, 37, {}, Weights::none, &window_nc);
  forward(d, "mods/e64h4/alibi", e64, 2, 37, 37, {}, Weights::none, &alibi);
  forward(d, "mods/e64h4/alibi_causal", e64, 2, 37, 37, {}, Weights::none, &alibi_c);
  forward(d, "mods/e64h4/softcap", e64, 2, 37, 37, {}, Weights::none, &softcap);
  forward(d, "mods/e64h4/sinks", e64, 2, 37, 37, {}, Weights::none, &sinks);
  forward(d, "mods/e64h4/rope_neox", e64, 2, 37, 37, {}, Weights::none, &rope_neox);
  forward(d, "mods/e64h4/rope_gptj", e64, 2, 37, 37, {}, Weights::none, &rope_gptj);
  forward(d, "mods/e64h4/rope_partial_gptj", e64, 2, 37, 37, {}, Weights::none, &rope_partial);
  forward(d, "mods/e64h4/lse", e64, 2, 37, 37, {}, Weights::none, &lse);
  forward(d, "mods/e64h4/lse_padding", e64, 2, 37, 37, {.key_padding = true}, Weights::none, &lse);
  forward(d, "mods/e64h4/all", e64, 2, 37, 37, {}, Weights::none, &all);
  forward(d, "mods/e64h4/all_gptj_q5_kv37", e64, 2, 5, 37, {}, Weights::none, &all_gptj);
  forward(d, "mods/e64h4/all_weights_per_head", e64, 2, 37, 37, {}, Weights::per_head, &all);
  forward(d, "mods/e64h4/sinks_weights_averaged", e64, 2, 37, 37, {}, Weights::averaged, &sinks);
  forward(d, "mods/e256h4/all_l130", e256, 2, 130, 130, {}, Weights::none, &all);
  forward(d, "mods/gqa_h4kv2/all", gqa, 2, 37, 37, {}, Weights::none, &all);
  forward(d, "mods/cross_k48_v80/alibi_softcap_lse", cross, 2, 17, 41, {}, Weights::none,
          &alibi_softcap_lse);

  // Split-KV: fewer than 64 (batch, head, query block) tasks over 1024 or
  // more keys.
  for (std::size_t q = 1; q <= 4; ++q) {
    forward(d, "splitkv/e64h4/q" + std::to_string(q) + "_kv2500", e64, 1, q, 2500);
  }
  forward(d, "splitkv/e64h4/causal_q3_kv2500", e64, 1, 3, 2500, {.causal = true});
  forward(d, "splitkv/e64h4/padding_q2_kv2500", e64, 1, 2, 2500, {.key_padding = true});
  forward(d, "splitkv/e64h4/additive_q2_kv2500", e64, 1, 2, 2500, {.additive = 2});
  forward(d, "splitkv/gqa_h4kv2/q2_kv2500", gqa, 1, 2, 2500);
  forward(d, "splitkv/e128h2/q2_kv2500", e128, 1, 2, 2500);
  forward(d, "splitkv/e64h4/all_q3_kv2500", e64, 1, 3, 2500, {}, Weights::none, &all_long);
  forward(d, "splitkv/e64h4/lse_q1_kv2500", e64, 1, 1, 2500, {}, Weights::none, &lse);
  // The same shape with weights: one pass per row, never split.
  forward(d, "fwd/e64h4/weights_q2_kv2500", e64, 1, 2, 2500, {}, Weights::per_head);
}

// ---- ragged forward ------------------------------------------------------

std::vector<std::size_t> offsets(const std::vector<std::size_t>& lens) {
  std::vector<std::size_t> o(lens.size() + 1, 0);
  for (std::size_t i = 0; i < lens.size(); ++i) o[i + 1] = o[i] + lens[i];
  return o;
}

// kv_lens empty: self-attention (kv_start NULL, the same as q_start).
void ragged(const Dump& d, const std::string& name, const Model& m,
            const std::vector<std::size_t>& q_lens, const std::vector<std::size_t>& kv_lens,
            const ModsSpec* mods_spec) {
  const auto q_start = offsets(q_lens);
  const auto kv_start = kv_lens.empty() ? q_start : offsets(kv_lens);
  const std::size_t nq = q_start.back(), nkv = kv_start.back();
  Rng r(seed_of(name));
  const auto q = uniform(r, nq * m.E(), 1.0f);
  const auto k = uniform(r, nkv * m.kdim(), 1.0f);
  const auto v = uniform(r, nkv * m.vdim(), 1.0f);
  std::vector<float> out(nq * m.E());
  mha_ragged seqs{};
  seqs.struct_size = sizeof(seqs);
  seqs.num_seqs = q_lens.size();
  seqs.q_start = q_start.data();
  seqs.kv_start = kv_lens.empty() ? nullptr : kv_start.data();
  Mods mods(mods_spec != nullptr ? *mods_spec : ModsSpec{}, m.H(), nq);
  check(mha_attention_forward_ragged(m.attn, &seqs, q.data(), k.data(), v.data(),
                                     mods_spec != nullptr ? &mods.m : nullptr, out.data()),
        name);
  Fnv f;
  f.add(out);
  f.add(mods.lse);
  d.line(name, f.h);
}

void ragged_cases(const Dump& d, mha_dtype dt) {
  const Model e64(config(64, 4), dt, 11);
  const Model gqa(config(64, 4, 2), dt, 12);
  const Model cross(config(64, 4, 0, 48, 80), dt, 13);
  const std::vector<std::size_t> lens{23, 1500, 77};
  const ModsSpec causal{.causal = true};
  const ModsSpec mods{.causal = true, .alibi = true, .softcap = 1.5f, .rope_dim = 16, .lse = true};
  const ModsSpec window{.causal = true, .window = 40, .sinks = true, .lse = true};
  ragged(d, "ragged/e64h4/self_23_1500_77", e64, lens, {}, nullptr);
  ragged(d, "ragged/e64h4/causal_23_1500_77", e64, lens, {}, &causal);
  ragged(d, "ragged/e64h4/mods_23_1500_77", e64, lens, {}, &mods);
  ragged(d, "ragged/e64h4/window_sinks_23_1500_77", e64, lens, {}, &window);
  ragged(d, "ragged/gqa_h4kv2/causal_23_1500_77", gqa, lens, {}, &causal);
  // Short query sets against long keys: split-KV.
  ragged(d, "ragged/e64h4/cross_q5_1_3_kv23_1500_77", e64, {5, 1, 3}, lens, nullptr);
  ragged(d, "ragged/e64h4/cross_mods_q5_1_3_kv23_1500_77", e64, {5, 1, 3}, lens, &mods);
  ragged(d, "ragged/cross_k48_v80/q5_0_3_2_kv23_1500_0_77", cross, {5, 0, 3, 2}, {23, 1500, 0, 77},
         nullptr);
}

// ---- KV cache ------------------------------------------------------------

// A step of n tokens, or (truncate) a truncation to n positions.
struct CacheOp {
  std::size_t n;
  bool truncate = false;
};

void kv_steps(const Dump& d, const std::string& name, const Model& m, std::size_t batch,
              std::size_t max_len, const std::vector<CacheOp>& ops, const ModsSpec* mods_spec) {
  mha_kv_cache* cache = nullptr;
  check(mha_kv_cache_create(m.attn, batch, max_len, &cache), name + ": mha_kv_cache_create");
  Mods mods(mods_spec != nullptr ? *mods_spec : ModsSpec{}, m.H(), 0);
  std::size_t step = 0;
  for (const CacheOp& op : ops) {
    if (op.truncate) {
      check(mha_kv_cache_truncate(cache, op.n), name + ": truncate");
      continue;
    }
    const std::string line = name + "/step" + std::to_string(step++);
    Rng r(seed_of(line));
    const auto q = uniform(r, batch * op.n * m.E(), 1.0f);
    const auto k = uniform(r, batch * op.n * m.kdim(), 1.0f);
    const auto v = uniform(r, batch * op.n * m.vdim(), 1.0f);
    std::vector<float> out(batch * op.n * m.E());
    mods.resize_lse(batch * op.n, m.H());
    if (mods_spec != nullptr) {
      check(mha_attention_step_mods(m.attn, cache, op.n, q.data(), k.data(), v.data(), &mods.m,
                                    out.data()),
            line);
    } else {
      check(mha_attention_step(m.attn, cache, op.n, q.data(), k.data(), v.data(), out.data()),
            line);
    }
    Fnv f;
    f.add(out);
    f.add(mods.lse);
    f.add_size(mha_kv_cache_length(cache));
    d.line(line, f.h);
  }
  mha_kv_cache_destroy(cache);
}

void kv_cases(const Dump& d, mha_dtype dt) {
  const Model e64(config(64, 4), dt, 21);
  const Model gqa(config(64, 4, 2), dt, 22);
  const Model cross(config(64, 4, 0, 48, 80), dt, 23);
  const Model e128(config(128, 2), dt, 24);
  const ModsSpec rope_lse{.rope_dim = 16, .lse = true};
  const ModsSpec all{.window = 8,
                     .alibi = true,
                     .softcap = 1.5f,
                     .sinks = true,
                     .rope_dim = 8,
                     .rope_interleaved = 1,
                     .lse = true};
  const std::vector<CacheOp> one{{37}, {1}, {1}, {1}};
  const std::vector<CacheOp> chunked{{7}, {1}, {1}, {1}, {1}, {1}, {1}};
  const std::vector<CacheOp> mixed{{12}, {1}, {5}, {1}, {1}, {3}};
  const std::vector<CacheOp> truncate{{20}, {12, true}, {3}, {1}, {0, true}, {5}, {1}};
  kv_steps(d, "kv/e64h4/prefill37", e64, 2, 64, one, nullptr);
  kv_steps(d, "kv/e64h4/prefill7_chunked", e64, 2, 64, chunked, nullptr);
  kv_steps(d, "kv/e64h4/truncate", e64, 2, 64, truncate, nullptr);
  kv_steps(d, "kv/e64h4/rope_lse", e64, 2, 64, mixed, &rope_lse);
  kv_steps(d, "kv/e64h4/mods_all", e64, 2, 64, mixed, &all);
  kv_steps(d, "kv/gqa_h4kv2/chunked", gqa, 2, 64, chunked, nullptr);
  kv_steps(d, "kv/gqa_h4kv2/rope_lse", gqa, 2, 64, mixed, &rope_lse);
  kv_steps(d, "kv/cross_k48_v80/chunked", cross, 2, 64, chunked, nullptr);
  // Decode over 2100 cached positions: split-KV.
  const std::vector<CacheOp> long_decode{{2096}, {1}, {1}, {3}, {1}};
  kv_steps(d, "kv/e64h4/long2100", e64, 1, 2112, long_decode, nullptr);
  kv_steps(d, "kv/gqa_h4kv2/long2100_rope_lse", gqa, 1, 2112, long_decode, &rope_lse);
  kv_steps(d, "kv/e128h2/long2100_rope_lse", e128, 1, 2112, long_decode, &rope_lse);
  kv_steps(d, "kv/e64h4/long2100_truncate", e64, 1, 2304,
           {{1500}, {700}, {1}, {1400, true}, {1}, {2}}, nullptr);
}

// ---- paged KV cache ------------------------------------------------------

struct PagedOp {
  enum Kind { step, reset, truncate } kind = step;
  std::vector<std::size_t> slots;  // step: the slots; reset, truncate: {slot}
  std::vector<std::size_t> lens;   // step: new tokens per slot; truncate: {len}
};

void paged(const Dump& d, const std::string& name, const Model& m, std::size_t num_slots,
           std::size_t block_tokens, std::size_t num_blocks, const std::vector<PagedOp>& ops,
           const ModsSpec* mods_spec) {
  mha_paged_kv_cache* cache = nullptr;
  check(mha_kv_cache_create_paged(m.attn, num_slots, block_tokens, num_blocks, &cache),
        name + ": mha_kv_cache_create_paged");
  Mods mods(mods_spec != nullptr ? *mods_spec : ModsSpec{}, m.H(), 0);
  std::size_t step = 0;
  for (const PagedOp& op : ops) {
    if (op.kind == PagedOp::reset) {
      check(mha_kv_cache_reset_slot(cache, op.slots[0]), name + ": reset_slot");
      continue;
    }
    if (op.kind == PagedOp::truncate) {
      check(mha_kv_cache_truncate_slot(cache, op.slots[0], op.lens[0]), name + ": truncate_slot");
      continue;
    }
    const std::string line = name + "/step" + std::to_string(step++);
    const auto q_start = offsets(op.lens);
    const std::size_t n = q_start.back();
    Rng r(seed_of(line));
    const auto q = uniform(r, n * m.E(), 1.0f);
    const auto k = uniform(r, n * m.kdim(), 1.0f);
    const auto v = uniform(r, n * m.vdim(), 1.0f);
    std::vector<float> out(n * m.E());
    mods.resize_lse(n, m.H());
    if (mods_spec != nullptr) {
      check(mha_attention_step_ragged_mods(m.attn, cache, op.slots.size(), op.slots.data(),
                                           q_start.data(), q.data(), k.data(), v.data(), &mods.m,
                                           out.data()),
            line);
    } else {
      check(mha_attention_step_ragged(m.attn, cache, op.slots.size(), op.slots.data(),
                                      q_start.data(), q.data(), k.data(), v.data(), out.data()),
            line);
    }
    Fnv f;
    f.add(out);
    f.add(mods.lse);
    for (std::size_t s = 0; s < num_slots; ++s) f.add_size(mha_kv_cache_slot_length(cache, s));
    f.add_size(mha_kv_cache_free_blocks(cache));
    d.line(line, f.h);
  }
  mha_paged_kv_cache_destroy(cache);
}

void paged_cases(const Dump& d, mha_dtype dt) {
  const Model e64(config(64, 4), dt, 31);
  const Model gqa(config(64, 4, 2), dt, 32);
  const Model e128(config(128, 2), dt, 33);
  using P = PagedOp;
  // Four requests: chunked prefills beside decodes, a finished request
  // replaced, a rejected draft truncated away.
  const std::vector<PagedOp> mixed{
      {P::step, {0, 1}, {7, 33}},
      {P::step, {2, 0, 1}, {40, 1, 1}},
      {P::step, {1, 2}, {1, 25}},
      {P::step, {0, 1, 2}, {1, 1, 1}},
      {P::step, {2, 1, 0}, {1, 1, 1}},
      {P::step, {0, 1, 2}, {1, 0, 1}},
      {P::reset, {1}, {}},
      {P::step, {1, 3, 0}, {9, 4, 1}},
      {P::truncate, {2}, {50}},
      {P::step, {2, 0, 3, 1}, {2, 1, 1, 1}},
  };
  // A windowed slot beside an unwindowed-length one; the window's blocks
  // are returned as the slot moves past them.
  std::vector<PagedOp> windowed{{P::step, {0, 1}, {60, 5}}, {P::step, {0, 1}, {70, 1}}};
  for (int i = 0; i < 12; ++i) windowed.push_back({P::step, {1, 0}, {1, 1}});
  windowed.push_back({P::truncate, {0}, {0}});
  windowed.push_back({P::step, {0}, {3}});
  const ModsSpec rope_alibi_lse{.alibi = true, .rope_dim = 16, .lse = true};
  const ModsSpec window{.window = 20, .softcap = 1.5f, .sinks = true, .lse = true};
  for (std::size_t bt : {16, 64, 100}) {
    const std::string b = "/bt" + std::to_string(bt);
    const std::size_t blocks = 600 / bt + 16;
    paged(d, "paged/e64h4" + b + "/mixed", e64, 4, bt, blocks, mixed, nullptr);
    paged(d, "paged/e64h4" + b + "/mixed_rope_alibi_lse", e64, 4, bt, blocks, mixed,
          &rope_alibi_lse);
    paged(d, "paged/gqa_h4kv2" + b + "/mixed", gqa, 4, bt, blocks, mixed, nullptr);
    paged(d, "paged/e64h4" + b + "/window20", e64, 2, bt, blocks, windowed, &window);
  }
  // Decodes over 1100 positions: split-KV.
  const std::vector<PagedOp> long_decode{
      {P::step, {0, 1}, {1100, 3}}, {P::step, {1, 0}, {1, 1}}, {P::step, {0}, {1}}};
  paged(d, "paged/e64h4/bt64/long1100", e64, 2, 64, 32, long_decode, nullptr);
  paged(d, "paged/e64h4/bt256/long1100_rope_lse", e64, 2, 256, 8, long_decode, &rope_alibi_lse);
  paged(d, "paged/e128h2/bt256/long1100", e128, 2, 256, 8, long_decode, nullptr);
}

}  // namespace

int main() {
  for (const char* isa : {"scalar", "avx2", "avx512", "neon"}) {
    if (mha_isa_supported(isa) == 0) {
      std::fprintf(stderr, "dump_bits: %s: not supported here, skipped\n", isa);
      continue;
    }
    check(mha_set_isa(isa), std::string("mha_set_isa ") + isa);
    for (const mha_dtype dt : {MHA_FP32, MHA_BF16}) {
      for (const std::size_t threads : {1, 2}) {
        mha_set_num_threads(threads);
        const Dump d(std::string(isa) + (dt == MHA_FP32 ? "/fp32" : "/bf16") + "/t" +
                     std::to_string(threads) + "/");
        forward_cases(d, dt);
        ragged_cases(d, dt);
        kv_cases(d, dt);
        paged_cases(d, dt);
      }
    }
  }
  return 0;
}
