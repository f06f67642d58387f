// Objects with int8 activations (W8A8: mha_attention_options'
// MHA_ACTIVATIONS_INT8 with int8 weights), fp32 and bf16 compute: the error
// against a float64 fake-quant reference (each projection's input rows
// quantized per token, the weights per output row) and against the
// unquantized layer; bits that do not depend on the thread count or on how
// KV-cache steps chunk a sequence; codes given equal codes made at create;
// the option checks and old struct sizes. The int8 products' own bits
// against their emulation are test_gemm_i8's.
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "attention/attention_case.hpp"
#include "attention/projection/projection.hpp"
#include "attention/quant_case.hpp"
#include "support/attention_reference.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::AttentionCase;
using mha::test::CaseData;
using mha::test::forward;
using mha::test::Handle;
using mha::test::quant_case;
using mha::test::RandomWeights;
using mha::test::same_bits;

// The weight formats int8 activations take: int8 per row or in groups,
// int4 in groups or per row, uint4 (with zero points) in groups.
struct Format {
  mha_weight_format f;
  std::size_t group;
};
constexpr Format kFormats[] = {{MHA_WEIGHTS_INT8, 0},
                               {MHA_WEIGHTS_INT8, 32},
                               {MHA_WEIGHTS_INT4, 128},
                               {MHA_WEIGHTS_INT4, 0},
                               {MHA_WEIGHTS_UINT4, 64}};

mha_attention_options w8a8(mha_dtype compute = MHA_FP32, Format f = kFormats[0]) {
  mha_attention_options o{};
  o.struct_size = sizeof(mha_attention_options);
  o.compute = compute;
  o.weight_format = f.f;
  o.weight_group = f.group;
  o.activations = MHA_ACTIVATIONS_INT8;
  return o;
}

// A weight [out x in] as the object quantizes it, widened: (code - zero
// point) * scale.
std::vector<double> dequantized(Format f, const std::vector<float>& w, std::size_t out,
                                std::size_t in) {
  const auto type = f.f == MHA_WEIGHTS_INT8   ? mha::detail::QuantCodes::int8
                    : f.f == MHA_WEIGHTS_INT4 ? mha::detail::QuantCodes::int4
                                              : mha::detail::QuantCodes::uint4;
  const std::size_t groups = mha::detail::quant_groups(in, f.group);
  const std::size_t len = groups == 1 ? in : f.group;
  std::vector<std::int8_t> codes(out * in);
  std::vector<float> scales(out * groups), zeros(out * groups, 0.0f);
  mha::detail::quantize_rows(type, f.group, out, in, w.data(), codes.data(), scales.data(),
                             zeros.data(), "w");
  std::vector<double> r(w.size());
  for (std::size_t i = 0; i < r.size(); ++i) {
    const std::size_t g = i / in * groups + i % in / len;
    r[i] = double((float(codes[i]) - zeros[g]) * scales[g]);
  }
  return r;
}

// rows x in (ld in) projected by w [out x in] and bias: y = x̂·wᵀ + b, with
// x̂ each row fake-quantized per token in float64 when `quant`.
std::vector<double> project(const double* x, std::size_t rows, std::size_t in,
                            const std::vector<double>& w, const std::vector<float>& b,
                            std::size_t out, bool quant) {
  std::vector<double> y(rows * out);
  std::vector<double> xr(in);
  for (std::size_t i = 0; i < rows; ++i) {
    double amax = 0;
    for (std::size_t p = 0; p < in; ++p) amax = std::max(amax, std::fabs(x[i * in + p]));
    const double s = amax / 127;
    for (std::size_t p = 0; p < in; ++p) {
      xr[p] = !quant ? x[i * in + p] : s > 0 ? std::nearbyint(x[i * in + p] / s) * s : 0.0;
    }
    for (std::size_t j = 0; j < out; ++j) {
      double acc = b.empty() ? 0.0 : b[j];
      for (std::size_t p = 0; p < in; ++p) acc += xr[p] * w[j * in + p];
      y[i * out + j] = acc;
    }
  }
  return y;
}

