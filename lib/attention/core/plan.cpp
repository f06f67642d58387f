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
std::atomic<bool> cascade_on{true};

// Rows of a shared chunk's task at most: sequences times their kv head's
// query heads (32 forked Llama-3.2-1B-like samples: 128).
constexpr std::size_t kSharedRows = 128;

// A cascade candidate: a full chunk of a decode row's history, by the pool
// block its first key is in.
struct ChunkKey {
  std::size_t chunk, block, seq;
};

// Whether two views of one cache read keys [k0, k1) from the same blocks.
bool same_blocks(const KvView& a, const KvView& b, std::size_t k0, std::size_t k1) {
  for (std::size_t j = k0; j < k1; j = (j / a.block_tokens + 1) * a.block_tokens) {
    if (a.block(j) != b.block(j)) return false;
  }
  return true;
}

// The plan's shared chunks: the full chunks of the key grid, before the new
// token, that two or more decode rows read from the same pool blocks, with
// their sequences in order (the units, whose task_begin the caller sets;
// null if none). Blocks are shared only by forking, which keeps
// a block at its index, so the chunks' first blocks sort the candidates and
// the rest of each chunk's blocks is checked.
SharedChunk* plan_cascade(CorePlan& p, const SeqSpans& seqs, const CoreArrays& arr) {
  const std::size_t n = seqs.num, ck = p.chunk_keys;
  std::size_t total = 0;
  arr.shared_base[0] = 0;
  for (std::size_t i = 0; i < n; ++i) {
    // Not after a window dropped blocks: the view's table starts later.
    // (A tree row's keys from its tail on are its own.)
    const KvView& v = arr.views[i];
    if (seqs.q_len(i) == 1 && v.block0 == 0) total += std::min(seqs.kv_len(i) - 1, v.tail) / ck;
    arr.shared_base[i + 1] = total;
  }
  if (total < 2) return nullptr;
  const char* what = "shared chunks";
  const std::size_t key_words = ceil_div(sizeof(ChunkKey), sizeof(std::size_t));
  const std::size_t unit_words = ceil_div(sizeof(SharedChunk), sizeof(std::size_t));
  std::size_t words = checked_mul(total, key_words + 1, what);
  words = checked_add(words, checked_mul(total / 2, unit_words, what), what);
  words = checked_add(words, ceil_div(total, sizeof(std::size_t)), what);
  auto* w = thread_scratch_array<std::size_t>(ScratchSlot::kCascade, words);
  auto* keys = reinterpret_cast<ChunkKey*>(w);
  std::size_t* members = w + total * key_words;
  auto* units = reinterpret_cast<SharedChunk*>(members + total);
  auto* flags = reinterpret_cast<unsigned char*>(units + total / 2);
  static_assert(alignof(ChunkKey) <= alignof(std::size_t) &&
                alignof(SharedChunk) <= alignof(std::size_t));
  std::size_t at = 0;
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t c = 0; c < arr.shared_base[i + 1] - arr.shared_base[i]; ++c) {
      keys[at++] = {c, arr.views[i].block(c * ck), i};
    }
  }
  std::sort(keys, keys + total, [](const ChunkKey& a, const ChunkKey& b) {
    return a.chunk != b.chunk   ? a.chunk < b.chunk
           : a.block != b.block ? a.block < b.block
                                : a.seq < b.seq;
  });
  std::fill_n(flags, total, 0);
  constexpr std::size_t kTaken = ~std::size_t{0};
  std::size_t units_n = 0, members_n = 0;
  for (std::size_t r0 = 0; r0 < total;) {
    std::size_t r1 = r0 + 1;
    while (r1 < total && keys[r1].chunk == keys[r0].chunk && keys[r1].block == keys[r0].block) ++r1;
    const std::size_t c = keys[r0].chunk;
    // Each untaken sequence of the run leads the ones reading its blocks.
    for (std::size_t lead = r0; lead < r1; ++lead) {
      if (keys[lead].seq == kTaken) continue;
      const KvView& v = arr.views[keys[lead].seq];
      SharedChunk u{c, members_n, 0, 0};
      for (std::size_t x = lead; x < r1; ++x) {
        const std::size_t i = keys[x].seq;
        if (i == kTaken || !same_blocks(v, arr.views[i], c * ck, (c + 1) * ck)) continue;
        members[u.first + u.count++] = i;
        keys[x].seq = kTaken;
      }
      if (u.count < 2) continue;
      for (std::size_t m = 0; m < u.count; ++m) {
        flags[arr.shared_base[members[u.first + m]] + c] = 1;
      }
      members_n += u.count;
      units[units_n++] = u;
    }
    r0 = r1;
  }
  if (units_n == 0) return nullptr;
  p.shared = units_n;
  p.units = units;
  p.members = members;
  p.shared_of = flags;
  p.shared_base = arr.shared_base;
  return units;
}

}  // namespace

