// The attention core shared by the full forward and the KV-cache step:
// per (batch, head, query block[, KV chunk]) it computes
//   O = softmax(scale·Q·Kᵀ + mask)·V
// flash-style (Milakov & Gimelshein's online softmax over key tiles), with
// K and V already packed in the GEMM's B layout per (batch, kv head).
#pragma once

#include <mha/mha.h>

#include <cstddef>

#include "attention/engine.hpp"
#include "gemm/gemm.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {

// K and V of every (batch, kv head) block, at a fixed stride per block:
// K packed as the GEMM's op(B) = Kᵀ ([head_dim x len], strips of nr keys),
// V row-major [len x ldv] with ldv = head_dim rounded up to whole cache
// lines (the columns past head_dim are never read), so that P·V reads V in
// place (gemm_serial_inplace) and P is never packed. The same view describes
// per-call packing and the KV cache (whose blocks have room for max_len
// keys; only `len` are used).
// A bf16 view (g16 non-null; a bf16 object where the CPU has bf16 dot
// products) holds K and V in bf16 in g16's packed-B layout instead: K as
// op(B) = Kᵀ (pairs along head_dim, strips of g16->nr keys), V as op(B) = V
// (pairs of consecutive keys, strips of g16->nr columns v_strip elements
// apart); the strides stay in floats and ldv is unused. The high half of
// an odd length's last V pair is zero.
struct KvCacheView {
  const float* k = nullptr;
  const float* v = nullptr;
  std::size_t len = 0;
  std::size_t kv_heads = 0, head_dim = 0, nr = 0;
  std::size_t k_stride = 0, v_stride = 0;  // floats between (b, g) blocks
  std::size_t ldv = 0;                     // floats between V rows
  // Paged (one slot of a PagedKvCache), or null: key j lives in pool block
  // blocks[j / block_tokens - block0] at column j % block_tokens, that
  // block's (b, g) being block * kv_heads + g at the strides above (b is not
  // used). Keys before block0 * block_tokens were dropped (a sliding window)
  // and are never read.
  const std::size_t* blocks = nullptr;
  std::size_t block_tokens = 0, block0 = 0;
  const GemmBf16Kernels* g16 = nullptr;
  std::size_t v_strip = 0;

  PackedBView keys(std::size_t b, std::size_t g) const {
    return PackedBView::whole(k + (b * kv_heads + g) * k_stride, head_dim, len, nr);
  }
  // Row j (key j) of V at values(b, g) + j*ldv.
  const float* values(std::size_t b, std::size_t g) const {
    return v + (b * kv_heads + g) * v_stride;
  }
  // Keys [k0, k1) of one key tile: a paged view's tiles never straddle blocks
  // (the plan's key tile divides block_tokens), so a tile is one block's view.
  PackedBView key_tile(std::size_t b, std::size_t g, std::size_t k0, std::size_t k1) const {
    if (blocks == nullptr) return keys(b, g).cols(k0, k1);
    const std::size_t j0 = k0 % block_tokens;
    const float* base = k + (blocks[k0 / block_tokens - block0] * kv_heads + g) * k_stride;
    return PackedBView::whole(base, head_dim, block_tokens, nr).cols(j0, j0 + (k1 - k0));
  }
  // bf16: the K strip holding key k0 (from k0 on when k0 starts a strip),
  // and V's pair row holding key k0 in its first column strip; paged, those
  // of k0's block, where k0 stands at local(k0).
  const std::uint16_t* key_strips16(std::size_t b, std::size_t g, std::size_t k0) const {
    return reinterpret_cast<const std::uint16_t*>(k + block_of(b, g, k0) * k_stride) +
           local(k0) / g16->nr * ((head_dim + 1) / 2) * g16->nr * 2;
  }
  const std::uint16_t* value_pairs16(std::size_t b, std::size_t g, std::size_t k0) const {
    return reinterpret_cast<const std::uint16_t*>(v + block_of(b, g, k0) * v_stride) +
           local(k0) / 2 * g16->nr * 2;
  }
  // Key j's index in its block (paged), or j.
  std::size_t local(std::size_t j) const { return blocks == nullptr ? j : j % block_tokens; }
  // The (b, g) block holding key j, in strides from k (or v).
  std::size_t block_of(std::size_t b, std::size_t g, std::size_t j) const {
    return (blocks == nullptr ? b : blocks[j / block_tokens - block0]) * kv_heads + g;
  }
  // V rows from key k0 on, within k0's key tile.
  const float* value_rows(std::size_t b, std::size_t g, std::size_t k0) const {
    if (blocks == nullptr) return values(b, g) + k0 * ldv;
    return v + (blocks[k0 / block_tokens - block0] * kv_heads + g) * v_stride +
           (k0 % block_tokens) * ldv;
  }
};

