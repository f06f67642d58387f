// Objects with quantized weights (mha_attention_options' MHA_WEIGHTS_INT8,
// _INT4 and _UINT4, per row or in groups, and mha_attention_create_int8's
// codes): the quantization rules of mha.h on chosen rows; bit-identical to
// an fp32 object created with the widened weights ((code - zero) * scale in
// fp32) on forwards, KV-cache steps at one row and several, and at 1, 2
// and 3 threads, on every ISA (CTest runs the binary once per MHA_ISA);
// the error against the double oracle on the widened weights, and against
// the fp32 layer; the option checks.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mha/error.hpp>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "attention/projection/projection.hpp"
#include "attention/quant_case.hpp"
#include "support/attention_reference.hpp"
#include "support/reference.hpp"

namespace {

using mha::detail::QuantCodes;
using mha::test::AttentionCase;
using mha::test::CaseData;
using mha::test::forward;
using mha::test::Handle;
using mha::test::quant_case;
using mha::test::RandomWeights;
using mha::test::same_bits;

// A quantized format as the options name it, and as the library's rules do.
struct Format {
  mha_weight_format f;
  std::size_t group;
  QuantCodes type() const {
    return f == MHA_WEIGHTS_INT8   ? QuantCodes::int8
           : f == MHA_WEIGHTS_INT4 ? QuantCodes::int4
                                   : QuantCodes::uint4;
  }
};
// Every code type, per row and in groups (128 leaves a short last group
// of the 1100-wide key rows below).
constexpr Format kFormats[] = {{MHA_WEIGHTS_INT8, 0},  {MHA_WEIGHTS_INT8, 32},
                               {MHA_WEIGHTS_INT4, 32}, {MHA_WEIGHTS_INT4, 128},
                               {MHA_WEIGHTS_UINT4, 0}, {MHA_WEIGHTS_UINT4, 64}};

mha_attention_options quant_options(Format f = {MHA_WEIGHTS_INT8, 0}) {
  mha_attention_options o{};
  o.struct_size = sizeof(mha_attention_options);
  o.compute = MHA_FP32;
  o.weight_format = f.f;
  o.weight_group = f.group;
  return o;
}

// A weight [out x in]'s codes, scales and zeros by the library's rule, and
// the values an object multiplies by: (code - zero) * scale.
struct Quantized {
  std::vector<std::int8_t> codes;
  std::vector<float> scales, zeros;
  std::size_t groups, len;
  Quantized(Format f, const std::vector<float>& w, std::size_t out, std::size_t in)
      : codes(out * in),
        scales(out * mha::detail::quant_groups(in, f.group)),
        zeros(f.type() == QuantCodes::uint4 ? scales.size() : 0),
        groups(mha::detail::quant_groups(in, f.group)),
        len(groups == 1 ? in : f.group) {
    mha::detail::quantize_rows(f.type(), f.group, out, in, w.data(), codes.data(), scales.data(),
                               zeros.empty() ? nullptr : zeros.data(), "w");
  }
  std::vector<float> widened() const {
    const std::size_t out = scales.size() / groups, in = codes.size() / out;
    std::vector<float> w(codes.size());
    for (std::size_t j = 0; j < out; ++j) {
      for (std::size_t p = 0; p < in; ++p) {
        const std::size_t q = j * groups + p / len;
        const float z = zeros.empty() ? 0.0f : zeros[q];
        w[j * in + p] = (float(codes[j * in + p]) - z) * scales[q];
      }
    }
    return w;
  }
};

RandomWeights widened(Format f, const AttentionCase& c, const RandomWeights& w) {
  const std::size_t E = c.config.embed_dim, kdim = CaseData::kdim(c), vdim = CaseData::vdim(c);
  const std::size_t kv = w.k.size() / kdim;
  RandomWeights x = w;
  x.q = Quantized(f, w.q, E, E).widened();
  x.k = Quantized(f, w.k, kv, kdim).widened();
  x.v = Quantized(f, w.v, kv, vdim).widened();
  x.o = Quantized(f, w.o, E, E).widened();
  return x;
}

// Shapes whose projections cover a row (decode), several rows and strips,
// column counts off the strip width, and an input width past the GEMM's K
// block (1100 > 1024 on AVX-512, 256 elsewhere).
std::vector<AttentionCase> cases() {
  return {quant_case(64, 4, 0, 0, 2, 9, 9, 11), quant_case(48, 3, 1, 0, 1, 1, 5, 12, false),
          quant_case(40, 5, 0, 23, 3, 4, 6, 13), quant_case(96, 8, 2, 0, 1, 17, 17, 14),
          quant_case(24, 2, 0, 1100, 2, 3, 2, 15)};
}

}  // namespace

