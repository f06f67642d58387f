// A paged KV cache for continuous batching: a pool of fixed-size blocks,
// each holding block_tokens positions of K (packed columns, the layout the
// core reads) and V for every kv head, and per slot (one request) a block
// table and a length. A slot takes blocks as it grows and gives them back on
// truncate or reset, so a short sequence never reserves max_len.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "attention/core.hpp"
#include "attention/engine.hpp"
#include "common/aligned.hpp"

namespace mha::detail {

class PagedKvCache {
 public:
  PagedKvCache(const AttentionEngine& engine, std::size_t num_slots, std::size_t block_tokens,
               std::size_t num_blocks);
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  const AttentionEngine& engine() const { return engine_; }
  std::size_t num_slots() const { return lengths_.size(); }
  std::size_t block_tokens() const { return block_tokens_; }
  std::size_t num_blocks() const { return num_blocks_; }
  std::size_t free_blocks() const { return free_.size(); }
  std::size_t length(std::size_t slot) const { return lengths_[slot]; }
  // Drops the slot's positions >= len (len <= length) and returns the blocks
  // it no longer needs to the pool; truncate(slot, 0) frees the slot.
  void truncate(std::size_t slot, std::size_t len);

  // For a step (AttentionEngine::step_ragged): sequence i of `seqs` grows
  // slot slots[i] to kv_len(i) positions by q_len(i) new ones.
  // Takes the blocks every slot needs, or throws MHA_OUT_OF_MEMORY taking none.
  void reserve(const std::size_t* slots, const RaggedSeqs& seqs);
  // Writes the new rows' K and V ([q_start[num], ld], kv head g at column
  // g*head_dim) after each slot's history; returns each slot's view of
  // kv_len(i) keys. Lengths are unchanged until commit.
  std::vector<KvCacheView> append(const std::size_t* slots, const RaggedSeqs& seqs, const float* k,
                                  const float* v, std::size_t ld) const;
  void commit(const std::size_t* slots, const RaggedSeqs& seqs);
  // Undoes reserve and append: clears what was written past each length and
  // returns the blocks beyond it. Idempotent.
  void rollback(const std::size_t* slots, const RaggedSeqs& seqs);

 private:
  PackedBColumns keys(std::size_t block, std::size_t g) const;
  float* values(std::size_t block, std::size_t g) const;
  // Zeroes key columns [from, to) of the slot (inside blocks it holds).
  void clear(std::size_t slot, std::size_t from, std::size_t to);
  // Returns the slot's blocks past those holding `len` positions.
  void release(std::size_t slot, std::size_t len);

  const AttentionEngine& engine_;
  std::size_t block_tokens_, num_blocks_;
  KvPacking packing_;  // per block and kv head, as kv_packing(num_blocks, block_tokens)
  AlignedFloats pool_;
  std::vector<std::size_t> free_;                 // free block ids (a stack)
  std::vector<std::vector<std::size_t>> tables_;  // per slot: its blocks, in order
  std::vector<std::size_t> lengths_;
};

}  // namespace mha::detail

// The C handle of a paged cache.
struct mha_paged_kv_cache {
  std::unique_ptr<mha::detail::PagedKvCache> cache;
};
