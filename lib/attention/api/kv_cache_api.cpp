// KV cache API: every check happens in the helpers below, which the C++ class
// (mha/kv_cache.hpp) calls directly and the C entry points (mha.h, "KV cache
// for incremental decoding") wrap in guarded(), as api.cpp does for attention.
#include <mha/mha.h>

#include <mha/kv_cache.hpp>
#include <utility>

#include "attention/api/checks.hpp"
#include "attention/cache/kv_cache.hpp"
#include "attention/engine/engine.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"

namespace mha {
namespace detail {

mha_kv_dtype kv_dtype_of(const mha_kv_cache_options* options, const char* fn) {
  if (options == nullptr) return MHA_KV_DEFAULT;
  check_arg(options->struct_size == sizeof(mha_kv_cache_options), fn,
            ": options->struct_size: expected sizeof(mha_kv_cache_options) (",
            sizeof(mha_kv_cache_options), "), got ", options->struct_size);
  const mha_kv_dtype d = options->dtype;
  check_arg(d == MHA_KV_DEFAULT || d == MHA_KV_INT8 || d == MHA_KV_FP8_E4M3, fn,
            ": options->dtype: expected MHA_KV_DEFAULT, MHA_KV_INT8 or MHA_KV_FP8_E4M3, got ",
            static_cast<long>(d));
  return d;
}

mha_kv_cache* make_kv_cache(const AttentionEngine& e, std::size_t batch, std::size_t max_len,
                            const mha_kv_cache_options* options, const char* fn) {
  const mha_kv_dtype dtype = kv_dtype_of(options, fn);
  check_arg(batch > 0, fn, ": batch must be > 0, got 0");
  check_arg(max_len > 0, fn, ": max_len must be > 0, got 0");
  // The KvCache constructor sizes its padded layout with checked arithmetic
  // (kv_packing) and allocates without touching the pages.
  auto cache = std::make_unique<mha_kv_cache>();
  cache->cache = std::make_unique<KvCache>(e, e.shape(), e.kv_type(dtype), batch, max_len);
  return cache.release();
}

}  // namespace detail
namespace {

using detail::check_arg;

mha_kv_cache* make_cache(const mha_attention* attn, std::size_t batch, std::size_t max_len,
                         const mha_kv_cache_options* options = nullptr) {
  check_arg(attn != nullptr, "mha_kv_cache_create: attn must not be NULL");
  return detail::make_kv_cache(*attn->engine, batch, max_len, options, "mha_kv_cache_create");
}

void truncate(mha_kv_cache* cache, std::size_t len) {
  check_arg(cache != nullptr, "mha_kv_cache_truncate: cache must not be NULL");
  check_arg(len <= cache->cache->length(), "mha_kv_cache_truncate: len must be <= length (",
            cache->cache->length(), "), got ", len);
  cache->cache->truncate(len);
}

void step(const mha_attention* attn, mha_kv_cache* cache, std::size_t n_new, const float* query,
          const float* key, const float* value, float* out, const mha_mods* mods = nullptr) {
  check_arg(attn != nullptr, "mha_attention_step: attn must not be NULL");
  check_arg(cache != nullptr, "mha_attention_step: cache must not be NULL");
  detail::KvCache& c = *cache->cache;
  check_arg(c.owner() == attn->engine.get(),
            "mha_attention_step: cache was created for a different mha_attention");
  check_arg(n_new > 0, "mha_attention_step: n_new must be > 0, got 0");
  check_arg(n_new <= c.max_len() - c.length(), "mha_attention_step: length (", c.length(),
            ") + n_new (", n_new, ") exceeds max_len (", c.max_len(), ")");
  check_arg(query != nullptr, "mha_attention_step: query must not be NULL");
  check_arg(key != nullptr, "mha_attention_step: key must not be NULL");
  check_arg(value != nullptr, "mha_attention_step: value must not be NULL");
  check_arg(out != nullptr, "mha_attention_step: out must not be NULL");
  using detail::check_no_overlap;
  using detail::tensor_extent;
  const auto& s = attn->engine->shape();
  const std::size_t B = c.batch();
  const auto eq = tensor_extent(query, {B, n_new, s.embed_dim}, "mha_attention_step: query");
  const auto ek = tensor_extent(key, {B, n_new, s.kdim}, "mha_attention_step: key");
  const auto ev = tensor_extent(value, {B, n_new, s.vdim}, "mha_attention_step: value");
  const auto eo = tensor_extent(out, {B, n_new, s.embed_dim}, "mha_attention_step: out");
  // out is written only after every input has been read: in place is safe.
  check_no_overlap(eo, eq, true, "mha_attention_step: out", "query");
  check_no_overlap(eo, ek, true, "mha_attention_step: out", "key");
  check_no_overlap(eo, ev, true, "mha_attention_step: out", "value");
  const detail::AttentionMods m =
      detail::resolve_mods(mods, s, B * n_new, {eq, ek, ev, eo}, "mha_attention_step_mods");
  // The engine advances the cache only when the whole step succeeds.
  attn->engine->step(c, n_new, query, key, value, out, m);
}

}  // namespace

KvCache::KvCache(const MultiheadAttention& attn, std::size_t batch, std::size_t max_len)
    : attn_(attn.handle()), handle_(make_cache(attn_, batch, max_len)) {}
KvCache::KvCache(const MultiheadAttention& attn, std::size_t batch, std::size_t max_len,
                 mha_kv_dtype dtype)
    : attn_(attn.handle()) {
  const mha_kv_cache_options options{sizeof(mha_kv_cache_options), dtype};
  handle_ = make_cache(attn_, batch, max_len, &options);
}
KvCache::~KvCache() {
  delete handle_;
}
KvCache::KvCache(KvCache&& other) noexcept
    : attn_(other.attn_), handle_(std::exchange(other.handle_, nullptr)) {}
KvCache& KvCache::operator=(KvCache&& other) noexcept {
  std::swap(attn_, other.attn_);
  std::swap(handle_, other.handle_);
  return *this;
}
std::size_t KvCache::length() const noexcept {
  return mha_kv_cache_length(handle_);
}
std::size_t KvCache::bytes() const noexcept {
  return mha_kv_cache_bytes(handle_);
}
void KvCache::truncate(std::size_t len) {
  mha::truncate(handle_, len);
}
void KvCache::step(std::size_t n_new, const float* query, const float* key, const float* value,
                   float* out) {
  mha::step(attn_, handle_, n_new, query, key, value, out);
}
void KvCache::step_mods(std::size_t n_new, const float* query, const float* key, const float* value,
                        const mha_mods* mods, float* out) {
  mha::step(attn_, handle_, n_new, query, key, value, out, mods);
}

}  // namespace mha

