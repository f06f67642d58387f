// C API of the KV cache (mha.h, "KV cache for incremental decoding").
#include <mha/mha.h>

#include <mha/kv_cache.hpp>
#include <utility>

#include "attention/engine.hpp"
#include "common/error.hpp"

using mha::detail::check_arg;
using mha::detail::checked_mul;
using mha::detail::guarded;

extern "C" {

MHA_API mha_status mha_kv_cache_create(const mha_attention* attn, size_t batch, size_t max_len,
                                       mha_kv_cache** out) {
  return guarded([&] {
    check_arg(out != nullptr, "mha_kv_cache_create: out must not be NULL");
    *out = nullptr;
    check_arg(attn != nullptr, "mha_kv_cache_create: attn must not be NULL");
    check_arg(batch > 0, "mha_kv_cache_create: batch must be > 0, got 0");
    check_arg(max_len > 0, "mha_kv_cache_create: max_len must be > 0, got 0");
    const auto& s = attn->engine->shape();
    checked_mul(checked_mul(checked_mul(batch, max_len, "batch * max_len"), s.kv_dim(),
                            "batch * max_len * kv_dim"),
                2 * sizeof(float), "KV cache bytes");
    auto cache = std::make_unique<mha_kv_cache>();
    cache->cache = std::make_unique<mha::detail::KvCache>(*attn->engine, batch, max_len);
    *out = cache.release();
  });
}

MHA_API void mha_kv_cache_destroy(mha_kv_cache* cache) {
  delete cache;
}

MHA_API size_t mha_kv_cache_length(const mha_kv_cache* cache) {
  return cache ? cache->cache->length() : 0;
}

MHA_API mha_status mha_kv_cache_truncate(mha_kv_cache* cache, size_t len) {
  return guarded([&] {
    check_arg(cache != nullptr, "mha_kv_cache_truncate: cache must not be NULL");
    check_arg(len <= cache->cache->length(), "mha_kv_cache_truncate: len must be <= length (",
              cache->cache->length(), "), got ", len);
    cache->cache->truncate(len);
  });
}

MHA_API mha_status mha_attention_step(const mha_attention* attn, mha_kv_cache* cache, size_t n_new,
                                      const float* query, const float* key, const float* value,
                                      float* out) {
  return guarded([&] {
    check_arg(attn != nullptr, "mha_attention_step: attn must not be NULL");
    check_arg(cache != nullptr, "mha_attention_step: cache must not be NULL");
    mha::detail::KvCache& c = *cache->cache;
    check_arg(&c.engine() == attn->engine.get(),
              "mha_attention_step: cache was created for a different mha_attention");
    check_arg(n_new > 0, "mha_attention_step: n_new must be > 0, got 0");
    check_arg(n_new <= c.max_len() - c.length(), "mha_attention_step: length (", c.length(),
              ") + n_new (", n_new, ") exceeds max_len (", c.max_len(), ")");
    check_arg(query != nullptr, "mha_attention_step: query must not be NULL");
    check_arg(key != nullptr, "mha_attention_step: key must not be NULL");
    check_arg(value != nullptr, "mha_attention_step: value must not be NULL");
    check_arg(out != nullptr, "mha_attention_step: out must not be NULL");
    attn->engine->step(c, n_new, query, key, value, out);
  });
}

}  // extern "C"

namespace mha {
namespace {
void check(mha_status s) {
  if (s != MHA_OK) throw Error(s, mha_last_error());
}
}  // namespace

KvCache::KvCache(const MultiheadAttention& attn, std::size_t batch, std::size_t max_len)
    : attn_(attn.handle()) {
  check(mha_kv_cache_create(attn_, batch, max_len, &handle_));
}
KvCache::~KvCache() {
  mha_kv_cache_destroy(handle_);
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
void KvCache::truncate(std::size_t len) {
  check(mha_kv_cache_truncate(handle_, len));
}
void KvCache::step(std::size_t n_new, const float* query, const float* key, const float* value,
                   float* out) {
  check(mha_attention_step(attn_, handle_, n_new, query, key, value, out));
}
}  // namespace mha
