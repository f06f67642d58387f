// The fp32 projections: the weights packed in the GEMM's B layout
// (projection_packed.hpp).
#include "attention/projection/projection_packed.hpp"
#include "common/checked.hpp"

namespace mha::detail {
namespace {

PackedBView pack_weight(const GemmKernels& g, const float* w, std::size_t out_features,
                        std::size_t in_features, float* dst) {
  // w is [out, in] row-major; the GEMM wants op(B) = wᵀ, [in x out].
  return pack_b(g, Trans::T, in_features, out_features, w, in_features, dst);
}

class ProjectionsFp32 final : public PackedProjections<PackedBView> {
 public:
  ProjectionsFp32(const GemmKernels& g, const AttentionShape& s, const mha_weights& w)
      : PackedProjections(g, s) {
    const std::size_t E = s.embed_dim, kv = s.kv_dim();
    // packed_b_floats(g, k, n) is round_up(n, nr) * k: checked here, as
    // these are the sizes allocated.
    const std::size_t q_floats = checked_mul(E, q_cols_, "packed q_weight");
    const std::size_t k_floats = checked_mul(s.kdim, k_cols_, "packed k_weight");
    const std::size_t v_floats = checked_mul(s.vdim, v_cols_, "packed v_weight");
    const std::size_t in_floats =
        checked_add(checked_add(q_floats, k_floats, "packed weights"), v_floats, "packed weights");
    float_bytes(in_floats, "packed weights");
    in_weights_ = alloc_floats(in_floats);
    float* dst = in_weights_.get();
    wq_ = pack_weight(g, w.q_weight, E, E, dst);
    wk_ = pack_weight(g, w.k_weight, kv, s.kdim, dst + q_floats);
    wv_ = pack_weight(g, w.v_weight, kv, s.vdim, dst + q_floats + k_floats);
    fused_ = s.kdim == E && s.vdim == E;
    if (fused_) wqkv_ = PackedBView::whole(dst, E, q_cols_ + k_cols_ + v_cols_, g.nr);
    out_weights_ = alloc_floats(packed_b_floats(g, E, E));
    wo_ = pack_weight(g, w.out_weight, E, E, out_weights_.get());
    copy_biases(w);
  }

 private:
  AlignedFloats in_weights_, out_weights_;
};

class PackedWeightFp32 final : public PackedWeight {
 public:
  PackedWeightFp32(const GemmKernels& g, std::size_t k, std::size_t n, const float* b) : g_(g) {
    const std::size_t floats =
        checked_mul(k, checked_round_up(n, g.nr, "packed weights"), "packed weights");
    float_bytes(floats, "packed weights");
    data_ = alloc_floats(floats);
    b_ = pack_b(g, Trans::N, k, n, b, n, data_.get());
  }
  void apply(std::size_t rows, const float* a, std::size_t lda, float* c,
             std::size_t ldc) const override {
    gemm_prepacked_b(g_, Trans::N, rows, a, lda, b_, 1.0f, 0.0f, c, ldc);
  }
  void reserve(std::size_t rows) const override { reserve_gemm_prepacked_b(g_, rows, b_); }

 private:
  const GemmKernels& g_;
  AlignedFloats data_;
  PackedBView b_;
};

class PrecisionFp32 final : public Precision {
 public:
  explicit PrecisionFp32(const GemmKernels& g) : g_(g) {}
  std::unique_ptr<PackedWeight> pack(std::size_t k, std::size_t n, const float* b) const override {
    return std::make_unique<PackedWeightFp32>(g_, k, n, b);
  }
  void round(std::size_t, std::size_t, float*, std::size_t) const override {}

 private:
  const GemmKernels& g_;
};

}  // namespace

std::unique_ptr<Projections> make_projections_fp32(const GemmKernels& g, const AttentionShape& s,
                                                   const mha_weights& w) {
  return std::make_unique<ProjectionsFp32>(g, s, w);
}

std::unique_ptr<Precision> make_precision_fp32(const GemmKernels& g) {
  return std::make_unique<PrecisionFp32>(g);
}

}  // namespace mha::detail
