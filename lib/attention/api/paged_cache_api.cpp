// Paged KV cache API (mha.h, "Paged KV cache for continuous batching"): every
// check happens in the helpers below, which the C++ class (mha/kv_cache.hpp)
// calls directly and the C entry points wrap in guarded().
#include <mha/mha.h>

#include <cstdint>
#include <memory>
#include <mha/kv_cache.hpp>
#include <utility>
#include <vector>

#include "attention/api/checks.hpp"
#include "attention/cache/paged_cache.hpp"
#include "attention/engine/engine.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"

namespace mha {
namespace detail {

mha_paged_kv_cache* make_paged_cache(const AttentionEngine& e, std::size_t num_slots,
                                     std::size_t block_tokens, std::size_t num_blocks,
                                     const mha_kv_cache_options* options, const char* fn) {
  const mha_kv_dtype dtype = kv_dtype_of(options, fn);
  check_arg(num_slots > 0, fn, ": num_slots must be > 0, got 0");
  check_arg(block_tokens > 0, fn, ": block_tokens must be > 0, got 0");
  check_arg(num_blocks > 0, fn, ": num_blocks must be > 0, got 0");
  // Per slot: a block table and three counters, all allocated here.
  constexpr std::size_t per_slot =
      (sizeof(std::vector<std::size_t>) + 3 * sizeof(std::size_t)) / sizeof(float);
  float_bytes(checked_mul(num_slots, per_slot, "num_slots (per-slot tables)"),
              "num_slots (per-slot tables)");
  const auto& s = e.shape();
  // Each block's K is padded to whole strips and 16 floats; nr + 16 bounds it.
  const std::size_t tokens =
      checked_mul(num_blocks, block_tokens + e.gemm().nr + 16, "pool tokens");
  checked_mul(checked_mul(tokens, s.kv_dim() + 16, "pool floats"), 2 * sizeof(float),
              "paged KV cache bytes");
  auto cache = std::make_unique<mha_paged_kv_cache>();
  cache->cache =
      std::make_unique<PagedKvCache>(e, s, e.kv_type(dtype), num_slots, block_tokens, num_blocks);
  return cache.release();
}

void check_ragged_slots(PagedKvCache& c, std::size_t num, const std::size_t* slots,
                        const std::size_t* q_start, const char* fn) {
  check_arg(num == 0 || slots != nullptr, fn, ": slots must be [num] slot ids, got NULL");
  check_arg(q_start != nullptr, fn, ": q_start must be [num + 1] offsets, got NULL");
  check_arg(q_start[0] == 0, fn, ": q_start[0] must be 0, got ", q_start[0]);
  const std::size_t step = c.next_step();
  for (std::size_t i = 0; i < num; ++i) {
    check_arg(slots[i] < c.num_slots(), fn, ": slots[", i, "] must be < num_slots (", c.num_slots(),
              "), got ", slots[i]);
    check_arg(c.mark(slots[i], step), fn, ": slots[", i, "] (", slots[i], ") appears twice");
    check_arg(!c.tree_pending(slots[i]), fn, ": slot ", slots[i],
              " holds a tree step's tokens; accept a path first (mha_kv_cache_accept_path)");
    check_arg(q_start[i + 1] >= q_start[i], fn, ": q_start[", i + 1, "] must be >= q_start[", i,
              "] (", q_start[i], "), got ", q_start[i + 1]);
  }
}

void check_ragged_room(const PagedKvCache& c, std::size_t num, const std::size_t* slots,
                       const std::size_t* q_start, std::size_t window, const char* fn) {
  for (std::size_t i = 0; i < num; ++i) {
    const std::size_t slot = slots[i], len = c.length(slot), first = c.first_kept(slot);
    check_arg(q_start[i + 1] - q_start[i] <= c.num_blocks() * c.block_tokens() - (len - first), fn,
              ": slot ", slot, " would exceed the whole pool (", c.num_blocks(), " blocks of ",
              c.block_tokens(), " tokens)");
    // Its first new query (position len) must read no dropped position: its
    // window reaches back to len + 1 - window (first <= len, so no wrap),
    // and the core reads from the key tile holding that key.
    if (first != 0 &&
        (window == 0 || window > len + 1 - first || c.first_read(len + 1 - window) < first)) {
      fail(MHA_INVALID_ARGUMENT, fn, ": slot ", slot, " holds positions from ", first,
           " on (a window dropped the ones before), but this step's window (", window,
           "; 0 = none) reaches further back");
    }
  }
}

void check_tree_parents(std::size_t num, const std::size_t* q_start, const std::int32_t* parent,
                        const char* fn) {
  check_arg(q_start[num] == 0 || parent != nullptr, fn,
            ": parent must be [q_start[num]] indices, got NULL");
  for (std::size_t i = 0; i < num; ++i) {
    for (std::size_t r = q_start[i]; r < q_start[i + 1]; ++r) {
      const std::int32_t p = parent[r];
      check_arg(p == -1 || (p >= 0 && static_cast<std::size_t>(p) < r - q_start[i]), fn,
                ": parent[", r, "] must be -1 or the index of an earlier token of its slot (< ",
                r - q_start[i], "), got ", p);
    }
  }
}

void check_tree_path(const PagedKvCache& c, std::size_t slot, std::size_t n,
                     const std::size_t* path, const char* fn) {
  check_arg(c.tree_pending(slot), fn, ": slot ", slot,
            "'s last step was not a tree step (mha_attention_step_tree)");
  const std::vector<std::int32_t>& tree = c.tree(slot);
  check_arg(n <= tree.size(), fn, ": n must be <= the tree's tokens (", tree.size(), "), got ", n);
  check_arg(n == 0 || path != nullptr, fn, ": path must be [n] indices, got NULL");
  for (std::size_t j = 0; j < n; ++j) {
    check_arg(path[j] < tree.size(), fn, ": path[", j, "] must be < the tree's tokens (",
              tree.size(), "), got ", path[j]);
    const std::int32_t want = j == 0 ? -1 : static_cast<std::int32_t>(path[j - 1]);
    check_arg(tree[path[j]] == want, fn, ": path[", j, "] (", path[j], ") must be ",
              j == 0 ? "a root (parent -1)" : "a child of path[j - 1]", "; its parent is ",
              tree[path[j]]);
  }
}

}  // namespace detail
namespace {

using detail::check_arg;
using detail::checked_mul;

mha_paged_kv_cache* make_paged(const mha_attention* attn, std::size_t num_slots,
                               std::size_t block_tokens, std::size_t num_blocks,
                               const mha_kv_cache_options* options = nullptr) {
  check_arg(attn != nullptr, "mha_kv_cache_create_paged: attn must not be NULL");
  return detail::make_paged_cache(*attn->engine, num_slots, block_tokens, num_blocks, options,
                                  "mha_kv_cache_create_paged");
}

detail::PagedKvCache& slot_cache(mha_paged_kv_cache* cache, std::size_t slot, const char* fn) {
  check_arg(cache != nullptr, fn, ": cache must not be NULL");
  check_arg(slot < cache->cache->num_slots(), fn, ": slot must be < num_slots (",
            cache->cache->num_slots(), "), got ", slot);
  return *cache->cache;
}

void truncate_slot(mha_paged_kv_cache* cache, std::size_t slot, std::size_t len) {
  detail::PagedKvCache& c = slot_cache(cache, slot, "mha_kv_cache_truncate_slot");
  check_arg(len <= c.length(slot), "mha_kv_cache_truncate_slot: len must be <= the slot's length (",
            c.length(slot), "), got ", len);
  check_arg(len == 0 || len >= c.first_kept(slot),
            "mha_kv_cache_truncate_slot: len must be 0 or >= the first position the slot still "
            "holds (",
            c.first_kept(slot), ": a window dropped the ones before), got ", len);
  check_arg(!c.tree_pending(slot) || len <= c.tree_base(slot),
            "mha_kv_cache_truncate_slot: the slot holds a tree step's tokens from position ",
            c.tree_base(slot), "; accept a path, or truncate to at most that, got ", len);
  c.truncate(slot, len);
}

void fork_slot(mha_paged_kv_cache* cache, std::size_t src, std::size_t dst, std::size_t len) {
  const char* fn = "mha_kv_cache_fork_slot";
  detail::PagedKvCache& c = slot_cache(cache, src, fn);
  check_arg(dst < c.num_slots(), fn, ": dst must be < num_slots (", c.num_slots(), "), got ", dst);
  check_arg(dst != src, fn, ": dst must differ from src (", src, ")");
  check_arg(c.length(dst) == 0, fn, ": slot dst (", dst, ") must be empty; it holds ",
            c.length(dst), " positions (reset it first)");
  check_arg(len <= c.length(src), fn, ": len must be <= slot src's length (", c.length(src),
            "), got ", len);
  check_arg(len == 0 || len >= c.first_kept(src), fn,
            ": len must be 0 or >= the first position slot src still holds (", c.first_kept(src),
            ": a window dropped the ones before), got ", len);
  check_arg(!c.tree_pending(src) || len <= c.tree_base(src), fn,
            ": slot src holds a tree step's tokens from position ", c.tree_base(src),
            "; accept a path first, or fork at most that, got ", len);
  c.fork(src, dst, len);
}

// A step's checks (tree: its parents too); false if it has no rows (nothing to do).
bool check_step(const mha_attention* attn, mha_paged_kv_cache* cache, std::size_t num,
                const std::size_t* slots, const std::size_t* q_start, const std::int32_t* parent,
                bool tree, const float* query, const float* key, const float* value,
                const mha_mods* mods, float* out, const char* fn, detail::AttentionMods& m) {
  check_arg(attn != nullptr, fn, ": attn must not be NULL");
  check_arg(cache != nullptr, fn, ": cache must not be NULL");
  detail::PagedKvCache& c = *cache->cache;
  check_arg(c.owner() == attn->engine.get(), fn,
            ": cache was created for a different mha_attention");
  detail::check_ragged_slots(c, num, slots, q_start, fn);
  if (tree) detail::check_tree_parents(num, q_start, parent, fn);
  const auto& s = attn->engine->shape();
  const std::size_t rows = q_start[num];
  using detail::tensor_extent;
  const auto eq = tensor_extent(query, {rows, s.embed_dim}, "query [q_start[num], embed_dim]");
  const auto ek = tensor_extent(key, {rows, s.kdim}, "key [q_start[num], kdim]");
  const auto ev = tensor_extent(value, {rows, s.vdim}, "value [q_start[num], vdim]");
  const auto eo = tensor_extent(out, {rows, s.embed_dim}, "out [q_start[num], embed_dim]");
  m = detail::resolve_mods(mods, s, rows, {eq, ek, ev, eo}, fn);
  detail::check_ragged_room(c, num, slots, q_start, m.window, fn);
  if (rows == 0) return false;
  check_arg(query != nullptr, fn, ": query must not be NULL");
  check_arg(key != nullptr, fn, ": key must not be NULL");
  check_arg(value != nullptr, fn, ": value must not be NULL");
  check_arg(out != nullptr, fn, ": out must not be NULL");
  // out is written only after every input has been read: in place is safe.
  detail::check_no_overlap(eo, eq, true, "out", "query");
  detail::check_no_overlap(eo, ek, true, "out", "key");
  detail::check_no_overlap(eo, ev, true, "out", "value");
  return true;
}

void step_ragged(const mha_attention* attn, mha_paged_kv_cache* cache, std::size_t num,
                 const std::size_t* slots, const std::size_t* q_start, const float* query,
                 const float* key, const float* value, const mha_mods* mods, float* out,
                 const char* fn) {
  detail::AttentionMods m;
  if (check_step(attn, cache, num, slots, q_start, nullptr, false, query, key, value, mods, out, fn,
                 m)) {
    attn->engine->step_ragged(*cache->cache, num, slots, q_start, query, key, value, m, out);
  }
}

void step_tree(const mha_attention* attn, mha_paged_kv_cache* cache, std::size_t num,
               const std::size_t* slots, const std::size_t* q_start, const std::int32_t* parent,
               const float* query, const float* key, const float* value, const mha_mods* mods,
               float* out) {
  detail::AttentionMods m;
  if (check_step(attn, cache, num, slots, q_start, parent, true, query, key, value, mods, out,
                 "mha_attention_step_tree", m)) {
    attn->engine->step_tree(*cache->cache, num, slots, q_start, parent, query, key, value, m, out);
  }
}

void accept_path(mha_paged_kv_cache* cache, std::size_t slot, std::size_t n,
                 const std::size_t* path) {
  const char* fn = "mha_kv_cache_accept_path";
  detail::PagedKvCache& c = slot_cache(cache, slot, fn);
  detail::check_tree_path(c, slot, n, path, fn);
  c.accept(slot, n, path);
}

}  // namespace

PagedKvCache::PagedKvCache(const MultiheadAttention& attn, std::size_t num_slots,
                           std::size_t block_tokens, std::size_t num_blocks)
    : attn_(attn.handle()), handle_(make_paged(attn_, num_slots, block_tokens, num_blocks)) {}
PagedKvCache::PagedKvCache(const MultiheadAttention& attn, std::size_t num_slots,
                           std::size_t block_tokens, std::size_t num_blocks, mha_kv_dtype dtype)
    : attn_(attn.handle()) {
  const mha_kv_cache_options options{sizeof(mha_kv_cache_options), dtype};
  handle_ = make_paged(attn_, num_slots, block_tokens, num_blocks, &options);
}
PagedKvCache::~PagedKvCache() {
  delete handle_;
}
PagedKvCache::PagedKvCache(PagedKvCache&& other) noexcept
    : attn_(other.attn_), handle_(std::exchange(other.handle_, nullptr)) {}
PagedKvCache& PagedKvCache::operator=(PagedKvCache&& other) noexcept {
  std::swap(attn_, other.attn_);
  std::swap(handle_, other.handle_);
  return *this;
}
std::size_t PagedKvCache::slot_length(std::size_t slot) const noexcept {
  return mha_kv_cache_slot_length(handle_, slot);
}
std::size_t PagedKvCache::free_blocks() const noexcept {
  return mha_kv_cache_free_blocks(handle_);
}
std::size_t PagedKvCache::bytes() const noexcept {
  return mha_paged_kv_cache_bytes(handle_);
}
void PagedKvCache::reset_slot(std::size_t slot) {
  truncate_slot(slot, 0);
}
void PagedKvCache::truncate_slot(std::size_t slot, std::size_t len) {
  mha::truncate_slot(handle_, slot, len);
}
void PagedKvCache::fork_slot(std::size_t src, std::size_t dst, std::size_t len) {
  mha::fork_slot(handle_, src, dst, len);
}
void PagedKvCache::step_tree(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
                             const std::int32_t* parent, const float* query, const float* key,
                             const float* value, const mha_mods* mods, float* out) {
  mha::step_tree(attn_, handle_, num, slots, q_start, parent, query, key, value, mods, out);
}
void PagedKvCache::accept_path(std::size_t slot, std::size_t n, const std::size_t* path) {
  mha::accept_path(handle_, slot, n, path);
}
std::size_t PagedKvCache::shared_chunks() const noexcept {
  return mha_kv_cache_shared_chunks(handle_);
}
void PagedKvCache::step(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
                        const float* query, const float* key, const float* value, float* out) {
  mha::step_ragged(attn_, handle_, num, slots, q_start, query, key, value, nullptr, out,
                   "mha_attention_step_ragged");
}
void PagedKvCache::step_mods(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
                             const float* query, const float* key, const float* value,
                             const mha_mods* mods, float* out) {
  mha::step_ragged(attn_, handle_, num, slots, q_start, query, key, value, mods, out,
                   "mha_attention_step_ragged_mods");
}

}  // namespace mha

