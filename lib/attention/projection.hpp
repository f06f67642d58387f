// The projections: the packed weights of an attention object, and the
// products that use them,
//   Q, K, V = X·Wqᵀ + bq, X·Wkᵀ + bk, X·Wvᵀ + bv      (one product when X is shared)
//   out = O·Woᵀ + bo
// on the object's fp32 GEMM, or its bf16 GEMM for a bf16 object.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <mha/isa.hpp>

#include "attention/engine.hpp"
#include "common/aligned.hpp"
#include "gemm/gemm.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {

struct ProjectionWeights {
  // Copies and packs the weights; the caller's arrays are not referenced later.
  ProjectionWeights(const GemmKernels& g, const GemmBf16Kernels* g16, const AttentionShape& s,
                    const mha_weights& w, bool bf16);

  // Packed Wqᵀ, Wkᵀ, Wvᵀ, each starting on a strip boundary, so that when
  // query, key and value share one input (self-attention, kdim == vdim == E)
  // a single GEMM over the concatenation projects all three. Each section is
  // padded to a multiple of nr columns; the padding columns are zero weights
  // and zero bias, so they cost at most nr-1 wasted columns per section.
  AlignedFloats in_weights;
  PackedBView wq, wk, wv;
  PackedBView wqkv;  // all three, valid when `fused`
  bool fused = false;
  std::size_t q_cols = 0, k_cols = 0, v_cols = 0;  // padded section widths
  AlignedFloats in_bias;                           // [q_cols + k_cols + v_cols]
  AlignedFloats out_weights;
  PackedBView wo;
  AlignedFloats out_bias;  // [E], or null
  // A bf16 object: the four weights rounded to bf16 and packed for the bf16
  // GEMM, in one allocation (the fp32 packs above stay empty); with bf16
  // kernels and whole strips, Wq, Wk and Wv packed back to back are one B
  // (wqkv16, `fused`), as in fp32.
  bool bf16 = false;
  const GemmBf16Kernels* core16 = nullptr;  // the bf16 kernels, or nullptr
  AlignedFloats bf16_weights;
  PackedBf16B wq16, wk16, wv16, wo16, wqkv16;
};

// Q, K, V in [rows, features] layout in scratch: the attention core reads
// each head as a strided column block, so there is no head-split copy.
struct Projected {
  float *q, *k, *v;  // RoPE rotates q and k in place
  std::size_t ldq, ldkv;
};

// Scratch floats of project(); `fused`: one product over the shared input.
std::size_t projection_floats(const ProjectionWeights& m, const AttentionShape& s, bool fused,
                              std::size_t q_rows, std::size_t kv_rows);
// A bf16 object's inputs are rounded to bf16 by the products, and V comes
// out rounded; Q and K too unless RoPE will rotate them first (`rope`).
Projected project(const GemmKernels& g, const ProjectionWeights& m, const AttentionShape& s,
                  bool fused, bool rope, std::size_t q_rows, std::size_t kv_rows,
                  const float* query, const float* key, const float* value, float* dst);
// Q and K rows of a bf16 object rounded after their rotation.
void round_rotated(const AttentionShape& s, const Projected& p, std::size_t q_rows,
                   std::size_t kv_rows);
// out [rows, E] = merged·Woᵀ + bo.
void project_out(const GemmKernels& g, const ProjectionWeights& m, const AttentionShape& s,
                 std::size_t rows, const float* merged, float* out);
// Takes the calling thread's scratch that project_out over `rows` uses, so a
// call that has written other outputs cannot then fail for want of it.
void reserve_project_out(const GemmKernels& g, const ProjectionWeights& m, std::size_t rows);

}  // namespace mha::detail
