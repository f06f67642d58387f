// The projections whose products are the fp32 kernels' on weights packed as
// W: PackedBView (projection_fp32.cpp) or PackedQuantB, widened as they are
// read (projection_quant.cpp), or PackedI8B (projection_i8.cpp). Wqᵀ, Wkᵀ and Wvᵀ side by side in
// the B layout, each section starting on a strip boundary (one product when the inputs are shared
// and fused_ says so), Woᵀ on its own; the biases ride in the micro-kernel's epilogue.
#pragma once

#include "attention/projection/projection.hpp"

namespace mha::detail {

// c [rows x n] = a · B + bias, on either packing.
inline void product(const GemmKernels& g, std::size_t rows, const float* a, std::size_t lda,
                    const PackedBView& b, float* c, std::size_t ldc, const float* bias) {
  gemm_prepacked_b(g, Trans::N, rows, a, lda, b, 1.0f, 0.0f, c, ldc, bias);
}
inline void product(const GemmKernels& g, std::size_t rows, const float* a, std::size_t lda,
                    const PackedQuantB& b, float* c, std::size_t ldc, const float* bias) {
  gemm_quant_b(g, rows, a, lda, b, c, ldc, bias);
}
inline void reserve_product(const GemmKernels& g, std::size_t rows, const PackedBView& b) {
  reserve_gemm_prepacked_b(g, rows, b);
}
inline void reserve_product(const GemmKernels& g, std::size_t rows, const PackedQuantB& b) {
  reserve_gemm_quant_b(g, rows, b);
}

template <class W>
class PackedProjections : public Projections {
 public:
  Projected project(bool fused, bool rope, std::size_t q_rows, std::size_t kv_rows,
                    const float* query, const float* key, const float* value,
                    float* dst) const override {
    const Projected p = products(fused, q_rows, kv_rows, query, key, value, dst);
    if (bf16_) {
      // Q and K are rounded after RoPE rotates them (finish_rotated).
      if (!rope) finish_rotated(p, q_rows, kv_rows);
      round_rows_bf16(kv_rows, s_.kv_dim(), p.v, p.ldkv);
    }
    return p;
  }
  void finish_rotated(const Projected& p, std::size_t q_rows, std::size_t kv_rows) const override {
    if (!bf16_) return;
    round_rows_bf16(q_rows, s_.embed_dim, p.q, p.ldq);
    round_rows_bf16(kv_rows, s_.kv_dim(), p.k, p.ldkv);
  }
  void project_out(std::size_t rows, const float* merged, float* out) const override {
    product(g_, rows, merged, s_.embed_dim, wo_, out, s_.embed_dim, out_bias_.get());
  }
  void reserve_out(std::size_t rows) const override { reserve_product(g_, rows, wo_); }

 protected:
  // bf16: a bf16 object's, Q, K and V rounded to bf16 where they enter its
  // core, as its own projections round them.
  PackedProjections(const GemmKernels& g, const AttentionShape& s, bool bf16 = false)
      : Projections(g, s), bf16_(bf16) {}
  W wq_, wk_, wv_, wo_;
  W wqkv_;  // all three, valid when fused_

 private:
  const bool bf16_;

  Projected products(bool fused, std::size_t q_rows, std::size_t kv_rows, const float* query,
                     const float* key, const float* value, float* dst) const {
    const std::size_t E = s_.embed_dim, kvd = s_.kv_dim();
    const float* bias = in_bias_.get();
    if (fused) {
      const std::size_t ld = q_cols_ + k_cols_ + v_cols_;
      product(g_, q_rows, query, E, wqkv_, dst, ld, bias);
      return {dst, dst + q_cols_, dst + q_cols_ + k_cols_, ld, ld};
    }
    float* pq = dst;
    float* pk = pq + q_rows * E;
    float* pv = pk + kv_rows * kvd;
    product(g_, q_rows, query, E, wq_, pq, E, bias);
    product(g_, kv_rows, key, s_.kdim, wk_, pk, kvd, bias + q_cols_);
    product(g_, kv_rows, value, s_.vdim, wv_, pv, kvd, bias + q_cols_ + k_cols_);
    return {pq, pk, pv, E, kvd};
  }
};

}  // namespace mha::detail
