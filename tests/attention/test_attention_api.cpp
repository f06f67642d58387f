// The API's contract: argument errors (one case each, nothing written),
// extreme logits, fully masked rows, the C++ wrapper, and threading.
#include <mha/mha.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mha/attention.hpp>
#include <mha/isa.hpp>
#include <string>
#include <thread>
#include <vector>

#include "attention/attention_case.hpp"

using namespace mha::test;

namespace {

constexpr std::size_t kHuge = std::numeric_limits<std::size_t>::max() / 2 + 1;

struct Fixture {
  mha_config config{8, 2, 0, 0, 0};
  RandomWeights w{config, true, 3};
  std::vector<float> x = random_vector(2 * 3 * 8, 4);
  mha_weights view = w.view();
  mha_attention* attn = nullptr;
  Fixture() { REQUIRE(mha_attention_create(&config, &view, &attn) == MHA_OK); }
  ~Fixture() { mha_attention_destroy(attn); }
};

// Expects `status` and a message containing `needle`.
void expect_error(mha_status got, mha_status want, const std::string& needle) {
  CHECK(got == want);
  const std::string msg = mha_last_error();
  INFO("message: " << msg);
  CHECK(msg.find(needle) != std::string::npos);
}

void expect_create_error(const mha_config* c, const mha_weights* w, const std::string& needle,
                         mha_status want = MHA_INVALID_ARGUMENT) {
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x1234});
  mha_attention* out = sentinel;
  expect_error(mha_attention_create(c, w, &out), want, needle);
  CHECK(out == sentinel);  // nothing written
}

}  // namespace

TEST_CASE("create rejects each invalid argument", "[attention][errors]") {
  const mha_config good{8, 2, 0, 0, 0};
  const RandomWeights rw(good, true, 1);
  const mha_weights w = rw.view();
  mha_attention* out = nullptr;

  expect_create_error(nullptr, &w, "config");
  expect_create_error(&good, nullptr, "weights");
  expect_error(mha_attention_create(&good, &w, nullptr), MHA_INVALID_ARGUMENT, "out");

  mha_config c = good;
  c.embed_dim = 0;
  expect_create_error(&c, &w, "embed_dim");
  c = good;
  c.num_heads = 0;
  expect_create_error(&c, &w, "num_heads");
  c = good;
  c.num_heads = 3;  // 8 % 3 != 0
  expect_create_error(&c, &w, "multiple of num_heads (3)");
  c = good;
  c.num_kv_heads = 3;  // 2 % 3 != 0
  expect_create_error(&c, &w, "num_kv_heads");
  c = mha_config{kHuge, 1, 0, 0, 0};  // E * E overflows size_t
  expect_create_error(&c, &w, "overflows");
  c = good;
  c.kdim = kHuge;  // kv_dim * kdim overflows
  expect_create_error(&c, &w, "k_weight");

  for (int which = 0; which < 4; ++which) {
    mha_weights bad = w;
    const char* name = nullptr;
    switch (which) {
      case 0:
        bad.q_weight = nullptr, name = "q_weight";
        break;
      case 1:
        bad.k_weight = nullptr, name = "k_weight";
        break;
      case 2:
        bad.v_weight = nullptr, name = "v_weight";
        break;
      default:
        bad.out_weight = nullptr, name = "out_weight";
    }
    expect_create_error(&good, &bad, name);
  }
  // Null biases are not an error: they mean "no bias".
  const RandomWeights no_bias(good, false, 1);
  const mha_weights no_bias_view = no_bias.view();
  REQUIRE(mha_attention_create(&good, &no_bias_view, &out) == MHA_OK);
  mha_attention_destroy(out);
}