// The layer in float64 on weights ww (quantized or not): causal self or
// cross attention, GQA, no other mask; `quant`: fake-quant inputs.
std::vector<double> layer(const AttentionCase& c, const CaseData& d,
                          const std::vector<double> (&ww)[4], bool quant) {
  const std::size_t E = c.config.embed_dim, H = c.config.num_heads;
  const std::size_t KVH = c.config.num_kv_heads ? c.config.num_kv_heads : H, hd = E / H;
  const std::size_t kdim = CaseData::kdim(c), vdim = CaseData::vdim(c), kv = KVH * hd;
  const std::size_t L = c.q_len, S = c.kv_len;
  std::vector<double> out(c.batch * L * E);
  for (std::size_t b = 0; b < c.batch; ++b) {
    const std::vector<double> xq(d.query.begin() + b * L * E, d.query.begin() + (b + 1) * L * E);
    const std::vector<double> xk(d.key.begin() + b * S * kdim, d.key.begin() + (b + 1) * S * kdim);
    const std::vector<double> xv(d.value.begin() + b * S * vdim,
                                 d.value.begin() + (b + 1) * S * vdim);
    const auto q = project(xq.data(), L, E, ww[0], d.w.qb, E, quant);
    const auto k = project(xk.data(), S, kdim, ww[1], d.w.kb, kv, quant);
    const auto v = project(xv.data(), S, vdim, ww[2], d.w.vb, kv, quant);
    std::vector<double> merged(L * E, 0.0);
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t g = h / (H / KVH);
      for (std::size_t i = 0; i < L; ++i) {
        std::vector<double> z(S);
        double zmax = -INFINITY;
        for (std::size_t j = 0; j < S; ++j) {
          double dot = 0;
          for (std::size_t e = 0; e < hd; ++e)
            dot += q[i * E + h * hd + e] * k[j * kv + g * hd + e];
          z[j] = c.causal && j > i + (S - L) ? -INFINITY : dot / std::sqrt(double(hd));
          zmax = std::max(zmax, z[j]);
        }
        double sum = 0;
        for (double& x : z) sum += (x = std::exp(x - zmax));
        for (std::size_t j = 0; j < S; ++j) {
          for (std::size_t e = 0; e < hd; ++e) {
            merged[i * E + h * hd + e] += z[j] / sum * v[j * kv + g * hd + e];
          }
        }
      }
    }
    const auto o = project(merged.data(), L, E, ww[3], d.w.ob, E, quant);
    std::copy(o.begin(), o.end(), out.begin() + b * L * E);
  }
  return out;
}

double scaled_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}
double scaled_error(const std::vector<double>& got, const std::vector<double>& want) {
  return scaled_error(std::vector<float>(got.begin(), got.end()), want);
}

// Self and cross attention, GQA, one query row, widths off every strip
// width, and an input width past the fp32 GEMM's K block.
std::vector<AttentionCase> cases() {
  return {quant_case(64, 4, 0, 0, 2, 9, 9, 11), quant_case(48, 3, 1, 0, 1, 1, 5, 12),
          quant_case(40, 5, 0, 23, 3, 4, 6, 13), quant_case(96, 8, 2, 0, 1, 17, 17, 14),
          quant_case(24, 2, 0, 1100, 2, 3, 2, 15)};
}

}  // namespace

TEST_CASE("int8 activations: the error against float64 fake-quant and the unquantized layer",
          "[w8a8][attention]") {
  for (const mha_dtype compute : {MHA_FP32, MHA_BF16}) {
    for (const Format f : kFormats) {
      const mha_attention_options o = w8a8(compute, f);
      for (const AttentionCase& c : cases()) {
        CAPTURE(static_cast<int>(compute), static_cast<int>(f.f), f.group, c.config.embed_dim,
                c.config.num_heads, c.config.num_kv_heads, c.config.kdim, c.batch, c.q_len,
                c.kv_len);
        const CaseData d(c);
        const std::size_t E = c.config.embed_dim, kv = d.w.k.size() / CaseData::kdim(c);
        const std::vector<double> exact[] = {std::vector<double>(d.w.q.begin(), d.w.q.end()),
                                             std::vector<double>(d.w.k.begin(), d.w.k.end()),
                                             std::vector<double>(d.w.v.begin(), d.w.v.end()),
                                             std::vector<double>(d.w.o.begin(), d.w.o.end())};
        const std::vector<double> quant[] = {
            dequantized(f, d.w.q, E, E), dequantized(f, d.w.k, kv, CaseData::kdim(c)),
            dequantized(f, d.w.v, kv, CaseData::vdim(c)), dequantized(f, d.w.o, E, E)};
        const std::vector<double> truth = layer(c, d, exact, false);
        const std::vector<double> fake = layer(c, d, quant, true);
        const Handle h(c.config, d.w.view(), &o);
        const std::vector<float> out = forward(h.a, c, d);
        const double ours = scaled_error(out, truth), theirs = scaled_error(fake, truth);
        // fp32: the fake-quant reference's own error, within the 1.1x
        // (an input code may round the other way in fp32, a step of 1/254 of
        // the row's range; measured 1.00x, and 0.4e-7 to 1.9e-7 from the
        // fake-quant result). bf16: Q, K, V and P rounded to bf16 (2^-9
        // relative each) add to the int8 error (measured up to 1.6e-3).
        if (compute == MHA_FP32) {
          CHECK(ours <= 1.1 * theirs);
          CHECK(scaled_error(out, fake) <= 0.25 * theirs);
        } else {
          CHECK(ours <= theirs + 5e-3);
        }
        CHECK(theirs > 1e-4);  // the inputs and weights really were quantized
      }
    }
  }
}