extern "C" {

MHA_API mha_status mha_kv_cache_create_paged(const mha_attention* attn, size_t num_slots,
                                             size_t block_tokens, size_t num_blocks,
                                             mha_paged_kv_cache** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(out != nullptr, "mha_kv_cache_create_paged: out must not be NULL");
    *out = mha::make_paged(attn, num_slots, block_tokens, num_blocks);
  });
}

MHA_API mha_status mha_kv_cache_create_paged_ex(const mha_attention* attn, size_t num_slots,
                                                size_t block_tokens, size_t num_blocks,
                                                const mha_kv_cache_options* options,
                                                mha_paged_kv_cache** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(out != nullptr, "mha_kv_cache_create_paged_ex: out must not be NULL");
    *out = mha::make_paged(attn, num_slots, block_tokens, num_blocks, options);
  });
}

MHA_API size_t mha_paged_kv_cache_bytes(const mha_paged_kv_cache* cache) {
  return cache ? cache->cache->bytes() : 0;
}

MHA_API void mha_paged_kv_cache_destroy(mha_paged_kv_cache* cache) {
  delete cache;
}

MHA_API size_t mha_kv_cache_slot_length(const mha_paged_kv_cache* cache, size_t slot) {
  if (cache == nullptr || slot >= cache->cache->num_slots()) return 0;
  return cache->cache->length(slot);
}