// Layout of K/V blocks holding `capacity` keys, for `batch` rows.
// g16 non-null: the bf16 layouts of KvCacheView.
struct KvPacking {
  std::size_t k_stride = 0, v_stride = 0, ldv = 0;
  std::size_t floats = 0;  // total, K blocks then V blocks
  const GemmBf16Kernels* g16 = nullptr;
  std::size_t v_strip = 0;  // bf16 only
};
KvPacking kv_packing(const GemmKernels& g, const AttentionShape& s, std::size_t batch,
                     std::size_t capacity, const GemmBf16Kernels* g16 = nullptr);

// The view of blocks laid out as `p` at dst (K blocks, then V blocks) for
// `batch` rows of len keys.
KvCacheView kv_view(const GemmKernels& g, const AttentionShape& s, const KvPacking& p,
                    std::size_t batch, std::size_t len, float* dst);

// Packs K and copies V ([batch*kv_len, ld] rows, kv head g at column
// g*head_dim) into dst laid out as `p`, in parallel over (batch, kv head).
KvCacheView pack_kv(const GemmKernels& g, const AttentionShape& s, const KvPacking& p,
                    std::size_t batch, std::size_t kv_len, const float* k, const float* v,
                    std::size_t ld, float* dst);

// A bf16 view's block (b, g) gets key j: its K and V (head_dim floats each,
// rounded to bf16 here) written into their strips. An even j also zeroes
// j + 1's half of the V pairs, and the first key of a K strip zeroes the
// strip, so positions past the length read as zero (paged: j's block, by
// its index there).
void put_key_bf16(const KvCacheView& view, std::size_t b, std::size_t g, std::size_t j,
                  const float* k, const float* v);
// Zeroes key j of a bf16 view's block (b, g) (a truncated position).
void clear_key_bf16(const KvCacheView& view, std::size_t b, std::size_t g, std::size_t j);

// The task decomposition, a fixed function of the shapes and the ISA's tile
// sizes (never of the thread count), so results are bit-identical at any
// thread count.
struct CorePlan {
  std::size_t q_block = 0;    // query rows per task
  std::size_t key_tile = 0;   // keys per online-softmax step (multiple of nr)
  std::size_t chunks = 1;     // split-KV chunks (1 = no split)
  std::size_t chunk_len = 0;  // keys per chunk (multiple of key_tile)
  std::size_t key_begin = 0;  // first key any row may see (sliding window), tile-aligned
  // From threads_for: the one field the thread count sets (a cap, not the split).
  std::size_t max_threads = 1;
  bool materialize = false;          // caller asked for the weights
  std::size_t workspace_floats = 0;  // from the calling thread (split partials)
  std::size_t task_floats = 0;       // per task
  // bf16 core: where in a task's scratch its Q rows and P rows (the bf16
  // kernels' A rows) start (floats), and their strides (elements).
  std::size_t bf16_offset = 0, ldq16 = 0, ldp16 = 0;
};
// `window`: mha_mods.window (0: none); the chunks then cover only the keys
// some row's window reaches. g16: the K/V views will be bf16 for these
// kernels (their strips then divide the key tile), or nullptr.
CorePlan plan_core(const GemmKernels& g, const AttentionShape& s, std::size_t batch,
                   std::size_t q_len, std::size_t kv_len, bool weights, bool average,
                   std::size_t window, const GemmBf16Kernels* g16 = nullptr);

struct CoreInputs {
  const float* q;  // [batch*q_len, ldq], head h at column h*head_dim
  std::size_t ldq;
  std::size_t batch, q_len;
  KvCacheView kv;  // kv.len keys
  const mha_mask* mask;
  float* out;  // merged heads [batch*q_len, ldo], head h at column h*head_dim
  std::size_t ldo;
  AttentionMods mods;  // RoPE already applied to q and the keys
};

