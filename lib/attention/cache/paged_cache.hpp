// A paged KV cache for continuous batching: a pool of fixed-size blocks,
// each holding block_tokens positions of K and V for every kv head (one
// head-block each, in the layout of the engine's KV type), and per slot
// (one request) a block table and a length. A slot takes blocks as it grows
// and gives them back on truncate or reset, so a short sequence never
// reserves max_len; forked slots share their prefix's blocks by reference
// count (n samples of one prompt, a shared system prompt).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "attention/cache/kv_store.hpp"
#include "attention/core/core.hpp"
#include "attention/core/shape.hpp"
#include "attention/kv/kv_type.hpp"
#include "common/aligned.hpp"

namespace mha::detail {

class AttentionEngine;

// The rows of a tree step: packed row r is new token local[r] of sequence
// seq[r], and reads its path (root to r) from positions path[path_begin[r]]
// .. path[path_begin[r + 1] - 1] of its slot.
struct TreeRows {
  const std::size_t* seq;
  const std::size_t* local;
  const std::size_t* path_begin;
  const std::size_t* path;
};

class PagedKvCache {
 public:
  // A cache of the engine `owner`, whose shape and KV type (one of its
  // kv_type()s) `shape` and `type` are. It keeps the shape and never calls
  // the owner, which the entry points compare (owner()) with a step's engine.
  PagedKvCache(const AttentionEngine& owner, const AttentionShape& shape, const KvType& type,
               std::size_t num_slots, std::size_t block_tokens, std::size_t num_blocks);
  PagedKvCache(const PagedKvCache&) = delete;
  PagedKvCache& operator=(const PagedKvCache&) = delete;

  const AttentionEngine* owner() const { return owner_; }
  const KvType& type() const { return type_; }
  // Bytes of the pool (values and scales).
  std::size_t bytes() const;
  std::size_t num_slots() const { return lengths_.size(); }
  std::size_t block_tokens() const { return block_tokens_; }
  std::size_t num_blocks() const { return num_blocks_; }
  std::size_t free_blocks() const { return free_.size(); }
  std::size_t length(std::size_t slot) const { return lengths_[slot]; }
  // The first position the slot still holds: a step with a sliding window
  // drops the blocks wholly before first_read() of the first key its next
  // query can see (0 if none dropped).
  std::size_t first_kept(std::size_t slot) const { return first_block_[slot] * block_tokens_; }
  // The first position a window that starts at position j lets a step
  // read: the core reads from the key tile holding j, and no KV type's tile
  // is longer than kKeyTile keys, so one rule serves every ISA and type.
  std::size_t first_read(std::size_t j) const {
    const std::size_t t = std::max(kKeyTile, type_.key_tile());
    return j > t ? j - t : 0;
  }
  // Drops the slot's positions >= len (len <= length, and len >=
  // first_kept(slot) unless 0) and returns the blocks it no longer needs to
  // the pool; truncate(slot, 0) frees the slot. A kept block that another
  // slot shares is copied first (it throws MHA_OUT_OF_MEMORY, changing
  // nothing, if no block is free for that).
  void truncate(std::size_t slot, std::size_t len);
  // Empty slot dst becomes slot src's first len positions (len <= length,
  // and len >= first_kept(src) unless 0): their whole blocks shared, a
  // partial last one copied (throws MHA_OUT_OF_MEMORY, changing nothing, if
  // no block is free for it).
  void fork(std::size_t src, std::size_t dst, std::size_t len);
  // Marks slot as named by the step being checked; false if it already is.
  // Steps on one cache do not run concurrently, so one array serves them.
  bool mark(std::size_t slot, std::size_t step) const;
  std::size_t next_step() const { return ++steps_; }

