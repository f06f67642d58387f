// The core's plan: query blocks, the key grid, which sequences split their
// keys into chunks across tasks, and the scratch each task and the call
// take. Only the thread cap depends on the machine.
#include <algorithm>
#include <atomic>

#include "attention/core/core.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"

namespace mha::detail {
namespace {

// Query rows per task: the K/V tiles are reused across these rows.
constexpr std::size_t kQueryBlock = 64;
// Split-KV: when (sequences x heads x query blocks) gives fewer tasks than
// this, a sequence of at least 2·kMinChunk keys runs one task per chunk of
// the key grid. A fixed constant, not the thread count, and the grid is the
// object's, so the result depends on neither.
constexpr std::size_t kSplitTargetTasks = 64;
constexpr std::size_t kMinChunk = 512;

// The first key any query of a sequence may see with a sliding window (its
// first query is at position kv_len - q_len), on the tile grid.
std::size_t first_key(std::size_t q_len, std::size_t kv_len, std::size_t window, std::size_t tile) {
  if (window == 0 || kv_len < q_len || kv_len - q_len < window) return 0;
  return (kv_len - q_len - window + 1) / tile * tile;
}

// The split tests force (set_core_split_override), plus one; 0: none.
std::atomic<unsigned> forced_split{0};

}  // namespace

void set_core_split_override(std::optional<CoreSplit> forced) noexcept {
  forced_split.store(forced ? static_cast<unsigned>(*forced) + 1 : 0, std::memory_order_relaxed);
}

CoreArrays CoreArrays::take(std::size_t num) {
  // One block, size_t arrays first: 3 of [num + 1] and 3 of [num], then the
  // views and the sequences.
  const char* what = "sequences";
  const std::size_t n1 = checked_add(num, 1, what);
  const std::size_t words = checked_add(checked_mul(3, n1, what), checked_mul(3, num, what), what);
  const std::size_t view_words = ceil_div(sizeof(KvView), sizeof(std::size_t));
  const std::size_t seq_words = ceil_div(sizeof(CoreSeq), sizeof(std::size_t));
  auto* w = thread_scratch_array<std::size_t>(
      ScratchSlot::kRagged,
      checked_add(words, checked_mul(num, view_words + seq_words, what), what));
  static_assert(alignof(CoreSeq) <= alignof(std::size_t) &&
                alignof(KvView) <= alignof(std::size_t));
  CoreArrays a;
  a.q_start = w;
  a.kv_start = w + n1;
  a.task_begin = w + 2 * n1;
  a.chunk0 = w + 3 * n1;
  a.chunks = a.chunk0 + num;
  a.part_begin = a.chunks + num;
  a.views = reinterpret_cast<KvView*>(w + words);
  a.seqs = reinterpret_cast<CoreSeq*>(w + words + num * view_words);
  return a;
}

CorePlan plan_core(const KvType& kv, const GemmKernels& g, const AttentionShape& s,
                   const SeqSpans& seqs, std::size_t block_tokens, bool weights, bool average,
                   std::size_t window, const CoreArrays& arr) {
  CorePlan p;
  const std::size_t n = seqs.num, H = s.num_heads, d = s.head_dim;
  p.materialize = weights;
  p.average = weights && average;
  p.key_tile = kv.key_tile();
  // A paged cache's key tiles are the contiguous cache's: one that spans
  // blocks (or starts off a strip) is gathered into the task's scratch,
  // laid out as a head-block of one tile, so the products see the same
  // operands and every block size gives the same bits.
  p.gather = block_tokens % p.key_tile != 0;
  if (p.gather) p.gather_layout = kv.layout(d, p.key_tile);
  p.chunk_keys = round_up(kMinChunk, p.key_tile);
  std::size_t max_q = 0, max_kv = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_q = std::max(max_q, seqs.q_len(i));
    max_kv = std::max(max_kv, seqs.kv_len(i));
  }
  // Short query sets stay one block: splitting 80 rows as 64 + 16 would run
  // the second block's products at a quarter of the micro-kernel's rows.
  // Longer ones use blocks of whole micro-tiles (56 rows for AVX-512's 14-row
  // tile rather than 64 = 4 x 14 + 8, whose last pass runs at 8/14).
  p.q_block = max_q <= kQueryBlock + kQueryBlock / 2 ? std::max<std::size_t>(max_q, 1)
                                                     : std::max(g.mr, kQueryBlock / g.mr * g.mr);
  // GQA decode: a K/V head's query heads as one task's rows. (A Llama-3.2-
  // 1B-like decode step, b1 kv16384, 1 thread on Zen 4, took 0.53-0.62x the
  // time of one task per query head, which reads each K/V head 4 times, on
  // fp32, bf16, int8 and fp8 caches alike.)
  if (!weights && max_q <= 1 && s.num_kv_heads < H) p.bundle = H / s.num_kv_heads;
  const std::size_t heads = p.average ? 1 : H / p.bundle;
  std::size_t unsplit = 0;
  for (std::size_t i = 0; i < n; ++i) unsplit += heads * ceil_div(seqs.q_len(i), p.q_block);
  const unsigned forced = forced_split.load(std::memory_order_relaxed);
  const bool split = !weights && forced != static_cast<unsigned>(CoreSplit::unsplit) + 1 &&
                     (unsplit < kSplitTargetTasks || forced != 0);
  const std::size_t min_span = forced != 0 ? 1 : 2 * kMinChunk;
  // Tasks per split sequence and head and query block: enough for
  // kSplitTargetTasks in all (forced: one per chunk); each takes a run of
  // consecutive chunks, each chunk's partial its own, so the grouping
  // changes no bit. (With one task per chunk, a b1 bf16 decode over 8192
  // keys ran 1.06-1.09x the time of the earlier split at 1 thread on Zen 4;
  // grouped, 0.93x.)
  const std::size_t want = ceil_div(kSplitTargetTasks, std::max<std::size_t>(unsplit, 1));
  double flops = 0.0;
  std::size_t parts = 0;
  arr.task_begin[0] = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t q = seqs.q_len(i), len = seqs.kv_len(i);
    const std::size_t begin = first_key(q, len, window, p.key_tile);
    if (i == 0) p.key_begin = begin;
    arr.chunk0[i] = begin / p.chunk_keys;
    arr.chunks[i] = 1;
    if (split && len - begin >= min_span && ceil_div(len, p.chunk_keys) - arr.chunk0[i] > 1) {
      arr.chunks[i] = ceil_div(len, p.chunk_keys) - arr.chunk0[i];
    }
    p.chunks = std::max(p.chunks, arr.chunks[i]);
    const std::size_t per = forced != 0 ? 1 : ceil_div(arr.chunks[i], want);
    const std::size_t groups = ceil_div(arr.chunks[i], per);
    arr.task_begin[i + 1] = arr.task_begin[i] + heads * ceil_div(q, p.q_block) * groups;
    arr.part_begin[i] = parts;
    if (arr.chunks[i] > 1) parts += H * arr.chunks[i] * q * (d + 2);
    // Keys each row reads: a window bounds them.
    const std::size_t seen = window != 0 ? std::min(len - begin, window) : len - begin;
    flops += 4.0 * static_cast<double>(H * q) * static_cast<double>(seen * d);
  }
  p.tasks = arr.task_begin[n];
  p.task_begin = arr.task_begin;
  p.chunk0 = arr.chunk0;
  p.chunks_of = arr.chunks;
  p.part_begin = arr.part_begin;
  p.max_threads = std::min(std::max<std::size_t>(p.tasks, 1), threads_for({flops}));
  p.workspace_floats = parts;
  // A task's scratch: the S tile (a P row per key, every key with the
  // weights), the running and the chunk's (max, sum) per row, the chunk's
  // accumulator, the prepared queries and the rounded P rows.
  // (With per-head weights, P is the caller's array.)
  const std::size_t bq = p.q_block * p.bundle;
  p.p_cols = weights ? max_kv : p.key_tile;
  // (The S tile also holds 3 floats per row for the chunk folds, tile_math.cpp.)
  p.s_cols = weights && !average ? 0 : std::max<std::size_t>(p.p_cols, 3);
  p.task_floats = round_up(bq * p.s_cols, 16) + 4 * round_up(bq, 16) + round_up(bq * d, 16) +
                  round_up(kv.query_floats(bq, d), 16) + round_up(kv.p_floats(bq, p.p_cols), 16) +
                  (p.gather_layout.k_bytes + p.gather_layout.v_bytes) / sizeof(float);
  return p;
}

}  // namespace mha::detail
