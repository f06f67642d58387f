// Objects on GPTQ's and AWQ's 4-bit checkpoints (mha_attention_create_
// checkpoint), packed here as mha.h describes each layout: the object
// create_ex makes with uint4 weights from weights whose quantization gives
// the checkpoint's codes, zero points and scales, bit for bit, with float
// and int8 activations and both compute types; GPTQ's zero point 16, which
// create never makes, against an fp32 object on the widened weights; the
// argument checks.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mha/attention.hpp>
#include <mha/error.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention_case.hpp"
#include "attention/quant_case.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::AttentionCase;
using mha::test::CaseData;
using mha::test::forward;
using mha::test::quant_case;
using mha::test::RandomWeights;
using mha::test::same_bits;

constexpr mha_checkpoint_layout kLayouts[] = {MHA_CHECKPOINT_GPTQ, MHA_CHECKPOINT_GPTQ_V2,
                                              MHA_CHECKPOINT_AWQ};

// AWQ's nibble for output 8j + t (mha.h).
constexpr unsigned kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

// One layer [out x in] in a layout, and its weights (code - z) * scale in
// fp32 (exact: a 5-bit integer times an fp16 value), in input order (w) and
// in group order (w_grouped).
struct Layer4 {
  std::vector<std::int32_t> qweight, qzeros, g_idx;
  std::vector<std::uint16_t> scales;
  std::vector<float> w, w_grouped;
  // Zero points from zlo to zhi; every group of every row holds the codes 0
  // and 15, so that create's quantization of w finds this scale and zero
  // point again when 0 <= z <= 15. perm: empty, or the group order's input
  // q is input feature perm[q] (GPTQ's act order, g_idx[perm[q]] = q /
  // group).
  Layer4(mha_checkpoint_layout layout, std::size_t out, std::size_t in, std::size_t group, int zlo,
         int zhi, std::mt19937& rng, const std::vector<std::size_t>& perm = {}) {
    const bool awq = layout == MHA_CHECKPOINT_AWQ;
    const std::size_t groups = group == 0 || group >= in ? 1 : (in + group - 1) / group;
    const std::size_t len = groups == 1 ? in : group;
    std::vector<std::uint32_t> qw(in * out / 8, 0), qz(groups * out / 8, 0);
    scales.resize(groups * out);
    w.resize(out * in);
    w_grouped.resize(out * in);
    g_idx.resize(in);
    std::uniform_int_distribution<int> code(0, 15), zero(zlo, zhi), t(0, 63), e(-10, -7);
    for (std::size_t g = 0; g < groups; ++g) {
      for (std::size_t j = 0; j < out; ++j) {
        const int eb = e(rng), tb = t(rng), z = zero(rng);
        scales[g * out + j] = static_cast<std::uint16_t>((eb + 15) << 10 | tb * 16);
        const float s = std::ldexp(1.0f + static_cast<float>(tb) / 64, eb);
        const auto stored = static_cast<std::uint32_t>(layout == MHA_CHECKPOINT_GPTQ ? z - 1 : z);
        qz[g * (out / 8) + j / 8] |= (stored & 15u) << 4 * (awq ? kAwqNibble[j % 8] : j % 8);
        for (std::size_t q = g * len; q < std::min(in, (g + 1) * len); ++q) {
          const std::size_t p = perm.empty() ? q : perm[q];
          const int c = q == g * len ? 0 : q == g * len + 1 ? 15 : code(rng);
          w[j * in + p] = w_grouped[j * in + q] = static_cast<float>(c - z) * s;
          g_idx[p] = static_cast<std::int32_t>(g);
          const auto u = static_cast<std::uint32_t>(c);
          if (awq) {
            qw[p * (out / 8) + j / 8] |= u << 4 * kAwqNibble[j % 8];
          } else {
            qw[p / 8 * out + j] |= u << 4 * (p % 8);
          }
        }
      }
    }
    qweight.assign(qw.begin(), qw.end());
    qzeros.assign(qz.begin(), qz.end());
  }
  mha_checkpoint_matrix view(const std::vector<float>& bias, bool with_g_idx) const {
    return {qweight.data(), qzeros.data(), scales.data(), with_g_idx ? g_idx.data() : nullptr,
            bias.empty() ? nullptr : bias.data()};
  }
};