TEST_CASE("quantized weights: the rules of mha.h", "[quant][attention]") {
  // int8, one group per row. Row 0: max 127, scale 1: codes are the values
  // rounded half to even. Row 1: all zero. Row 2: one value 1000x the
  // others, which round to 0 (0.1 / (1000/127) = 0.0127). Row 3: max 63.5,
  // scale 0.5, exact ties (63.5, 64.5 and 1.5) to even.
  const std::vector<float> w = {127.0f, 2.5f, -3.5f, 0.5f, 0.0f,   0.0f,   0.0f,   0.0f,
                                1000.f, 0.1f, -0.1f, 0.0f, -63.5f, 31.75f, 32.25f, 0.75f};
  std::vector<std::int8_t> codes(16, 99);
  std::vector<float> scales(8, NAN), zeros(8, NAN);
  mha::detail::quantize_rows(QuantCodes::int8, 0, 4, 4, w.data(), codes.data(), scales.data(),
                             nullptr, "w");
  CHECK(scales[0] == 1.0f);
  CHECK(scales[1] == 0.0f);
  CHECK(scales[2] == 1000.f / 127.0f);
  CHECK(scales[3] == 0.5f);
  const std::vector<std::int8_t> int8 = {127, 2, -4, 0, 0, 0, 0, 0, 127, 0, 0, 0, -127, 64, 64, 2};
  CHECK(codes == int8);
  // int4 in groups of 2: row 0's groups {127, 2.5} (scale 127/7, codes 7
  // and 0) and {-3.5, 0.5} (scale 0.5, -7 and 1); row 2's {-0.1, 0} (-7,
  // 0); row 3's {-63.5, 31.75} (scale 63.5/7 in fp32, -7 and 3.5000002 ->
  // 4) and {32.25, 0.75} (7 and 0.16 -> 0).
  mha::detail::quantize_rows(QuantCodes::int4, 2, 4, 4, w.data(), codes.data(), scales.data(),
                             nullptr, "w");
  CHECK(scales[0] == 127.0f / 7.0f);
  CHECK(scales[1] == 0.5f);
  CHECK(scales[2] == 0.0f);
  CHECK(scales[3] == 0.0f);
  const std::vector<std::int8_t> int4 = {7, 0, -7, 1, 0, 0, 0, 0, 7, 0, -7, 0, -7, 4, 7, 0};
  CHECK(codes == int4);
  // uint4 in groups of 2: {127, 2.5} spans [0, 127]: scale 127/15, zero
  // point 0, codes 15 and 0 (0.295 rounds to 0); {-3.5, 0.5}: scale 4/15,
  // zero point 13 (13.125), codes 13 - 13 = 0 and 2 + 13 = 15 (1.875 -> 2);
  // an all-zero group: scale 0, zero point 0, codes 0.
  mha::detail::quantize_rows(QuantCodes::uint4, 2, 4, 4, w.data(), codes.data(), scales.data(),
                             zeros.data(), "w");
  CHECK(scales[0] == 127.0f / 15.0f);
  CHECK(zeros[0] == 0.0f);
  CHECK(scales[1] == 4.0f / 15.0f);
  CHECK(zeros[1] == 13.0f);
  CHECK(scales[2] == 0.0f);
  CHECK(zeros[2] == 0.0f);
  CHECK(codes[0] == 15);
  CHECK(codes[1] == 0);
  CHECK(codes[2] == 0);
  CHECK(codes[3] == 15);
  for (const std::int8_t x : codes) CHECK((x >= 0 && x <= 15));
  // A NaN or infinite weight is refused, naming it.
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY}) {
    std::vector<float> x = w;
    x[6] = bad;
    for (const auto type : {QuantCodes::int8, QuantCodes::int4, QuantCodes::uint4}) {
      try {
        mha::detail::quantize_rows(type, 2, 4, 4, x.data(), codes.data(), scales.data(),
                                   zeros.data(), "w");
        FAIL("no error for a non-finite weight");
      } catch (const mha::Error& e) {
        CHECK(e.status() == MHA_INVALID_ARGUMENT);
        CHECK(std::string(e.what()).find("w[1][2]") != std::string::npos);
      }
    }
  }
}

