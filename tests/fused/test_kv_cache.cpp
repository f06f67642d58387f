// KV cache and the fused path's decode behaviour: stepping through a sequence
// equals one causal forward over it; split-KV decode is bit-identical at any
// thread count; errors are clear.
//
// Tolerance for step vs forward: both compute the same formula with different
// blockings (the step sees one query block and a different key tiling), so
// they differ only by float rounding in sums of at most kv_len terms of
// magnitude <= 1 (softmax weights) times |v| <= ~2: we allow 2e-5·(1 + |x|),
// about 100x the typical difference seen (2e-7) and far below any real error
// (a wrong mask or offset changes outputs by ~1e-2).
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <memory>
#include <mha/attention.hpp>
#include <mha/kv_cache.hpp>
#include <string>
#include <vector>

#include "attention/kv/kv_type.hpp"
#include "dispatch/dispatch.hpp"
#include "fused/model_weights.hpp"
#include "gemm/kernels.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::random_vector;
using mha::test::scaled;

struct Model : mha::test::ModelWeights {
  std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)> attn{nullptr,
                                                                        mha_attention_destroy};
  Model(std::size_t E, std::size_t H, std::size_t kv_heads, std::uint64_t seed)
      : ModelWeights(E, H, kv_heads, 0, seed) {
    const mha_weights w = view();
    mha_attention* a = nullptr;
    REQUIRE(mha_attention_create(&cfg, &w, &a) == MHA_OK);
    attn.reset(a);
  }
};

using Cache = std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)>;

Cache make_cache(const Model& m, std::size_t batch, std::size_t max_len) {
  mha_kv_cache* c = nullptr;
  REQUIRE(mha_kv_cache_create(m.attn.get(), batch, max_len, &c) == MHA_OK);
  return Cache(c, mha_kv_cache_destroy);
}

// Rows [t0, t0+n) of every batch row of x [B, L, E], as a [B, n, E] block.
std::vector<float> rows(const std::vector<float>& x, std::size_t B, std::size_t L, std::size_t E,
                        std::size_t t0, std::size_t n) {
  std::vector<float> out(B * n * E);
  for (std::size_t b = 0; b < B; ++b) {
    std::copy_n(&x[(b * L + t0) * E], n * E, &out[b * n * E]);
  }
  return out;
}

}  // namespace

TEST_CASE("kv cache: stepping equals one causal forward", "[kv_cache]") {
  struct Case {
    std::size_t E, H, kv_heads, B, L;
  };
  // Includes GQA/MQA, lengths that cross key tiles (256) and split-KV
  // chunks (>= 1024 keys), and head sizes that are not multiples of the
  // vector width.
  const std::vector<Case> cases = {{8, 2, 2, 1, 5},    {12, 3, 1, 2, 17},   {64, 4, 2, 2, 70},
                                   {48, 4, 4, 1, 300}, {32, 2, 1, 1, 1100}, {96, 6, 3, 3, 33}};
  std::uint64_t seed = 100;
  for (const Case& c : cases) {
    CAPTURE(c.E, c.H, c.kv_heads, c.B, c.L);
    Model m(c.E, c.H, c.kv_heads, seed);
    const std::vector<float> x = random_vector(c.B * c.L * c.E, seed + 50);
    std::vector<float> full(x.size());
    mha_mask mask{};
    mask.causal = 1;
    REQUIRE(mha_attention_forward(m.attn.get(), c.B, c.L, c.L, x.data(), x.data(), x.data(), &mask,
                                  full.data(), nullptr, 0) == MHA_OK);

    Cache cache = make_cache(m, c.B, c.L);
    // A chunked prefill of a third of the sequence, then chunks of 1..4.
    std::size_t t = 0, chunk = std::max<std::size_t>(1, c.L / 3);
    while (t < c.L) {
      const std::size_t n = std::min(chunk, c.L - t);
      const std::vector<float> xs = rows(x, c.B, c.L, c.E, t, n);
      std::vector<float> out(xs.size());
      REQUIRE(mha_attention_step(m.attn.get(), cache.get(), n, xs.data(), xs.data(), xs.data(),
                                 out.data()) == MHA_OK);
      const std::vector<float> want = rows(full, c.B, c.L, c.E, t, n);
      for (std::size_t i = 0; i < out.size(); ++i) {
        INFO("position " << t << " + " << i / c.E % n);
        REQUIRE(std::abs(out[i] - want[i]) <= 2e-5f * (1.0f + std::abs(want[i])));
      }
      t += n;
      REQUIRE(mha_kv_cache_length(cache.get()) == t);
      chunk = 1 + t % 4;
    }
    seed += 10;
  }
}

