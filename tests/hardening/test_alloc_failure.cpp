// Allocation-failure injection: this binary replaces the global operator new
// (which every allocation of the library reaches: handles, packed weights, KV
// caches, per-thread scratch) with one that fails the N-th allocation after
// it is armed. Each operation of a scenario (attention create, forward self
// and cross, with and without weights, KV-cache create, step and truncate,
// sgemm packed and not, softmax, reshape, a paged cache's step and fork;
// for a bf16 object, its forwards and KV steps and the bf16 GEMMs; an MLA
// layer's create, forward and latent caches, contiguous and paged, fp32 and
// int8) runs once for every N until an armed run makes fewer than N
// allocations, on a fresh thread so that its scratch starts empty, at 1
// thread and inside a tbb::task_arena(4). Each
// failed run must return MHA_OUT_OF_MEMORY with a message and leave every
// output, handle and cache untouched, or (when the failure hit a worker and
// the calling thread finished its tasks) succeed with the reference result;
// a retry (on a fresh thread, from the prepared state again where the failure
// was absorbed) must then succeed with results bit-identical to a run without
// injection. Runs under ASan with leak detection, so a failure that leaks is
// caught too.
#include <mha/mha.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "support/mla_reference.hpp"
#include "support/reference.hpp"

namespace {

std::atomic<bool> armed{false};
std::atomic<long> countdown{0};
std::atomic<bool> fired{false};

void* allocate(std::size_t n, std::size_t align) {
  if (armed.load(std::memory_order_relaxed) && countdown.fetch_sub(1) == 1) {
    fired.store(true);
    throw std::bad_alloc();
  }
  if (n == 0) n = 1;
  void* p = align <= alignof(std::max_align_t)
                ? std::malloc(n)
                : std::aligned_alloc(align, (n + align - 1) / align * align);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

void arm(long n) {
  fired.store(false);
  countdown.store(n);
  armed.store(true);
}
// Disarms; whether the armed window's N-th allocation was made (and failed).
bool disarm() {
  armed.store(false);
  return fired.load();
}

void* allocate_nothrow(std::size_t n, std::size_t align) noexcept {
  try {
    return allocate(n, align);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}

}  // namespace

// Every form, so that no allocation reaches the sanitizer's own operator new
// and is then freed here (an alloc-dealloc mismatch under ASan).
void* operator new(std::size_t n) {
  return allocate(n, 0);
}
void* operator new[](std::size_t n) {
  return allocate(n, 0);
}
void* operator new(std::size_t n, std::align_val_t al) {
  return allocate(n, static_cast<std::size_t>(al));
}
void* operator new[](std::size_t n, std::align_val_t al) {
  return allocate(n, static_cast<std::size_t>(al));
}
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, 0);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, 0);
}
void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, static_cast<std::size_t>(al));
}
void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return allocate_nothrow(n, static_cast<std::size_t>(al));
}
void operator delete(void* p) noexcept {
  std::free(p);
}
void operator delete[](void* p) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept {
  std::free(p);
}
void operator delete(void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept {
  std::free(p);
}

namespace {

using mha::test::random_vector;

constexpr float kSentinel = -7777.f;

// One operation of the scenario: prepare() puts its outputs (and any state it
// changes) in a known state, call() runs it, observe() returns everything a
// caller can see of the outputs and state.
struct Op {
  std::string name;
  std::function<void()> prepare;
  std::function<mha_status()> call;
  std::function<std::vector<float>()> observe;
  bool allocates = true;  // on a fresh thread; false for the copy-only operations
};

struct Outcome {
  bool fired = false;
  mha_status status = MHA_OK, retry = MHA_OK;
  std::string message;
  std::vector<float> before, after, after_retry;
};

// Runs fn on a fresh thread (inside a task_arena(4) if asked), or on this one
// where no second thread may be started (qemu-user; there the scratch is warm
// after the first run and fewer allocations fail).
void on_fresh_thread(const std::function<void()>& fn, bool four_threads) {
  if (!mha::test::threads_allowed()) {
    fn();
    return;
  }
  std::thread t([&] {
    if (four_threads) {
      tbb::task_arena arena(4);
      arena.execute(fn);
    } else {
      fn();
    }
  });
  t.join();
}

// Runs op with the n-th allocation failing (n = 0: none), then, if that
// allocation was made, retries it without injection.
Outcome attempt(const Op& op, long n, bool four_threads) {
  Outcome o;
  // Prepared here, so that the fresh thread's scratch is still empty.
  op.prepare();
  o.before = op.observe();
  on_fresh_thread(
      [&] {
        if (n > 0) arm(n);
        o.status = op.call();
        o.fired = disarm();
        o.message = mha_last_error();
        o.after = op.observe();
      },
      four_threads);
  if (!o.fired) return o;
  // An absorbed failure (a worker's; the caller finished the work) has
  // updated the outputs: the retry starts from the prepared state, or an
  // accumulating call (sgemm with beta 1) would add its product twice.
  if (o.status == MHA_OK) op.prepare();
  on_fresh_thread(
      [&] {
        o.retry = op.call();
        o.after_retry = op.observe();
      },
      four_threads);
  return o;
}

void run_injection(const Op& op, bool four_threads) {
  INFO(op.name << (four_threads ? " in task_arena(4)" : " at 1 thread"));
  const Outcome ref = attempt(op, 0, four_threads);
  REQUIRE(ref.status == MHA_OK);
  long failures = 0;
  for (long n = 1;; ++n) {
    INFO("allocation " << n << " fails");
    const Outcome o = attempt(op, n, four_threads);
    if (!o.fired) {
      REQUIRE(o.status == MHA_OK);
      REQUIRE(o.after == ref.after);
      break;
    }
    ++failures;
    if (o.status == MHA_OK) {
      REQUIRE(o.after == ref.after);  // absorbed: a worker failed, the caller finished
    } else {
      REQUIRE(o.status == MHA_OUT_OF_MEMORY);
      REQUIRE(!o.message.empty());
      REQUIRE(o.after == o.before);
    }
    REQUIRE(o.retry == MHA_OK);
    REQUIRE(o.after_retry == ref.after);
  }
  if (op.allocates && mha::test::threads_allowed()) CHECK(failures > 0);
}

std::vector<float> sentinel(std::size_t n) {
  return std::vector<float>(n, kSentinel);
}

struct Scenario {
  static constexpr std::size_t E = 64, H = 4, B = 2, L = 128, Lkv = 96;
  std::vector<float> wq = random_vector(E * E, 1, -0.2f, 0.2f);
  std::vector<float> wk = random_vector(E * E, 2, -0.2f, 0.2f);
  std::vector<float> wv = random_vector(E * E, 3, -0.2f, 0.2f);
  std::vector<float> wo = random_vector(E * E, 4, -0.2f, 0.2f);
  std::vector<float> bias = random_vector(E, 5);
  mha_weights weights{wq.data(),   wk.data(),   wv.data(),   wo.data(),
                      bias.data(), bias.data(), bias.data(), bias.data()};
  mha_config cfg{E, H, 0, 0, 0};
  mha_attention_options options;
  mha_attention* attn = nullptr;
  std::vector<float> x = random_vector(B * L * E, 6), kv = random_vector(B * Lkv * E, 7);
  std::vector<float> out = sentinel(B * L * E), w = sentinel(B * H * L * Lkv);

  explicit Scenario(mha_dtype compute, mha_weight_format format = MHA_WEIGHTS_COMPUTE,
                    std::size_t group = 0, mha_activations act = MHA_ACTIVATIONS_FLOAT)
      : options{sizeof(mha_attention_options), compute, format, group, act} {
    REQUIRE(mha_attention_create_ex(&cfg, &weights, &options, &attn) == MHA_OK);
  }
  ~Scenario() { mha_attention_destroy(attn); }
  Scenario(const Scenario&) = delete;
  Scenario& operator=(const Scenario&) = delete;
};

// A handle written by a create: "not written" (the sentinel) is observable.
template <class T>
T* const kNoHandle = reinterpret_cast<T*>(std::uintptr_t{0x1234});

// A KV cache's operations on s's object: create, steps, truncate; a cache
// of `dtype` (MHA_KV_DEFAULT: mha_kv_cache_create, else the _ex creator),
// and for a quantized dtype the paged cache's create and step too.
void run_cache(Scenario& s, bool four_threads, mha_kv_dtype dtype) {
  constexpr std::size_t E = Scenario::E, B = Scenario::B, L = Scenario::L;
  const auto reset_out = [&] { s.out = sentinel(s.out.size()); };
  const mha_kv_cache_options options{sizeof(mha_kv_cache_options), dtype};
  const std::string name = dtype == MHA_KV_DEFAULT ? "" : ", dtype " + std::to_string(dtype);
  const auto create = [&](mha_kv_cache** out) {
    return dtype == MHA_KV_DEFAULT ? mha_kv_cache_create(s.attn, B, L, out)
                                   : mha_kv_cache_create_ex(s.attn, B, L, &options, out);
  };
  mha_kv_cache* cache_made = kNoHandle<mha_kv_cache>;
  run_injection(
      {"KV cache create" + name, [&] { cache_made = kNoHandle<mha_kv_cache>; },
       [&] {
         const mha_status st = create(&cache_made);
         if (st == MHA_OK) {
           mha_kv_cache_destroy(cache_made);
           cache_made = nullptr;
         }
         return st;
       },
       [&] { return std::vector<float>{cache_made == kNoHandle<mha_kv_cache> ? 1.f : 0.f}; }},
      four_threads);

  // Steps on a cache holding a 40-token prefix (the prepare step rebuilds it
  // with truncate and a prefill, so every attempt starts from the same cache).
  mha_kv_cache* cache = nullptr;
  REQUIRE(create(&cache) == MHA_OK);
  constexpr std::size_t kPrefix = 40, kChunk = 24;
  std::vector<float> prefix = random_vector(B * kPrefix * E, 8),
                     chunk = random_vector(B * kChunk * E, 9);
  std::vector<float> scratch_out(B * kPrefix * E);
  const auto with_prefix = [&] {
    REQUIRE(mha_kv_cache_truncate(cache, 0) == MHA_OK);
    REQUIRE(mha_attention_step(s.attn, cache, kPrefix, prefix.data(), prefix.data(), prefix.data(),
                               scratch_out.data()) == MHA_OK);
    reset_out();
  };
  const auto step_state = [&] {
    std::vector<float> v(s.out.begin(), s.out.begin() + B * kChunk * E);
    v.push_back(static_cast<float>(mha_kv_cache_length(cache)));
    return v;
  };
  for (std::size_t n_new : {std::size_t{1}, kChunk}) {
    run_injection({"KV step of " + std::to_string(n_new) + name, with_prefix,
                   [&] {
                     return mha_attention_step(s.attn, cache, n_new, chunk.data(), chunk.data(),
                                               chunk.data(), s.out.data());
                   },
                   step_state},
                  four_threads);
  }
  run_injection({"KV truncate" + name, with_prefix,
                 [&] { return mha_kv_cache_truncate(cache, 17); }, step_state, false},
                four_threads);
  mha_kv_cache_destroy(cache);
  if (dtype == MHA_KV_DEFAULT) return;

  mha_paged_kv_cache* paged_made = kNoHandle<mha_paged_kv_cache>;
  run_injection(
      {"paged cache create" + name, [&] { paged_made = kNoHandle<mha_paged_kv_cache>; },
       [&] {
         const mha_status st =
             mha_kv_cache_create_paged_ex(s.attn, 3, 32, 8, &options, &paged_made);
         if (st == MHA_OK) {
           mha_paged_kv_cache_destroy(paged_made);
           paged_made = nullptr;
         }
         return st;
       },
       [&] { return std::vector<float>{paged_made == kNoHandle<mha_paged_kv_cache> ? 1.f : 0.f}; }},
      four_threads);
  // Two slots: one prefilled with 40 tokens decodes one, the other takes a
  // prefill of 24 (from empty, each attempt).
  mha_paged_kv_cache* paged = nullptr;
  REQUIRE(mha_kv_cache_create_paged_ex(s.attn, 3, 32, 8, &options, &paged) == MHA_OK);
  const std::size_t slots[] = {2, 0}, q_start[] = {0, 1, 25};
  std::vector<float> pre = random_vector(40 * E, 20), rows = random_vector(25 * E, 21);
  std::vector<float> pre_out(40 * E);
  const std::size_t one = 2, one_q[] = {0, 40};
  const auto prepared = [&] {
    REQUIRE(mha_kv_cache_reset_slot(paged, 0) == MHA_OK);
    REQUIRE(mha_kv_cache_reset_slot(paged, 2) == MHA_OK);
    REQUIRE(mha_attention_step_ragged(s.attn, paged, 1, &one, one_q, pre.data(), pre.data(),
                                      pre.data(), pre_out.data()) == MHA_OK);
    reset_out();
  };
  const auto paged_state = [&] {
    std::vector<float> v(s.out.begin(), s.out.begin() + 25 * E);
    v.push_back(static_cast<float>(mha_kv_cache_slot_length(paged, 0)));
    v.push_back(static_cast<float>(mha_kv_cache_slot_length(paged, 2)));
    v.push_back(static_cast<float>(mha_kv_cache_free_blocks(paged)));
    return v;
  };
  run_injection({"paged step" + name, prepared,
                 [&] {
                   return mha_attention_step_ragged(s.attn, paged, 2, slots, q_start, rows.data(),
                                                    rows.data(), rows.data(), s.out.data());
                 },
                 paged_state},
                four_threads);
  mha_paged_kv_cache_destroy(paged);

  // A fork into an empty slot of a new cache: its block table is allocated,
  // and a partial block (35 = 32 + 3) copied.
  mha_paged_kv_cache* forked = nullptr;
  const auto fresh = [&] {
    mha_paged_kv_cache_destroy(forked);
    forked = nullptr;
    REQUIRE(mha_kv_cache_create_paged_ex(s.attn, 3, 32, 8, &options, &forked) == MHA_OK);
    REQUIRE(mha_attention_step_ragged(s.attn, forked, 1, &one, one_q, pre.data(), pre.data(),
                                      pre.data(), pre_out.data()) == MHA_OK);
  };
  const auto fork_state = [&] {
    return std::vector<float>{static_cast<float>(mha_kv_cache_slot_length(forked, 1)),
                              static_cast<float>(mha_kv_cache_free_blocks(forked))};
  };
  run_injection({"paged fork" + name, fresh,
                 [&] { return mha_kv_cache_fork_slot(forked, 2, 1, 35); }, fork_state},
                four_threads);
  mha_paged_kv_cache_destroy(forked);

  // A decode step of three slots forked from one 600-token prompt: the
  // plan finds their shared chunk of the key grid (in this thread's
  // scratch) and computes it once for the three.
  constexpr std::size_t kForked = 600;
  mha_paged_kv_cache* cascade = nullptr;
  const std::vector<float> long_pre = random_vector(kForked * E, 22);
  std::vector<float> long_out(kForked * E);
  const std::size_t all[] = {0, 1, 2}, each[] = {0, 1, 2, 3}, whole[] = {0, kForked};
  const auto forked3 = [&] {
    mha_paged_kv_cache_destroy(cascade);
    cascade = nullptr;
    REQUIRE(mha_kv_cache_create_paged_ex(s.attn, 3, 32, 32, &options, &cascade) == MHA_OK);
    REQUIRE(mha_attention_step_ragged(s.attn, cascade, 1, &one, whole, long_pre.data(),
                                      long_pre.data(), long_pre.data(), long_out.data()) == MHA_OK);
    REQUIRE(mha_kv_cache_fork_slot(cascade, 2, 0, kForked) == MHA_OK);
    REQUIRE(mha_kv_cache_fork_slot(cascade, 2, 1, kForked) == MHA_OK);
    reset_out();
  };
  const auto cascade_state = [&] {
    std::vector<float> v(s.out.begin(), s.out.begin() + 3 * E);
    for (std::size_t slot : all) {
      v.push_back(static_cast<float>(mha_kv_cache_slot_length(cascade, slot)));
    }
    v.push_back(static_cast<float>(mha_kv_cache_free_blocks(cascade)));
    v.push_back(static_cast<float>(mha_kv_cache_shared_chunks(cascade)));
    return v;
  };
  const auto cascade_step = [&] {
    return mha_attention_step_ragged(s.attn, cascade, 3, all, each, rows.data(), rows.data(),
                                     rows.data(), s.out.data());
  };
  run_injection({"paged cascade step" + name, forked3, cascade_step, cascade_state}, four_threads);
  forked3();
  REQUIRE(cascade_step() == MHA_OK);
  CHECK(mha_kv_cache_shared_chunks(cascade) > 0);
  mha_paged_kv_cache_destroy(cascade);

  // A tree step of 5 tokens onto a 40-token slot (its rows, paths and tree
  // record), then the accept of a path (its keys through scratch).
  mha_paged_kv_cache* treed = nullptr;
  const std::int32_t tree_parent[] = {-1, 0, 0, 2, -1};
  const std::size_t five[] = {0, 5}, tree_path[] = {0, 2, 3};
  const auto fresh_tree = [&] {
    mha_paged_kv_cache_destroy(treed);
    treed = nullptr;
    REQUIRE(mha_kv_cache_create_paged_ex(s.attn, 3, 32, 8, &options, &treed) == MHA_OK);
    REQUIRE(mha_attention_step_ragged(s.attn, treed, 1, &one, one_q, pre.data(), pre.data(),
                                      pre.data(), pre_out.data()) == MHA_OK);
    reset_out();
  };
  const auto tree_step = [&] {
    return mha_attention_step_tree(s.attn, treed, 1, &one, five, tree_parent, rows.data(),
                                   rows.data(), rows.data(), nullptr, s.out.data());
  };
  const auto tree_state = [&] {
    std::vector<float> v(s.out.begin(), s.out.begin() + 5 * E);
    v.push_back(static_cast<float>(mha_kv_cache_slot_length(treed, one)));
    v.push_back(static_cast<float>(mha_kv_cache_free_blocks(treed)));
    return v;
  };
  run_injection({"paged tree step" + name, fresh_tree, tree_step, tree_state}, four_threads);
  run_injection({"accept path" + name,
                 [&] {
                   fresh_tree();
                   REQUIRE(tree_step() == MHA_OK);
                 },
                 [&] { return mha_kv_cache_accept_path(treed, one, 3, tree_path); }, tree_state},
                four_threads);
  mha_paged_kv_cache_destroy(treed);
}

// An MLA layer's operations (mha_mla_*): create, forward (to its own buffer
// and in place), and a latent cache of `dtype`, contiguous and paged:
// create and steps. Sizes where every product packs and the core tiles.
void run_mla(bool four_threads, mha_kv_dtype dtype, const mha_attention_options* opt = nullptr) {
  constexpr std::size_t E = 48, B = 2, L = 64;
  mha_mla_config c{};
  c.struct_size = sizeof c;
  c.hidden_size = E;
  c.num_heads = 4;
  c.q_lora_rank = 24;
  c.kv_lora_rank = 32;
  c.qk_nope_head_dim = 8;
  c.qk_rope_head_dim = 4;
  c.v_head_dim = 12;
  c.yarn_factor = 40;
  c.yarn_original_max_position = 4096;
  c.yarn_mscale = c.yarn_mscale_all_dim = 1;
  const mha::test::MlaLayer layer(c, 30);
  const mha_mla_weights weights = layer.view();
  const std::string name = ", dtype " + std::to_string(dtype);

  mha_mla* made = kNoHandle<mha_mla>;
  run_injection({"MLA create", [&] { made = kNoHandle<mha_mla>; },
                 [&] {
                   const mha_status st = mha_mla_create(&layer.cfg, &weights, opt, &made);
                   if (st == MHA_OK) {
                     mha_mla_destroy(made);
                     made = nullptr;
                   }
                   return st;
                 },
                 [&] { return std::vector<float>{made == kNoHandle<mha_mla> ? 1.f : 0.f}; }},
                four_threads);
  mha_mla* mla = nullptr;
  REQUIRE(mha_mla_create(&layer.cfg, &weights, opt, &mla) == MHA_OK);

  constexpr std::size_t kSeq = 24;
  const std::vector<float> x = random_vector(B * L * E, 31);
  std::vector<float> out = sentinel(B * L * E), buf;
  const auto reset_out = [&] { out = sentinel(out.size()); };
  if (dtype == MHA_KV_DEFAULT) {
    run_injection({"MLA forward", reset_out,
                   [&] { return mha_mla_forward(mla, B, kSeq, 5, x.data(), out.data()); },
                   [&] { return out; }},
                  four_threads);
    run_injection({"MLA forward in place", [&] { buf = x; },
                   [&] { return mha_mla_forward(mla, B, kSeq, 5, buf.data(), buf.data()); },
                   [&] { return buf; }},
                  four_threads);
  }

  const mha_kv_cache_options options{sizeof(mha_kv_cache_options), dtype};
  mha_kv_cache* cache_made = kNoHandle<mha_kv_cache>;
  run_injection(
      {"MLA cache create" + name, [&] { cache_made = kNoHandle<mha_kv_cache>; },
       [&] {
         const mha_status st = mha_mla_kv_cache_create(mla, B, L, &options, &cache_made);
         if (st == MHA_OK) {
           mha_kv_cache_destroy(cache_made);
           cache_made = nullptr;
         }
         return st;
       },
       [&] { return std::vector<float>{cache_made == kNoHandle<mha_kv_cache> ? 1.f : 0.f}; }},
      four_threads);
  // Steps on a cache holding a 20-token prefix, rebuilt by each prepare.
  mha_kv_cache* cache = nullptr;
  REQUIRE(mha_mla_kv_cache_create(mla, B, L, &options, &cache) == MHA_OK);
  constexpr std::size_t kPrefix = 20, kChunk = 12;
  const std::vector<float> prefix = random_vector(B * kPrefix * E, 32),
                           chunk = random_vector(B * kChunk * E, 33);
  std::vector<float> prefix_out(prefix.size());
  const auto with_prefix = [&] {
    REQUIRE(mha_kv_cache_truncate(cache, 0) == MHA_OK);
    REQUIRE(mha_mla_step(mla, cache, kPrefix, prefix.data(), prefix_out.data()) == MHA_OK);
    reset_out();
    buf = chunk;
  };
  const auto step_state = [&] {
    std::vector<float> v(out.begin(), out.begin() + B * kChunk * E);
    v.insert(v.end(), buf.begin(), buf.end());
    v.push_back(static_cast<float>(mha_kv_cache_length(cache)));
    return v;
  };
  for (std::size_t n_new : {std::size_t{1}, kChunk}) {
    run_injection(
        {"MLA step of " + std::to_string(n_new) + name, with_prefix,
         [&] { return mha_mla_step(mla, cache, n_new, chunk.data(), out.data()); }, step_state},
        four_threads);
  }
  run_injection(
      {"MLA step in place" + name, with_prefix,
       [&] { return mha_mla_step(mla, cache, kChunk, buf.data(), buf.data()); }, step_state},
      four_threads);
  mha_kv_cache_destroy(cache);

  mha_paged_kv_cache* paged_made = kNoHandle<mha_paged_kv_cache>;
  run_injection(
      {"MLA paged cache create" + name, [&] { paged_made = kNoHandle<mha_paged_kv_cache>; },
       [&] {
         const mha_status st = mha_mla_kv_cache_create_paged(mla, 3, 16, 8, &options, &paged_made);
         if (st == MHA_OK) {
           mha_paged_kv_cache_destroy(paged_made);
           paged_made = nullptr;
         }
         return st;
       },
       [&] { return std::vector<float>{paged_made == kNoHandle<mha_paged_kv_cache> ? 1.f : 0.f}; }},
      four_threads);
  // Slot 2 prefilled with 20 tokens decodes one; slot 0 takes a prefill of
  // 12 (from empty, each attempt).
  mha_paged_kv_cache* paged = nullptr;
  REQUIRE(mha_mla_kv_cache_create_paged(mla, 3, 16, 8, &options, &paged) == MHA_OK);
  const std::size_t slots[] = {2, 0}, q_start[] = {0, 1, 1 + kChunk};
  const std::size_t two = 2, prefix_q[] = {0, kPrefix};
  const std::vector<float> rows = random_vector((1 + kChunk) * E, 34);
  const auto prepared = [&] {
    REQUIRE(mha_kv_cache_reset_slot(paged, 0) == MHA_OK);
    REQUIRE(mha_kv_cache_reset_slot(paged, 2) == MHA_OK);
    REQUIRE(mha_mla_step_ragged(mla, paged, 1, &two, prefix_q, prefix.data(), prefix_out.data()) ==
            MHA_OK);
    reset_out();
    buf = rows;
  };
  const auto paged_state = [&] {
    std::vector<float> v(out.begin(), out.begin() + (1 + kChunk) * E);
    v.insert(v.end(), buf.begin(), buf.end());
    v.push_back(static_cast<float>(mha_kv_cache_slot_length(paged, 0)));
    v.push_back(static_cast<float>(mha_kv_cache_slot_length(paged, 2)));
    v.push_back(static_cast<float>(mha_kv_cache_free_blocks(paged)));
    return v;
  };
  run_injection(
      {"MLA paged step" + name, prepared,
       [&] { return mha_mla_step_ragged(mla, paged, 2, slots, q_start, rows.data(), out.data()); },
       paged_state},
      four_threads);
  run_injection(
      {"MLA paged step in place" + name, prepared,
       [&] { return mha_mla_step_ragged(mla, paged, 2, slots, q_start, buf.data(), buf.data()); },
       paged_state},
      four_threads);
  mha_paged_kv_cache_destroy(paged);
  mha_mla_destroy(mla);
}

// The attention object's operations, computing in `compute` on weights in
// `format` (groups of `group`), with activations `act`.
void run_attention(bool four_threads, mha_dtype compute,
                   mha_weight_format format = MHA_WEIGHTS_COMPUTE, std::size_t group = 0,
                   mha_activations act = MHA_ACTIVATIONS_FLOAT) {
  Scenario s(compute, format, group, act);
  constexpr std::size_t E = Scenario::E, B = Scenario::B, L = Scenario::L, Lkv = Scenario::Lkv;
  const auto reset_out = [&] {
    s.out = sentinel(s.out.size());
    s.w = sentinel(s.w.size());
  };
  const auto outputs = [&] {
    std::vector<float> v = s.out;
    v.insert(v.end(), s.w.begin(), s.w.end());
    return v;
  };

  // A create (create(&handle) gives its status), whose handle is compared
  // through the results of other operations: here only "written or not"
  // counts.
  mha_attention* created = kNoHandle<mha_attention>;
  const auto run_create = [&](const char* name, auto create) {
    run_injection(
        {name, [&] { created = kNoHandle<mha_attention>; },
         [&] {
           const mha_status st = create(&created);
           if (st == MHA_OK) {
             mha_attention_destroy(created);
             created = nullptr;
           }
           return st;
         },
         [&] { return std::vector<float>{created == kNoHandle<mha_attention> ? 1.f : 0.f}; }},
        four_threads);
  };
  run_create("attention create", [&](mha_attention** out) {
    return mha_attention_create_ex(&s.cfg, &s.weights, &s.options, out);
  });
  if (format == MHA_WEIGHTS_INT8) {
    // The same weights given as codes (every code and a scale of 1/64).
    std::vector<std::int8_t> codes(E * E);
    for (std::size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<std::int8_t>(i * 37);
    const std::vector<float> scales(E, 1.0f / 64);
    const float* sc = scales.data();
    const mha_int8_weights w8{sizeof(mha_int8_weights),
                              codes.data(),
                              codes.data(),
                              codes.data(),
                              codes.data(),
                              sc,
                              sc,
                              sc,
                              sc,
                              nullptr,
                              nullptr,
                              nullptr,
                              nullptr};
    run_create("attention create from int8 codes", [&](mha_attention** out) {
      return mha_attention_create_int8(&s.cfg, &w8, &s.options, out);
    });
    // The same codes as llama.cpp's Q8_0 blocks, a scale of 1/64 (fp16
    // 0x2400) each; with this scenario's compute and activations.
    std::vector<unsigned char> blocks(E * E / 32 * 34);
    for (std::size_t b = 0; b < E * E / 32; ++b) {
      blocks[b * 34] = 0x00;
      blocks[b * 34 + 1] = 0x24;
      std::memcpy(&blocks[b * 34 + 2], codes.data() + b * 32, 32);
    }
    const void* bp = blocks.data();
    const mha_block_weights wb{sizeof(mha_block_weights),
                               MHA_BLOCKS_Q8_0,
                               bp,
                               bp,
                               bp,
                               bp,
                               nullptr,
                               nullptr,
                               nullptr,
                               nullptr};
    mha_attention_options blocks_options = s.options;
    blocks_options.weight_group = 32;
    run_create("attention create from Q8_0 blocks", [&](mha_attention** out) {
      return mha_attention_create_blocks(&s.cfg, &wb, &blocks_options, out);
    });
  }

  if (format == MHA_WEIGHTS_UINT4) {
    // A GPTQ checkpoint of this scenario's group: every E x E layer the
    // same nibbles, scales 1/64 (fp16 0x2400), stored zeros 7.
    const std::size_t groups = group == 0 ? 1 : E / group;
    std::vector<std::int32_t> qweight(E / 8 * E), qzeros(groups * E / 8, 0x77777777);
    for (std::size_t i = 0; i < qweight.size(); ++i) {
      qweight[i] = static_cast<std::int32_t>(0x9E3779B9u * static_cast<std::uint32_t>(i + 1));
    }
    const std::vector<std::uint16_t> scales(groups * E, 0x2400);
    const mha_checkpoint_matrix m{qweight.data(), qzeros.data(), scales.data(), nullptr, nullptr};
    const mha_checkpoint_weights wc{sizeof wc, MHA_CHECKPOINT_GPTQ, group, m, m, m, m};
    run_create("attention create from a GPTQ checkpoint", [&](mha_attention** out) {
      return mha_attention_create_checkpoint(&s.cfg, &wc, &s.options, out);
    });
    if (groups > 1) {
      // Act order: the first and last inputs' groups swapped.
      std::vector<std::int32_t> g_idx(E);
      for (std::size_t p = 0; p < E; ++p) g_idx[p] = static_cast<std::int32_t>(p / group);
      std::swap(g_idx[0], g_idx[E - 1]);
      mha_checkpoint_weights act = wc;
      act.q.g_idx = act.k.g_idx = act.v.g_idx = act.out.g_idx = g_idx.data();
      run_create("attention create from an act-order GPTQ checkpoint", [&](mha_attention** out) {
        return mha_attention_create_checkpoint(&s.cfg, &act, &s.options, out);
      });
      // Its products gather each input row first (their own scratch).
      mha_attention* ordered = nullptr;
      REQUIRE(mha_attention_create_checkpoint(&s.cfg, &act, &s.options, &ordered) == MHA_OK);
      run_injection({"forward self, act-order checkpoint", reset_out,
                     [&] {
                       return mha_attention_forward(ordered, B, L, L, s.x.data(), s.x.data(),
                                                    s.x.data(), nullptr, s.out.data(), nullptr, 0);
                     },
                     outputs},
                    four_threads);
      mha_attention_destroy(ordered);
    }
  }

  const float* x = s.x.data();
  run_injection({"forward self", reset_out,
                 [&] {
                   return mha_attention_forward(s.attn, B, L, L, x, x, x, nullptr, s.out.data(),
                                                nullptr, 0);
                 },
                 outputs},
                four_threads);
  const float* kv = s.kv.data();
  run_injection({"forward cross with weights", reset_out,
                 [&] {
                   return mha_attention_forward(s.attn, B, L, Lkv, x, kv, kv, nullptr, s.out.data(),
                                                s.w.data(), 0);
                 },
                 outputs},
                four_threads);
  mha_mask causal{};
  causal.causal = 1;
  run_injection({"forward self, causal, averaged weights", reset_out,
                 [&] {
                   return mha_attention_forward(s.attn, B, L, L, x, x, x, &causal, s.out.data(),
                                                s.w.data(), 1);
                 },
                 outputs},
                four_threads);

  run_cache(s, four_threads, MHA_KV_DEFAULT);
}

void run_all(bool four_threads) {
  run_attention(four_threads, MHA_FP32);
  constexpr std::size_t M = 128;
  std::vector<float> a = random_vector(M * M, 10), b = random_vector(M * M, 11);
  std::vector<float> c = sentinel(M * M), cbias = random_vector(M, 15);
  const auto reset_c = [&] { c = sentinel(M * M); };
  const auto c_state = [&] { return c; };
  // Read in place, without packing: nothing to allocate at this size.
  run_injection({"sgemm NN", reset_c,
                 [&] {
                   return mha_sgemm('N', 'N', M, M, M, 1.f, a.data(), M, b.data(), M, 0.f, c.data(),
                                    M);
                 },
                 c_state, false},
                four_threads);
  run_injection({"sgemm TT, beta 1", [&] { c = random_vector(M * M, 12); },
                 [&] {
                   return mha_sgemm('T', 'T', M, M, M, 0.5f, a.data(), M, b.data(), M, 1.f,
                                    c.data(), M);
                 },
                 c_state},
                four_threads);
  mha_sgemm_packed_b* packed = kNoHandle<mha_sgemm_packed_b>;
  run_injection(
      {"sgemm pack_b", [&] { packed = kNoHandle<mha_sgemm_packed_b>; },
       [&] {
         const mha_status st = mha_sgemm_pack_b('T', M, M, b.data(), M, &packed);
         if (st == MHA_OK) {
           mha_sgemm_packed_b_destroy(packed);
           packed = nullptr;
         }
         return st;
       },
       [&] { return std::vector<float>{packed == kNoHandle<mha_sgemm_packed_b> ? 1.f : 0.f}; }},
      four_threads);
  REQUIRE(mha_sgemm_pack_b('N', M, M, b.data(), M, &packed) == MHA_OK);
  run_injection({"sgemm packed", reset_c,
                 [&] {
                   return mha_sgemm_packed('N', M, 1.f, a.data(), M, packed, 0.f, c.data(), M,
                                           cbias.data());
                 },
                 c_state},
                four_threads);
  mha_sgemm_packed_b_destroy(packed);

  constexpr std::size_t R = 64, C = 1024;
  std::vector<float> sx = random_vector(R * C, 13), sy = sentinel(R * C);
  run_injection({"softmax in place", [&] { sy = sx; },
                 [&] { return mha_softmax(R, C, sy.data(), C, sy.data(), C, nullptr); },
                 [&] { return sy; }, false},
                four_threads);
  constexpr std::size_t RB = 2, RS = 64, RH = 4, RD = 256;
  std::vector<float> rx = random_vector(RB * RS * RH * RD, 14), ry = sentinel(RB * RS * RH * RD);
  run_injection({"split_heads", [&] { ry = sentinel(ry.size()); },
                 [&] { return mha_split_heads(RB, RS, RH, RD, rx.data(), ry.data()); },
                 [&] { return ry; }, false},
                four_threads);
}

// A bf16 object and the bf16 GEMMs, on the kernels MHA_BF16_KERNEL forces
// (ctest runs this per kernel set) or the CPU's own.
void run_bf16(bool four_threads) {
  run_attention(four_threads, MHA_BF16);
  constexpr std::size_t M = 160;
  std::vector<std::uint16_t> a(M * M), b(M * M);
  mha_fp32_to_bf16(a.size(), random_vector(a.size(), 16).data(), a.data());
  mha_fp32_to_bf16(b.size(), random_vector(b.size(), 17).data(), b.data());
  std::vector<float> a32 = random_vector(M * M, 18), c = sentinel(M * M);
  const auto reset_c = [&] { c = sentinel(M * M); };
  const auto c_state = [&] { return c; };
  // beta 0: a run whose failed worker the caller absorbed is retried on its
  // own output.
  run_injection({"gemm_bf16 NT", reset_c,
                 [&] {
                   return mha_gemm_bf16('N', 'T', M, M, M, 0.5f, a.data(), M, b.data(), M, 0.f,
                                        c.data(), M);
                 },
                 c_state},
                four_threads);
  mha_gemm_bf16_packed_b* packed = kNoHandle<mha_gemm_bf16_packed_b>;
  run_injection(
      {"gemm_bf16 pack_b", [&] { packed = kNoHandle<mha_gemm_bf16_packed_b>; },
       [&] {
         const mha_status st = mha_gemm_bf16_pack_b('T', M, M, b.data(), M, &packed);
         if (st == MHA_OK) {
           mha_gemm_bf16_packed_b_destroy(packed);
           packed = nullptr;
         }
         return st;
       },
       [&] { return std::vector<float>{packed == kNoHandle<mha_gemm_bf16_packed_b> ? 1.f : 0.f}; }},
      four_threads);
  REQUIRE(mha_gemm_bf16_pack_b('N', M, M, b.data(), M, &packed) == MHA_OK);
  run_injection({"gemm_bf16 packed, fp32 A", reset_c,
                 [&] {
                   return mha_gemm_bf16_packed('N', M, 1.f, MHA_FP32, a32.data(), M, packed, 0.f,
                                               c.data(), M);
                 },
                 c_state},
                four_threads);
  mha_gemm_bf16_packed_b_destroy(packed);
}

}  // namespace

TEST_CASE("allocation failures at 1 thread: out of memory, nothing changed, retry exact",
          "[hardening][oom]") {
  mha_set_num_threads(1);
  run_all(false);
  mha_set_num_threads(0);
}

TEST_CASE("allocation failures in a task_arena(4): out of memory, nothing changed, retry exact",
          "[hardening][oom]") {
  if (!mha::test::threads_allowed()) {
    WARN("skipped: no second thread may be started here");
    return;
  }
  run_all(true);
}

TEST_CASE("allocation failures, quantized weights: out of memory, nothing changed, retry exact",
          "[hardening][oom][quant]") {
  for (bool four_threads : {false, true}) {
    if (four_threads && !mha::test::threads_allowed()) {
      WARN("skipped in a task_arena(4): no second thread may be started here");
      break;
    }
    mha_set_num_threads(four_threads ? 0 : 1);
    run_attention(four_threads, MHA_FP32, MHA_WEIGHTS_INT8);
    run_attention(four_threads, MHA_FP32, MHA_WEIGHTS_UINT4, 32);
    run_attention(four_threads, MHA_BF16, MHA_WEIGHTS_INT4, 64);  // weight-only, the bf16 core
    // int8 activations: the int8 products' scratch (the quantized rows, and
    // uint4's group sums) on both cores, per-row int8 and grouped int4 and
    // uint4 weights.
    run_attention(four_threads, MHA_FP32, MHA_WEIGHTS_INT8, 0, MHA_ACTIVATIONS_INT8);
    run_attention(four_threads, MHA_BF16, MHA_WEIGHTS_INT4, 128, MHA_ACTIVATIONS_INT8);
    run_attention(four_threads, MHA_FP32, MHA_WEIGHTS_UINT4, 64, MHA_ACTIVATIONS_INT8);
  }
  mha_set_num_threads(0);
}

TEST_CASE("allocation failures, quantized KV caches: out of memory, nothing changed, retry exact",
          "[hardening][oom][kv_quant]") {
  for (bool four_threads : {false, true}) {
    if (four_threads && !mha::test::threads_allowed()) {
      WARN("skipped in a task_arena(4): no second thread may be started here");
      break;
    }
    mha_set_num_threads(four_threads ? 0 : 1);
    for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
      Scenario s(compute);
      for (mha_kv_dtype dtype : {MHA_KV_INT8, MHA_KV_FP8_E4M3}) run_cache(s, four_threads, dtype);
    }
  }
  mha_set_num_threads(0);
}

TEST_CASE("allocation failures, bf16: out of memory, nothing changed, retry exact",
          "[hardening][oom][bf16]") {
  mha_set_num_threads(1);
  run_bf16(false);
  mha_set_num_threads(0);
  if (!mha::test::threads_allowed()) {
    WARN("skipped in a task_arena(4): no second thread may be started here");
    return;
  }
  run_bf16(true);
}

TEST_CASE("allocation failures, MLA: out of memory, nothing changed, retry exact",
          "[hardening][oom][mla]") {
  for (bool four_threads : {false, true}) {
    if (four_threads && !mha::test::threads_allowed()) {
      WARN("skipped in a task_arena(4): no second thread may be started here");
      break;
    }
    mha_set_num_threads(four_threads ? 0 : 1);
    for (mha_kv_dtype dtype : {MHA_KV_DEFAULT, MHA_KV_INT8}) run_mla(four_threads, dtype);
    // int8 weights and activations: the int8 products' packs and scratch.
    mha_attention_options w8a8{};
    w8a8.struct_size = sizeof w8a8;
    w8a8.weight_format = MHA_WEIGHTS_INT8;
    w8a8.activations = MHA_ACTIVATIONS_INT8;
    run_mla(four_threads, MHA_KV_DEFAULT, &w8a8);
  }
  mha_set_num_threads(0);
}
