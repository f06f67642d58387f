#include "attention/cache/paged_cache.hpp"

#include <algorithm>

#include "common/checked.hpp"
#include "common/error.hpp"
#include "common/scratch.hpp"

namespace mha::detail {

PagedKvCache::PagedKvCache(const AttentionEngine& owner, const AttentionShape& shape,
                           const KvType& type, std::size_t num_slots, std::size_t block_tokens,
                           std::size_t num_blocks)
    : owner_(&owner),
      shape_(shape),
      type_(type),
      block_tokens_(block_tokens),
      num_blocks_(num_blocks),
      layout_(type.block_layout(shape.head_dim, block_tokens)),
      refs_(num_blocks, 0),
      tables_(num_slots),
      first_block_(num_slots, 0),
      lengths_(num_slots, 0),
      marks_(num_slots, 0),
      tree_base_(num_slots, kNoTree),
      trees_(num_slots) {
  const char* what = "KV cache layout (batch x kv_heads x padded max_len x padded head_dim)";
  const std::size_t blocks = checked_mul(num_blocks, shape.num_kv_heads, what);
  k_region_ = checked_mul(blocks, layout_.k_bytes, what);
  const std::size_t bytes =
      checked_add(k_region_, checked_mul(blocks, layout_.v_bytes, what), what);
  pool_ = alloc_floats(float_bytes(bytes / sizeof(float), what) / sizeof(float));
  // Highest id on top, so blocks are handed out from the start of the pool;
  // the pool's pages are only touched when a block is first taken.
  free_.resize(num_blocks);
  for (std::size_t i = 0; i < num_blocks; ++i) free_[i] = num_blocks - 1 - i;
}

std::size_t PagedKvCache::bytes() const {
  return num_blocks_ * shape_.num_kv_heads * (layout_.k_bytes + layout_.v_bytes);
}

bool PagedKvCache::mark(std::size_t slot, std::size_t step) const {
  if (marks_[slot] == step) return false;
  marks_[slot] = step;
  return true;
}

KvView PagedKvCache::pool() const {
  KvView v;
  v.k = pool_.get();
  v.v = reinterpret_cast<char*>(pool_.get()) + k_region_;
  v.block_step = 1;
  v.head_step = num_blocks_;
  v.layout = layout_;
  return v;
}

KvView PagedKvCache::view(std::size_t slot, std::size_t len) const {
  KvView v = pool();
  v.len = len;
  v.blocks = tables_[slot].data();
  v.block_tokens = block_tokens_;
  v.block0 = first_block_[slot];
  return v;
}

void PagedKvCache::clear(std::size_t slot, std::size_t from, std::size_t to) noexcept {
  const AttentionShape& s = shape_;
  const KvType& type = type_;
  const std::size_t first = first_block_[slot];
  from = std::max(from, first * block_tokens_);
  to = std::min(to, (first + tables_[slot].size()) * block_tokens_);
  const KvView v = view(slot, to);
  for (std::size_t pos = from; pos < to; ++pos) {
    for (std::size_t g = 0; g < s.num_kv_heads; ++g) {
      type.clear(layout_, v.k_block(g, pos), v.v_block(g, pos), v.local(pos), s.head_dim);
    }
  }
}

void PagedKvCache::unref(std::size_t b) noexcept {
  // free_ has room for every block, so this push never allocates.
  if (--refs_[b] == 0) free_.push_back(b);
}

std::size_t PagedKvCache::take() noexcept {
  const std::size_t b = free_.back();
  free_.pop_back();
  refs_[b] = 1;
  return b;
}

void PagedKvCache::copy_block(std::size_t from, std::size_t to) noexcept {
  const KvView p = pool();
  char* k = static_cast<char*>(p.k);
  char* v = static_cast<char*>(p.v);
  for (std::size_t g = 0; g < shape_.num_kv_heads; ++g) {
    const std::size_t a = p.head_block(from, g), b = p.head_block(to, g);
    std::copy_n(k + a * layout_.k_bytes, layout_.k_bytes, k + b * layout_.k_bytes);
    std::copy_n(v + a * layout_.v_bytes, layout_.v_bytes, v + b * layout_.v_bytes);
  }
}

void PagedKvCache::release(std::size_t slot, std::size_t len) noexcept {
  // Positions a pending tree held go with it (the API allows only this).
  if (tree_base_[slot] != kNoTree && len <= tree_base_[slot]) tree_base_[slot] = kNoTree;
  std::vector<std::size_t>& table = tables_[slot];
  const std::size_t end = ceil_div(len, block_tokens_), first = first_block_[slot];
  const std::size_t keep = end > first ? end - first : 0;
  while (table.size() > keep) {
    unref(table.back());
    table.pop_back();
  }
  if (len == 0) first_block_[slot] = 0;
}

void PagedKvCache::truncate(std::size_t slot, std::size_t len) {
  // The block keeping positions up to len (a partial one) is written below:
  // a shared one is copied first, checked before anything changes.
  std::vector<std::size_t>& table = tables_[slot];
  const std::size_t at = len / block_tokens_ - first_block_[slot];
  const bool copy = len % block_tokens_ != 0 && len < lengths_[slot] && refs_[table[at]] > 1;
  if (copy && free_.empty()) {
    fail(MHA_OUT_OF_MEMORY, "mha_kv_cache_truncate_slot: the slot shares its block at position ",
         len, " with another slot, and no block is free to copy it into");
  }
  release(slot, len);
  if (copy) {
    const std::size_t b = take();
    copy_block(table[at], b);
    unref(table[at]);
    table[at] = b;
  }
  // Blocks given back keep their keys (append clears a strip as it enters
  // it); the kept block's columns past len must read as zero.
  clear(slot, len, lengths_[slot]);
  lengths_[slot] = std::min(lengths_[slot], len);
}

void PagedKvCache::fork(std::size_t src, std::size_t dst, std::size_t len) {
  if (len == 0) return;
  const std::size_t first = first_block_[src], blocks = ceil_div(len, block_tokens_) - first;
  const bool partial = len % block_tokens_ != 0;
  if (partial && free_.empty()) {
    fail(MHA_OUT_OF_MEMORY, "mha_kv_cache_fork_slot: position ", len - 1, " of slot ", src,
         " is in a partial block, and no block is free to copy it into");
  }
  std::vector<std::size_t>& table = tables_[dst];
  table.reserve(blocks);  // the only allocation, before anything changes
  const std::vector<std::size_t>& from = tables_[src];
  for (std::size_t i = 0; i + (partial ? 1 : 0) < blocks; ++i) {
    ++refs_[from[i]];
    table.push_back(from[i]);
  }
  first_block_[dst] = first;
  lengths_[dst] = len;
  if (partial) {
    table.push_back(take());
    copy_block(from[blocks - 1], table.back());
    // The copy holds src's positions past len too: they must read as zero.
    clear(dst, len, std::min(lengths_[src], (len / block_tokens_ + 1) * block_tokens_));
  }
}

void PagedKvCache::reserve(const std::size_t* slots, const SeqSpans& seqs) {
  // Blocks slot i must hold: from its first kept one to kv_len(i).
  const auto blocks = [&](std::size_t i) {
    return ceil_div(seqs.kv_len(i), block_tokens_) - first_block_[slots[i]];
  };
  std::size_t need = 0;
  for (std::size_t i = 0; i < seqs.num; ++i) need += blocks(i) - tables_[slots[i]].size();
  if (need > free_.size()) {
    fail(MHA_OUT_OF_MEMORY, "mha_attention_step_ragged: the step needs ", need, " more blocks of ",
         block_tokens_, " tokens, but only ", free_.size(), " of ", num_blocks_,
         " are free; reset or truncate a slot first");
  }
  // Table room first (the only allocation), so taking blocks cannot fail half way.
  for (std::size_t i = 0; i < seqs.num; ++i) {
    std::vector<std::size_t>& table = tables_[slots[i]];
    if (table.capacity() < blocks(i)) table.reserve(std::max(blocks(i), 2 * table.capacity()));
  }
  for (std::size_t i = 0; i < seqs.num; ++i) {
    std::vector<std::size_t>& table = tables_[slots[i]];
    while (table.size() < blocks(i)) table.push_back(take());
  }
}

void PagedKvCache::describe(const std::size_t* slots, const SeqSpans& seqs, KvView* views) const {
  for (std::size_t i = 0; i < seqs.num; ++i) views[i] = view(slots[i], seqs.kv_len(i));
}

void PagedKvCache::append(const std::size_t* slots, const SeqSpans& seqs, const float* k,
                          const float* v, std::size_t ld, KvView* views) const {
  const AttentionShape& s = shape_;
  const KvType& type = type_;
  const std::size_t d = s.head_dim;
  describe(slots, seqs, views);
  for (std::size_t i = 0; i < seqs.num; ++i) {
    const std::size_t start = lengths_[slots[i]];
    const KvView& w = views[i];
    // Each block's run of keys; put() zeroes a strip as it is entered, so
    // a block's pages are touched only as the slot reaches them, and stale
    // keys of a reused block vanish.
    for (std::size_t pos = start; pos < start + seqs.q_len(i);) {
      const std::size_t end =
          std::min(start + seqs.q_len(i), (pos / block_tokens_ + 1) * block_tokens_);
      const std::size_t row = seqs.q_start[i] + pos - start;
      for (std::size_t g = 0; g < s.num_kv_heads; ++g) {
        type.put_rows(layout_, w.k_block(g, pos), w.v_block(g, pos), w.local(pos), end - pos, d,
                      k + row * ld + g * d, v + row * ld + g * d, ld);
      }
      pos = end;
    }
  }
}

void PagedKvCache::commit(const std::size_t* slots, const SeqSpans& seqs, std::size_t window) {
  for (std::size_t i = 0; i < seqs.num; ++i) {
    const std::size_t slot = slots[i], len = seqs.kv_len(i);
    lengths_[slot] = len;
    // The next query (position len) sees keys from len + 1 - window on.
    if (window == 0 || len + 1 <= window) continue;
    std::vector<std::size_t>& table = tables_[slot];
    const std::size_t upto = first_read(len + 1 - window) / block_tokens_;
    if (upto <= first_block_[slot]) continue;
    const std::size_t drop = std::min(upto - first_block_[slot], table.size());
    // A block leaves the front (to the pool with its last reference).
    for (std::size_t b = 0; b < drop; ++b) unref(table[b]);
    table.erase(table.begin(), table.begin() + static_cast<std::ptrdiff_t>(drop));
    first_block_[slot] += drop;
  }
}

void PagedKvCache::rollback(const std::size_t* slots, const SeqSpans& seqs) noexcept {
  for (std::size_t i = 0; i < seqs.num; ++i) {
    const std::size_t slot = slots[i];
    release(slot, lengths_[slot]);
    clear(slot, lengths_[slot], seqs.kv_len(i));
  }
}

}  // namespace mha::detail

