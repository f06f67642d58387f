// Where a call's new K and V go, the one interface between the pipeline
// (engine/engine.cpp) and the stores behind it: its per-call store, a
// contiguous cache (kv_cache.hpp) or one step of a paged one
// (paged_cache.hpp).
#pragma once

#include <cstddef>

namespace mha::detail {

class KvType;
struct KvView;
struct SeqSpans;

// Packed for the call alone, or appended to a cache. Sequence i of `seqs`
// gets new(i) = key_start[i+1] - key_start[i] keys (rows key_start[i].. of
// k and v, [rows, ld], kv head g at column g*head_dim) after its kv_len(i) -
// new(i) earlier ones.
class KvStore {
 public:
  virtual ~KvStore() = default;
  // The element type the store holds K and V in, which the core reads.
  virtual const KvType& type() const = 0;
  // Floats of the calling thread's scratch that append() writes into (a
  // per-call store), else 0.
  virtual std::size_t scratch_floats(const SeqSpans& seqs) const = 0;
  // Keys per block of a paged store (tiles spanning blocks are gathered), or 0.
  virtual std::size_t block_tokens() const { return 0; }
  // Gives views[i] sequence i's kv_len(i) keys as append() will, writing
  // nothing, where a paged store (block_tokens() != 0) holds them: the plan
  // reads which sequences share blocks.
  virtual void describe(const SeqSpans& seqs, KvView* views) const {
    static_cast<void>(seqs);
    static_cast<void>(views);
  }
  // Writes the new keys and gives views[i] sequence i's kv_len(i) keys.
  virtual void append(const SeqSpans& seqs, const std::size_t* key_start, const float* k,
                      const float* v, std::size_t ld, float* scratch, KvView* views) = 0;
  // The call succeeded: the new keys are kept. Failed: the store is as
  // before the call (nothing kept, nothing lost).
  virtual void commit(const SeqSpans& seqs) = 0;
  virtual void rollback(const SeqSpans& seqs) noexcept = 0;
};

}  // namespace mha::detail