  // For a step (AttentionEngine::step_ragged): sequence i of `seqs` grows
  // slot slots[i] to kv_len(i) positions by q_len(i) new ones.
  // Takes the blocks every slot needs, or throws MHA_OUT_OF_MEMORY taking none.
  void reserve(const std::size_t* slots, const SeqSpans& seqs);
  // views[i] gets slot slots[i]'s view of kv_len(i) keys (after reserve).
  void describe(const std::size_t* slots, const SeqSpans& seqs, KvView* views) const;
  // Writes the new rows' K and V ([q_start[num], ld], kv head g at column
  // g*head_dim) after each slot's history; views[i] gets slot i's view of
  // kv_len(i) keys. Lengths are unchanged until commit.
  void append(const std::size_t* slots, const SeqSpans& seqs, const float* k, const float* v,
              std::size_t ld, KvView* views) const;
  // Sets the lengths; with a window (0: none), each slot then returns the
  // blocks wholly before what its next query (at its new length) can see.
  void commit(const std::size_t* slots, const SeqSpans& seqs, std::size_t window);
  // Undoes reserve and append: clears what was written past each length and
  // returns the blocks beyond it. Idempotent.
  void rollback(const std::size_t* slots, const SeqSpans& seqs) noexcept;
  // Tree steps (mha_attention_step_tree). The step's views, one per row:
  // the slot's keys to the row's position, its path gathered (KvView::tail).
  void describe_tree(const std::size_t* slots, const SeqSpans& slot_seqs, const TreeRows& rows,
                     const SeqSpans& seqs, KvView* views) const;
  // Writes row r's K and V (rows of k and v) at its slot's position
  // length + rows.local[r]; views as describe_tree.
  void append_tree(const std::size_t* slots, const SeqSpans& slot_seqs, const TreeRows& rows,
                   const SeqSpans& seqs, const float* k, const float* v, std::size_t ld,
                   KvView* views) const;
  // Room for each slot's tree of q_len(i) tokens (allocates, changing nothing).
  void reserve_tree(const std::size_t* slots, const SeqSpans& slot_seqs);
  // After a tree step's commit: slot's positions from base on are tree
  // tokens with these parents (within the step), until accept().
  void set_tree(std::size_t slot, std::size_t base, const std::int32_t* parent,
                std::size_t n) noexcept;
  // Whether the slot's last step was a tree step not yet accepted; its
  // first tree position, size and parents.
  bool tree_pending(std::size_t slot) const { return tree_base_[slot] != kNoTree; }
  std::size_t tree_base(std::size_t slot) const { return tree_base_[slot]; }
  const std::vector<std::int32_t>& tree(std::size_t slot) const { return trees_[slot]; }
  // Tree tokens path[0..n) (a root-to-node path, checked) become the slot's
  // next n positions; the others go. Throws MHA_OUT_OF_MEMORY, changing
  // nothing, if the calling thread's scratch cannot hold n keys.
  void accept(std::size_t slot, std::size_t n, const std::size_t* path);

  // Key chunks (per kv head) the last successful step computed once for
  // several rows (cascade), for mha_kv_cache_shared_chunks.
  std::size_t shared_chunks() const { return shared_chunks_; }
  void set_shared_chunks(std::size_t n) { shared_chunks_ = n; }

 private:
  // The pool's head-blocks as a view of no slot's keys.
  KvView pool() const;
  // The slot's view of len keys (in blocks it holds).
  KvView view(std::size_t slot, std::size_t len) const;
  // Zeroes positions [from, to) of the slot (inside blocks it holds).
  void clear(std::size_t slot, std::size_t from, std::size_t to) noexcept;
  // Returns the slot's blocks past those holding `len` positions.
  void release(std::size_t slot, std::size_t len) noexcept;
  // One reference to block b less; the last returns it to the pool.
  void unref(std::size_t b) noexcept;
  // A block from the pool (one must be free), with one reference.
  std::size_t take() noexcept;
  // Block `to` becomes a copy of block `from`, every kv head's K and V.
  void copy_block(std::size_t from, std::size_t to) noexcept;

