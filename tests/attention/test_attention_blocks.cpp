// Objects on llama.cpp's Q8_0 and Q4_0 blocks (mha_attention_create_blocks):
// the object create_ex makes from weights whose quantization gives the
// blocks' codes and scales, bit for bit, with float and int8 activations
// and both compute types; Q4_0's code -8, which create never makes, against
// an fp32 object on the widened weights; the argument checks.
#include <mha/mha.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mha/attention.hpp>
#include <mha/error.hpp>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "attention/quant_case.hpp"
#include "support/attention_reference.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::AttentionCase;
using mha::test::CaseData;
using mha::test::forward;
using mha::test::quant_case;
using mha::test::RandomWeights;
using mha::test::same_bits;

// fp16 bits of 2^e * (1 + t / 64), t < 64: a normal fp16 value.
std::uint16_t fp16(int e, int t) {
  return static_cast<std::uint16_t>((e + 15) << 10 | t * 16);
}

// One matrix [rows x in] as blocks, and its weights code * scale in fp32.
struct Blocks {
  std::vector<unsigned char> bytes;
  std::vector<float> w;
  // lo, hi: the code range; every block holds hi or -hi (its largest
  // magnitude at the top code, as create quantizes), and -8 when
  // `with_minus8` (Q4_0 only).
  Blocks(mha_block_format f, std::size_t rows, std::size_t in, std::mt19937& rng,
         bool with_minus8) {
    const bool q8 = f == MHA_BLOCKS_Q8_0;
    const int top = q8 ? 127 : 7;
    std::uniform_int_distribution<int> code(-top, top), t(0, 63), e(-10, -7);
    const std::size_t size = q8 ? 34 : 18;
    bytes.resize(rows * in / 32 * size);
    w.resize(rows * in);
    for (std::size_t b = 0; b < rows * in / 32; ++b) {
      const int eb = e(rng), tb = t(rng);
      const std::uint16_t h = fp16(eb, tb);
      const float d = std::ldexp(1.0f + static_cast<float>(tb) / 64, eb);
      unsigned char* blk = bytes.data() + b * size;
      blk[0] = static_cast<unsigned char>(h & 255);
      blk[1] = static_cast<unsigned char>(h >> 8);
      int codes[32];
      for (int& c : codes) c = code(rng);
      codes[b % 32] = b % 2 == 0 ? top : -top;
      if (with_minus8) codes[(b + 5) % 32] = -8;
      for (std::size_t j = 0; j < 32; ++j) {
        w[b * 32 + j] = static_cast<float>(codes[j]) * d;
        if (q8) {
          blk[2 + j] = static_cast<unsigned char>(static_cast<std::int8_t>(codes[j]));
        } else if (j < 16) {
          blk[2 + j] = static_cast<unsigned char>(codes[j] + 8);
        } else {
          blk[2 + j - 16] = static_cast<unsigned char>(blk[2 + j - 16] | (codes[j] + 8) << 4);
        }
      }
    }
  }
};

struct Layer {
  Blocks q, k, v, o;
  RandomWeights w;  // the blocks' weights, the case's biases
  Layer(mha_block_format f, const AttentionCase& c, const CaseData& d, bool with_minus8,
        std::mt19937& rng)
      : q(f, c.config.embed_dim, c.config.embed_dim, rng, with_minus8),
        k(f, d.w.k.size() / CaseData::kdim(c), CaseData::kdim(c), rng, with_minus8),
        v(f, d.w.v.size() / CaseData::vdim(c), CaseData::vdim(c), rng, with_minus8),
        o(f, c.config.embed_dim, c.config.embed_dim, rng, with_minus8),
        w(d.w) {
    w.q = q.w;
    w.k = k.w;
    w.v = v.w;
    w.o = o.w;
  }
  mha_block_weights view(mha_block_format f) const {
    const auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
    return {sizeof(mha_block_weights),
            f,
            q.bytes.data(),
            k.bytes.data(),
            v.bytes.data(),
            o.bytes.data(),
            bias(w.qb),
            bias(w.kb),
            bias(w.vb),
            bias(w.ob)};
  }
};