TEST_CASE("quantized weights give the fp32 object's bits on the widened weights",
          "[quant][attention]") {
  for (const Format f : kFormats) {
    const mha_attention_options o = quant_options(f);
    // The error against the fp32 weights (the oracle on them), by code
    // type: the rounding of the codes, half a step of the group's range /
    // 254, / 14 or / 15 per weight, at PyTorch's weight scale (measured:
    // int8 1.2e-3 to 2.9e-3, int4 and uint4 1.4e-2 to 6.6e-2).
    const double limit = f.type() == QuantCodes::int8 ? 2e-2 : 2e-1;
    for (const AttentionCase& c : cases()) {
      CAPTURE(static_cast<int>(f.f), f.group, c.config.embed_dim, c.config.num_heads,
              c.config.num_kv_heads, c.config.kdim, c.batch, c.q_len, c.kv_len);
      const CaseData d(c);
      const mha_weights given = d.w.view();
      const RandomWeights wide = widened(f, c, d.w);
      const mha_weights wide_view = wide.view();
      const Handle quant(c.config, given, &o), fp32(c.config, wide_view, nullptr);
      const std::size_t H = c.config.num_heads;
      std::vector<float> wq(c.batch * H * c.q_len * c.kv_len), w32(wq.size());
      for (const std::size_t threads : {1, 2, 3}) {
        CAPTURE(threads);
        mha_set_num_threads(threads);
        CHECK(same_bits(forward(quant.a, c, d, &wq), forward(fp32.a, c, d, &w32)));
        CHECK(same_bits(wq, w32));
      }
      mha_set_num_threads(0);
      // The double oracle on the widened weights bounds the object as it
      // bounds the fp32 one (1e-5 of the outputs' scale:
      // test_attention_oracle's kTolerance).
      const auto ref_wide = mha::test::reference_attention(
          c.config, wide_view, c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(),
          d.value.data(), d.mask_ptr(), false, false);
      const auto ref_given = mha::test::reference_attention(
          c.config, given, c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(), d.value.data(),
          d.mask_ptr(), false, false);
      const std::vector<float> out = forward(quant.a, c, d);
      CHECK(mha::test::scaled_error(out, ref_wide.out) <= 1e-5);
      const double quantized = mha::test::scaled_error(out, ref_given.out);
      CHECK(quantized < limit);
      CHECK(quantized > 1e-5);  // the weights really were quantized
    }
  }
}