  const AttentionEngine* owner_;
  AttentionShape shape_;
  const KvType& type_;
  std::size_t block_tokens_, num_blocks_;
  KvLayout layout_;           // of a head-block of block_tokens keys
  std::size_t k_region_ = 0;  // bytes of the pool's K head-blocks, before the V ones
  AlignedFloats pool_;
  std::vector<std::size_t> free_;  // free block ids (a stack)
  // Per block: the slots whose tables hold it (0: free). A block two slots
  // hold is never written: a write into it copies it first, and appends
  // only ever reach a slot's own blocks (a fork copies a partial block).
  std::vector<std::size_t> refs_;
  // Per slot: its blocks in order, table[i] holding positions from
  // (first_block + i) * block_tokens on. Tables grow geometrically and never
  // shrink, so steps allocate only while a slot outgrows its largest size.
  std::vector<std::vector<std::size_t>> tables_;
  std::vector<std::size_t> first_block_;
  std::vector<std::size_t> lengths_;
  mutable std::vector<std::size_t> marks_;  // per slot: the last step that named it
  mutable std::size_t steps_ = 0;
  std::size_t shared_chunks_ = 0;
  // Per slot: the first position of a pending tree (kNoTree: none) and its
  // tokens' parents (capacity kept, as the tables').
  static constexpr std::size_t kNoTree = static_cast<std::size_t>(-1);
  std::vector<std::size_t> tree_base_;
  std::vector<std::vector<std::int32_t>> trees_;
};

// One step's view of a paged cache as a KvStore: sequence i is slot slots[i].
class PagedStep final : public KvStore {
 public:
  PagedStep(PagedKvCache& cache, const std::size_t* slots, std::size_t window)
      : cache_(cache), slots_(slots), window_(window) {}
  const KvType& type() const override { return cache_.type(); }
  std::size_t scratch_floats(const SeqSpans&) const override { return 0; }
  std::size_t block_tokens() const override { return cache_.block_tokens(); }
  void describe(const SeqSpans& seqs, KvView* views) const override {
    cache_.describe(slots_, seqs, views);
  }
  void append(const SeqSpans& seqs, const std::size_t*, const float* k, const float* v,
              std::size_t ld, float*, KvView* views) override {
    cache_.append(slots_, seqs, k, v, ld, views);
  }
  void commit(const SeqSpans& seqs) override { cache_.commit(slots_, seqs, window_); }
  void rollback(const SeqSpans& seqs) noexcept override { cache_.rollback(slots_, seqs); }

 private:
  PagedKvCache& cache_;
  const std::size_t* slots_;
  std::size_t window_;
};

// A tree step's view of a paged cache: the core's sequences are its rows
// (one query each, the keys of its path), the cache's are its slots
// (slot_seqs: every tree token appended). A window drops nothing until the
// accepted path is the slot's (the next plain step's commit).
class TreeStep final : public KvStore {
 public:
  TreeStep(PagedKvCache& cache, const std::size_t* slots, const SeqSpans& slot_seqs,
           const TreeRows& rows, const std::int32_t* parent)
      : cache_(cache), slots_(slots), slot_seqs_(slot_seqs), rows_(rows), parent_(parent) {}
  const KvType& type() const override { return cache_.type(); }
  std::size_t scratch_floats(const SeqSpans&) const override { return 0; }
  std::size_t block_tokens() const override { return cache_.block_tokens(); }
  void describe(const SeqSpans& seqs, KvView* views) const override {
    cache_.describe_tree(slots_, slot_seqs_, rows_, seqs, views);
  }
  void append(const SeqSpans& seqs, const std::size_t*, const float* k, const float* v,
              std::size_t ld, float*, KvView* views) override {
    cache_.append_tree(slots_, slot_seqs_, rows_, seqs, k, v, ld, views);
  }
  void commit(const SeqSpans&) override {
    const SeqSpans& s = slot_seqs_;
    for (std::size_t i = 0; i < s.num; ++i) {
      cache_.set_tree(slots_[i], s.kv_len(i) - s.q_len(i), parent_ + s.q_start[i], s.q_len(i));
    }
    cache_.commit(slots_, s, 0);
  }
  void rollback(const SeqSpans&) noexcept override { cache_.rollback(slots_, slot_seqs_); }

 private:
  PagedKvCache& cache_;
  const std::size_t* slots_;
  SeqSpans slot_seqs_;
  TreeRows rows_;
  const std::int32_t* parent_;
};

}  // namespace mha::detail

// The C handle of a paged cache.
struct mha_paged_kv_cache {
  std::unique_ptr<mha::detail::PagedKvCache> cache;
};