struct Layer {
  mha_checkpoint_layout layout;
  std::size_t group;
  Layer4 q, k, v, o;
  RandomWeights w;  // the layers' weights, the case's biases
  Layer(mha_checkpoint_layout f, std::size_t g, const AttentionCase& c, const CaseData& d, int zlo,
        int zhi, std::mt19937& rng)
      : layout(f),
        group(g),
        q(f, c.config.embed_dim, c.config.embed_dim, g, zlo, zhi, rng),
        k(f, d.w.k.size() / CaseData::kdim(c), CaseData::kdim(c), g, zlo, zhi, rng),
        v(f, d.w.v.size() / CaseData::vdim(c), CaseData::vdim(c), g, zlo, zhi, rng),
        o(f, c.config.embed_dim, c.config.embed_dim, g, zlo, zhi, rng),
        w(d.w) {
    w.q = q.w;
    w.k = k.w;
    w.v = v.w;
    w.o = o.w;
  }
  mha_checkpoint_weights view(bool with_g_idx = false) const {
    const bool g = with_g_idx && layout != MHA_CHECKPOINT_AWQ;
    return {sizeof(mha_checkpoint_weights),
            layout,
            group,
            q.view(w.qb, g),
            k.view(w.kb, g),
            v.view(w.vb, g),
            o.view(w.ob, g)};
  }
};

mha_attention_options options(std::size_t group, mha_dtype compute, mha_activations act) {
  mha_attention_options o{};
  o.struct_size = sizeof o;
  o.compute = compute;
  o.weight_format = MHA_WEIGHTS_UINT4;
  o.weight_group = group;
  o.activations = act;
  return o;
}

}  // namespace

TEST_CASE("GPTQ and AWQ checkpoints give the bits of create_ex on their weights",
          "[quant][attention]") {
  std::mt19937 rng(17);
  for (const mha_checkpoint_layout f : kLayouts) {
    for (const std::size_t group : {0, 32, 128}) {
      for (const AttentionCase& c :
           {quant_case(64, 4, 2, 0, 2, 9, 9, 1), quant_case(128, 4, 0, 64, 2, 4, 7, 2)}) {
        const CaseData d(c);
        // GPTQ stores z - 1: z = 0 would read back as 16.
        const Layer layer(f, group, c, d, f == MHA_CHECKPOINT_GPTQ ? 1 : 0, 15, rng);
        const mha_weights w = layer.w.view();
        for (const bool g_idx : {false, true}) {
          const mha_checkpoint_weights cw = layer.view(g_idx);
          for (const auto& [compute, act] : {std::pair{MHA_FP32, MHA_ACTIVATIONS_FLOAT},
                                             std::pair{MHA_FP32, MHA_ACTIVATIONS_INT8},
                                             std::pair{MHA_BF16, MHA_ACTIVATIONS_FLOAT},
                                             std::pair{MHA_BF16, MHA_ACTIVATIONS_INT8}}) {
            CAPTURE(static_cast<int>(f), group, c.config.embed_dim, g_idx,
                    static_cast<int>(compute), static_cast<int>(act));
            const mha_attention_options o = options(group, compute, act);
            mha_attention *from_checkpoint = nullptr, *made = nullptr;
            REQUIRE(mha_attention_create_checkpoint(&c.config, &cw, &o, &from_checkpoint) ==
                    MHA_OK);
            REQUIRE(mha_attention_create_ex(&c.config, &w, &o, &made) == MHA_OK);
            CHECK(same_bits(forward(from_checkpoint, c, d), forward(made, c, d)));
            mha_attention_destroy(from_checkpoint);
            mha_attention_destroy(made);
          }
        }
        // NULL options: fp32 compute, weight-only, which is the fp32 object
        // on the widened weights.
        const mha_checkpoint_weights cw = layer.view();
        mha_attention *plain = nullptr, *fp32 = nullptr;
        REQUIRE(mha_attention_create_checkpoint(&c.config, &cw, nullptr, &plain) == MHA_OK);
        REQUIRE(mha_attention_create(&c.config, &w, &fp32) == MHA_OK);
        CHECK(same_bits(forward(plain, c, d), forward(fp32, c, d)));
        mha_attention_destroy(plain);
        mha_attention_destroy(fp32);
      }
    }
  }
}

TEST_CASE("GPTQ's zero point 16 gives the fp32 object's bits on the widened weights",
          "[quant][attention]") {
  std::mt19937 rng(18);
  const AttentionCase c = quant_case(64, 4, 2, 0, 2, 5, 5, 3);
  const CaseData d(c);
  // Stored 15, read as 16: every code - z is negative or zero.
  const Layer layer(MHA_CHECKPOINT_GPTQ, 32, c, d, 16, 16, rng);
  const mha_checkpoint_weights cw = layer.view(true);
  const mha_weights w = layer.w.view();
  mha_attention *from_checkpoint = nullptr, *fp32 = nullptr;
  REQUIRE(mha_attention_create_checkpoint(&c.config, &cw, nullptr, &from_checkpoint) == MHA_OK);
  REQUIRE(mha_attention_create(&c.config, &w, &fp32) == MHA_OK);
  CHECK(same_bits(forward(from_checkpoint, c, d), forward(fp32, c, d)));
  mha_attention_destroy(from_checkpoint);
  mha_attention_destroy(fp32);
}