TEST_CASE("quantized weights with compute MHA_BF16: the bf16 core on the fp32 products",
          "[quant][attention]") {
  // The projections are the fp32 weight-only object's, Q, K and V then
  // rounded to bf16 (2^-9 relative each) where they enter the bf16 core,
  // which rounds P too: within the bf16 test's 1e-2 of scaled_error against
  // the oracle on the widened weights (test_attention_bf16.cpp; measured
  // here at most 1.4e-3, every ISA). That the bf16 core ran: further than 1e-4 from
  // the fp32 object with the same codes.
  double worst = 0;
  for (const Format f : kFormats) {
    mha_attention_options o = quant_options(f);
    o.compute = MHA_BF16;
    const mha_attention_options o32 = quant_options(f);
    for (const AttentionCase& c : cases()) {
      CAPTURE(static_cast<int>(f.f), f.group, c.config.embed_dim, c.config.num_heads,
              c.config.num_kv_heads, c.config.kdim, c.batch, c.q_len, c.kv_len);
      const CaseData d(c);
      const RandomWeights wide = widened(f, c, d.w);
      const Handle bf16(c.config, d.w.view(), &o), fp32(c.config, d.w.view(), &o32);
      std::vector<float> out;
      for (const std::size_t threads : {1, 2, 3}) {
        CAPTURE(threads);
        mha_set_num_threads(threads);
        const std::vector<float> y = forward(bf16.a, c, d);
        if (out.empty()) out = y;
        CHECK(same_bits(y, out));
      }
      mha_set_num_threads(0);
      const auto ref_wide = mha::test::reference_attention(
          c.config, wide.view(), c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(),
          d.value.data(), d.mask_ptr(), false, false);
      const double err = mha::test::scaled_error(out, ref_wide.out);
      worst = std::max(worst, err);
      CHECK(err <= 1e-2);
      const std::vector<float> y32 = forward(fp32.a, c, d);
      double diff = 0;
      for (std::size_t i = 0; i < out.size(); ++i)
        diff = std::max(diff, static_cast<double>(std::fabs(out[i] - y32[i])));
      CHECK(diff > 1e-4);
    }
  }
  INFO("worst scaled error " << worst);
  CHECK(worst > 0);
}

TEST_CASE("quantized weights: KV-cache steps give the fp32 object's bits, one row and several",
          "[quant][attention]") {
  for (const Format f : kFormats) {
    const mha_attention_options o = quant_options(f);
    for (const std::size_t batch : {1, 3}) {
      const AttentionCase c = quant_case(64, 4, 2, 0, batch, 1, 1, 21 + batch);
      CAPTURE(static_cast<int>(f.f), f.group, batch);
      const CaseData d(c);
      const RandomWeights wide = widened(f, c, d.w);
      const Handle quant(c.config, d.w.view(), &o), fp32(c.config, wide.view(), nullptr);
      mha_kv_cache *cq = nullptr, *c32 = nullptr;
      REQUIRE(mha_kv_cache_create(quant.a, batch, 16, &cq) == MHA_OK);
      REQUIRE(mha_kv_cache_create(fp32.a, batch, 16, &c32) == MHA_OK);
      const std::size_t E = c.config.embed_dim;
      for (const std::size_t tokens : {5, 1, 1, 3}) {
        CAPTURE(tokens);
        const std::vector<float> x = mha::test::random_vector(batch * tokens * E, 30 + tokens);
        std::vector<float> yq(x.size(), NAN), y32(x.size(), NAN);
        REQUIRE(mha_attention_step(quant.a, cq, tokens, x.data(), x.data(), x.data(), yq.data()) ==
                MHA_OK);
        REQUIRE(mha_attention_step(fp32.a, c32, tokens, x.data(), x.data(), x.data(), y32.data()) ==
                MHA_OK);
        CHECK(same_bits(yq, y32));
      }
      mha_kv_cache_destroy(cq);
      mha_kv_cache_destroy(c32);
    }
  }
}

TEST_CASE("quantized weights: options are checked, and a failed create writes nothing",
          "[quant][attention]") {
  const AttentionCase c = quant_case(32, 4, 0, 0, 1, 6, 6, 41);
  const CaseData d(c);
  const mha_weights w = d.w.view();
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  const auto fails = [&](const mha_attention_options& o, mha_status status, const char* word) {
    REQUIRE(mha_attention_create_ex(&c.config, &w, &o, &attn) == status);
    CHECK(std::string(mha_last_error()).find(word) != std::string::npos);
    REQUIRE(attn == sentinel);
  };
  mha_attention_options o = quant_options();
  o.weight_format = static_cast<mha_weight_format>(7);
  fails(o, MHA_INVALID_ARGUMENT, "weight_format");
  for (const std::size_t group : {std::size_t{1}, std::size_t{16}, std::size_t{96}}) {
    o = quant_options({MHA_WEIGHTS_INT4, group});
    fails(o, MHA_INVALID_ARGUMENT, "weight_group");
  }
  o = quant_options({MHA_WEIGHTS_COMPUTE, 32});
  fails(o, MHA_INVALID_ARGUMENT, "weight_group");
  o = quant_options();
  o.struct_size = sizeof(mha_attention_options) + 8;
  fails(o, MHA_INVALID_ARGUMENT, "struct_size");
  // A NaN weight: refused, naming the matrix and the element.
  RandomWeights bad = d.w;
  bad.v[5] = NAN;
  const mha_weights bad_view = bad.view();
  for (const Format f : kFormats) {
    const mha_attention_options q = quant_options(f);
    REQUIRE(mha_attention_create_ex(&c.config, &bad_view, &q, &attn) == MHA_INVALID_ARGUMENT);
    CHECK(std::string(mha_last_error()).find("v_weight[0][5]") != std::string::npos);
    REQUIRE(attn == sentinel);
  }
}

