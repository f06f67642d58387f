// The projections on quantized weights (mha_attention_options' int8, int4
// and uint4 formats, and mha_attention_create_int8's codes): each weight
// quantized per output row and group at create, or its codes taken as
// given, and packed in the fp32 GEMM's B layout, Wq|Wk|Wv side by side as in
// fp32, for gemm_quant_b, which gives the fp32 products' bits on the
// widened weights.
#include <algorithm>
#include <cmath>
#include <vector>

#include "attention/projection/projection_packed.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"

namespace mha::detail {

void quantize_rows(QuantCodes type, std::size_t group, std::size_t n, std::size_t k, const float* w,
                   std::int8_t* codes, float* scales, float* zeros, const char* name) {
  const std::size_t groups = quant_groups(k, group), len = groups == 1 ? k : group;
  for (std::size_t j = 0; j < n; ++j) {
    for (std::size_t q = 0; q < groups; ++q) {
      const std::size_t p0 = q * len, p1 = std::min(k, p0 + len);
      const float* row = w + j * k;
      float lo = 0.0f, hi = 0.0f;
      for (std::size_t p = p0; p < p1; ++p) {
        check_arg(std::isfinite(row[p]), name, "[", j, "][", p,
                  "]: expected a finite value to quantize, got ", row[p]);
        lo = std::min(lo, row[p]);
        hi = std::max(hi, row[p]);
      }
      // Symmetric: the largest magnitude at the top code; uint4: [lo, hi]
      // (0 included) over 0..15 with a zero point.
      const float top = type == QuantCodes::int8 ? 127.0f : 7.0f;
      const float scale = type == QuantCodes::uint4 ? (hi - lo) / 15.0f : std::max(hi, -lo) / top;
      const float zero = type == QuantCodes::uint4 && scale != 0.0f
                             ? std::clamp(std::nearbyint(-lo / scale), 0.0f, 15.0f)
                             : 0.0f;
      scales[j * groups + q] = scale;
      if (zeros != nullptr) zeros[j * groups + q] = zero;
      for (std::size_t p = p0; p < p1; ++p) {
        float code = 0.0f;
        if (scale != 0.0f) {
          code = std::nearbyint(row[p] / scale);
          code = type == QuantCodes::uint4 ? std::clamp(code + zero, 0.0f, 15.0f)
                                           : std::clamp(code, -top, top);
        }
        codes[j * k + p] = static_cast<std::int8_t>(code);
      }
    }
  }
}

void quantize_columns(const GemmKernels& g, QuantCodes type, std::size_t group, std::size_t k,
                      std::size_t n, const float* b, std::int8_t* codes, float* scales,
                      float* zeros) {
  std::vector<float> rows(checked_mul(k, n, "quantized weights"));
  g.transpose(n, k, b, n, rows.data(), k);
  quantize_rows(type, group, n, k, rows.data(), codes, scales, zeros,
                "an MLA weight (output column, input row)");
}

namespace {

class ProjectionsQuant final : public PackedProjections<PackedQuantB> {
 public:
  ProjectionsQuant(const GemmKernels& g, const AttentionShape& s, bool bf16, QuantCodes type,
                   std::size_t group, const QuantSource (&src)[4], const mha_weights& biases)
      : PackedProjections(g, s, bf16) {
    const std::size_t E = s.embed_dim, kv = s.kv_dim();
    const std::size_t out[] = {E, kv, kv, E}, in[] = {E, s.kdim, s.vdim, E};
    PackedQuantB* const dst[] = {&wq_, &wk_, &wv_, &wo_};
    const bool zeros = type == QuantCodes::uint4;
    // Codes (back to back, so that Wq|Wk|Wv's strips are one B's), then the
    // scales and zeros; sizes and given scales checked before anything is
    // allocated.
    std::size_t codes = 0, scales = 0, largest = 0, largest_groups = 0;
    for (std::size_t i = 0; i < 4; ++i) {
      codes = checked_add(codes, packed_quant_b_bytes(g, type, in[i], out[i], "quantized weights"),
                          "quantized weights");
      scales =
          checked_add(scales, packed_quant_b_scales(g, in[i], out[i], group, "quantized weights"),
                      "quantized weights");
      if (src[i].w != nullptr) {
        largest = std::max(largest, out[i] * in[i]);
        largest_groups = std::max(largest_groups, out[i] * quant_groups(in[i], group));
      }
      for (std::size_t j = 0; src[i].w == nullptr && j < out[i] * quant_groups(in[i], group); ++j) {
        check_arg(std::isfinite(src[i].scales[j]), src[i].name, "_scales[", j,
                  "]: expected a finite scale, got ", src[i].scales[j]);
      }
    }
    const std::size_t code_floats = round_up(ceil_div(codes, sizeof(float)), 16);
    const std::size_t floats = checked_add(
        code_floats, checked_mul(zeros ? 2 : 1, scales, "quantized weights"), "quantized weights");
    float_bytes(floats, "quantized weights");
    storage_ = alloc_floats(floats);
    std::vector<std::int8_t> quantized(largest);
    std::vector<float> row_scales(largest_groups), row_zeros(zeros ? largest_groups : 0);
    auto* cdst = reinterpret_cast<std::int8_t*>(storage_.get());
    float* sdst = storage_.get() + code_floats;
    float* zdst = sdst + scales;
    for (std::size_t i = 0; i < 4; ++i) {
      const std::int8_t* c = src[i].codes;
      const float* sc = src[i].scales;
      const float* zp = zeros ? src[i].zeros : nullptr;
      if (src[i].w != nullptr) {
        quantize_rows(type, group, out[i], in[i], src[i].w, quantized.data(), row_scales.data(),
                      zeros ? row_zeros.data() : nullptr, src[i].name);
        c = quantized.data();
        sc = row_scales.data();
        zp = zeros ? row_zeros.data() : nullptr;
      }
      *dst[i] = pack_quant_b(g, type, in[i], out[i], group, c, in[i], sc, zp, cdst, sdst, zdst);
      if (src[i].perm != nullptr) {
        perms_[i].assign(src[i].perm, src[i].perm + in[i]);
        dst[i]->perm = perms_[i].data();
      }
      cdst += packed_quant_b_bytes(g, type, in[i], out[i], "");
      const std::size_t n_scales = packed_quant_b_scales(g, in[i], out[i], group, "");
      sdst += n_scales;
      zdst += n_scales;
    }
    // One product for Wq|Wk|Wv: their strips follow each other with the
    // same stride, and so do their scales, group by group, when there is
    // one group (whole rows).
    fused_ = s.kdim == E && s.vdim == E && quant_groups(E, group) == 1 && src[0].perm == nullptr &&
             src[1].perm == nullptr && src[2].perm == nullptr;
    if (fused_) {
      wqkv_ = wq_;
      wqkv_.n = q_cols_ + k_cols_ + v_cols_;
      wqkv_.scale_stride = wqkv_.n;
    }
    copy_biases(biases);
  }