TEST_CASE("GPTQ act order: the object on the layers in group order, inputs gathered alike",
          "[quant][attention]") {
  std::mt19937 rng(21);
  const AttentionCase c = quant_case(64, 4, 2, 0, 2, 7, 7, 6);
  const CaseData d(c);
  const std::size_t E = 64, kv = d.w.k.size() / E;
  // Q, K and V share one act order (GPTQ's, from the same inputs' Hessian);
  // o_proj's input is the merged heads, here in its own order.
  std::vector<std::size_t> identity(E);
  for (std::size_t p = 0; p < E; ++p) identity[p] = p;
  for (const std::size_t group : {32, 0}) {
    // Inputs dealt to groups at random, each group's in ascending order, as
    // mha.h orders them (group 0: one group, the identity).
    std::vector<std::size_t> order = identity;
    std::shuffle(order.begin(), order.end(), rng);
    const std::size_t len = group == 0 ? E : group;
    for (std::size_t g0 = 0; g0 < E; g0 += len) {
      std::sort(order.begin() + static_cast<std::ptrdiff_t>(g0),
                order.begin() + static_cast<std::ptrdiff_t>(std::min(E, g0 + len)));
    }
    const Layer4 q(MHA_CHECKPOINT_GPTQ, E, E, group, 1, 15, rng, order),
        k(MHA_CHECKPOINT_GPTQ, kv, E, group, 1, 15, rng, order),
        v(MHA_CHECKPOINT_GPTQ, kv, E, group, 1, 15, rng, order),
        o(MHA_CHECKPOINT_GPTQ, E, E, group, 1, 15, rng, identity);
    const mha_checkpoint_weights cw{sizeof cw,
                                    MHA_CHECKPOINT_GPTQ,
                                    group,
                                    q.view(d.w.qb, true),
                                    k.view(d.w.kb, true),
                                    v.view(d.w.vb, true),
                                    o.view(d.w.ob, true)};
    // The reference: create_ex on the weights in group order, every input
    // row gathered in that order.
    RandomWeights grouped(d.w);
    grouped.q = q.w_grouped;
    grouped.k = k.w_grouped;
    grouped.v = v.w_grouped;
    grouped.o = o.w;
    CaseData gathered(d);
    for (std::vector<float>* x : {&gathered.query, &gathered.key, &gathered.value}) {
      for (std::size_t r = 0; r < x->size() / E; ++r) {
        for (std::size_t p = 0; p < E; ++p) (*x)[r * E + p] = d.query[r * E + order[p]];
      }
    }
    const mha_weights gw = grouped.view();
    for (const auto& [compute, act] :
         {std::pair{MHA_FP32, MHA_ACTIVATIONS_FLOAT}, std::pair{MHA_FP32, MHA_ACTIVATIONS_INT8},
          std::pair{MHA_BF16, MHA_ACTIVATIONS_FLOAT}, std::pair{MHA_BF16, MHA_ACTIVATIONS_INT8}}) {
      CAPTURE(group, static_cast<int>(compute), static_cast<int>(act));
      const mha_attention_options opt = options(group, compute, act);
      mha_attention *from_checkpoint = nullptr, *made = nullptr;
      REQUIRE(mha_attention_create_checkpoint(&c.config, &cw, &opt, &from_checkpoint) == MHA_OK);
      REQUIRE(mha_attention_create_ex(&c.config, &gw, &opt, &made) == MHA_OK);
      const std::vector<float> got = forward(from_checkpoint, c, d);
      CHECK(same_bits(got, forward(made, c, gathered)));
      // Against the fp32 object on the weights in input order, which sums
      // in another order: within fp32 rounding (a wrong gather is off by
      // the weights' own scale); fp32 compute, weight-only.
      if (compute == MHA_FP32 && act == MHA_ACTIVATIONS_FLOAT) {
        RandomWeights plain(d.w);
        plain.q = q.w;
        plain.k = k.w;
        plain.v = v.w;
        plain.o = o.w;
        mha_attention* fp32 = nullptr;
        const mha_weights pw = plain.view();
        REQUIRE(mha_attention_create(&c.config, &pw, &fp32) == MHA_OK);
        const std::vector<float> want = forward(fp32, c, d);
        double err = 0, scale = 0;
        for (std::size_t i = 0; i < got.size(); ++i) {
          err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
          scale = std::max(scale, std::fabs(double(want[i])));
        }
        CHECK(err <= 1e-5 * scale);
        mha_attention_destroy(fp32);
      }
      mha_attention_destroy(from_checkpoint);
      mha_attention_destroy(made);
    }
  }
}