TEST_CASE("the first version's mha_attention_options still works, padding unread",
          "[quant][attention]") {
  // What a caller compiled against { struct_size, compute } passes: the
  // bytes past compute are its padding, which may hold anything.
  const AttentionCase c = quant_case(32, 4, 0, 0, 1, 6, 6, 42);
  const CaseData d(c);
  const mha_weights w = d.w.view();
  struct First {
    std::size_t struct_size;
    mha_dtype compute;
  };
  alignas(mha_attention_options) unsigned char bytes[sizeof(mha_attention_options)];
  std::memset(bytes, 0xA5, sizeof bytes);
  const First first{sizeof(First), MHA_FP32};
  std::memcpy(bytes, &first, sizeof first);
  std::memset(bytes + offsetof(First, compute) + sizeof(mha_dtype), 0x5A,
              sizeof(First) - offsetof(First, compute) - sizeof(mha_dtype));
  mha_attention_options o;
  std::memcpy(&o, bytes, sizeof o);
  const Handle old(c.config, w, &o), plain(c.config, w, nullptr);
  CHECK(same_bits(forward(old.a, c, d), forward(plain.a, c, d)));
}

namespace {

// A weight's codes and scales, as a checkpoint holds them.
struct Codes {
  std::vector<std::int8_t> codes;
  std::vector<float> scales;
  Codes(const std::vector<float>& w, std::size_t out, std::size_t in)
      : codes(out * in), scales(out) {
    mha::detail::quantize_rows(QuantCodes::int8, 0, out, in, w.data(), codes.data(), scales.data(),
                               nullptr, "w");
  }
  std::vector<float> widened() const {
    std::vector<float> w(codes.size());
    const std::size_t in = codes.size() / scales.size();
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = float(codes[i]) * scales[i / in];
    return w;
  }
};

struct CodedWeights {
  Codes q, k, v, o;
  const RandomWeights& b;
  CodedWeights(const AttentionCase& c, const RandomWeights& w)
      : q(w.q, c.config.embed_dim, c.config.embed_dim),
        k(w.k, w.k.size() / CaseData::kdim(c), CaseData::kdim(c)),
        v(w.v, w.v.size() / CaseData::vdim(c), CaseData::vdim(c)),
        o(w.o, c.config.embed_dim, c.config.embed_dim),
        b(w) {}
  mha_int8_weights view() const {
    return {sizeof(mha_int8_weights),
            q.codes.data(),
            k.codes.data(),
            v.codes.data(),
            o.codes.data(),
            q.scales.data(),
            k.scales.data(),
            v.scales.data(),
            o.scales.data(),
            b.qb.empty() ? nullptr : b.qb.data(),
            b.kb.empty() ? nullptr : b.kb.data(),
            b.vb.empty() ? nullptr : b.vb.data(),
            b.ob.empty() ? nullptr : b.ob.data()};
  }
};

}  // namespace