TEST_CASE("forward rejects each invalid argument and writes nothing", "[attention][errors]") {
  Fixture f;
  const float* x = f.x.data();
  std::vector<float> out(f.x.size(), 42.f), w(2 * 2 * 3 * 3, 42.f);
  auto call = [&](const mha_attention* a, std::size_t b, std::size_t l, std::size_t s,
                  const float* q, const float* k, const float* v, float* o) {
    return mha_attention_forward(a, b, l, s, q, k, v, nullptr, o, w.data(), 0);
  };
  expect_error(call(nullptr, 2, 3, 3, x, x, x, out.data()), MHA_INVALID_ARGUMENT, "attn");
  expect_error(call(f.attn, 0, 3, 3, x, x, x, out.data()), MHA_INVALID_ARGUMENT, "batch");
  expect_error(call(f.attn, 2, 0, 3, x, x, x, out.data()), MHA_INVALID_ARGUMENT, "q_len");
  expect_error(call(f.attn, 2, 3, 0, x, x, x, out.data()), MHA_INVALID_ARGUMENT, "kv_len");
  expect_error(call(f.attn, 2, 3, 3, nullptr, x, x, out.data()), MHA_INVALID_ARGUMENT, "query");
  expect_error(call(f.attn, 2, 3, 3, x, nullptr, x, out.data()), MHA_INVALID_ARGUMENT, "key");
  expect_error(call(f.attn, 2, 3, 3, x, x, nullptr, out.data()), MHA_INVALID_ARGUMENT, "value");
  expect_error(call(f.attn, 2, 3, 3, x, x, x, nullptr), MHA_INVALID_ARGUMENT, "out");
  expect_error(call(f.attn, kHuge, 3, 3, x, x, x, out.data()), MHA_INVALID_ARGUMENT, "overflows");
  // Inputs fit, but batch * H * q_len * kv_len does not.
  expect_error(call(f.attn, 1, std::size_t{1} << 40, std::size_t{1} << 40, x, x, x, out.data()),
               MHA_INVALID_ARGUMENT, "overflows");
  for (float v : out) REQUIRE(v == 42.f);
  for (float v : w) REQUIRE(v == 42.f);
}

TEST_CASE("allocation failure gives MHA_OUT_OF_MEMORY", "[attention][errors]") {
#if defined(MHA_ASAN)
  // ASan's throwing operator new reports a failed allocation and aborts (even
  // with allocator_may_return_null=1) instead of throwing std::bad_alloc.
  WARN("skipped under AddressSanitizer: its operator new aborts instead of throwing");
  return;
#endif
  // E = 2^28: E*E floats = 2^58 bytes fits size_t but no address space. The
  // engine allocates its copy before reading the caller's arrays, so the
  // small arrays below are never read past their end.
  const mha_config c{std::size_t{1} << 28, 1, 1, 1, 0};
  const std::vector<float> small(16, 0.f);
  const mha_weights w{small.data(), small.data(), small.data(), small.data(),
                      nullptr,      nullptr,      nullptr,      nullptr};
  expect_create_error(&c, &w, "memory", MHA_OUT_OF_MEMORY);
}

TEST_CASE("the C++ class throws mha::Error and wraps the same engine", "[attention][api]") {
  const mha_config c{8, 2, 5, 6, 1};
  const RandomWeights rw(c, true, 5);
  try {
    mha::MultiheadAttention bad(mha_config{8, 3, 0, 0, 0}, rw.view());
    FAIL("no exception");
  } catch (const mha::Error& e) {
    CHECK(e.status() == MHA_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("num_heads") != std::string::npos);
  }
  mha::MultiheadAttention attn(c, rw.view());
  CHECK(attn.embed_dim() == 8);
  CHECK(attn.num_heads() == 2);
  CHECK(attn.num_kv_heads() == 1);
  CHECK(attn.head_dim() == 4);
  CHECK(attn.kdim() == 5);
  CHECK(attn.vdim() == 6);

  const auto q = random_vector(2 * 3 * 8, 1), k = random_vector(2 * 4 * 5, 2),
             v = random_vector(2 * 4 * 6, 3);
  std::vector<float> out_cpp(2 * 3 * 8), out_c(2 * 3 * 8);
  attn.forward(2, 3, 4, q.data(), k.data(), v.data(), nullptr, out_cpp.data());
  REQUIRE(mha_attention_forward(attn.handle(), 2, 3, 4, q.data(), k.data(), v.data(), nullptr,
                                out_c.data(), nullptr, 0) == MHA_OK);
  CHECK(std::memcmp(out_cpp.data(), out_c.data(), out_c.size() * sizeof(float)) == 0);
  CHECK_THROWS_AS(attn.forward_self(2, 3, q.data(), nullptr, out_cpp.data()), mha::Error);
  CHECK_THROWS_AS(attn.forward(0, 3, 4, q.data(), k.data(), v.data(), nullptr, out_cpp.data()),
                  mha::Error);

  mha::MultiheadAttention moved(std::move(attn));
  CHECK(moved.embed_dim() == 8);
  CHECK(attn.handle() == nullptr);  // NOLINT(bugprone-use-after-move): checked on purpose
  CHECK_THROWS_AS(attn.embed_dim(), mha::Error);
}