extern "C" {

MHA_API mha_status mha_kv_cache_create(const mha_attention* attn, size_t batch, size_t max_len,
                                       mha_kv_cache** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(out != nullptr, "mha_kv_cache_create: out must not be NULL");
    *out = mha::make_cache(attn, batch, max_len);
  });
}

MHA_API mha_status mha_kv_cache_create_ex(const mha_attention* attn, size_t batch, size_t max_len,
                                          const mha_kv_cache_options* options, mha_kv_cache** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(out != nullptr, "mha_kv_cache_create_ex: out must not be NULL");
    *out = mha::make_cache(attn, batch, max_len, options);
  });
}

MHA_API size_t mha_kv_cache_bytes(const mha_kv_cache* cache) {
  return cache ? cache->cache->bytes() : 0;
}

MHA_API void mha_kv_cache_destroy(mha_kv_cache* cache) {
  delete cache;
}

MHA_API size_t mha_kv_cache_length(const mha_kv_cache* cache) {
  return cache ? cache->cache->length() : 0;
}

MHA_API mha_status mha_kv_cache_truncate(mha_kv_cache* cache, size_t len) {
  return mha::detail::guarded([&] { mha::truncate(cache, len); });
}

MHA_API mha_status mha_attention_step(const mha_attention* attn, mha_kv_cache* cache, size_t n_new,
                                      const float* query, const float* key, const float* value,
                                      float* out) {
  return mha::detail::guarded([&] { mha::step(attn, cache, n_new, query, key, value, out); });
}

MHA_API mha_status mha_attention_step_mods(const mha_attention* attn, mha_kv_cache* cache,
                                           size_t n_new, const float* query, const float* key,
                                           const float* value, const mha_mods* mods, float* out) {
  return mha::detail::guarded([&] { mha::step(attn, cache, n_new, query, key, value, out, mods); });
}

}  // extern "C"