TEST_CASE("kv cache: truncate rolls back exactly", "[kv_cache]") {
  Model m(32, 4, 2, 7);
  const std::size_t B = 2, L = 40;
  const std::vector<float> x = random_vector(B * L * 32, 8);
  Cache cache = make_cache(m, B, L);
  std::vector<float> prefix_out(B * 30 * 32), a(B * 10 * 32), b(B * 10 * 32);
  const std::vector<float> head = rows(x, B, L, 32, 0, 30), tail = rows(x, B, L, 32, 30, 10);
  REQUIRE(mha_attention_step(m.attn.get(), cache.get(), 30, head.data(), head.data(), head.data(),
                             prefix_out.data()) == MHA_OK);
  REQUIRE(mha_attention_step(m.attn.get(), cache.get(), 10, tail.data(), tail.data(), tail.data(),
                             a.data()) == MHA_OK);
  REQUIRE(mha_kv_cache_truncate(cache.get(), 30) == MHA_OK);
  REQUIRE(mha_kv_cache_length(cache.get()) == 30);
  REQUIRE(mha_attention_step(m.attn.get(), cache.get(), 10, tail.data(), tail.data(), tail.data(),
                             b.data()) == MHA_OK);
  REQUIRE(a == b);
  // Rolling back into the middle of a key strip and stepping different
  // tokens must not see the dropped keys.
  REQUIRE(mha_kv_cache_truncate(cache.get(), 3) == MHA_OK);
  REQUIRE(mha_kv_cache_truncate(cache.get(), 0) == MHA_OK);
  std::vector<float> again(prefix_out.size());
  REQUIRE(mha_attention_step(m.attn.get(), cache.get(), 30, head.data(), head.data(), head.data(),
                             again.data()) == MHA_OK);
  REQUIRE(again == prefix_out);
}

TEST_CASE("kv cache: split-KV decode is bit-identical at 1, 2 and 4 threads",
          "[kv_cache][threads]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: threads are not allowed here (qemu-user)");
    return;
  }
  // One query against 3000 keys: B*H = 2 tasks, so the decode splits KV.
  Model m(64, 2, 2, 21);
  const std::size_t L = scaled(3000, 1100);
  const std::vector<float> x = random_vector(L * 64, 22);
  std::vector<std::vector<float>> results;
  for (std::size_t threads : {1, 2, 4}) {
    mha_set_num_threads(threads);
    Cache cache = make_cache(m, 1, L);
    std::vector<float> out(x.size());
    REQUIRE(mha_attention_step(m.attn.get(), cache.get(), L - 1, x.data(), x.data(), x.data(),
                               out.data()) == MHA_OK);
    std::vector<float> last(64);
    REQUIRE(mha_attention_step(m.attn.get(), cache.get(), 1, &x[(L - 1) * 64], &x[(L - 1) * 64],
                               &x[(L - 1) * 64], last.data()) == MHA_OK);
    out.insert(out.end(), last.begin(), last.end());
    results.push_back(std::move(out));
  }
  mha_set_num_threads(0);
  REQUIRE(results[0] == results[1]);
  REQUIRE(results[0] == results[2]);
}