MHA_API size_t mha_kv_cache_free_blocks(const mha_paged_kv_cache* cache) {
  return cache ? cache->cache->free_blocks() : 0;
}

MHA_API mha_status mha_kv_cache_reset_slot(mha_paged_kv_cache* cache, size_t slot) {
  return mha::detail::guarded([&] { mha::truncate_slot(cache, slot, 0); });
}

MHA_API mha_status mha_kv_cache_truncate_slot(mha_paged_kv_cache* cache, size_t slot, size_t len) {
  return mha::detail::guarded([&] { mha::truncate_slot(cache, slot, len); });
}

MHA_API mha_status mha_kv_cache_fork_slot(mha_paged_kv_cache* cache, size_t src, size_t dst,
                                          size_t len) {
  return mha::detail::guarded([&] { mha::fork_slot(cache, src, dst, len); });
}

MHA_API size_t mha_kv_cache_shared_chunks(const mha_paged_kv_cache* cache) {
  return cache ? cache->cache->shared_chunks() : 0;
}

MHA_API mha_status mha_kv_cache_accept_path(mha_paged_kv_cache* cache, size_t slot, size_t n,
                                            const size_t* path) {
  return mha::detail::guarded([&] { mha::accept_path(cache, slot, n, path); });
}

MHA_API mha_status mha_attention_step_tree(const mha_attention* attn, mha_paged_kv_cache* cache,
                                           size_t num, const size_t* slots, const size_t* q_start,
                                           const int32_t* parent, const float* query,
                                           const float* key, const float* value,
                                           const mha_mods* mods, float* out) {
  return mha::detail::guarded([&] {
    mha::step_tree(attn, cache, num, slots, q_start, parent, query, key, value, mods, out);
  });
}

MHA_API mha_status mha_attention_step_ragged(const mha_attention* attn, mha_paged_kv_cache* cache,
                                             size_t num, const size_t* slots, const size_t* q_start,
                                             const float* query, const float* key,
                                             const float* value, float* out) {
  return mha::detail::guarded([&] {
    mha::step_ragged(attn, cache, num, slots, q_start, query, key, value, nullptr, out,
                     "mha_attention_step_ragged");
  });
}

MHA_API mha_status mha_attention_step_ragged_mods(const mha_attention* attn,
                                                  mha_paged_kv_cache* cache, size_t num,
                                                  const size_t* slots, const size_t* q_start,
                                                  const float* query, const float* key,
                                                  const float* value, const mha_mods* mods,
                                                  float* out) {
  return mha::detail::guarded([&] {
    mha::step_ragged(attn, cache, num, slots, q_start, query, key, value, mods, out,
                     "mha_attention_step_ragged_mods");
  });
}

}  // extern "C"
