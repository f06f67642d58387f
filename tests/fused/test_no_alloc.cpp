// "Hot paths do not allocate": after warm-up calls (which size the
// thread-local scratch), steady-state calls of every public entry point (MLA's
// forward and steps included) make no heap allocation at all. This binary
// replaces the C allocator (malloc and friends, which operator new and the
// library's aligned scratch both reach) with counting wrappers around glibc's
// own entry points, so it is a suite of its own and is skipped under the
// sanitizers, whose runtimes own malloc.
#include <mha/mha.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mha/attention.hpp>
#include <mha/gemm.hpp>
#include <mha/kv_cache.hpp>
#include <mha/mla.hpp>
#include <string>
#include <vector>

#include "support/mla_reference.hpp"
#include "support/reference.hpp"

#if defined(__GLIBC__) && !defined(MHA_ASAN) && !defined(MHA_TSAN)
#define MHA_TEST_COUNT_MALLOC 1
#else
#define MHA_TEST_COUNT_MALLOC 0
#endif

namespace {
std::atomic<bool> counting{false};
std::atomic<long> allocations{0};
void note() {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1);
}
}  // namespace

#if MHA_TEST_COUNT_MALLOC
extern "C" {
void* __libc_malloc(std::size_t);
void* __libc_calloc(std::size_t, std::size_t);
void* __libc_realloc(void*, std::size_t);
void* __libc_memalign(std::size_t, std::size_t);
void __libc_free(void*);

void* malloc(std::size_t n) {
  note();
  return __libc_malloc(n);
}
void* calloc(std::size_t count, std::size_t n) {
  note();
  return __libc_calloc(count, n);
}
void* realloc(void* p, std::size_t n) {
  note();
  return __libc_realloc(p, n);
}
void* aligned_alloc(std::size_t alignment, std::size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
void* memalign(std::size_t alignment, std::size_t n) {
  note();
  return __libc_memalign(alignment, n);
}
int posix_memalign(void** out, std::size_t alignment, std::size_t n) {
  note();
  void* p = __libc_memalign(alignment, n);
  if (p == nullptr) return 12;  // ENOMEM
  *out = p;
  return 0;
}
void free(void* p) {
  __libc_free(p);
}
}
#endif

namespace {

using mha::test::random_vector;

// Allocations made by `calls` runs of f after `warmup` runs.
long steady_allocations(const std::function<void()>& f, int warmup = 3, int calls = 20) {
  for (int i = 0; i < warmup; ++i) f();
  allocations = 0;
  counting = true;
  for (int i = 0; i < calls; ++i) f();
  counting = false;
  return allocations.load();
}

// At one thread: none. At more, a TBB worker that meets a task for the
// first time inside the counted calls sizes its own scratch then, once per
// scratch slot (4): allowed, while an allocation per call (20 or more) is not.
void check_entry_points(std::size_t threads) {
  mha_set_num_threads(threads);
  const long allowed = threads == 1 ? 0 : 4 * static_cast<long>(threads - 1);
  // The allocator is really counted: one std::vector is one allocation.
  CHECK(steady_allocations([] { std::vector<float> v(100); }) == 20);

  // Each sgemm path: in place (small N), transposed B, packed panels (N >
  // 512, or a transpose over 1 MiB; small enough for qemu), GEMV, and a
  // prepacked B with bias.
  struct Gemm {
    char ta, tb;
    std::size_t m, n, k;
  };
  for (const Gemm& s :
       {Gemm{'N', 'N', 37, 50, 20}, Gemm{'T', 'T', 64, 64, 64}, Gemm{'N', 'N', 40, 600, 50},
        Gemm{'N', 'T', 20, 900, 300}, Gemm{'N', 'N', 1, 300, 77}, Gemm{'N', 'T', 1, 300, 77}}) {
    const std::vector<float> a = random_vector(s.m * s.k, 1), b = random_vector(s.k * s.n, 2);
    std::vector<float> c(s.m * s.n);
    const std::size_t lda = s.ta == 'N' ? s.k : s.m, ldb = s.tb == 'N' ? s.n : s.k;
    INFO("sgemm " << s.ta << s.tb << " m=" << s.m << " n=" << s.n << " k=" << s.k);
    CHECK(steady_allocations([&] {
            mha_sgemm(s.ta, s.tb, s.m, s.n, s.k, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(),
                      s.n);
          }) <= allowed);
  }
  {
    const std::size_t m = 16, n = 200, k = 96;
    const std::vector<float> a = random_vector(m * k, 1), w = random_vector(n * k, 2),
                             bias = random_vector(n, 3);
    std::vector<float> c(m * n);
    const mha::PackedB packed('T', k, n, w.data(), k);
    CHECK(steady_allocations([&] {
            mha::sgemm('N', m, 1.f, a.data(), k, packed, 0.f, c.data(), n, bias.data());
          }) <= allowed);
  }

  // bf16: both paths plan_gemm_bf16 may take here (dot or fp32), and a
  // packed bf16 B with an fp32 A (rounded into scratch).
  {
    const std::size_t m = 40, n = 300, k = 77;
    std::vector<std::uint16_t> a(m * k), b(k * n);
    mha_fp32_to_bf16(a.size(), random_vector(a.size(), 1).data(), a.data());
    mha_fp32_to_bf16(b.size(), random_vector(b.size(), 2).data(), b.data());
    const std::vector<float> a32 = random_vector(m * k, 3);
    std::vector<float> c(m * n);
    CHECK(steady_allocations([&] {
            mha_gemm_bf16('N', 'T', m, n, k, 1.f, a.data(), k, b.data(), k, 0.f, c.data(), n);
          }) <= allowed);
    const mha::PackedBf16B packed('N', k, n, b.data(), n);
    CHECK(steady_allocations([&] {
            mha::gemm_bf16('N', m, 1.f, a32.data(), k, packed, 0.f, c.data(), n);
          }) <= allowed);
  }

  // Softmax (a causal mask) and the head reshapes.
  {
    const std::size_t rows = 96, cols = 300;
    const std::vector<float> x = random_vector(rows * cols, 4);
    std::vector<float> y(rows * cols);
    mha_softmax_options opt{};
    opt.causal = 1;
    CHECK(steady_allocations(
              [&] { mha_softmax(rows, cols, x.data(), cols, y.data(), cols, &opt); }) <= allowed);
    const std::size_t B = 2, S = 100, H = 12, d = 64;
    const std::vector<float> t = random_vector(B * S * H * d, 5);
    std::vector<float> u(t.size());
    CHECK(steady_allocations([&] { mha_split_heads(B, S, H, d, t.data(), u.data()); }) <= allowed);
    CHECK(steady_allocations([&] { mha_merge_heads(B, S, H, d, t.data(), u.data()); }) <= allowed);
  }

  // Attention: self-attention with a causal mask, cross-attention returning
  // the weights, and a KV-cache decode step (the cache truncated back after
  // each step, so every call does the same work).
  {
    const std::size_t E = 64, H = 4, B = 2, S = 33, T = 20;
    const std::vector<float> w = random_vector(E * E, 6, -0.1f, 0.1f);
    const mha_config cfg{E, H, 0, 0, 0};
    const mha_weights weights{w.data(), w.data(), w.data(), w.data(),
                              nullptr,  nullptr,  nullptr,  nullptr};
    const mha::MultiheadAttention attn(cfg, weights);
    const std::vector<float> x = random_vector(B * S * E, 7), kv = random_vector(B * T * E, 8);
    std::vector<float> out(B * S * E), p(B * H * S * T);
    mha_mask causal{};
    causal.causal = 1;
    CHECK(steady_allocations([&] { attn.forward_self(B, S, x.data(), &causal, out.data()); }) <=
          allowed);
    CHECK(steady_allocations([&] {
            attn.forward(B, S, T, x.data(), kv.data(), kv.data(), nullptr, out.data(), p.data());
          }) <= allowed);
    mha::KvCache cache(attn, B, 64);
    const std::vector<float> prompt = random_vector(B * 10 * E, 9), tok = random_vector(B * E, 10);
    std::vector<float> prompt_out(prompt.size()), tok_out(tok.size());
    cache.step_self(10, prompt.data(), prompt_out.data());
    CHECK(steady_allocations([&] {
            cache.step_self(1, tok.data(), tok_out.data());
            cache.truncate(10);
          }) <= allowed);
    // Every modifier on: the RoPE table lives in the thread's scratch too.
    const std::vector<float> per_head = random_vector(H, 11);
    std::vector<float> lse(B * S * H);
    mha_mods mods{};
    mods.struct_size = sizeof(mha_mods);
    mods.causal = 1;
    mods.window = 8;
    mods.alibi_slopes = per_head.data();
    mods.softcap = 5.f;
    mods.sinks = per_head.data();
    mods.rope_dim = 8;
    mods.lse = lse.data();
    CHECK(steady_allocations([&] {
            attn.forward_mods(B, S, S, x.data(), x.data(), x.data(), nullptr, &mods, out.data());
          }) <= allowed);
    CHECK(steady_allocations([&] {
            cache.step_mods(1, tok.data(), tok.data(), tok.data(), &mods, tok_out.data());
            cache.truncate(10);
          }) <= allowed);
    // Quantized caches: their products (on the scalar ISA, the emulation)
    // dequantize in registers, with no buffer.
    for (mha_kv_dtype dtype : {MHA_KV_INT8, MHA_KV_FP8_E4M3}) {
      mha::KvCache q(attn, B, 64, dtype);
      q.step_self(10, prompt.data(), prompt_out.data());
      CHECK(steady_allocations([&] {
              q.step_mods(1, tok.data(), tok.data(), tok.data(), &mods, tok_out.data());
              q.truncate(10);
            }) <= allowed);
    }

    // A bf16 object: its projections round into the thread's scratch.
    mha_attention_options bf16{};
    bf16.struct_size = sizeof(mha_attention_options);
    bf16.compute = MHA_BF16;
    const mha::MultiheadAttention attn16(cfg, weights, bf16);
    CHECK(steady_allocations([&] {
            attn16.forward_mods(B, S, S, x.data(), x.data(), x.data(), nullptr, &mods, out.data());
          }) <= allowed);

    // Quantized weights. Weight-only: many rows widen B into the thread's
    // scratch, a decode step's one row in registers. int8 activations: each
    // product quantizes its rows into the thread's scratch. Int8 weights on
    // both cores, and int8 activations with int4 ones in groups on the bf16.
    const mha_attention_options formats[] = {
        {sizeof(mha_attention_options), MHA_FP32, MHA_WEIGHTS_INT8, 0, MHA_ACTIVATIONS_FLOAT},
        {sizeof(mha_attention_options), MHA_BF16, MHA_WEIGHTS_INT8, 0, MHA_ACTIVATIONS_FLOAT},
        {sizeof(mha_attention_options), MHA_FP32, MHA_WEIGHTS_INT8, 0, MHA_ACTIVATIONS_INT8},
        {sizeof(mha_attention_options), MHA_BF16, MHA_WEIGHTS_INT4, 32, MHA_ACTIVATIONS_INT8}};
    for (const mha_attention_options& o : formats) {
      const mha::MultiheadAttention a(cfg, weights, o);
      CHECK(steady_allocations([&] {
              a.forward_mods(B, S, S, x.data(), x.data(), x.data(), nullptr, &mods, out.data());
            }) <= allowed);
      mha::KvCache c(a, 1, 64);
      c.step_self(10, prompt.data(), prompt_out.data());
      CHECK(steady_allocations([&] {
              c.step_mods(1, tok.data(), tok.data(), tok.data(), &mods, tok_out.data());
              c.truncate(10);
            }) <= allowed);
    }

    // Ragged batches, plain and with every modifier (lse by packed row).
    const std::size_t q_start[] = {0, 7, 7, 33}, kv_start[] = {0, 20, 25, 40};
    const mha_ragged self{sizeof(mha_ragged), 3, q_start, nullptr};
    const mha_ragged cross{sizeof(mha_ragged), 3, q_start, kv_start};
    CHECK(steady_allocations([&] {
            attn.forward_ragged(self, x.data(), x.data(), x.data(), out.data(), true);
          }) <= allowed);
    CHECK(steady_allocations([&] {
            attn.forward_ragged_mods(cross, x.data(), kv.data(), kv.data(), &mods, out.data());
          }) <= allowed);

    // A paged cache: three slots each stepping a token (truncated back), and
    // two decoding on under a window, which returns blocks as it goes.
    mha::PagedKvCache paged(attn, 3, 16, 40);
    const std::size_t slots[] = {2, 0, 1}, prompts[] = {0, 10, 30, 31}, ones[] = {0, 1, 2, 3};
    paged.step(3, slots, prompts, x.data(), x.data(), x.data(), out.data());
    CHECK(steady_allocations([&] {
            paged.step(3, slots, ones, x.data(), x.data(), x.data(), out.data());
            for (std::size_t i = 0; i < 3; ++i) {
              paged.truncate_slot(slots[i], prompts[i + 1] - prompts[i]);
            }
          }) <= allowed);
    mods.window = 20;
    mods.lse = nullptr;
    paged.reset_slot(2);
    paged.reset_slot(0);
    const std::size_t two_prompts[] = {0, 30, 60};
    paged.step_mods(2, slots, two_prompts, x.data(), x.data(), x.data(), &mods, out.data());
    CHECK(steady_allocations([&] {
            paged.step_mods(2, slots, ones, x.data(), x.data(), x.data(), &mods, out.data());
          }) <= allowed);

    // Forked slots decoding together (their shared chunk computed once,
    // its plan in the thread's scratch), and a tree step with its accept.
    constexpr std::size_t kLong = 800;  // past a chunk of the key grid (720 on AVX2, 756 on NEON)
    mha::PagedKvCache forked(attn, 3, 16, 64);
    const std::vector<float> long_x = random_vector(kLong * E, 12);
    std::vector<float> long_out(kLong * E);
    const std::size_t s0 = 0, all[] = {0, 1, 2}, whole[] = {0, kLong};
    forked.step(1, &s0, whole, long_x.data(), long_x.data(), long_x.data(), long_out.data());
    forked.fork_slot(0, 1, kLong);
    forked.fork_slot(0, 2, kLong);
    CHECK(steady_allocations([&] {
            forked.step(3, all, ones, x.data(), x.data(), x.data(), out.data());
            for (std::size_t slot : all) forked.truncate_slot(slot, kLong);
          }) <= allowed);
    CHECK(forked.shared_chunks() > 0);
    const std::int32_t parent[] = {-1, 0, 0, 1};
    const std::size_t four[] = {0, 4}, path[] = {0, 1, 3};
    CHECK(steady_allocations([&] {
            forked.step_tree(1, &s0, four, parent, x.data(), x.data(), x.data(), nullptr,
                             out.data());
            forked.accept_path(0, 3, path);
            forked.truncate_slot(0, kLong);
          }) <= allowed);
  }

  // MLA: the forward, a decode step over a contiguous latent cache of each
  // element type (truncated back after each step) and a ragged step over a
  // paged one, on an fp32 and a bf16 object.
  {
    mha_mla_config c{};
    c.struct_size = sizeof c;
    c.hidden_size = 40;
    c.num_heads = 4;
    c.q_lora_rank = 24;
    c.kv_lora_rank = 32;
    c.qk_nope_head_dim = 8;
    c.qk_rope_head_dim = 4;
    c.v_head_dim = 12;
    c.yarn_factor = 40;
    c.yarn_original_max_position = 4096;
    c.yarn_mscale = c.yarn_mscale_all_dim = 1;
    const mha::test::MlaLayer layer(c, 12);
    const std::size_t E = c.hidden_size, B = 2, S = 30;
    const std::vector<float> x = random_vector(B * S * E, 13), tok = random_vector(B * E, 14);
    std::vector<float> out(x.size()), tok_out(tok.size());
    mha_attention_options bf16{};
    bf16.struct_size = sizeof(mha_attention_options);
    bf16.compute = MHA_BF16;
    for (const mha_attention_options* options :
         {(const mha_attention_options*)nullptr, (const mha_attention_options*)&bf16}) {
      INFO("MLA, " << (options == nullptr ? "fp32" : "bf16"));
      const mha::Mla mla(layer.cfg, layer.view(), options);
      CHECK(steady_allocations([&] { mla.forward(B, S, 7, x.data(), out.data()); }) <= allowed);
      for (mha_kv_dtype dtype : {MHA_KV_DEFAULT, MHA_KV_INT8, MHA_KV_FP8_E4M3}) {
        INFO("latent cache dtype " << dtype);
        mha::MlaKvCache cache(mla, B, 64, dtype);
        cache.step(10, x.data(), out.data());
        CHECK(steady_allocations([&] {
                cache.step(1, tok.data(), tok_out.data());
                cache.truncate(10);
              }) <= allowed);
      }
      mha::MlaPagedKvCache paged(mla, 3, 16, 40);
      const std::size_t slots[] = {2, 0, 1}, prompts[] = {0, 10, 25, 26}, ones[] = {0, 1, 2, 3};
      paged.step(3, slots, prompts, x.data(), out.data());
      CHECK(steady_allocations([&] {
              paged.step(3, slots, ones, x.data(), out.data());
              for (std::size_t i = 0; i < 3; ++i) {
                paged.truncate_slot(slots[i], prompts[i + 1] - prompts[i]);
              }
            }) <= allowed);
    }
  }
  mha_set_num_threads(0);
}

}  // namespace

TEST_CASE("steady-state calls make no heap allocation", "[memory][alloc]") {
#if !MHA_TEST_COUNT_MALLOC
  WARN("skipped: the sanitizer runtimes own malloc, which this test replaces");
  return;
#else
  SECTION("1 thread") {
    check_entry_points(1);
  }
  if (mha::test::threads_allowed()) {
    SECTION("2 threads") {
      check_entry_points(2);
    }
  }
#endif
}