TEST_CASE("self-attention through forward_self equals forward(x, x, x)", "[attention][api]") {
  const mha_config c{16, 4, 0, 0, 0};
  const RandomWeights rw(c, true, 6);
  const mha::MultiheadAttention attn(c, rw.view());
  const auto x = random_vector(3 * 7 * 16, 7);
  std::vector<float> a(x.size()), b(x.size()), wa(3 * 7 * 7), wb(3 * 7 * 7);
  const mha_mask causal{1, nullptr, nullptr, 0};
  attn.forward_self(3, 7, x.data(), &causal, a.data(), wa.data(), true);
  attn.forward(3, 7, 7, x.data(), x.data(), x.data(), &causal, b.data(), wb.data(), true);
  CHECK(a == b);
  CHECK(wa == wb);
}

TEST_CASE("extreme logits (+-1e4) stay finite and exact", "[attention][extreme]") {
  // Zero queries make every score exactly 0, so the logits are exactly the
  // additive mask: +-1e4 and neighbours, all representable in float.
  AttentionCase c;
  c.config = mha_config{8, 2, 0, 0, 0};
  c.q_len = 4;
  c.kv_len = 6;
  c.weights_out = WeightsOut::per_head;
  CaseData d(c);
  std::fill(d.query.begin(), d.query.end(), 0.f);
  std::fill(d.w.qb.begin(), d.w.qb.end(), 0.f);
  const float rows[4][6] = {{1e4f, 1e4f - 1, -1e4f, 1e4f - 2, -1e4f, 0.f},
                            {-1e4f, -1e4f, -1e4f, -1e4f, -1e4f, -1e4f},
                            {1e4f, -1e4f, 1e4f, -1e4f, 1e4f, -1e4f},
                            {-1e4f, -1e4f + 3, -1e4f, -1e4f, -1e4f, -1e4f + 1}};
  d.additive.assign(&rows[0][0], &rows[0][0] + 24);
  d.mask.additive = d.additive.data();
  d.has_mask = true;
  const mha::MultiheadAttention attn(c.config, d.w.view());
  const CaseResult ours = run_library(attn, c, d);
  const ReferenceResult ref = run_reference(c, d);
  CHECK(scaled_error(ours.out, ref.out) <= 1e-5);
  CHECK(scaled_error(ours.weights, ref.weights) <= 1e-5);

  // Large inputs: logits of order 1e4 computed through the projections. Their
  // float rounding (~1e4 * 2^-24 per term) makes weights differ from the
  // oracle by up to ~1e-3 relative, so check sanity: finite, rows sum to 1,
  // and each row's largest weight is on the oracle's key.
  AttentionCase big;
  big.config = mha_config{4, 1, 0, 0, 0};
  big.q_len = 5;
  big.kv_len = 7;
  big.weights_out = WeightsOut::per_head;
  CaseData bd(big);
  for (float& x : bd.query) x *= 300.f;
  for (float& x : bd.key) x *= 300.f;
  const mha::MultiheadAttention battn(big.config, bd.w.view());
  const CaseResult bo = run_library(battn, big, bd);
  const ReferenceResult br = run_reference(big, bd);
  for (std::size_t i = 0; i < 5; ++i) {
    double sum = 0;
    std::size_t arg = 0, ref_arg = 0;
    for (std::size_t j = 0; j < 7; ++j) {
      REQUIRE(std::isfinite(bo.weights[i * 7 + j]));
      sum += bo.weights[i * 7 + j];
      if (bo.weights[i * 7 + j] > bo.weights[i * 7 + arg]) arg = j;
      if (br.weights[i * 7 + j] > br.weights[i * 7 + ref_arg]) ref_arg = j;
    }
    CHECK(sum == Approx(1.0).epsilon(1e-5));
    CHECK(arg == ref_arg);
  }
  for (float x : bo.out) REQUIRE(std::isfinite(x));
}

