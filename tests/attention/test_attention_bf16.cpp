// bf16 attention objects (mha_attention_create_ex, compute = MHA_BF16):
// against the double oracle on the same bf16-rounded weights, over
// self/cross attention, GQA, every mask kind, weights output and modifiers;
// bit-identical at 1, 2 and 3 threads; KV-cache steps, ragged batches and
// the paged cache equal the bf16 forward; option checks.
// Every case runs on every ISA (CTest runs the binary once per MHA_ISA):
// the ISA's bf16 kernels where it has them (AVX512_BF16's, AVX2's), else the
// fp32 kernels on the converted operands; and again on the vdpbf16ps
// emulation forced on every ISA (Bf16Kernels), so that the bf16 attention
// core (bf16 K/V, P rounded) runs on any CPU.
//
// Tolerance against the oracle: the object rounds to bf16 (relative error
// at most 2^-9) the inputs of each projection, Q, K, V, P (in the bf16
// core) and the merged heads; the oracle rounds nothing but the weights.
// With inputs in [-1, 1] and PyTorch's weight scale, outputs are O(1) and
// five such roundings move the output by 5·2^-9 = 1e-2 at most: 1e-2 in
// scaled_error (measured: 1.0e-3 to 1.1e-3, either core).
// The same metric puts the fp32 object near 1e-6, and a dropped bias or a
// wrong weight near 1e-1 and above. That the bf16 path really ran is checked
// too: its result is further than 1e-4 from the fp32 object's on the same
// rounded weights.
// KV-cache steps, ragged and paged calls against the bf16 forward: bf16
// kernels give each projection row the same bits at any row count, but the
// fp32 kernels of ISAs without them need not (a one-row product runs
// another micro-kernel), and a last-bit difference can move a rounding to
// bf16 by one bf16 ulp (2^-8 relative) in Q, K or V, and P rounds to bf16
// against a running maximum that depends on the key tiles: 4e-3·(1 + |x|),
// still far below the ~1e-1 of a wrong position or block. On bf16 kernels,
// a ragged call and a paged prefill on the forward's key tiles must give
// the forward's bits (so they cannot be running the fp32 core).
#include <mha/mha.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <mha/attention.hpp>
#include <mha/kv_cache.hpp>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/gemm_bf16.hpp"
#include "support/bf16_kernels.hpp"
#include "support/reference.hpp"

namespace {

using mha::test::AttentionCase;
using mha::test::Bf16Kernels;
using mha::test::CaseData;
using mha::test::scaled_error;
using mha::test::WeightsOut;

mha_attention_options bf16_options() {
  mha_attention_options o{};
  o.struct_size = sizeof(mha_attention_options);
  o.compute = MHA_BF16;
  return o;
}

// The weights of d rounded to bf16 (the values a bf16 object stores).
mha::test::RandomWeights rounded(const CaseData& d) {
  mha::test::RandomWeights w = d.w;
  w.round_to_bf16();
  return w;
}

std::vector<float> forward(const mha::MultiheadAttention& attn, const AttentionCase& c,
                           const CaseData& d, const mha_mods* mods,
                           std::vector<float>* weights = nullptr) {
  std::vector<float> out(c.batch * c.q_len * c.config.embed_dim, NAN);
  attn.forward_mods(c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(), d.value.data(),
                    d.mask_ptr(), mods, out.data(), weights ? weights->data() : nullptr,
                    c.weights_out == WeightsOut::averaged);
  return out;
}

AttentionCase make_case(std::size_t E, std::size_t H, std::size_t kv_heads, std::size_t kdim,
                        std::size_t batch, std::size_t q_len, std::size_t kv_len,
                        std::uint64_t seed) {
  AttentionCase c;
  c.config = {E, H, kdim, kdim, kv_heads};
  c.batch = batch;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.self = kdim == 0 && q_len == kv_len;
  c.seed = seed;
  return c;
}

}  // namespace

