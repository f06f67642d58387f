#include "attention/projection/projection.hpp"

#include <algorithm>

#include "common/checked.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/gemm_i8.hpp"
#include "reshape/kernels.hpp"

namespace mha::detail {

Projections::Projections(const GemmKernels& g, const AttentionShape& s) : g_(g), s_(s) {
  q_cols_ = checked_round_up(s.embed_dim, g.nr, "embed_dim (in whole strips)");
  k_cols_ = checked_round_up(s.kv_dim(), g.nr, "num_kv_heads*head_dim (in whole strips)");
  v_cols_ = k_cols_;
}

void Projections::copy_biases(const mha_weights& w) {
  const std::size_t E = s_.embed_dim, kv = s_.kv_dim();
  const std::size_t cols =
      checked_add(q_cols_, checked_mul(2, k_cols_, "packed biases"), "packed biases");
  in_bias_ = alloc_floats(cols);
  std::fill_n(in_bias_.get(), cols, 0.0f);
  if (w.q_bias) std::copy_n(w.q_bias, E, in_bias_.get());
  if (w.k_bias) std::copy_n(w.k_bias, kv, in_bias_.get() + q_cols_);
  if (w.v_bias) std::copy_n(w.v_bias, kv, in_bias_.get() + q_cols_ + k_cols_);
  if (w.out_bias) {
    out_bias_ = alloc_floats(E);
    std::copy_n(w.out_bias, E, out_bias_.get());
  }
}

Bf16Epilogue bf16_epilogue(const float* bias, std::size_t round_from) {
  return {reshape_kernels(active_isa()).bias_round_rows, bias, round_from};
}

void round_rows_bf16(std::size_t rows, std::size_t cols, float* x, std::size_t ld) {
  apply_epilogue_rows(bf16_epilogue(nullptr, 0), x, ld, rows, cols);
}

std::size_t Projections::scratch_floats(bool fused, std::size_t q_rows, std::size_t kv_rows) const {
  const std::size_t in_cols = q_cols_ + k_cols_ + v_cols_;
  return round_up(fused ? q_rows * in_cols : q_rows * s_.embed_dim + 2 * kv_rows * s_.kv_dim(), 16);
}

QuantCodes quant_codes(WeightFormat f) {
  return f == WeightFormat::int8   ? QuantCodes::int8
         : f == WeightFormat::int4 ? QuantCodes::int4
                                   : QuantCodes::uint4;
}

std::unique_ptr<Projections> make_projections_coded(Isa isa, const AttentionShape& s,
                                                    const ObjectOptions& o, QuantCodes type,
                                                    std::size_t group, const QuantSource (&src)[4],
                                                    const mha_weights& biases) {
  const GemmKernels& g = gemm_kernels(isa);
  if (o.int8_activations) {
    return make_projections_i8(g, gemm_i8_kernels(isa), s, o.bf16, type, group, src, biases);
  }
  return make_projections_quant(g, s, o.bf16, type, group, src, biases);
}

std::unique_ptr<Precision> make_precision(Isa isa, const ObjectOptions& o) {
  const GemmKernels& g = gemm_kernels(isa);
  const QuantCodes type = quant_codes(o.weights);
  if (o.int8_activations) return make_precision_i8(g, gemm_i8_kernels(isa), o.bf16, type, o.group);
  if (o.weights != WeightFormat::as_compute) return make_precision_quant(g, o.bf16, type, o.group);
  return o.bf16 ? make_precision_bf16(g, gemm_bf16_kernels(isa)) : make_precision_fp32(g);
}

}  // namespace mha::detail