TEST_CASE("kv cache: bad arguments are clear errors", "[kv_cache][errors]") {
  Model m(16, 2, 2, 31), other(16, 2, 2, 32);
  mha_kv_cache* raw = nullptr;
  CHECK(mha_kv_cache_create(nullptr, 1, 4, &raw) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_create(m.attn.get(), 0, 4, &raw) == MHA_INVALID_ARGUMENT);
  CHECK(std::string(mha_last_error()).find("batch") != std::string::npos);
  CHECK(mha_kv_cache_create(m.attn.get(), 1, 0, &raw) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_create(m.attn.get(), 1, 4, nullptr) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_create(m.attn.get(), SIZE_MAX / 2, SIZE_MAX / 2, &raw) ==
        MHA_INVALID_ARGUMENT);
  CHECK(raw == nullptr);

  Cache cache = make_cache(m, 1, 4);
  const std::vector<float> x = random_vector(5 * 16, 33);
  std::vector<float> out(x.size(), 7.0f);
  CHECK(mha_attention_step(m.attn.get(), cache.get(), 5, x.data(), x.data(), x.data(),
                           out.data()) == MHA_INVALID_ARGUMENT);
  CHECK(std::string(mha_last_error()).find("max_len") != std::string::npos);
  CHECK(mha_attention_step(other.attn.get(), cache.get(), 1, x.data(), x.data(), x.data(),
                           out.data()) == MHA_INVALID_ARGUMENT);
  CHECK(mha_attention_step(m.attn.get(), cache.get(), 0, x.data(), x.data(), x.data(),
                           out.data()) == MHA_INVALID_ARGUMENT);
  CHECK(mha_attention_step(m.attn.get(), cache.get(), 1, nullptr, x.data(), x.data(), out.data()) ==
        MHA_INVALID_ARGUMENT);
  CHECK(mha_attention_step(m.attn.get(), cache.get(), 1, x.data(), x.data(), x.data(), nullptr) ==
        MHA_INVALID_ARGUMENT);
  CHECK(std::all_of(out.begin(), out.end(), [](float v) { return v == 7.0f; }));
  CHECK(mha_kv_cache_length(cache.get()) == 0);
  CHECK(mha_kv_cache_truncate(cache.get(), 1) == MHA_INVALID_ARGUMENT);
  CHECK(mha_kv_cache_truncate(nullptr, 0) == MHA_INVALID_ARGUMENT);
}

TEST_CASE("kv cache: the C++ class matches the C API and throws mha::Error", "[kv_cache][errors]") {
  const std::size_t E = 16, L = 9;
  const std::vector<float> w = random_vector(E * E, 41, -0.3f, 0.3f);
  const mha_weights weights{w.data(), w.data(), w.data(), w.data(),
                            nullptr,  nullptr,  nullptr,  nullptr};
  const mha::MultiheadAttention attn(mha_config{E, 2, 0, 0, 0}, weights);
  const std::vector<float> x = random_vector(L * E, 42);
  std::vector<float> full(x.size()), stepped(x.size());
  mha_mask mask{};
  mask.causal = 1;
  attn.forward_self(1, L, x.data(), &mask, full.data());
  mha::KvCache cache(attn, 1, L);
  cache.step_self(4, x.data(), stepped.data());
  cache.step_self(5, &x[4 * E], &stepped[4 * E]);
  CHECK(cache.length() == L);
  for (std::size_t i = 0; i < x.size(); ++i) {
    REQUIRE(std::abs(stepped[i] - full[i]) <= 2e-5f * (1.0f + std::abs(full[i])));
  }
  try {
    cache.step_self(1, x.data(), stepped.data());
    FAIL("a step past max_len must throw");
  } catch (const mha::Error& e) {
    CHECK(e.status() == MHA_INVALID_ARGUMENT);
    CHECK(std::string(e.what()).find("max_len") != std::string::npos);
  }
  CHECK_THROWS_AS(cache.truncate(L + 1), mha::Error);
}

// put_rows writes the bytes of put() key by key, over head-blocks that held
// garbage (NaN bits), for the fp32 K/V and every bf16 kernel set this CPU
// runs: from a strip's start (a forward's pack) and from inside one (a
// cache's next keys), whole and partial strips and V groups, odd head_dim,
// and head_dim % 4 of 1 and 2, where a BFMMLA strip has a row of pairs no
// key writes, and head_dims past the bf16 put_rows' column passes (256
// columns at 32 keys a strip, 1024 at 8).
TEST_CASE("K/V: put_rows writes put()'s bytes", "[kv][bf16]") {
  const mha::detail::GemmKernels& g = mha::detail::gemm_kernels(mha::detail::active_isa());
  std::vector<std::unique_ptr<mha::detail::KvType>> types;
  types.push_back(mha::detail::make_kv_fp32(g));
  for (const mha::detail::GemmBf16Kernels* g16 : mha::detail::gemm_bf16_kernel_sets()) {
    types.push_back(mha::detail::make_kv_bf16(g, *g16));
    types.push_back(mha::detail::make_kv_bf16_shared(g, *g16, mha::detail::active_isa()));
  }
  for (std::size_t t = 0; t < types.size(); ++t) {
    const mha::detail::KvType& kv = *types[t];
    for (std::size_t d : {1, 2, 5, 6, 8, 64, 70, 130, 300, 1030}) {
      for (std::size_t j0 : {0, 5, 32, 37}) {
        for (std::size_t n : {1, 3, 8, 31, 32, 33, 70}) {
          INFO("type " << t << " (" << kv.name() << "): head_dim " << d << " from " << j0
                       << " keys " << n);
          const mha::detail::KvLayout l = kv.layout(d, j0 + n);
          const std::size_t ld = d + 3;
          const std::vector<float> key = random_vector(n * ld, 5 + d),
                                   value = random_vector(n * ld, 9 + n);
          std::vector<unsigned char> a(l.k_bytes + l.v_bytes, 0xff), b(a);
          kv.put_rows(l, a.data(), a.data() + l.k_bytes, j0, n, d, key.data(), value.data(), ld);
          for (std::size_t j = 0; j < n; ++j) {
            kv.put(l, b.data(), b.data() + l.k_bytes, j0 + j, d, key.data() + j * ld,
                   value.data() + j * ld);
          }
          CHECK(a == b);
        }
      }
    }
  }
}

