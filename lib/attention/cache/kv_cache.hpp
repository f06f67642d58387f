// The contiguous KV cache (kv_cache.cpp), and its C handle.
#pragma once

#include <cstddef>
#include <memory>

#include "attention/cache/kv_store.hpp"
#include "attention/core/shape.hpp"

namespace mha::detail {

class AttentionEngine;
class KvType;
struct KvView;
struct SeqSpans;

// Projected K/V of every position decoded so far, for `batch` sequences of up
// to `max_len` positions, stored in the layout of the engine's KV type (so a
// decode step never repacks the cache: the engine's default type, or a
// quantized one). All batch rows have the same length.
// One cache serves one sequence stream: steps on one cache must not run
// concurrently; different caches may.
class KvCache final : public KvStore {
 public:
  // A cache of the engine `owner`, whose shape and KV type (one of its
  // kv_type()s) `shape` and `type` are. It keeps the shape and never calls
  // the owner, which the entry points compare (owner()) with a step's engine.
  KvCache(const AttentionEngine& owner, const AttentionShape& shape, const KvType& type,
          std::size_t batch, std::size_t max_len);
  ~KvCache() override;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const AttentionEngine* owner() const { return owner_; }
  std::size_t batch() const { return batch_; }
  std::size_t max_len() const { return max_len_; }
  std::size_t length() const { return length_; }
  // Bytes of storage reserved (values and scales).
  std::size_t bytes() const;
  // Drops positions >= len (len <= length()), e.g. to roll back rejected
  // speculative tokens; truncate(0) empties the cache.
  void truncate(std::size_t len);

  const KvType& type() const override { return type_; }
  std::size_t scratch_floats(const SeqSpans&) const override { return 0; }
  void append(const SeqSpans& seqs, const std::size_t* key_start, const float* k, const float* v,
              std::size_t ld, float* scratch, KvView* views) override;
  void commit(const SeqSpans& seqs) override;
  void rollback(const SeqSpans& seqs) noexcept override;

 private:
  // Zeroes positions [from, to) of every row.
  void clear(std::size_t from, std::size_t to) noexcept;
  KvView view(std::size_t row, std::size_t len) const;
  const AttentionEngine* owner_;
  AttentionShape shape_;
  const KvType& type_;
  std::size_t batch_, max_len_, length_ = 0;
  struct Storage;
  std::unique_ptr<Storage> storage_;
};

}  // namespace mha::detail

// The C handle of a contiguous cache.
struct mha_kv_cache {
  std::unique_ptr<mha::detail::KvCache> cache;
};
