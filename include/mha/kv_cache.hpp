// mha::KvCache: the C++ face of mha_kv_cache_* (include/mha/mha.h, "KV cache
// for incremental decoding"). Failures throw mha::Error with the status and
// message the C API would return.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <mha/attention.hpp>

namespace mha {

class MHA_API KvCache {
 public:
  // A cache for `batch` sequences of up to `max_len` positions, bound to
  // `attn` (which must outlive it).
  KvCache(const MultiheadAttention& attn, std::size_t batch, std::size_t max_len);
  ~KvCache();
  KvCache(KvCache&& other) noexcept;
  KvCache& operator=(KvCache&& other) noexcept;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  std::size_t length() const noexcept;
  // Drops positions >= len (len <= length()).
  void truncate(std::size_t len);

  // Appends n_new tokens per batch row and attends them causally over the
  // cache; see mha_attention_step for the layouts.
  void step(std::size_t n_new, const float* query, const float* key, const float* value,
            float* out);
  // step with modifiers (mods may be null); see mha_attention_step_mods.
  void step_mods(std::size_t n_new, const float* query, const float* key, const float* value,
                 const mha_mods* mods, float* out);
  // Self-attention decoding: query, key and value are all x.
  void step_self(std::size_t n_new, const float* x, float* out) { step(n_new, x, x, x, out); }

  mha_kv_cache* handle() const noexcept { return handle_; }

 private:
  const mha_attention* attn_;
  mha_kv_cache* handle_ = nullptr;
};

}  // namespace mha
