// The library against the double-precision oracle over random problems:
// every mask kind, self and cross attention, kdim/vdim != E, GQA/MQA, with
// and without biases, weights none / per head / averaged.
//
// Tolerance: scaled_error (max abs error / max(1, max |ref|)) <= 1e-5. The
// float pipeline rounds at each stage (projection dots, score dots, softmax
// over up to 1024 keys, context and out-projection sums). Measured worst case
// over these problems (fused engine, every ISA, x86 and aarch64): 5.2e-7 on
// outputs, 7.6e-8 on weights, the same as the plain-loop engine it replaced;
// 1e-5 leaves room for other summation orders and exp polynomials while any
// indexing or masking slip errs by O(0.01..1).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <mha/attention.hpp>
#include <random>
#include <sstream>

#include "attention/attention_case.hpp"

using namespace mha::test;

namespace {

constexpr double kTolerance = 1e-5;
// Largest errors seen in this process, printed at the end of the random test
// so the margin under kTolerance stays visible in the test log.
double worst_out = 0, worst_weights = 0;

std::string describe(const AttentionCase& c) {
  std::ostringstream s;
  s << "E=" << c.config.embed_dim << " H=" << c.config.num_heads
    << " kv_heads=" << c.config.num_kv_heads << " kdim=" << c.config.kdim
    << " vdim=" << c.config.vdim << " batch=" << c.batch << " q_len=" << c.q_len
    << " kv_len=" << c.kv_len << (c.self ? " self" : " cross") << (c.causal ? " causal" : "")
    << (c.padding ? " padding" : "") << " additive=" << c.additive
    << " weights=" << static_cast<int>(c.weights_out) << " biases=" << c.biases
    << " seed=" << c.seed;
  return s.str();
}

// Lengths 1..300, biased towards short ones where edge handling lives.
std::size_t random_length(std::mt19937_64& rng) {
  std::uniform_int_distribution<int> pick(0, 3);
  switch (pick(rng)) {
    case 0:
      return std::uniform_int_distribution<std::size_t>(1, 8)(rng);
    case 1:
      return std::uniform_int_distribution<std::size_t>(9, 64)(rng);
    default:
      return std::uniform_int_distribution<std::size_t>(65, 300)(rng);
  }
}

AttentionCase random_case(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto any = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };
  static const std::size_t heads[] = {1, 2, 3, 4, 8};
  // 80 (capped to 128 / H: 80, 64, 42, 32, 16) reaches P·V's N edges past
  // one AVX-512 tile of V columns (80 = 64 + 16, 42 = 32 + 10).
  static const std::size_t head_dims[] = {1, 3, 4, 8, 16, 32, 80};
  AttentionCase c;
  c.seed = seed;
  const std::size_t H = heads[any(5)];
  std::size_t d = head_dims[any(7)];
  if (H * d > 128) d = 128 / H;
  c.config.embed_dim = H * d;
  c.config.num_heads = H;
  // kv heads: all, one (MQA), or another divisor of H (GQA).
  std::vector<std::size_t> divisors;
  for (std::size_t k = 1; k <= H; ++k)
    if (H % k == 0) divisors.push_back(k);
  const std::size_t kvh = divisors[any(static_cast<int>(divisors.size()))];
  c.config.num_kv_heads = (kvh == H && any(2) == 0) ? 0 : kvh;
  c.batch = 1 + any(3);
  c.self = any(3) == 0;
  if (!c.self) {
    if (any(2)) c.config.kdim = 1 + any(48);
    if (any(2)) c.config.vdim = 1 + any(48);
  }
  c.q_len = random_length(rng);
  c.kv_len = c.self ? c.q_len : random_length(rng);
  c.causal = any(3) == 0;
  c.padding = any(3) == 0;
  c.additive = any(3);
  c.weights_out = static_cast<WeightsOut>(any(3));
  c.biases = any(4) != 0;
  return c;
}

void check_case(const AttentionCase& c) {
  INFO(describe(c));
  const CaseData data(c);
  const mha::MultiheadAttention attn(c.config, data.w.view());
  const CaseResult ours = run_library(attn, c, data);
  const ReferenceResult ref = run_reference(c, data);
  const double out_err = scaled_error(ours.out, ref.out);
  CHECK(out_err <= kTolerance);
  worst_out = std::max(worst_out, out_err);
  if (c.weights_out != WeightsOut::none) {
    const double w_err = scaled_error(ours.weights, ref.weights);
    CHECK(w_err <= kTolerance);
    worst_weights = std::max(worst_weights, w_err);
  }
}

}  // namespace

TEST_CASE("random problems match the double oracle", "[attention][oracle]") {
  const std::size_t n = scaled(80, 8);
  for (std::size_t i = 0; i < n; ++i) check_case(random_case(1000 + i));
  std::printf("%zu random problems: largest scaled error out %.3g, weights %.3g (limit %.0e)\n", n,
              worst_out, worst_weights, kTolerance);
}

TEST_CASE("long sequences match the double oracle", "[attention][oracle]") {
  AttentionCase c;
  c.config = mha_config{32, 2, 0, 0, 0};
  c.q_len = 700;
  c.kv_len = 1024;
  c.causal = true;
  c.padding = true;
  c.weights_out = WeightsOut::averaged;
  c.seed = 7;
  check_case(c);
  if (full_scale()) {
    AttentionCase s;
    s.config = mha_config{64, 4, 0, 0, 2};
    s.q_len = s.kv_len = 1000;
    s.self = true;
    s.additive = 2;
    s.weights_out = WeightsOut::per_head;
    s.seed = 8;
    check_case(s);
  }
}

TEST_CASE("every mask kind alone and combined matches the oracle", "[attention][oracle]") {
  for (int causal = 0; causal < 2; ++causal)
    for (int padding = 0; padding < 2; ++padding)
      for (int additive = 0; additive < 3; ++additive)
        for (int weights = 0; weights < 3; ++weights) {
          AttentionCase c;
          c.config = mha_config{12, 3, 5, 7, 0};
          c.batch = 2;
          c.q_len = 5;
          c.kv_len = 9;
          c.causal = causal != 0;
          c.padding = padding != 0;
          c.additive = additive;
          c.weights_out = static_cast<WeightsOut>(weights);
          c.seed = 50 + static_cast<std::uint64_t>(((causal * 2 + padding) * 3 + additive) * 3 +
                                                   weights);
          check_case(c);
        }
}

TEST_CASE("GQA and MQA match the oracle", "[attention][oracle]") {
  for (std::size_t kvh : {1, 2, 4, 8}) {
    AttentionCase c;
    c.config = mha_config{64, 8, 0, 0, kvh};
    c.batch = 2;
    c.q_len = 17;
    c.kv_len = 33;
    c.causal = true;
    c.weights_out = WeightsOut::per_head;
    c.seed = 90 + kvh;
    check_case(c);
  }
}
