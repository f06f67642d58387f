// The tile math of one sequence: masking and modifying a tile of scores, the
// online softmax over key tiles and the key grid's chunks, and the two
// products through the KV type. No intrinsics: the products are the KV
// type's, the row passes the softmax kernels'.
#pragma once

#include <cstddef>

#include "attention/core/core.hpp"
#include "softmax/kernels.hpp"
#include "softmax/online.hpp"

namespace mha::detail {

// A task's scratch (plan.task_floats), carved in plan_core's order.
struct TaskScratch {
  float* s;      // the S tile (q_block x key_tile), or a block of weight rows
  float* m;      // running max per row
  float* l;      // running sum per row
  float* cm;     // the chunk's max per row
  float* cl;     // the chunk's sum per row
  float* co;     // the chunk's accumulator (q_block x head_dim)
  float* qbuf;   // the prepared query block
  float* pbuf;   // P rows as the KV type rounds them
  float* kbuf;   // a key tile gathered from paged blocks (plan.gather): K,
  float* vbuf;   // then V, a head-block of plan.gather_layout
  float* stage;  // a shared chunk's stacked queries (plan.stage_floats)
  static TaskScratch carve(const KvType& kv, const CorePlan& plan, std::size_t head_dim,
                           float* base);
};

// A task's query rows: rows [q0, q1) of head h0 (heads == 1), or row q0 of
// heads [h0, h0 + heads), the query heads of one K/V head at a decode
// position, which then read K and V once for all of them (plan.bundle).
struct RowBlock {
  std::size_t h0 = 0, heads = 1, q0 = 0, q1 = 0;
  std::size_t rows() const { return heads * (q1 - q0); }
  std::size_t head(std::size_t r) const { return heads > 1 ? h0 + r : h0; }
  std::size_t query(std::size_t r) const { return heads > 1 ? q0 : q0 + r; }
  std::size_t last_query() const { return q1 - 1; }
};

// Everything a task of one sequence needs, resolved once per task.
class SeqAttention {
 public:
  SeqAttention(const KvType& kv, const SoftmaxKernels& sm, const AttentionShape& s,
               const CorePlan& plan, const CoreCall& call, const CoreSeq& seq);

  // Flash-style pass over keys [kbeg, kend) for the rows of b: o (ld ldo)
  // gets the unnormalized sum of exp(s - m)·v, and (m, l) the rows'
  // online-softmax state, folded chunk by chunk of the key grid. Rows that
  // see no key keep m = -inf, l = 0, o = 0.
  void attend_online(const RowBlock& b, std::size_t kbeg, std::size_t kend, float* o,
                     std::size_t ldo, float* m, float* l, const TaskScratch& t) const;
  // One shared chunk, keys [k0, k1) of kv head g as this sequence reads them,
  // from a fresh state into (o, m, l) (ld head_dim) for `rows` query rows
  // of other sequences too (q, ld head_dim): rows the plan has checked see
  // every key and have no per-row term (core.hpp's cascade), so each row's
  // bits are what its own sequence's task gives that chunk.
  void attend_shared(std::size_t g, std::size_t rows, const float* q, std::size_t k0,
                     std::size_t k1, float* o, float* m, float* l, const TaskScratch& t) const;
  // o rows /= l (with each row's head's sink joined): zero for rows that saw
  // no key, NaN for poisoned ones; their log-sum-exp to lse if asked.
  void normalize(const RowBlock& b, float* o, std::size_t ldo, const float* m,
                 const float* l) const;
  // Weights requested: the rows of P (p, ld ldp) are computed whole (scores,
  // mask, softmax) and then multiplied by V into o. No second pass over K.
  void attend_materialized(std::size_t h, std::size_t q0, std::size_t q1, float* p, std::size_t ldp,
                           float* o, std::size_t ldo, const TaskScratch& t) const;
  // Row i of head h from its split partials, folded in chunk order.
  template <class Part>
  void merge_row(std::size_t h, std::size_t i, std::size_t count, const Part& part) const {
    const float s = mods_.sinks != nullptr ? sink(h, i) : 0.f;
    store_lse(h, i,
              online_merge(sm_, count, part, out_rows(h, i), s_.head_dim,
                           mods_.sinks != nullptr ? &s : nullptr));
  }

  float* out_rows(std::size_t h, std::size_t q0) const {
    return seq_.out + q0 * call_.ldo + h * s_.head_dim;
  }
  // The rows of b in the output (a bundle's heads are head_dim apart).
  std::size_t out_ld(const RowBlock& b) const { return b.heads > 1 ? s_.head_dim : call_.ldo; }
  const CoreSeq& seq() const { return seq_; }

 private:
  std::size_t group() const { return s_.num_heads / s_.num_kv_heads; }
  const float* q_rows(std::size_t h, std::size_t q0) const {
    return seq_.q + q0 * call_.ldq + h * s_.head_dim;
  }
  std::size_t visible_end(std::size_t i) const;
  std::size_t visible_begin(std::size_t i) const;
  bool tile_all_padded(std::size_t k0, std::size_t k1) const;
  void mask_scores(const RowBlock& b, std::size_t k0, std::size_t n, float* sc,
                   std::size_t ldsc) const;
  void add_alibi(std::size_t h, std::size_t i, std::size_t k0, float* row, std::size_t n) const;
  std::ptrdiff_t alibi_ref(std::size_t h, std::size_t i) const;
  float alibi_shift(std::size_t h, std::size_t i) const;  // 0 without ALiBi
  float sink(std::size_t h, std::size_t i) const;         // row i's sink, shifted as its z
  float gemm_alpha() const;
  bool scale_in_softmax() const;
  float tile_alpha() const;  // the key tiles' product scale (attend_chunk)
  // The scores of `rows` prepared queries against keys [k0, k1) of kv head
  // g into t.s; returns the keys as P·V reads them: in place, or gathered
  // into t's buffers where they span paged blocks.
  KvTile scores(std::size_t rows, std::size_t g, std::size_t k0, std::size_t k1,
                const TaskScratch& t) const;
  // One chunk of the key grid, keys [c0, c1), from a fresh state into (o, m, l).
  void attend_chunk(const RowBlock& b, std::size_t c0, std::size_t c1, float* o, std::size_t ldo,
                    float* m, float* l, const TaskScratch& t) const;
  void fold_rows(std::size_t rows, float* o, std::size_t ldo, float* m, float* l,
                 const TaskScratch& t) const;
  void join_sink(std::size_t h, std::size_t i, OnlineRow& st, float* acc, std::size_t n) const;
  void store_lse(std::size_t h, std::size_t i, const OnlineRow& st) const;
  void zero_masked_keys(std::size_t i, float* row) const;

  const KvType& kv_;
  const SoftmaxKernels& sm_;
  const AttentionShape& s_;
  const CorePlan& plan_;
  const CoreCall& call_;
  const CoreSeq& seq_;
  const AttentionMods& mods_;
  std::size_t kv_len_;
  float scale_;
  std::ptrdiff_t causal_offset_;  // query i sees key j iff j <= i + offset
};

}  // namespace mha::detail