void set_core_split_override(std::optional<CoreSplit> forced) noexcept {
  forced_split.store(forced ? static_cast<unsigned>(*forced) + 1 : 0, std::memory_order_relaxed);
}

void set_core_cascade(bool enabled) noexcept {
  cascade_on.store(enabled, std::memory_order_relaxed);
}

CoreArrays CoreArrays::take(std::size_t num) {
  // One block, size_t arrays first: 4 of [num + 1] and 3 of [num], then the
  // views and the sequences.
  const char* what = "sequences";
  const std::size_t n1 = checked_add(num, 1, what);
  const std::size_t words = checked_add(checked_mul(4, n1, what), checked_mul(3, num, what), what);
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
  a.shared_base = a.part_begin + num;
  a.views = reinterpret_cast<KvView*>(w + words);
  a.seqs = reinterpret_cast<CoreSeq*>(w + words + num * view_words);
  return a;
}

CorePlan plan_core(const KvType& kv, const GemmKernels& g, const AttentionShape& s,
                   const SeqSpans& seqs, std::size_t block_tokens, bool weights, bool average,
                   const AttentionMods& mods, const CoreArrays& arr) {
  CorePlan p;
  const std::size_t window = mods.window;
  const std::size_t n = seqs.num, H = s.num_heads, d = s.head_dim;
  p.materialize = weights;
  p.average = weights && average;
  p.key_tile = kv.key_tile();
  // A paged cache's key tiles are the contiguous cache's: one that spans
  // blocks (or starts off a strip) is gathered into the task's scratch,
  // laid out as a head-block of one tile, so the products see the same
  // operands and every block size gives the same bits. An entry that
  // spans_blocks() reads the blocks in place, with the same bits.
  p.spans = block_tokens != 0 && kv.spans_blocks(block_tokens);
  p.gather = !p.spans && block_tokens % p.key_tile != 0;
  // A tree step's rows gather their paths (KvView::tail).
  for (std::size_t i = 0; block_tokens != 0 && !p.gather && i < seqs.num; ++i) {
    p.gather = arr.views[i].path != nullptr;
  }
  if (p.gather) p.gather_layout = kv.layout(d, p.key_tile);
  p.chunk_keys = round_up(kMinChunk, p.key_tile);
  std::size_t max_q = 0, max_kv = 0;
  for (std::size_t i = 0; i < n; ++i) {
    max_q = std::max(max_q, seqs.q_len(i));
    max_kv = std::max(max_kv, seqs.kv_len(i));
  }
  // Short query sets stay one block: splitting 80 rows as 64 + 16 would run
  // the second block's products at a quarter of the micro-kernel's rows.
  // Longer ones use blocks of whole micro-tiles of the KV type's products
  // (56 rows for AVX-512's 14-row tile rather than 64 = 4 x 14 + 8, whose
  // last pass runs at 8/14; 64 for AMX's 32, where 56 left a tile of 8
  // rows copied to a padded tile every step).
  const std::size_t mr = kv.row_tile() != 0 ? kv.row_tile() : g.mr;
  p.q_block = max_q <= kQueryBlock + kQueryBlock / 2 ? std::max<std::size_t>(max_q, 1)
                                                     : std::max(mr, kQueryBlock / mr * mr);
  // GQA decode: a K/V head's query heads as one task's rows. (A Llama-3.2-
  // 1B-like decode step, b1 kv16384, 1 thread on Zen 4, took 0.53-0.62x the
  // time of one task per query head, which reads each K/V head 4 times, on
  // fp32, bf16, int8 and fp8 caches alike.)
  if (!weights && max_q <= 1 && s.num_kv_heads < H) p.bundle = H / s.num_kv_heads;
  const std::size_t heads = p.average ? 1 : H / p.bundle;
  std::size_t unsplit = 0;
  for (std::size_t i = 0; i < n; ++i) unsplit += heads * ceil_div(seqs.q_len(i), p.q_block);
  const unsigned forced = forced_split.load(std::memory_order_relaxed);
  const bool unsplit_forced = forced == static_cast<unsigned>(CoreSplit::unsplit) + 1;
  const bool split = !weights && !unsplit_forced && (unsplit < kSplitTargetTasks || forced != 0);
  // Cascade: the rows of a shared chunk differ in nothing but their queries
  // (decode rows, every key before each, no per-row position term). A
  // prefill chunk of another slot in the same step reads its keys itself.
  SharedChunk* units = nullptr;
  if (cascade_on.load(std::memory_order_relaxed) && block_tokens != 0 && !weights &&
      !unsplit_forced && window == 0 && mods.alibi == nullptr) {
    units = plan_cascade(p, seqs, arr);
  }
  const auto shares = [&](std::size_t i) {
    if (p.shared == 0) return false;
    const unsigned char* f = p.shared_of;
    return std::any_of(f + arr.shared_base[i], f + arr.shared_base[i + 1],
                       [](unsigned char x) { return x != 0; });
  };
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
    if (((split && len - begin >= min_span) || shares(i)) &&
        ceil_div(len, p.chunk_keys) - arr.chunk0[i] > 1) {
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
  p.own_tasks = p.tasks = arr.task_begin[n];
  // Each shared chunk: a task per kv head and run of its sequences, at
  // least two (MLA's 128 heads share one latent head).
  const std::size_t group = H / s.num_kv_heads;
  p.shared_runs = std::max<std::size_t>(2, kSharedRows / group);
  std::size_t run_max = 0;
  for (std::size_t u = 0; u < p.shared; ++u) {
    SharedChunk& unit = units[u];
    unit.task_begin = p.tasks;
    p.tasks += s.num_kv_heads * ceil_div(unit.count, p.shared_runs);
    run_max = std::max(run_max, std::min(unit.count, p.shared_runs));
  }
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
  p.task_rows = std::max(p.q_block * p.bundle, run_max * group);
  p.stage_floats = p.shared != 0 ? round_up(p.task_rows * d, 16) : 0;
  const std::size_t bq = p.task_rows;
  p.p_cols = weights ? max_kv : p.key_tile;
  // (The S tile also holds 3 floats per row for the chunk folds, tile_math.cpp.)
  p.s_cols = weights && !average ? 0 : std::max<std::size_t>(p.p_cols, 3);
  p.task_floats =
      round_up(bq * p.s_cols, 16) + 4 * round_up(bq, 16) + round_up(bq * d, 16) +
      round_up(kv.query_floats(bq, d), 16) + round_up(kv.p_floats(bq, p.p_cols, d), 16) +
      (p.gather_layout.k_bytes + p.gather_layout.v_bytes) / sizeof(float) + p.stage_floats;
  return p;
}

}  // namespace mha::detail
