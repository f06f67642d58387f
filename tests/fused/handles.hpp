// Owning handles of the C objects the fused tests make, and their makers
// (each REQUIREs success).
#pragma once

#include <mha/mha.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <memory>

#include "fused/model_weights.hpp"

namespace mha::test {

using Attn = std::unique_ptr<mha_attention, decltype(&mha_attention_destroy)>;
using Cache = std::unique_ptr<mha_kv_cache, decltype(&mha_kv_cache_destroy)>;
using Paged = std::unique_ptr<mha_paged_kv_cache, decltype(&mha_paged_kv_cache_destroy)>;

inline Attn make_attn(const mha_config& cfg, const mha_weights& w, mha_dtype compute) {
  const mha_attention_options o{sizeof(mha_attention_options), compute, MHA_WEIGHTS_COMPUTE, 0};
  mha_attention* a = nullptr;
  REQUIRE(mha_attention_create_ex(&cfg, &w, &o, &a) == MHA_OK);
  return Attn(a, mha_attention_destroy);
}

inline Attn make_attn(const ModelWeights& w, mha_dtype compute) {
  return make_attn(w.cfg, w.view(), compute);
}

inline Cache make_cache(const mha_attention* a, std::size_t batch, std::size_t max_len,
                        mha_kv_dtype d) {
  const mha_kv_cache_options o{sizeof(mha_kv_cache_options), d};
  mha_kv_cache* c = nullptr;
  REQUIRE(mha_kv_cache_create_ex(a, batch, max_len, &o, &c) == MHA_OK);
  return Cache(c, mha_kv_cache_destroy);
}

inline Paged make_paged(const mha_attention* a, std::size_t slots, std::size_t block_tokens,
                        std::size_t blocks, mha_kv_dtype d) {
  const mha_kv_cache_options o{sizeof(mha_kv_cache_options), d};
  mha_paged_kv_cache* c = nullptr;
  REQUIRE(mha_kv_cache_create_paged_ex(a, slots, block_tokens, blocks, &o, &c) == MHA_OK);
  return Paged(c, mha_paged_kv_cache_destroy);
}

}  // namespace mha::test
