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

namespace mha::detail {

// K and V of every (batch, kv head) block, at a fixed stride per block:
// K packed as the GEMM's op(B) = Kᵀ ([head_dim x len], strips of nr keys),
// V row-major [len x ldv] with ldv = head_dim rounded up to whole cache
// lines (the columns past head_dim are never read), so that P·V reads V in
// place (gemm_serial_inplace) and P is never packed. The same view describes
// per-call packing and the KV cache (whose blocks have room for max_len
// keys; only `len` are used).
struct KvCacheView {
  const float* k = nullptr;
  const float* v = nullptr;
  std::size_t len = 0;
  std::size_t kv_heads = 0, head_dim = 0, nr = 0;
  std::size_t k_stride = 0, v_stride = 0;  // floats between (b, g) blocks
  std::size_t ldv = 0;                     // floats between V rows

  PackedBView keys(std::size_t b, std::size_t g) const {
    return PackedBView::whole(k + (b * kv_heads + g) * k_stride, head_dim, len, nr);
  }
  // Row j (key j) of V at values(b, g) + j*ldv.
  const float* values(std::size_t b, std::size_t g) const {
    return v + (b * kv_heads + g) * v_stride;
  }
};

// Layout of K/V blocks holding `capacity` keys, for `batch` rows.
struct KvPacking {
  std::size_t k_stride = 0, v_stride = 0, ldv = 0;
  std::size_t floats = 0;  // total, K blocks then V blocks
};
KvPacking kv_packing(const GemmKernels& g, const AttentionShape& s, std::size_t batch,
                     std::size_t capacity);

// Packs K and copies V ([batch*kv_len, ld] rows, kv head g at column
// g*head_dim) into dst laid out as `p`, in parallel over (batch, kv head).
KvCacheView pack_kv(const GemmKernels& g, const AttentionShape& s, const KvPacking& p,
                    std::size_t batch, std::size_t kv_len, const float* k, const float* v,
                    std::size_t ld, float* dst);

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
};
// `window`: mha_mods.window (0: none); the chunks then cover only the keys
// some row's window reaches.
CorePlan plan_core(const GemmKernels& g, const AttentionShape& s, std::size_t batch,
                   std::size_t q_len, std::size_t kv_len, bool weights, bool average,
                   std::size_t window);

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

}  // namespace mha::detail