 private:
  AlignedFloats storage_;
  std::vector<std::uint32_t> perms_[4];  // QuantSource::perm, copied
};

// One weight op(B) [k x n] (an MLA layer's) quantized per output column
// and group, as the four projections' rows are, for gemm_quant_b.
class PackedWeightQuant final : public PackedWeight {
 public:
  PackedWeightQuant(const GemmKernels& g, QuantCodes type, std::size_t group, std::size_t k,
                    std::size_t n, const float* b)
      : g_(g) {
    const bool zeros = type == QuantCodes::uint4;
    const std::size_t code_bytes = packed_quant_b_bytes(g, type, k, n, "quantized weights");
    const std::size_t scales = packed_quant_b_scales(g, k, n, group, "quantized weights");
    const std::size_t code_floats = round_up(ceil_div(code_bytes, sizeof(float)), 16);
    storage_ =
        alloc_floats(checked_add(code_floats, (zeros ? 2 : 1) * scales, "quantized weights"));
    const std::size_t groups = n * quant_groups(k, group);
    std::vector<std::int8_t> codes(k * n);
    std::vector<float> sc(groups), zp(zeros ? groups : 0);
    quantize_columns(g, type, group, k, n, b, codes.data(), sc.data(), zeros ? zp.data() : nullptr);
    float* sdst = storage_.get() + code_floats;
    b_ = pack_quant_b(g, type, k, n, group, codes.data(), k, sc.data(), zeros ? zp.data() : nullptr,
                      reinterpret_cast<std::int8_t*>(storage_.get()), sdst, sdst + scales);
  }
  void apply(std::size_t rows, const float* a, std::size_t lda, float* c,
             std::size_t ldc) const override {
    gemm_quant_b(g_, rows, a, lda, b_, c, ldc);
  }
  void reserve(std::size_t rows) const override { reserve_gemm_quant_b(g_, rows, b_); }

 private:
  const GemmKernels& g_;
  AlignedFloats storage_;
  PackedQuantB b_;
};

class PrecisionQuant final : public Precision {
 public:
  PrecisionQuant(const GemmKernels& g, bool bf16, QuantCodes type, std::size_t group)
      : g_(g), bf16_(bf16), type_(type), group_(group) {}
  std::unique_ptr<PackedWeight> pack(std::size_t k, std::size_t n, const float* b) const override {
    return std::make_unique<PackedWeightQuant>(g_, type_, group_, k, n, b);
  }
  void round(std::size_t rows, std::size_t cols, float* x, std::size_t ld) const override {
    if (bf16_) round_rows_bf16(rows, cols, x, ld);
  }

 private:
  const GemmKernels& g_;
  bool bf16_;
  QuantCodes type_;
  std::size_t group_;
};

}  // namespace

std::unique_ptr<Precision> make_precision_quant(const GemmKernels& g, bool bf16, QuantCodes type,
                                                std::size_t group) {
  return std::make_unique<PrecisionQuant>(g, bf16, type, group);
}

std::unique_ptr<Projections> make_projections_quant(const GemmKernels& g, const AttentionShape& s,
                                                    bool bf16, QuantCodes type, std::size_t group,
                                                    const QuantSource (&src)[4],
                                                    const mha_weights& biases) {
  return std::make_unique<ProjectionsQuant>(g, s, bf16, type, group, src, biases);
}

}  // namespace mha::detail