TEST_CASE("int8 activations: the same bits at any thread count and KV-step chunking",
          "[w8a8][attention]") {
  // int8 per row, and int4 or uint4 in groups: the two kernels of each set,
  // the second with and without zero points.
  for (const auto& [compute, f] :
       {std::pair{MHA_FP32, kFormats[0]}, std::pair{MHA_BF16, kFormats[2]},
        std::pair{MHA_FP32, kFormats[4]}}) {
    const mha_attention_options o = w8a8(compute, f);
    for (const AttentionCase& c : cases()) {
      const CaseData d(c);
      const Handle h(c.config, d.w.view(), &o);
      mha_set_num_threads(1);
      const std::vector<float> one = forward(h.a, c, d);
      for (const std::size_t threads : {2, 3}) {
        mha_set_num_threads(threads);
        CHECK(same_bits(forward(h.a, c, d), one));
      }
      mha_set_num_threads(0);
    }
    // A sequence stepped through a cache in chunks of 5, 1, 1 and 3 rows,
    // and in one chunk of 10: each row's result does not depend on its
    // chunk-mates (the activations are quantized per row).
    const AttentionCase c = quant_case(64, 4, 2, 0, 2, 1, 1, 21);
    const CaseData d(c);
    const Handle h(c.config, d.w.view(), &o);
    const std::size_t E = 64, batch = 2, total = 10;
    const std::vector<float> x = mha::test::random_vector(batch * total * E, 30);
    std::vector<float> whole(x.size(), NAN), parts(x.size(), NAN);
    mha_kv_cache *c1 = nullptr, *c2 = nullptr;
    REQUIRE(mha_kv_cache_create(h.a, batch, 16, &c1) == MHA_OK);
    REQUIRE(mha_kv_cache_create(h.a, batch, 16, &c2) == MHA_OK);
    REQUIRE(mha_attention_step(h.a, c1, total, x.data(), x.data(), x.data(), whole.data()) ==
            MHA_OK);
    // Rows [t0, t0 + n) of each sequence, gathered for a step of n rows.
    std::size_t t0 = 0;
    for (const std::size_t n : {5, 1, 1, 3}) {
      std::vector<float> xs(batch * n * E), ys(xs.size(), NAN);
      for (std::size_t b = 0; b < batch; ++b) {
        std::copy_n(x.data() + (b * total + t0) * E, n * E, xs.data() + b * n * E);
      }
      REQUIRE(mha_attention_step(h.a, c2, n, xs.data(), xs.data(), xs.data(), ys.data()) == MHA_OK);
      for (std::size_t b = 0; b < batch; ++b) {
        std::copy_n(ys.data() + b * n * E, n * E, parts.data() + (b * total + t0) * E);
      }
      t0 += n;
    }
    CHECK(same_bits(whole, parts));
    mha_kv_cache_destroy(c1);
    mha_kv_cache_destroy(c2);
  }
}

