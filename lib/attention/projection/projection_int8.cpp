// The int8 projections (mha_attention_options' MHA_WEIGHTS_INT8, and
// mha_attention_create_int8's codes): each weight quantized per output row
// at create, or its codes taken as given, and packed as int8 codes in the
// fp32 GEMM's B layout, Wq|Wk|Wv side by side as in fp32, for gemm_int8_b,
// which gives the fp32 products' bits on the widened weights.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/projection/projection.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"

namespace mha::detail {

void quantize_int8_rows(std::size_t n, std::size_t k, const float* w, std::int8_t* codes,
                        float* scales, const char* name) {
  for (std::size_t j = 0; j < n; ++j) {
    const float* row = w + j * k;
    float amax = 0.0f;
    for (std::size_t p = 0; p < k; ++p) {
      check_arg(std::isfinite(row[p]), name, "[", j, "][", p,
                "]: expected a finite value to quantize to int8, got ", row[p]);
      amax = std::max(amax, std::fabs(row[p]));
    }
    const float scale = amax / 127.0f;
    scales[j] = scale;
    for (std::size_t p = 0; p < k; ++p) {
      codes[j * k + p] = scale == 0.0f ? 0
                                       : static_cast<std::int8_t>(std::clamp(
                                             std::nearbyint(row[p] / scale), -127.0f, 127.0f));
    }
  }
}

namespace {

class ProjectionsInt8 final : public Projections {
 public:
  ProjectionsInt8(const GemmKernels& g, const AttentionShape& s, const Int8Source (&src)[4],
                  const mha_weights& biases)
      : Projections(g, s) {
    const std::size_t E = s.embed_dim, kv = s.kv_dim();
    const std::size_t out[] = {E, kv, kv, E}, in[] = {E, s.kdim, s.vdim, E};
    PackedInt8B* const dst[] = {&wq_, &wk_, &wv_, &wo_};
    // Codes (packed_b_floats(g, in, out) bytes each, back to back, so that
    // Wq|Wk|Wv's strips are one B's), then the scales; sizes and given
    // scales checked before anything is allocated.
    std::size_t codes = 0, scales = 0, largest = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      const std::size_t cols = checked_round_up(out[i], g.nr, "int8 weights");
      codes = checked_add(codes, checked_mul(cols, in[i], "int8 weights"), "int8 weights");
      scales = checked_add(scales, cols, "int8 weights");
      if (src[i].w != nullptr) largest = std::max(largest, out[i] * in[i]);
      for (std::size_t j = 0; src[i].w == nullptr && j < out[i]; ++j) {
        check_arg(std::isfinite(src[i].scales[j]), src[i].name, "_scales[", j,
                  "]: expected a finite scale, got ", src[i].scales[j]);
      }
    }
    const std::size_t code_floats = round_up(ceil_div(codes, sizeof(float)), 16);
    float_bytes(checked_add(code_floats, scales, "int8 weights"), "int8 weights");
    storage_ = alloc_floats(code_floats + scales);
    std::vector<std::int8_t> quantized(largest);
    std::vector<float> row_scales(largest == 0 ? 0 : std::max(E, kv));
    auto* cdst = reinterpret_cast<std::int8_t*>(storage_.get());
    float* sdst = storage_.get() + code_floats;
    for (std::size_t i = 0; i < 4; ++i) {
      const std::int8_t* c = src[i].codes;
      const float* sc = src[i].scales;
      if (src[i].w != nullptr) {
        quantize_int8_rows(out[i], in[i], src[i].w, quantized.data(), row_scales.data(),
                           src[i].name);
        c = quantized.data();
        sc = row_scales.data();
      }
      *dst[i] = pack_int8_b(g, in[i], out[i], c, in[i], sc, cdst, sdst);
      cdst += packed_b_floats(g, in[i], out[i]);
      sdst += packed_int8_b_scales(g, out[i]);
    }
    fused_ = s.kdim == E && s.vdim == E;
    if (fused_) wqkv_ = {wq_.codes, wq_.scales, E, q_cols_ + k_cols_ + v_cols_, g.nr, E * g.nr};
    copy_biases(biases);
  }

  Projected project(bool fused, bool, std::size_t q_rows, std::size_t kv_rows, const float* query,
                    const float* key, const float* value, float* dst) const override {
    const std::size_t E = s_.embed_dim, kvd = s_.kv_dim();
    const float* bias = in_bias_.get();
    if (fused) {
      const std::size_t ld = q_cols_ + k_cols_ + v_cols_;
      gemm_int8_b(g_, q_rows, query, E, wqkv_, dst, ld, bias);
      return {dst, dst + q_cols_, dst + q_cols_ + k_cols_, ld, ld};
    }
    float* pq = dst;
    float* pk = pq + q_rows * E;
    float* pv = pk + kv_rows * kvd;
    gemm_int8_b(g_, q_rows, query, E, wq_, pq, E, bias);
    gemm_int8_b(g_, kv_rows, key, s_.kdim, wk_, pk, kvd, bias + q_cols_);
    gemm_int8_b(g_, kv_rows, value, s_.vdim, wv_, pv, kvd, bias + q_cols_ + k_cols_);
    return {pq, pk, pv, E, kvd};
  }
  void finish_rotated(const Projected&, std::size_t, std::size_t) const override {}
  void project_out(std::size_t rows, const float* merged, float* out) const override {
    gemm_int8_b(g_, rows, merged, s_.embed_dim, wo_, out, s_.embed_dim, out_bias_.get());
  }
  void reserve_out(std::size_t rows) const override { reserve_gemm_int8_b(g_, rows, wo_); }

 private:
  AlignedFloats storage_;
  PackedInt8B wq_, wk_, wv_, wo_;
  PackedInt8B wqkv_;  // all three, valid when fused_
};

}  // namespace

std::unique_ptr<Projections> make_projections_int8(const GemmKernels& g, const AttentionShape& s,
                                                   const Int8Source (&src)[4],
                                                   const mha_weights& biases) {
  return std::make_unique<ProjectionsInt8>(g, s, src, biases);
}

}  // namespace mha::detail
