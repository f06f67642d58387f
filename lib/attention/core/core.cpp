// The core's schedule: tasks over (sequence, head, query block[, chunk]),
// each on its own scratch, then the split sequences' partials folded.
#include "attention/core/core.hpp"

#include <algorithm>

#include "attention/core/tile_math.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/denormals.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"

namespace mha::detail {
namespace {

// Split-KV partial results of one sequence, per (head, chunk): O [q_len x
// d], m, l.
struct Partials {
  float* base;
  std::size_t q_len, d, chunks;
  std::size_t block() const { return q_len * (d + 2); }
  float* o(std::size_t h, std::size_t c) const { return base + (h * chunks + c) * block(); }
  float* m(std::size_t h, std::size_t c) const { return o(h, c) + q_len * d; }
  float* l(std::size_t h, std::size_t c) const { return m(h, c) + q_len; }
};

// The sequence owning task t.
std::size_t seq_of(const CorePlan& plan, std::size_t num, std::size_t t) {
  const std::size_t* it = std::upper_bound(plan.task_begin, plan.task_begin + num + 1, t);
  return static_cast<std::size_t>(it - plan.task_begin) - 1;
}

// Shared chunk u's task t (from its task_begin): kv head g's query heads of
// a run of its sequences, their decode queries stacked in the task's
// scratch, against the chunk's keys as its first sequence reads them; each
// row's (o, m, l) goes to its own sequence's partial of that chunk.
template <class PartialsOf>
void run_shared(const KvType& kv, const SoftmaxKernels& sm, const AttentionShape& s,
                const CorePlan& plan, const CoreCall& call, const TaskScratch& ts, std::size_t u,
                std::size_t t, const PartialsOf& partials) {
  const SharedChunk& unit = plan.units[u];
  const std::size_t d = s.head_dim, group = s.num_heads / s.num_kv_heads;
  const std::size_t runs = ceil_div(unit.count, plan.shared_runs);
  const std::size_t g = t / runs, m0 = t % runs * plan.shared_runs;
  const std::size_t m1 = std::min(unit.count, m0 + plan.shared_runs);
  const std::size_t* members = plan.members + unit.first;
  for (std::size_t m = m0; m < m1; ++m) {
    const CoreSeq& seq = call.seqs[members[m]];
    std::copy_n(seq.q + g * group * d, group * d, ts.stage + (m - m0) * group * d);
  }
  const SeqAttention a(kv, sm, s, plan, call, call.seqs[members[0]]);
  const std::size_t k0 = unit.chunk * plan.chunk_keys;
  a.attend_shared(g, (m1 - m0) * group, ts.stage, k0, k0 + plan.chunk_keys, ts.co, ts.m, ts.l, ts);
  for (std::size_t m = m0; m < m1; ++m) {
    const auto parts = partials(members[m]);
    for (std::size_t r = 0; r < group; ++r) {
      const std::size_t row = (m - m0) * group + r, h = g * group + r;
      std::copy_n(ts.co + row * d, d, parts.o(h, unit.chunk));
      *parts.m(h, unit.chunk) = ts.m[row];
      *parts.l(h, unit.chunk) = ts.l[row];
    }
  }
}

// The shared chunk owning task t (>= plan.own_tasks).
std::size_t unit_of(const CorePlan& plan, std::size_t t) {
  const SharedChunk* it =
      std::upper_bound(plan.units, plan.units + plan.shared, t,
                       [](std::size_t x, const SharedChunk& u) { return x < u.task_begin; });
  return static_cast<std::size_t>(it - plan.units) - 1;
}

}  // namespace

void run_core(const KvType& kv, const SoftmaxKernels& sm, const AttentionShape& s,
              const CorePlan& plan, const CoreCall& call, float* workspace) {
  const std::size_t H = s.num_heads, d = s.head_dim, bq = plan.q_block;
  const auto partials = [&](std::size_t i) {
    return Partials{workspace + plan.part_begin[i], call.seqs[i].q_len, d, plan.chunks_of[i]};
  };
  parallel_for(plan.tasks, plan.max_threads, [&](std::size_t t) {
    const DenormalsFlushed flushed;
    const TaskScratch ts = TaskScratch::carve(
        kv, plan, d, thread_scratch(ScratchSlot::kAttentionTask, plan.task_floats));
    kv.prepare_thread();
    if (t >= plan.own_tasks) {
      const std::size_t u = unit_of(plan, t);
      run_shared(kv, sm, s, plan, call, ts, u, t - plan.units[u].task_begin, partials);
      return;
    }
    const std::size_t i = seq_of(plan, call.num, t);
    const CoreSeq& seq = call.seqs[i];
    const SeqAttention a(kv, sm, s, plan, call, seq);
    const std::size_t q_blocks = ceil_div(seq.q_len, bq), local = t - plan.task_begin[i];
    const std::size_t kv_len = seq.kv.len;
    if (plan.average) {
      // Averaged weights: one task owns all heads of its rows, so the sum
      // over heads runs in a fixed order (h = 0, 1, ...) with no races.
      const std::size_t q0 = local * bq, q1 = std::min(seq.q_len, q0 + bq), rows = q1 - q0;
      float* acc = seq.weights + q0 * kv_len;
      for (std::size_t h = 0; h < H; ++h) {
        a.attend_materialized(h, q0, q1, h == 0 ? acc : ts.s, kv_len, a.out_rows(h, q0), call.ldo,
                              ts);
        if (h == 0) continue;
        for (std::size_t r = 0; r < rows; ++r) {
          sm.scale_add(ts.s + r * kv_len, acc + r * kv_len, acc + r * kv_len, kv_len, 1.0f);
        }
      }
      for (std::size_t r = 0; r < rows; ++r) {
        sm.scale(acc + r * kv_len, kv_len, 1.0f / static_cast<float>(H));
      }
      return;
    }
    if (plan.materialize) {
      const std::size_t qb = local % q_blocks, h = local / q_blocks;
      const std::size_t q0 = qb * bq, q1 = std::min(seq.q_len, q0 + bq);
      float* p = seq.weights + (h * seq.q_len + q0) * kv_len;
      a.attend_materialized(h, q0, q1, p, kv_len, a.out_rows(h, q0), call.ldo, ts);
      return;
    }
    // A split sequence's tasks per (heads, query block): groups of its chunks.
    const std::size_t chunks = plan.chunks_of[i];
    const std::size_t groups =
        (plan.task_begin[i + 1] - plan.task_begin[i]) / (H / plan.bundle * q_blocks);
    const std::size_t g = local % groups, qb = (local / groups) % q_blocks;
    const std::size_t q0 = qb * bq;
    const RowBlock b{local / (groups * q_blocks) * plan.bundle, plan.bundle, q0,
                     std::min(seq.q_len, q0 + bq)};
    if (chunks == 1) {
      float* o = a.out_rows(b.h0, q0);
      a.attend_online(b, 0, kv_len, o, a.out_ld(b), ts.m, ts.l, ts);
      a.normalize(b, o, a.out_ld(b), ts.m, ts.l);
      return;
    }
    // Chunks [c0, c1) of the key grid, each into its own partial (a bundle's
    // rows, of different heads, through the task's scratch).
    const std::size_t per = ceil_div(chunks, groups);
    const std::size_t c0 = g * per, c1 = std::min(chunks, c0 + per);
    const Partials parts = partials(i);
    for (std::size_t ch = c0; ch < c1; ++ch) {
      if (plan.is_shared(i, plan.chunk0[i] + ch)) continue;
      const std::size_t k0 = (plan.chunk0[i] + ch) * plan.chunk_keys;
      const std::size_t k1 = std::min(kv_len, k0 + plan.chunk_keys);
      if (b.heads == 1) {
        a.attend_online(b, k0, k1, parts.o(b.h0, ch) + q0 * d, d, parts.m(b.h0, ch) + q0,
                        parts.l(b.h0, ch) + q0, ts);
        continue;
      }
      a.attend_online(b, k0, k1, ts.co, d, ts.m, ts.l, ts);
      for (std::size_t r = 0; r < b.heads; ++r) {
        std::copy_n(ts.co + r * d, d, parts.o(b.h0 + r, ch) + q0 * d);
        parts.m(b.h0 + r, ch)[q0] = ts.m[r];
        parts.l(b.h0 + r, ch)[q0] = ts.l[r];
      }
    }
  });
  if (plan.chunks == 1) return;

  // Fold each split sequence's chunks, row by row, in chunk order.
  parallel_for(call.num * H, plan.max_threads, [&](std::size_t t) {
    const std::size_t i = t / H, h = t % H;
    if (plan.chunks_of[i] == 1) return;
    const DenormalsFlushed flushed;
    const CoreSeq& seq = call.seqs[i];
    const SeqAttention a(kv, sm, s, plan, call, seq);
    const Partials parts = partials(i);
    for (std::size_t r = 0; r < seq.q_len; ++r) {
      a.merge_row(h, r, parts.chunks, [&](std::size_t c) {
        return OnlinePart{{parts.m(h, c)[r], parts.l(h, c)[r]}, parts.o(h, c) + r * d};
      });
    }
  });
}

}  // namespace mha::detail