// MLA's bf16 latent rows are stored once (V's layout) and their K strips
// built per score chunk: its scores must be the two-copy entry's, bit for
// bit, on every bf16 kernel set this CPU runs, from a tile's first key and
// from later ones, over whole and partial chunks (64 keys, 256 on panels)
// and strips, odd head_dims (a pair completed by zero) and MLA's 576, one
// row (the row kernels) and several.
TEST_CASE("K/V: a shared bf16 entry's products equal the two-copy entry's", "[kv][bf16][mla]") {
  const mha::detail::GemmKernels& g = mha::detail::gemm_kernels(mha::detail::active_isa());
  for (const mha::detail::GemmBf16Kernels* g16 : mha::detail::gemm_bf16_kernel_sets()) {
    const auto two = mha::detail::make_kv_bf16(g, *g16);
    const auto one = mha::detail::make_kv_bf16_shared(g, *g16, mha::detail::active_isa());
    for (std::size_t d : {1, 5, 19, 64, 576}) {
      for (std::size_t n : {1, 17, 64, 65, 200, 300}) {
        const std::size_t j0 = 2 * g16->nr, cap = j0 + n, ld = d + 3;
        const mha::detail::KvLayout l2 = two->layout(d, cap), l1 = one->layout(d, cap);
        CHECK(l1.k_bytes == 0);
        CHECK(l1.v_bytes == l2.v_bytes);
        const std::vector<float> x = random_vector(cap * ld, 3 + d + n);
        std::vector<unsigned char> a(l2.k_bytes + l2.v_bytes), b(l1.v_bytes);
        two->put_rows(l2, a.data(), a.data() + l2.k_bytes, 0, cap, d, x.data(), x.data(), ld);
        one->put_rows(l1, nullptr, b.data(), 0, cap, d, x.data(), x.data(), ld);
        const mha::detail::KvTile t2{&l2, a.data(), a.data() + l2.k_bytes, j0, n};
        const mha::detail::KvTile t1{&l1, nullptr, b.data(), j0, n};
        for (std::size_t rows : {1, 3, 16}) {
          INFO(g16->name << ": head_dim " << d << ", keys " << n << ", rows " << rows);
          const std::vector<float> q = random_vector(rows * d, 7 + rows);
          std::vector<float> q2(two->query_floats(rows, d)), q1(one->query_floats(rows, d));
          std::vector<float> s2(rows * n, 1.0f), s1(rows * n, 2.0f);
          two->prepare_thread();
          two->prepare_queries(rows, d, q.data(), d, q2.data());
          one->prepare_queries(rows, d, q.data(), d, q1.data());
          two->scores(rows, d, q2.data(), t2, 0.125f, s2.data(), n);
          one->scores(rows, d, q1.data(), t1, 0.125f, s1.data(), n);
          CHECK(s1 == s2);
          std::vector<float> o2(rows * d), o1(rows * d), pbuf(two->p_floats(rows, n, d));
          two->values(rows, d, s2.data(), n, t2, 0.0f, o2.data(), d, pbuf.data());
          one->values(rows, d, s2.data(), n, t1, 0.0f, o1.data(), d, pbuf.data());
          CHECK(o1 == o2);
        }
      }
    }
  }
}