TEST_CASE("bf16 attention matches the double oracle on its bf16 weights", "[bf16][attention]") {
  const bool emulated = GENERATE(false, true);
  INFO("emulated bf16 kernels: " << emulated);
  const Bf16Kernels kernels(emulated);
  std::vector<AttentionCase> cases;
  AttentionCase c = make_case(64, 4, 0, 0, 2, 33, 33, 1);
  c.causal = true;
  cases.push_back(c);
  c = make_case(96, 6, 2, 40, 2, 17, 70, 2);  // cross, GQA 6/2
  c.padding = true;
  c.additive = 2;
  cases.push_back(c);
  c = make_case(128, 8, 0, 0, 1, 130, 130, 3);
  c.weights_out = WeightsOut::per_head;
  cases.push_back(c);
  c = make_case(48, 3, 0, 24, 2, 9, 300, 4);
  c.additive = 1;
  c.weights_out = WeightsOut::averaged;
  cases.push_back(c);
  c = make_case(64, 2, 1, 0, 1, 1, 1, 5);  // one token
  cases.push_back(c);
  c = make_case(32, 2, 0, 0, 1, 5, 1100, 6);  // split-KV
  cases.push_back(c);
  double worst = 0;
  for (const AttentionCase& ac : cases) {
    for (bool with_mods : {false, true}) {
      CAPTURE(ac.seed, with_mods);
      const CaseData d(ac);
      const mha::test::RandomWeights w16 = rounded(d);
      const mha::MultiheadAttention bf16(ac.config, d.w.view(), bf16_options());
      const mha::MultiheadAttention fp32(ac.config, w16.view());
      const std::size_t H = ac.config.num_heads, hd = ac.config.embed_dim / H;
      const std::vector<float> slopes = mha::test::random_vector(H, 7, 0.f, 0.3f);
      const std::vector<float> sinks = mha::test::random_vector(H, 8, -1.f, 1.f);
      mha_mods mods{};
      mods.struct_size = sizeof(mha_mods);
      mods.rope_dim = hd / 2 * 2;
      mods.alibi_slopes = slopes.data();
      mods.sinks = sinks.data();
      const mha_mods* mp = with_mods ? &mods : nullptr;
      std::vector<float> wb(mha::test::weights_size(ac), NAN);
      const std::vector<float> got = forward(bf16, ac, d, mp, wb.empty() ? nullptr : &wb);
      const std::vector<float> f32 = forward(fp32, ac, d, mp);
      const mha::test::ReferenceResult ref = mha::test::reference_attention(
          ac.config, w16.view(), ac.batch, ac.q_len, ac.kv_len, d.query.data(), d.key.data(),
          d.value.data(), d.mask_ptr(), !wb.empty(), ac.weights_out == WeightsOut::averaged, mp);
      const double err = scaled_error(got, ref.out);
      worst = std::max(worst, err);
      CHECK(err <= 1e-2);
      CHECK(scaled_error(f32, ref.out) <= 1e-5);
      double diff = 0;
      for (std::size_t i = 0; i < got.size(); ++i)
        diff = std::max(diff, static_cast<double>(std::fabs(got[i] - f32[i])));
      if (ac.q_len * ac.kv_len > 1) CHECK(diff > 1e-4);
      if (!wb.empty()) CHECK(scaled_error(wb, ref.weights) <= 1e-2);
    }
  }
  std::printf("bf16 attention vs oracle on bf16 weights: worst scaled error %.2g (bound 1e-2)\n",
              worst);
}

TEST_CASE("bf16 attention is bit-identical at 1, 2 and 3 threads", "[bf16][attention]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: this run must not start threads (qemu-user)");
    return;
  }
  const bool emulated = GENERATE(false, true);
  const Bf16Kernels kernels(emulated);
  AttentionCase c = make_case(256, 8, 2, 0, 2, 200, 200, 11);
  c.causal = true;
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view(), bf16_options());
  mha_set_num_threads(1);
  const std::vector<float> one = forward(attn, c, d, nullptr);
  for (std::size_t t : {2, 3}) {
    mha_set_num_threads(t);
    const std::vector<float> many = forward(attn, c, d, nullptr);
    REQUIRE(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)) == 0);
  }
  mha_set_num_threads(0);
}

TEST_CASE("a bf16 self-attention's fused QKV product gives the separate products' bits",
          "[bf16][attention]") {
  const bool emulated = GENERATE(false, true);
  INFO("emulated bf16 kernels: " << emulated);
  const Bf16Kernels kernels(emulated);
  // GQA, so that K's and V's sections are narrower than Q's.
  const AttentionCase c = make_case(64, 4, 2, 0, 2, 9, 9, 31);
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view(), bf16_options());
  const std::size_t n = c.batch * c.q_len * c.config.embed_dim;
  std::vector<float> fused(n), separate(n);
  const std::vector<float> key(d.query), value(d.query);
  attn.forward(c.batch, c.q_len, c.kv_len, d.query.data(), d.query.data(), d.query.data(), nullptr,
               fused.data());
  attn.forward(c.batch, c.q_len, c.kv_len, d.query.data(), key.data(), value.data(), nullptr,
               separate.data());
  CHECK(std::memcmp(fused.data(), separate.data(), n * sizeof(float)) == 0);
}