mha_attention_options options(mha_block_format f, mha_dtype compute, mha_activations act) {
  mha_attention_options o{};
  o.struct_size = sizeof o;
  o.compute = compute;
  o.weight_format = f == MHA_BLOCKS_Q8_0 ? MHA_WEIGHTS_INT8 : MHA_WEIGHTS_INT4;
  o.weight_group = 32;
  o.activations = act;
  return o;
}

}  // namespace

TEST_CASE("llama.cpp blocks give the bits of create_ex on their weights", "[quant][attention]") {
  std::mt19937 rng(7);
  for (const mha_block_format f : {MHA_BLOCKS_Q8_0, MHA_BLOCKS_Q4_0}) {
    for (const AttentionCase& c :
         {quant_case(64, 4, 2, 0, 2, 9, 9, 1), quant_case(96, 3, 0, 64, 2, 4, 7, 2)}) {
      const CaseData d(c);
      const Layer layer(f, c, d, false, rng);
      const mha_block_weights bw = layer.view(f);
      const mha_weights w = layer.w.view();
      for (const mha_dtype compute : {MHA_FP32, MHA_BF16}) {
        for (const mha_activations act : {MHA_ACTIVATIONS_FLOAT, MHA_ACTIVATIONS_INT8}) {
          CAPTURE(static_cast<int>(f), c.config.embed_dim, static_cast<int>(compute),
                  static_cast<int>(act));
          const mha_attention_options o = options(f, compute, act);
          mha_attention *from_blocks = nullptr, *made = nullptr;
          REQUIRE(mha_attention_create_blocks(&c.config, &bw, &o, &from_blocks) == MHA_OK);
          REQUIRE(mha_attention_create_ex(&c.config, &w, &o, &made) == MHA_OK);
          CHECK(same_bits(forward(from_blocks, c, d), forward(made, c, d)));
          mha_attention_destroy(from_blocks);
          mha_attention_destroy(made);
        }
      }
      // NULL options: fp32 compute, weight-only.
      mha_attention *plain = nullptr, *made = nullptr;
      const mha_attention_options o = options(f, MHA_FP32, MHA_ACTIVATIONS_FLOAT);
      REQUIRE(mha_attention_create_blocks(&c.config, &bw, nullptr, &plain) == MHA_OK);
      REQUIRE(mha_attention_create_ex(&c.config, &w, &o, &made) == MHA_OK);
      CHECK(same_bits(forward(plain, c, d), forward(made, c, d)));
      mha_attention_destroy(plain);
      mha_attention_destroy(made);
    }
  }
}

TEST_CASE("Q4_0's code -8 gives the fp32 object's bits on the widened weights",
          "[quant][attention]") {
  std::mt19937 rng(8);
  const AttentionCase c = quant_case(64, 4, 2, 0, 2, 5, 5, 3);
  const CaseData d(c);
  const Layer layer(MHA_BLOCKS_Q4_0, c, d, true, rng);
  const mha_block_weights bw = layer.view(MHA_BLOCKS_Q4_0);
  const mha_weights w = layer.w.view();
  mha_attention *from_blocks = nullptr, *fp32 = nullptr;
  REQUIRE(mha_attention_create_blocks(&c.config, &bw, nullptr, &from_blocks) == MHA_OK);
  REQUIRE(mha_attention_create(&c.config, &w, &fp32) == MHA_OK);
  CHECK(same_bits(forward(from_blocks, c, d), forward(fp32, c, d)));
  mha_attention_destroy(from_blocks);
  mha_attention_destroy(fp32);
}

