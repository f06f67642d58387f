// The attention core, one loop for every call mode (a padded batch, ragged
// sequences, a KV-cache step, a paged step): per (sequence, head, query
// block[, key chunk]) it computes
//   O = softmax(scale·Q·Kᵀ + mask)·V
// flash-style (Milakov & Gimelshein's online softmax over key tiles), over
// K and V laid out by the object's KV element type (kv/kv_type.hpp).
//
// Every row's keys are reduced on a fixed grid: key tiles of plan.key_tile
// from key 0, folded within chunks of plan.chunk_keys keys (online softmax),
// and the chunks folded in order (online_fold). Split-KV runs a chunk per
// task and folds the partials afterwards in the same order, so a row's bits
// depend on its keys and the object alone: not on the thread count, the
// other sequences of the call, the split, or how a prefill is cut into steps.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <optional>

#include "attention/core/shape.hpp"
#include "attention/kv/kv_type.hpp"
#include "gemm/gemm.hpp"
#include "softmax/kernels.hpp"

namespace mha::detail {

// Sequences back to back: sequence i owns query rows q_start[i] ..
// q_start[i+1]-1 and kv_start[i+1] - kv_start[i] keys (all of them, the
// history of a cache included), its last query aligned with its last key.
struct SeqSpans {
  std::size_t num = 0;
  const std::size_t* q_start = nullptr;
  const std::size_t* kv_start = nullptr;
  std::size_t q_len(std::size_t i) const { return q_start[i + 1] - q_start[i]; }
  std::size_t kv_len(std::size_t i) const { return kv_start[i + 1] - kv_start[i]; }
};

// One sequence as the core reads it.
struct CoreSeq {
  const float* q = nullptr;  // [q_len, ldq] rows, head h at column h*head_dim (RoPE applied)
  float* out = nullptr;      // [q_len, ldo] rows of merged heads, likewise
  std::size_t q_len = 0;
  KvView kv;                               // its kv.len keys
  const unsigned char* padding = nullptr;  // [kv.len] key padding mask, or null
  // Additive mask of head h: [q_len, kv.len] at additive + h*additive_head_stride.
  const float* additive = nullptr;
  std::size_t additive_head_stride = 0;
  float* lse = nullptr;      // [q_len, H], or null
  float* weights = nullptr;  // [H, q_len, kv.len], or [q_len, kv.len] averaged, or null
};

// What a call asks of the core besides its sequences.
struct CoreCall {
  const CoreSeq* seqs = nullptr;
  std::size_t num = 0;
  std::size_t ldq = 0, ldo = 0;
  bool causal = false;
  AttentionMods mods;  // window, ALiBi, soft-cap, sinks (lse per sequence)
};

// Per-sequence arrays of a call, carved from the calling thread's kRagged
// scratch, so a call allocates nothing once that has grown.
struct CoreArrays {
  std::size_t* q_start;     // [num + 1]
  std::size_t* kv_start;    // [num + 1]
  std::size_t* task_begin;  // [num + 1]: sequence i's first task
  std::size_t* chunk0;      // [num]: its first split chunk (of the key grid)
  std::size_t* chunks;      // [num]: its split chunks (1: not split)
  std::size_t* part_begin;  // [num]: its split partials in the workspace (floats)
  // [num + 1]: sequence i's full history chunks c (cascade candidates) have
  // flags at shared_base[i] + c of the plan's `shared_of`.
  std::size_t* shared_base;
  KvView* views;  // [num]: each sequence's keys, as its KvStore gives them
  CoreSeq* seqs;  // [num]
  static CoreArrays take(std::size_t num);
};

// A chunk of the key grid that several sequences' decode rows read in the
// same pool blocks (forked slots), computed once for all of them
// (cascade): count sequences from members[first], one task per kv head
// and run of them from task_begin on.
struct SharedChunk {
  std::size_t chunk, first, count, task_begin;
};

// The task decomposition, a fixed function of the shapes and the KV type's
// tiles (never of the thread count); the key grid (key_tile, chunk_keys) is
// the object's alone (never a paged cache's block size), so that results
// are bit-identical however a call is split and wherever its keys live.
struct CorePlan {
  std::size_t q_block = 0;  // query rows per task
  // Query heads per task: every query head of a K/V head where each query is
  // a decode row (q_len <= 1, no weights), so they read K and V once; else 1.
  std::size_t bundle = 1;
  std::size_t key_tile = 0;  // keys per online-softmax step
  // Whether a tile may span a paged cache's blocks, to be gathered into a
  // head-block of gather_layout (one tile of keys) in the task's scratch.
  bool gather = false;
  // Whether the KV type reads every tile of the paged blocks in place
  // (KvType::spans_blocks), except a tree's path.
  bool spans = false;
  KvLayout gather_layout;
  std::size_t chunk_keys = 0;  // keys per fold of the key grid (a multiple of key_tile)
  std::size_t chunks = 1;      // the most split chunks of any sequence (1: none split)
  std::size_t key_begin = 0;   // sequence 0's first key any row may see (window), tile-aligned
  std::size_t tasks = 0;
  std::size_t max_threads = 1;         // from threads_for: a cap, not the split
  std::size_t workspace_floats = 0;    // from the calling thread (split partials)
  std::size_t task_floats = 0;         // per task (TaskScratch, tile_math.hpp)
  std::size_t s_cols = 0, p_cols = 0;  // a task's S rows and P rows (keys)
  bool materialize = false, average = false;
  const std::size_t* task_begin = nullptr;
  const std::size_t* chunk0 = nullptr;
  const std::size_t* chunks_of = nullptr;
  const std::size_t* part_begin = nullptr;
  std::size_t task_rows = 0;  // rows per task at most (the scratch's)
  // Cascade: tasks [own_tasks, tasks) compute the shared chunks, each into
  // every member's split partial, and the members' own tasks skip them.
  std::size_t own_tasks = 0;
  std::size_t shared = 0;        // shared chunks (per kv head)
  std::size_t shared_runs = 0;   // sequences per shared task at most
  std::size_t stage_floats = 0;  // per task: a shared task's stacked queries
  const SharedChunk* units = nullptr;
  const std::size_t* members = nullptr;
  const unsigned char* shared_of = nullptr;
  const std::size_t* shared_base = nullptr;
  // Whether sequence i's chunk c (of the key grid) is a shared task's.
  bool is_shared(std::size_t i, std::size_t c) const {
    return shared_of != nullptr && c < shared_base[i + 1] - shared_base[i] &&
           shared_of[shared_base[i] + c] != 0;
  }
};

// block_tokens: the keys live in a paged cache's blocks of that many keys,
// or 0; arr.views then say in which (KvStore::describe), and full chunks of
// the key grid that several decode rows read in the same blocks become
// shared tasks (cascade), where no row's mask or position term tells them
// apart: no window, ALiBi or weights. mods.window (0: none): a sequence's
// split then covers only the keys some row's window reaches. The plan's
// arrays are arr's, and the calling thread's kCascade scratch.
CorePlan plan_core(const KvType& kv, const GemmKernels& g, const AttentionShape& s,
                   const SeqSpans& seqs, std::size_t block_tokens, bool weights, bool average,
                   const AttentionMods& mods, const CoreArrays& arr);

// The core's variants: a row block over all its keys (unsplit), one chunk
// of the key grid per task folded afterwards (split-KV), the weights
// materialized (forward with weights), averaged over heads or not. For
// tests: every later plan on every thread splits each sequence at every
// chunk of the key grid it reads (split), or none (unsplit), whatever its
// size; nullopt restores the plan's rule. Weights are never split.
enum class CoreSplit : unsigned char { split, unsplit };
void set_core_split_override(std::optional<CoreSplit> forced) noexcept;
// For tests: every later plan on every thread computes shared chunks once
// (true, the default) or once per sequence (false); the bits are the same.
void set_core_cascade(bool enabled) noexcept;

// Runs the core; `workspace` holds plan.workspace_floats floats.
void run_core(const KvType& kv, const SoftmaxKernels& sm, const AttentionShape& s,
              const CorePlan& plan, const CoreCall& call, float* workspace);

}  // namespace mha::detail