TEST_CASE("bf16 KV-cache steps, ragged batches and the paged cache equal the bf16 forward",
          "[bf16][attention]") {
  const bool emulated = GENERATE(false, true);
  INFO("emulated bf16 kernels: " << emulated);
  const Bf16Kernels kernels(emulated);
  const std::size_t E = 64, len = 40;
  AttentionCase c = make_case(E, 4, 2, 0, 1, len, len, 21);
  c.causal = true;
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view(), bf16_options());
  const std::vector<float> want = forward(attn, c, d, nullptr);
  const auto require_close = [&](const std::vector<float>& got) {
    for (std::size_t i = 0; i < want.size(); ++i) {
      REQUIRE(std::fabs(got[i] - want[i]) <= 4e-3f * (1.0f + std::fabs(want[i])));
    }
  };
  // KV cache: a prefill of 25, then one token at a time.
  std::vector<float> got(want.size());
  mha::KvCache cache(attn, 1, len);
  cache.step_self(25, d.query.data(), got.data());
  for (std::size_t t = 25; t < len; ++t) cache.step_self(1, &d.query[t * E], &got[t * E]);
  require_close(got);
  // Ragged: the sequence packed with another.
  std::vector<float> two(d.query);
  two.insert(two.end(), d.query.begin(), d.query.begin() + 7 * E);
  const std::size_t start[] = {0, len, len + 7};
  const mha_ragged seqs{sizeof(mha_ragged), 2, start, nullptr};
  std::vector<float> out2(two.size());
  attn.forward_ragged(seqs, two.data(), two.data(), two.data(), out2.data(), true);
  const std::vector<float> ragged(out2.begin(), out2.begin() + len * E);
  require_close(ragged);
  // With bf16 kernels, a ragged forward runs the bf16 core on the forward's
  // plan for this sequence (one query block, no split): the same bits.
  if (mha::detail::gemm_bf16_kernels(mha::detail::active_isa()) != nullptr) {
    CHECK(std::memcmp(ragged.data(), want.data(), want.size() * sizeof(float)) == 0);
  }
  // Paged, one step into a block longer than the sequence: one key tile, as
  // in the forward, so on bf16 kernels (the bf16 core in both) the same bits.
  {
    mha::PagedKvCache one(attn, 1, 64, 1);
    const std::size_t slot0 = 0, q_all[] = {0, len};
    std::vector<float> whole(want.size());
    one.step(1, &slot0, q_all, d.query.data(), d.query.data(), d.query.data(), whole.data());
    require_close(whole);
    if (mha::detail::gemm_bf16_kernels(mha::detail::active_isa()) != nullptr) {
      CHECK(std::memcmp(whole.data(), want.data(), want.size() * sizeof(float)) == 0);
    }
  }
  // Paged: prefill 30 in slot 1, then 10 one by one.
  mha::PagedKvCache paged(attn, 2, 16, 8);
  const std::size_t slot = 1, q30[] = {0, 30}, q1[] = {0, 1};
  paged.step(1, &slot, q30, d.query.data(), d.query.data(), d.query.data(), got.data());
  for (std::size_t t = 30; t < len; ++t) {
    paged.step(1, &slot, q1, &d.query[t * E], &d.query[t * E], &d.query[t * E], &got[t * E]);
  }
  require_close(got);
}