TEST_CASE("mha_attention_create_checkpoint checks its arguments and writes nothing on failure",
          "[quant][attention]") {
  std::mt19937 rng(19);
  const AttentionCase c = quant_case(64, 4, 2, 0, 2, 5, 5, 4);
  const CaseData d(c);
  const Layer layer(MHA_CHECKPOINT_GPTQ, 32, c, d, 1, 15, rng);
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  const auto fails = [&](const mha_config& cfg, const mha_checkpoint_weights& w,
                         const mha_attention_options* o, const char* word,
                         mha_status status = MHA_INVALID_ARGUMENT) {
    REQUIRE(mha_attention_create_checkpoint(&cfg, &w, o, &attn) == status);
    CHECK(std::string(mha_last_error()).find(word) != std::string::npos);
    REQUIRE(attn == sentinel);
  };
  mha_checkpoint_weights w = layer.view(true);
  w.struct_size = 8;
  fails(c.config, w, nullptr, "struct_size");
  w = layer.view(true);
  w.layout = static_cast<mha_checkpoint_layout>(3);
  fails(c.config, w, nullptr, "layout");
  w = layer.view(true);
  w.group = 16;
  fails(c.config, w, nullptr, "group");
  w = layer.view(true);
  w.v.qweight = nullptr;
  fails(c.config, w, nullptr, "weights->v.qweight");
  w = layer.view(true);
  w.k.qzeros = nullptr;
  fails(c.config, w, nullptr, "weights->k.qzeros");
  w = layer.view(true);
  w.out.scales = nullptr;
  fails(c.config, w, nullptr, "weights->out.scales");
  // A NaN and an infinite fp16 scale, group 1 of k's output 3.
  std::vector<std::uint16_t> bad = layer.k.scales;
  for (const std::uint16_t h : {std::uint16_t{0x7E00}, std::uint16_t{0xFC00}}) {
    bad[1 * 32 + 3] = h;
    w = layer.view(true);
    w.k.scales = bad.data();
    fails(c.config, w, nullptr, "weights->k.scales[1][3]");
  }
  // A g_idx whose groups are not `group` inputs each, and one out of range.
  std::vector<std::int32_t> g_idx = layer.q.g_idx;
  g_idx[0] = 1;
  w = layer.view(true);
  w.q.g_idx = g_idx.data();
  fails(c.config, w, nullptr, "weights->q.g_idx: group 0 holds 31 input features, expected 32");
  g_idx[0] = 2;
  fails(c.config, w, nullptr, "weights->q.g_idx[0]");
  // AWQ takes no g_idx.
  const Layer awq(MHA_CHECKPOINT_AWQ, 32, c, d, 0, 15, rng);
  w = awq.view();
  w.q.g_idx = layer.q.g_idx.data();
  fails(c.config, w, nullptr, "AWQ");
  // Options that do not name uint4 and the checkpoint's group.
  w = layer.view(true);
  mha_attention_options o = options(32, MHA_FP32, MHA_ACTIVATIONS_FLOAT);
  o.weight_format = MHA_WEIGHTS_INT4;
  fails(c.config, w, &o, "weight_format");
  o = options(64, MHA_FP32, MHA_ACTIVATIONS_FLOAT);
  fails(c.config, w, &o, "weight_group");
  // Widths off the packing's 8: 12 input features of a cross-attention's
  // keys, and 12 output features of one kv head of 12.
  const mha_config narrow_in{64, 4, 12, 0, 2};
  fails(narrow_in, w, nullptr, "input features in a multiple of 8");
  const mha_config narrow_out{48, 4, 0, 0, 1};
  fails(narrow_out, w, nullptr, "output features in a multiple of 8");
  REQUIRE(mha_attention_create_checkpoint(&c.config, nullptr, nullptr, &attn) ==
          MHA_INVALID_ARGUMENT);
  REQUIRE(attn == sentinel);
}

TEST_CASE("the C++ class takes a checkpoint as the C entry does", "[quant][attention]") {
  std::mt19937 rng(20);
  const AttentionCase c = quant_case(64, 4, 2, 0, 2, 5, 5, 5);
  const CaseData d(c);
  const Layer layer(MHA_CHECKPOINT_AWQ, 64, c, d, 0, 15, rng);
  const mha_checkpoint_weights cw = layer.view();
  const mha_attention_options o = options(64, MHA_BF16, MHA_ACTIVATIONS_INT8);
  mha_attention* from_c = nullptr;
  REQUIRE(mha_attention_create_checkpoint(&c.config, &cw, &o, &from_c) == MHA_OK);
  const mha::MultiheadAttention from_cpp(c.config, cw, &o);
  CHECK(same_bits(forward(from_cpp.handle(), c, d), forward(from_c, c, d)));
  mha_attention_destroy(from_c);
  mha_checkpoint_weights bad = cw;
  bad.layout = static_cast<mha_checkpoint_layout>(-1);
  CHECK_THROWS_AS(mha::MultiheadAttention(c.config, bad), mha::Error);
}