TEST_CASE("fully masked query rows give zero weights and out = out_bias", "[attention][masked]") {
  AttentionCase c;
  c.config = mha_config{12, 3, 0, 0, 0};
  c.batch = 2;
  c.q_len = 6;
  c.kv_len = 4;  // causal with q_len > kv_len: rows 0 and 1 see no key
  c.causal = true;
  c.padding = true;
  c.additive = 2;
  c.weights_out = WeightsOut::per_head;
  CaseData d(c);
  // Batch 1: every key padded, so all its rows are fully masked.
  std::fill(d.padding.begin() + 4, d.padding.end(), 1);
  // Batch 0, head 2, row 3: -inf on every key, for that head only.
  const float inf = std::numeric_limits<float>::infinity();
  std::fill_n(d.additive.begin() + ((0 * 3 + 2) * 6 + 3) * 4, 4, -inf);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  for (WeightsOut wo : {WeightsOut::per_head, WeightsOut::averaged}) {
    c.weights_out = wo;
    const CaseResult ours = run_library(attn, c, d);
    const ReferenceResult ref = run_reference(c, d);
    CHECK(scaled_error(ours.out, ref.out) <= 1e-5);
    CHECK(scaled_error(ours.weights, ref.weights) <= 1e-5);
    // Rows where every head is masked: out is exactly the out-projection bias.
    auto all_masked_row = [&](std::size_t b, std::size_t i) {
      for (std::size_t e = 0; e < 12; ++e) CHECK(ours.out[(b * 6 + i) * 12 + e] == d.w.ob[e]);
    };
    for (std::size_t i = 0; i < 6; ++i) all_masked_row(1, i);
    all_masked_row(0, 0);
    all_masked_row(0, 1);
    const std::size_t H = wo == WeightsOut::per_head ? 3 : 1;
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < 6; ++i)
        for (std::size_t j = 0; j < 4; ++j) {
          const float wij = ours.weights[((1 * H + h) * 6 + i) * 4 + j];
          CHECK(wij == 0.f);
        }
    if (wo == WeightsOut::per_head)
      for (std::size_t j = 0; j < 4; ++j) CHECK(ours.weights[((0 * 3 + 2) * 6 + 3) * 4 + j] == 0);
  }
}

TEST_CASE("concurrent forwards on one object give identical results", "[attention][threads]") {
  if (!threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user, MHA_TEST_SINGLE_THREAD=1)");
    return;
  }
  AttentionCase c;
  c.config = mha_config{32, 4, 0, 0, 2};
  c.batch = 2;
  c.q_len = 37;
  c.kv_len = 53;
  c.causal = true;
  c.additive = 1;
  c.weights_out = WeightsOut::per_head;
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  const CaseResult expected = run_library(attn, c, d);
  constexpr int kThreads = 4, kRepeats = 10;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      for (int r = 0; r < kRepeats; ++r) {
        const CaseResult got = run_library(attn, c, d);
        if (got.out != expected.out || got.weights != expected.weights) ++mismatches[t];
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < kThreads; ++t) CHECK(mismatches[t] == 0);
}

TEST_CASE("results are bit-identical for 1, 2 and 4 threads", "[attention][threads]") {
  if (!threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user, MHA_TEST_SINGLE_THREAD=1)");
    return;
  }
  AttentionCase c;
  c.config = mha_config{48, 6, 0, 0, 3};
  c.batch = 3;
  c.q_len = 65;
  c.kv_len = 130;
  c.padding = true;
  c.additive = 2;
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view());
  for (WeightsOut wo : {WeightsOut::per_head, WeightsOut::averaged}) {
    c.weights_out = wo;
    mha::set_num_threads(1);
    const CaseResult one = run_library(attn, c, d);
    for (std::size_t t : {2, 4}) {
      mha::set_num_threads(t);
      const CaseResult many = run_library(attn, c, d);
      CHECK(std::memcmp(one.out.data(), many.out.data(), one.out.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(one.weights.data(), many.weights.data(),
                        one.weights.size() * sizeof(float)) == 0);
    }
  }
  mha::set_num_threads(0);
}