// The software tiles abort on a tile instruction before the thread's tile
// configuration, and forgetting them before each call unconfigures every
// thread: each path must run thread_setup on each thread it computes on.
TEST_CASE("every bf16 path configures the AMX tiles on each thread it uses", "[bf16][attention]") {
  mha::detail::set_gemm_bf16_kernels_override(&mha::detail::gemm_bf16_kernels_amx_emulated);
  struct Reset {
    ~Reset() { mha::detail::set_gemm_bf16_kernels_override(nullptr); }
  } reset;
  const auto forget = [] { mha::detail::amx_emulated_forget_tiles(); };
  const std::size_t E = 64, len = 40;
  AttentionCase c = make_case(E, 4, 2, 0, 1, len, len, 23);
  c.causal = true;
  const CaseData d(c);
  const mha::MultiheadAttention attn(c.config, d.w.view(), bf16_options());
  REQUIRE(std::string(mha_kernel_name(MHA_BF16)) == "amx_emulated");
  // qemu-user runs single-threaded (threads_allowed): TBB's spinning workers
  // made this test take over 10 minutes there.
  for (std::size_t threads : {1, 3}) {
    if (threads > 1 && !mha::test::threads_allowed()) break;
    INFO("threads " << threads);
    mha_set_num_threads(threads);
    std::vector<float> out(len * E);
    forget();
    forward(attn, c, d, nullptr);
    mha::KvCache cache(attn, 1, len);
    forget();
    cache.step_self(25, d.query.data(), out.data());
    forget();
    cache.step_self(1, &d.query[25 * E], out.data());
    const std::size_t start[] = {0, 9, len};
    const mha_ragged seqs{sizeof(mha_ragged), 2, start, nullptr};
    forget();
    attn.forward_ragged(seqs, d.query.data(), d.query.data(), d.query.data(), out.data(), true);
    mha::PagedKvCache paged(attn, 2, 16, 8);
    const std::size_t slot = 1, q30[] = {0, 30};
    forget();
    paged.step(1, &slot, q30, d.query.data(), d.query.data(), d.query.data(), out.data());
    // Large enough for the GEMM drivers to thread.
    const std::size_t m = 192, n = 160, k = 256;
    std::vector<std::uint16_t> a(m * k, 0x3f80), b(k * n, 0x3c00);
    std::vector<float> cm(m * n);
    forget();
    REQUIRE(mha_gemm_bf16('N', 'N', m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, cm.data(), n) ==
            MHA_OK);
    mha_gemm_bf16_packed_b* packed = nullptr;
    forget();
    REQUIRE(mha_gemm_bf16_pack_b('N', k, n, b.data(), n, &packed) == MHA_OK);
    forget();
    CHECK(mha_gemm_bf16_packed('N', m, 1.f, MHA_BF16, a.data(), k, packed, 0.f, cm.data(), n) ==
          MHA_OK);
    mha_gemm_bf16_packed_b_destroy(packed);
  }
  mha_set_num_threads(0);
}

TEST_CASE("mha_attention_create_ex checks its options and defaults to fp32", "[bf16][attention]") {
  const AttentionCase c = make_case(32, 4, 0, 0, 1, 6, 6, 31);
  const CaseData d(c);
  const mha_weights w = d.w.view();
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  mha_attention_options o = bf16_options();
  o.struct_size = 0;
  REQUIRE(mha_attention_create_ex(&c.config, &w, &o, &attn) == MHA_INVALID_ARGUMENT);
  CHECK(std::string(mha_last_error()).find("struct_size") != std::string::npos);
  o = bf16_options();
  o.compute = static_cast<mha_dtype>(7);
  REQUIRE(mha_attention_create_ex(&c.config, &w, &o, &attn) == MHA_INVALID_ARGUMENT);
  CHECK(std::string(mha_last_error()).find("compute") != std::string::npos);
  REQUIRE(attn == sentinel);
  // A key width whose packed bf16 weight's bytes wrap size_t (2^60 x 32
  // strips x 2 pairs): rejected before anything is allocated or read.
  const mha_config huge{1, 1, std::size_t{1} << 60, 1, 0};
  o = bf16_options();
  const mha_status hs = mha_attention_create_ex(&huge, &w, &o, &attn);
  REQUIRE((hs == MHA_INVALID_ARGUMENT || hs == MHA_OUT_OF_MEMORY));
  REQUIRE(attn == sentinel);
  // NULL options, or compute = MHA_FP32: the object mha_attention_create makes.
  mha_attention* plain = nullptr;
  REQUIRE(mha_attention_create(&c.config, &w, &plain) == MHA_OK);
  o.compute = MHA_FP32;
  for (const mha_attention_options* opt : {static_cast<const mha_attention_options*>(nullptr),
                                           static_cast<const mha_attention_options*>(&o)}) {
    REQUIRE(mha_attention_create_ex(&c.config, &w, opt, &attn) == MHA_OK);
    std::vector<float> a(6 * 32), b(6 * 32);
    REQUIRE(mha_attention_forward(plain, 1, 6, 6, d.query.data(), d.query.data(), d.query.data(),
                                  nullptr, a.data(), nullptr, 0) == MHA_OK);
    REQUIRE(mha_attention_forward(attn, 1, 6, 6, d.query.data(), d.query.data(), d.query.data(),
                                  nullptr, b.data(), nullptr, 0) == MHA_OK);
    REQUIRE(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    mha_attention_destroy(attn);
  }
  mha_attention_destroy(plain);
}