// Runs the core. `weights`, if non-null, receives the attention weights
// ([batch, H, q_len, kv_len], or [batch, q_len, kv_len] averaged over heads).
// `workspace` holds plan.workspace_floats floats.
void run_core(const GemmKernels& g, const SoftmaxKernels& sm, const AttentionShape& s,
              const CorePlan& plan, const CoreInputs& in, float* weights, bool average,
              float* workspace);

// Sequences packed back to back (a validated mha_ragged): sequence b owns
// query/out rows q_start[b] .. q_start[b+1]-1 and key/value rows
// kv_start[b] .. kv_start[b+1]-1.
struct RaggedSeqs {
  std::size_t num = 0;
  const std::size_t* q_start = nullptr;
  const std::size_t* kv_start = nullptr;
  std::size_t q_len(std::size_t b) const { return q_start[b + 1] - q_start[b]; }
  std::size_t kv_len(std::size_t b) const { return kv_start[b + 1] - kv_start[b]; }
};

// The per-call arrays of a ragged pass over `num` sequences, carved from the
// calling thread's kRagged scratch, so a ragged call allocates nothing once
// that has grown.
struct RaggedArrays {
  std::size_t* kv_start;    // [num + 1]: a paged step's key offsets
  std::size_t* key_col;     // [num + 1]
  std::size_t* task_begin;  // [num + 1]
  std::size_t* chunks;      // [num]
  std::size_t* part_begin;  // [num]
  KvCacheView* views;       // [num]: each sequence's keys
  static RaggedArrays take(std::size_t num);
};

// The ragged decomposition: tasks over (sequence, head, query block, KV
// chunk), each sequence with its own lengths, so no task touches padding.
// Like plan_core, a fixed function of the shapes and tile sizes.
struct RaggedPlan {
  CorePlan core;  // q_block, key_tile, chunk_len, threads, scratch sizes
  // [num + 1]: sequence b's keys are packed columns key_col[b].. of one block
  // per kv head, each sequence starting a strip (nr-aligned, or the bf16
  // kernels' nr) so that its keys are a view of their own.
  const std::size_t* key_col = nullptr;
  const std::size_t* task_begin = nullptr;  // [num + 1]: sequence b's first task
  const std::size_t* chunks = nullptr;      // [num]: its split-KV chunks
  const std::size_t* part_begin = nullptr;  // [num]: its split partials in the workspace
  KvPacking packing;                        // one block per kv head, key_col[num] keys
};
// block_tokens: the keys live in a paged cache's blocks of that many keys
// (the key tile then divides it), or 0. g16: the keys are packed per call in
// bf16 for these kernels (as plan_core's g16), or nullptr.
// The plan's arrays are arr's.
RaggedPlan plan_ragged(const GemmKernels& g, const AttentionShape& s, const RaggedSeqs& seqs,
                       std::size_t block_tokens, const RaggedArrays& arr,
                       const GemmBf16Kernels* g16 = nullptr);

// pack_kv for ragged rows ([kv_start[num], ld], kv head g at column
// g*head_dim), laid out as plan.key_col says; each sequence's view to views.
void pack_kv_ragged(const GemmKernels& g, const AttentionShape& s, const RaggedPlan& plan,
                    const RaggedSeqs& seqs, const float* k, const float* v, std::size_t ld,
                    float* dst, KvCacheView* views);

// run_core over ragged sequences: q [q_start[num], ldq] and out [q_start[num],
// ldo] rows as in CoreInputs, sequence b's keys in kv[b] (kv_len(b) of them).
// mods as in CoreInputs, each sequence's last query aligned with its last key
// (mods.lse is [q_start[num], H]). `workspace` holds plan.core.workspace_floats
// floats.
void run_core_ragged(const GemmKernels& g, const SoftmaxKernels& sm, const AttentionShape& s,
                     const RaggedPlan& plan, const RaggedSeqs& seqs, const float* q,
                     std::size_t ldq, const KvCacheView* kv, const AttentionMods& mods, float* out,
                     std::size_t ldo, float* workspace);

}  // namespace mha::detail