TEST_CASE("int8 codes given (mha_attention_create_int8) give the bits of codes made at create",
          "[quant][attention]") {
  const mha_attention_options o = quant_options();
  for (const AttentionCase& c : cases()) {
    CAPTURE(c.config.embed_dim, c.config.num_heads, c.config.kdim);
    const CaseData d(c);
    const mha_weights given = d.w.view();
    CodedWeights coded(c, d.w);
    // Codes at the ends of int8's range, -128 included, which create
    // never makes: against an fp32 object on code * scale.
    coded.q.codes[0] = -128;
    coded.k.codes[1] = 127;
    coded.v.codes[2] = -128;
    coded.o.codes.back() = -128;
    const mha_int8_weights cw = coded.view();
    mha_attention* a = nullptr;
    for (const mha_attention_options* opt :
         {static_cast<const mha_attention_options*>(nullptr), &o}) {
      REQUIRE(mha_attention_create_int8(&c.config, &cw, opt, &a) == MHA_OK);
      RandomWeights wide = d.w;
      wide.q = coded.q.widened();
      wide.k = coded.k.widened();
      wide.v = coded.v.widened();
      wide.o = coded.o.widened();
      const Handle fp32(c.config, wide.view(), nullptr);
      CHECK(same_bits(forward(a, c, d), forward(fp32.a, c, d)));
      mha_attention_destroy(a);
    }
    // The codes create makes, given back: the same object.
    const CodedWeights same(c, d.w);
    const mha_int8_weights sw = same.view();
    REQUIRE(mha_attention_create_int8(&c.config, &sw, &o, &a) == MHA_OK);
    const Handle made(c.config, given, &o);
    CHECK(same_bits(forward(a, c, d), forward(made.a, c, d)));
    mha_attention_destroy(a);
  }
}

TEST_CASE("mha_attention_create_int8 checks its arguments and writes nothing on failure",
          "[quant][attention]") {
  const AttentionCase c = quant_case(32, 4, 0, 0, 1, 6, 6, 43);
  const CaseData d(c);
  const CodedWeights coded(c, d.w);
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  const auto fails = [&](const mha_int8_weights& w, const mha_attention_options* o,
                         mha_status status, const char* word) {
    REQUIRE(mha_attention_create_int8(&c.config, &w, o, &attn) == status);
    CHECK(std::string(mha_last_error()).find(word) != std::string::npos);
    REQUIRE(attn == sentinel);
  };
  mha_int8_weights w = coded.view();
  w.struct_size = 8;
  fails(w, nullptr, MHA_INVALID_ARGUMENT, "struct_size");
  w = coded.view();
  w.v_codes = nullptr;
  fails(w, nullptr, MHA_INVALID_ARGUMENT, "v_codes");
  w = coded.view();
  w.out_scales = nullptr;
  fails(w, nullptr, MHA_INVALID_ARGUMENT, "out_scales");
  std::vector<float> bad = coded.k.scales;
  for (const float x : {NAN, INFINITY}) {
    bad[3] = x;
    w = coded.view();
    w.k_scales = bad.data();
    fails(w, nullptr, MHA_INVALID_ARGUMENT, "k_scales[3]");
  }
  w = coded.view();
  mha_attention_options o = quant_options();
  o.weight_format = MHA_WEIGHTS_COMPUTE;
  fails(w, &o, MHA_INVALID_ARGUMENT, "weight_format");
  o = quant_options({MHA_WEIGHTS_INT4, 0});
  fails(w, &o, MHA_INVALID_ARGUMENT, "weight_format");
  o = quant_options({MHA_WEIGHTS_INT8, 32});
  fails(w, &o, MHA_INVALID_ARGUMENT, "weight_group");
  REQUIRE(mha_attention_create_int8(&c.config, nullptr, nullptr, &attn) == MHA_INVALID_ARGUMENT);
  REQUIRE(attn == sentinel);
  // A key width whose codes' bytes wrap size_t: refused before any code is
  // read or anything allocated.
  const mha_config huge{32, 4, std::size_t{1} << 62, 0, 0};
  const mha_status hs = mha_attention_create_int8(&huge, &w, nullptr, &attn);
  REQUIRE((hs == MHA_INVALID_ARGUMENT || hs == MHA_OUT_OF_MEMORY));
  REQUIRE(attn == sentinel);
}