TEST_CASE("int8 activations: codes given give the bits of codes made at create",
          "[w8a8][attention]") {
  for (const mha_dtype compute : {MHA_FP32, MHA_BF16}) {
    const mha_attention_options o = w8a8(compute);
    for (const AttentionCase& c : cases()) {
      const CaseData d(c);
      const std::size_t E = c.config.embed_dim, kdim = CaseData::kdim(c);
      const std::size_t vdim = CaseData::vdim(c), kv = d.w.k.size() / kdim;
      struct Coded {
        std::vector<std::int8_t> codes;
        std::vector<float> scales;
      } w[4];
      const std::vector<float>* src[] = {&d.w.q, &d.w.k, &d.w.v, &d.w.o};
      const std::size_t out[] = {E, kv, kv, E}, in[] = {E, kdim, vdim, E};
      for (std::size_t i = 0; i < 4; ++i) {
        w[i].codes.resize(out[i] * in[i]);
        w[i].scales.resize(out[i]);
        mha::detail::quantize_rows(mha::detail::QuantCodes::int8, 0, out[i], in[i], src[i]->data(),
                                   w[i].codes.data(), w[i].scales.data(), nullptr, "w");
      }
      const auto bias = [](const std::vector<float>& b) { return b.empty() ? nullptr : b.data(); };
      const mha_int8_weights cw{sizeof(mha_int8_weights),
                                w[0].codes.data(),
                                w[1].codes.data(),
                                w[2].codes.data(),
                                w[3].codes.data(),
                                w[0].scales.data(),
                                w[1].scales.data(),
                                w[2].scales.data(),
                                w[3].scales.data(),
                                bias(d.w.qb),
                                bias(d.w.kb),
                                bias(d.w.vb),
                                bias(d.w.ob)};
      mha_attention* a = nullptr;
      REQUIRE(mha_attention_create_int8(&c.config, &cw, &o, &a) == MHA_OK);
      const Handle made(c.config, d.w.view(), &o);
      CHECK(same_bits(forward(a, c, d), forward(made.a, c, d)));
      mha_attention_destroy(a);
    }
  }
}

TEST_CASE("int8 activations: options are checked, and earlier structs still work",
          "[w8a8][attention]") {
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
  mha_attention_options o = w8a8();
  o.activations = static_cast<mha_activations>(5);
  fails(o, MHA_INVALID_ARGUMENT, "activations");
  o = w8a8();
  o.weight_format = MHA_WEIGHTS_COMPUTE;
  fails(o, MHA_INVALID_ARGUMENT, "activations");
  o = w8a8(MHA_FP32, {MHA_WEIGHTS_INT4, 16});
  fails(o, MHA_INVALID_ARGUMENT, "weight_group");
  // The second version's struct (up to weight_group): the bytes past it are
  // its padding, which may hold anything; it reads as float activations.
  alignas(mha_attention_options) unsigned char bytes[sizeof(mha_attention_options)];
  std::memset(bytes, 0xA5, sizeof bytes);
  mha_attention_options second = w8a8();
  second.weight_format = MHA_WEIGHTS_INT8;
  second.struct_size = offsetof(mha_attention_options, activations);
  std::memcpy(bytes, &second, offsetof(mha_attention_options, activations));
  std::memcpy(&o, bytes, sizeof o);
  mha_attention_options int8_weights = o;
  std::memset(&int8_weights, 0, sizeof int8_weights);
  int8_weights.struct_size = sizeof int8_weights;
  int8_weights.weight_format = MHA_WEIGHTS_INT8;
  const Handle old(c.config, w, &o), plain(c.config, w, &int8_weights);
  CHECK(same_bits(forward(old.a, c, d), forward(plain.a, c, d)));
  CHECK(std::string(mha_kernel_name(MHA_INT8)) != "invalid");
}

TEST_CASE("int8 activations: MHA_I8_KERNEL names the set that serves, or fails the create",
          "[w8a8][attention]") {
  // ctest's i8/<set>/test_attention runs set it (tests/CMakeLists.txt).
  if (const char* env = std::getenv("MHA_I8_KERNEL"); env != nullptr && *env != '\0') {
    CHECK(std::string(mha_kernel_name(MHA_INT8)) == env);
    return;
  }
  // A name no build has: the create fails cleanly and names the variable.
  const AttentionCase c = quant_case(32, 4, 0, 0, 1, 6, 6, 41);
  const CaseData d(c);
  const mha_weights w = d.w.view();
  const mha_attention_options o = w8a8();
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  REQUIRE(setenv("MHA_I8_KERNEL", "no_such_set", 1) == 0);
  const mha_status status = mha_attention_create_ex(&c.config, &w, &o, &attn);
  const std::string message = mha_last_error(), name = mha_kernel_name(MHA_INT8);
  REQUIRE(unsetenv("MHA_I8_KERNEL") == 0);
  CHECK(status == MHA_UNSUPPORTED);
  CHECK(message.find("MHA_I8_KERNEL=no_such_set") != std::string::npos);
  CHECK(attn == sentinel);
  CHECK(name == "invalid");
  const Handle ok(c.config, w, &o);
  CHECK(std::string(mha_kernel_name(MHA_INT8)) != "invalid");
}