TEST_CASE("mha_attention_create_blocks checks its arguments and writes nothing on failure",
          "[quant][attention]") {
  std::mt19937 rng(9);
  const AttentionCase c = quant_case(64, 4, 2, 0, 2, 5, 5, 4);
  const CaseData d(c);
  const Layer layer(MHA_BLOCKS_Q8_0, c, d, false, rng);
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  const auto fails = [&](const mha_config& cfg, const mha_block_weights& w,
                         const mha_attention_options* o, const char* word) {
    REQUIRE(mha_attention_create_blocks(&cfg, &w, o, &attn) == MHA_INVALID_ARGUMENT);
    CHECK(std::string(mha_last_error()).find(word) != std::string::npos);
    REQUIRE(attn == sentinel);
  };
  mha_block_weights w = layer.view(MHA_BLOCKS_Q8_0);
  w.struct_size = 8;
  fails(c.config, w, nullptr, "struct_size");
  w = layer.view(MHA_BLOCKS_Q8_0);
  w.format = static_cast<mha_block_format>(3);
  fails(c.config, w, nullptr, "format");
  w = layer.view(MHA_BLOCKS_Q8_0);
  w.v_blocks = nullptr;
  fails(c.config, w, nullptr, "v_blocks");
  // A NaN and an infinite fp16 scale, in block [1][1] of k.
  std::vector<unsigned char> bad = layer.k.bytes;
  for (const std::uint16_t h : {std::uint16_t{0x7E00}, std::uint16_t{0xFC00}}) {
    bad[3 * 34] = static_cast<unsigned char>(h & 255);
    bad[3 * 34 + 1] = static_cast<unsigned char>(h >> 8);
    w = layer.view(MHA_BLOCKS_Q8_0);
    w.k_blocks = bad.data();
    fails(c.config, w, nullptr, "k_blocks: block [1][1]");
  }
  // Options that do not name the blocks' format and group 32.
  w = layer.view(MHA_BLOCKS_Q8_0);
  mha_attention_options o = options(MHA_BLOCKS_Q4_0, MHA_FP32, MHA_ACTIVATIONS_FLOAT);
  fails(c.config, w, &o, "weight_format");
  o = options(MHA_BLOCKS_Q8_0, MHA_FP32, MHA_ACTIVATIONS_FLOAT);
  o.weight_group = 64;
  fails(c.config, w, &o, "weight_group");
  // An input width off the block size: 48 features.
  const mha_config narrow{48, 4, 0, 0, 0};
  fails(narrow, w, nullptr, "multiple of 32");
  REQUIRE(mha_attention_create_blocks(&c.config, nullptr, nullptr, &attn) == MHA_INVALID_ARGUMENT);
  REQUIRE(attn == sentinel);
}

TEST_CASE("the C++ class takes blocks and int8 codes as the C entries do", "[quant][attention]") {
  std::mt19937 rng(10);
  const AttentionCase c = quant_case(64, 4, 2, 0, 2, 5, 5, 5);
  const CaseData d(c);
  const Layer layer(MHA_BLOCKS_Q8_0, c, d, false, rng);
  const mha_block_weights bw = layer.view(MHA_BLOCKS_Q8_0);
  const mha_attention_options o = options(MHA_BLOCKS_Q8_0, MHA_BF16, MHA_ACTIVATIONS_INT8);
  mha_attention* from_c = nullptr;
  REQUIRE(mha_attention_create_blocks(&c.config, &bw, &o, &from_c) == MHA_OK);
  const mha::MultiheadAttention from_cpp(c.config, bw, &o);
  CHECK(same_bits(forward(from_cpp.handle(), c, d), forward(from_c, c, d)));
  mha_attention_destroy(from_c);
  mha_block_weights bad = bw;
  bad.format = static_cast<mha_block_format>(1);
  CHECK_THROWS_AS(mha::MultiheadAttention(c.config, bad), mha::Error);
  // int8 codes: one per weight and a scale per row, as create quantizes them.
  std::vector<std::int8_t> codes(64 * 64, 3);
  const std::vector<float> scales(64, 0.01f);
  const mha_int8_weights w8{sizeof w8,     codes.data(),  codes.data(),  codes.data(),
                            codes.data(),  scales.data(), scales.data(), scales.data(),
                            scales.data(), nullptr,       nullptr,       nullptr,
                            nullptr};
  mha_attention* int8_c = nullptr;
  REQUIRE(mha_attention_create_int8(&c.config, &w8, nullptr, &int8_c) == MHA_OK);
  const mha::MultiheadAttention int8_cpp(c.config, w8);
  CHECK(same_bits(forward(int8_cpp.handle(), c, d), forward(int8_c, c, d)));
  mha_attention_destroy(int8_c);
}
