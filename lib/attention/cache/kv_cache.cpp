// The contiguous KV cache: per (batch row, kv head) one head-block with room
// for max_len keys, in the layout of the engine's KV type.
#include "attention/cache/kv_cache.hpp"

#include <algorithm>

#include "attention/core/core.hpp"
#include "attention/kv/kv_type.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"

namespace mha::detail {

struct KvCache::Storage {
  KvLayout layout;
  std::size_t k_region = 0;  // bytes of the K head-blocks, before the V ones
  AlignedFloats data;
};

KvCache::KvCache(const AttentionEngine& owner, const AttentionShape& shape, const KvType& type,
                 std::size_t batch, std::size_t max_len)
    : owner_(&owner),
      shape_(shape),
      type_(type),
      batch_(batch),
      max_len_(max_len),
      storage_(std::make_unique<Storage>()) {
  const char* what = "KV cache layout (batch x kv_heads x padded max_len x padded head_dim)";
  const AttentionShape& s = shape_;
  Storage& st = *storage_;
  st.layout = type.layout(s.head_dim, max_len);
  const std::size_t blocks = checked_mul(batch, s.num_kv_heads, what);
  st.k_region = checked_mul(blocks, st.layout.k_bytes, what);
  const std::size_t bytes =
      checked_add(st.k_region, checked_mul(blocks, st.layout.v_bytes, what), what);
  // Left untouched: pages of positions never reached are never backed, and
  // a key's put() zeroes each strip as it enters it.
  st.data = alloc_floats(float_bytes(bytes / sizeof(float), what) / sizeof(float));
}

KvCache::~KvCache() = default;

std::size_t KvCache::bytes() const {
  return batch_ * shape_.num_kv_heads * (storage_->layout.k_bytes + storage_->layout.v_bytes);
}

KvView KvCache::view(std::size_t row, std::size_t len) const {
  KvView v;
  v.k = storage_->data.get();
  v.v = reinterpret_cast<char*>(storage_->data.get()) + storage_->k_region;
  v.len = len;
  v.block_step = shape_.num_kv_heads;
  v.layout = storage_->layout;
  v.row = row;
  return v;
}

void KvCache::append(const SeqSpans& seqs, const std::size_t* key_start, const float* k,
                     const float* v, std::size_t ld, float*, KvView* views) {
  const AttentionShape& s = shape_;
  const KvType& type = type_;
  const std::size_t d = s.head_dim;
  for (std::size_t b = 0; b < batch_; ++b) {
    const std::size_t n_new = key_start[b + 1] - key_start[b];
    views[b] = view(b, seqs.kv_len(b));
    const std::size_t row = key_start[b];
    for (std::size_t g = 0; g < s.num_kv_heads; ++g) {
      type.put_rows(storage_->layout, views[b].k_block(g, length_), views[b].v_block(g, length_),
                    length_, n_new, d, k + row * ld + g * d, v + row * ld + g * d, ld);
    }
  }
}

void KvCache::commit(const SeqSpans& seqs) {
  length_ = seqs.kv_len(0);
}

// A cache keeps its length and contents unless the whole step succeeds.
void KvCache::rollback(const SeqSpans& seqs) noexcept {
  clear(length_, seqs.kv_len(0));
}

void KvCache::clear(std::size_t from, std::size_t to) noexcept {
  const AttentionShape& s = shape_;
  const KvType& type = type_;
  for (std::size_t b = 0; b < batch_; ++b) {
    const KvView all = view(b, max_len_);
    for (std::size_t g = 0; g < s.num_kv_heads; ++g) {
      for (std::size_t pos = from; pos < to; ++pos) {
        type.clear(storage_->layout, all.k_block(g, pos), all.v_block(g, pos), pos, s.head_dim);
      }
    }
  }
}

void KvCache::truncate(std::size_t len) {
  clear(len, length_);
  length_ = std::min(length_, len);
}

}  // namespace mha::detail