namespace mha::detail {

void PagedKvCache::describe_tree(const std::size_t* slots, const SeqSpans& slot_seqs,
                                 const TreeRows& rows, const SeqSpans& seqs, KvView* views) const {
  for (std::size_t r = 0; r < seqs.num; ++r) {
    const std::size_t i = rows.seq[r];
    views[r] = view(slots[i], seqs.kv_len(r));
    views[r].tail = slot_seqs.kv_len(i) - slot_seqs.q_len(i);
    views[r].path = rows.path + rows.path_begin[r];
  }
}

void PagedKvCache::append_tree(const std::size_t* slots, const SeqSpans& slot_seqs,
                               const TreeRows& rows, const SeqSpans& seqs, const float* k,
                               const float* v, std::size_t ld, KvView* views) const {
  const std::size_t d = shape_.head_dim;
  for (std::size_t r = 0; r < seqs.num; ++r) {
    const std::size_t i = rows.seq[r], slot = slots[i];
    const std::size_t pos = slot_seqs.kv_len(i) - slot_seqs.q_len(i) + rows.local[r];
    const KvView w = view(slot, pos + 1);
    for (std::size_t g = 0; g < shape_.num_kv_heads; ++g) {
      type_.put(layout_, w.k_block(g, pos), w.v_block(g, pos), w.local(pos), d, k + r * ld + g * d,
                v + r * ld + g * d);
    }
  }
  describe_tree(slots, slot_seqs, rows, seqs, views);
}

void PagedKvCache::reserve_tree(const std::size_t* slots, const SeqSpans& slot_seqs) {
  for (std::size_t i = 0; i < slot_seqs.num; ++i) {
    std::vector<std::int32_t>& t = trees_[slots[i]];
    const std::size_t n = slot_seqs.q_len(i);
    if (t.capacity() < n) t.reserve(std::max(n, 2 * t.capacity()));
  }
}

void PagedKvCache::set_tree(std::size_t slot, std::size_t base, const std::int32_t* parent,
                            std::size_t n) noexcept {
  tree_base_[slot] = base;
  trees_[slot].assign(parent, parent + n);  // within reserve_tree's capacity
}

void PagedKvCache::accept(std::size_t slot, std::size_t n, const std::size_t* path) {
  const std::size_t base = tree_base_[slot], d = shape_.head_dim;
  // Through the calling thread's scratch, a head-block of the n keys: a
  // path's key and its target can share a V group of keys (kv_bf16), which
  // copy_keys writes whole, so they are gathered first, as the core gathers
  // a tile, then written back in order (the only step that can fail).
  const KvLayout s = type_.layout(d, std::max<std::size_t>(n, 1));
  char* buf = reinterpret_cast<char*>(
      thread_scratch(ScratchSlot::kTree, (s.k_bytes + s.v_bytes) / sizeof(float)));
  const KvView v = view(slot, lengths_[slot]);
  for (std::size_t g = 0; n != 0 && g < shape_.num_kv_heads; ++g) {
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t from = base + path[j];
      type_.copy_keys(layout_, v.k_block(g, from), v.v_block(g, from), v.local(from), 1, s, buf,
                      buf + s.k_bytes, j, d);
    }
    // By runs inside blocks; a copy may write past its run in a V group,
    // into the next run's keys (rewritten next) or past n (cleared below).
    for (std::size_t a = 0; a < n;) {
      const std::size_t at = base + a;
      const std::size_t r = std::min(n - a, block_tokens_ - at % block_tokens_);
      type_.copy_keys(s, buf, buf + s.k_bytes, a, r, layout_, v.k_block(g, at), v.v_block(g, at),
                      v.local(at), d);
      a += r;
    }
  }
  tree_base_[slot] = kNoTree;
  release(slot, base + n);
  clear(slot, base + n, lengths_[slot]);
  lengths_[slot] = base + n;
}

}  // namespace mha::detail
