// The projections with int8 activations (W8A8 and W4A8,
// mha_attention_options' MHA_ACTIVATIONS_INT8): each weight's rows quantized
// to int8, int4 or uint4 codes with a scale (and zero point) per row or
// group (quantize_rows' rules, or the codes given), packed for the
// int8 GEMM's kernel set, and each input row quantized per token as the
// product reads it (gemm_i8.hpp). A bf16 object then rounds Q, K and V to
// bf16 where they enter its core, as its own projections do.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "attention/projection/projection_packed.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"
#include "gemm/gemm_i8.hpp"

namespace mha::detail {

inline void product(const GemmKernels&, std::size_t rows, const float* a, std::size_t lda,
                    const PackedI8B& b, float* c, std::size_t ldc, const float* bias) {
  gemm_i8(rows, a, lda, b, c, ldc, bias);
}
inline void reserve_product(const GemmKernels&, std::size_t rows, const PackedI8B& b) {
  reserve_gemm_i8(rows, b);
}

namespace {

class ProjectionsI8 final : public PackedProjections<PackedI8B> {
 public:
  ProjectionsI8(const GemmKernels& g, const GemmI8Kernels& g8, const AttentionShape& s, bool bf16,
                QuantCodes type, std::size_t group, const QuantSource (&src)[4],
                const mha_weights& biases)
      : PackedProjections(g, s, bf16) {
    const bool uint4 = type == QuantCodes::uint4;
    const std::size_t E = s.embed_dim, kv = s.kv_dim();
    // Sections on whole strips of both kernel sets' (the fp32 ones lay out
    // the biases), so that Wq|Wk|Wv is one packed B whose column views are
    // each weight.
    const std::size_t step = std::lcm(g.nr, g8.nr);
    q_cols_ = checked_round_up(E, step, "embed_dim (in whole strips)");
    k_cols_ = v_cols_ = checked_round_up(kv, step, "num_kv_heads*head_dim (in whole strips)");
    fused_ = s.kdim == E && s.vdim == E && src[0].perm == nullptr && src[1].perm == nullptr &&
             src[2].perm == nullptr;
    const std::size_t out[] = {E, kv, kv, E}, in[] = {E, s.kdim, s.vdim, E};
    const std::size_t at[] = {0, q_cols_, q_cols_ + k_cols_, 0};
    const std::size_t qkv = q_cols_ + k_cols_ + v_cols_;
    // The packed weights: Wq|Wk|Wv as one B when fused, else each alone;
    // then Wo. Sizes and given scales checked before anything is allocated.
    const std::size_t packs = fused_ ? 2 : 4;
    std::size_t bytes[4] = {}, total = 0;
    for (std::size_t i = 0; i < packs; ++i) {
      const std::size_t w = fused_ ? (i == 0 ? 0 : 3) : i;
      bytes[i] = packed_i8_b_bytes(g8, in[w], fused_ && i == 0 ? qkv : out[w], group, type,
                                   "int8 weights");
      total = checked_add(total, bytes[i], "int8 weights");
    }
    for (const QuantSource& x : src) {
      const std::size_t i = static_cast<std::size_t>(&x - src);
      for (std::size_t j = 0; x.w == nullptr && j < out[i] * quant_groups(in[i], group); ++j) {
        check_arg(std::isfinite(x.scales[j]), x.name, "_scales[", j,
                  "]: expected a finite scale, got ", x.scales[j]);
      }
    }
    storage_ = alloc_floats(ceil_div(total, sizeof(float)));
    // Each pack's rows (the combined one's padding rows zero), then packed.
    auto* dst = reinterpret_cast<unsigned char*>(storage_.get());
    PackedI8B packed[4];
    for (std::size_t i = 0; i < packs; ++i) {
      const std::size_t first = fused_ && i == 1 ? 3 : i, last = fused_ && i == 0 ? 3 : first + 1;
      const std::size_t k = in[first], rows = fused_ && i == 0 ? qkv : out[first];
      const std::size_t groups = quant_groups(k, group);
      std::vector<std::int8_t> codes(rows * k, 0);
      std::vector<float> scales(rows * groups, 0.0f), zeros(uint4 ? rows * groups : 0, 0.0f);
      for (std::size_t w = first; w < last; ++w) {
        const std::size_t row0 = fused_ ? at[w] : 0;
        float* zp = uint4 ? zeros.data() + row0 * groups : nullptr;
        if (src[w].w != nullptr) {
          quantize_rows(type, group, out[w], k, src[w].w, codes.data() + row0 * k,
                        scales.data() + row0 * groups, zp, src[w].name);
        } else {
          std::copy_n(src[w].codes, out[w] * k, codes.data() + row0 * k);
          std::copy_n(src[w].scales, out[w] * groups, scales.data() + row0 * groups);
          if (uint4) std::copy_n(src[w].zeros, out[w] * groups, zp);
        }
      }
      packed[i] = pack_i8_b(g8, k, rows, group, type, codes.data(), k, scales.data(),
                            uint4 ? zeros.data() : nullptr, dst);
      if (src[first].perm != nullptr) {
        perms_[first].assign(src[first].perm, src[first].perm + k);
        packed[i].perm = perms_[first].data();
      }
      dst += bytes[i];
    }
    if (fused_) {
      wqkv_ = packed[0];
      wq_ = wqkv_.cols(0, E);
      wk_ = wqkv_.cols(q_cols_, q_cols_ + kv);
      wv_ = wqkv_.cols(q_cols_ + k_cols_, q_cols_ + k_cols_ + kv);
      wo_ = packed[1];
    } else {
      wq_ = packed[0];
      wk_ = packed[1];
      wv_ = packed[2];
      wo_ = packed[3];
    }
    copy_biases(biases);
  }

 private:
  AlignedFloats storage_;
  std::vector<std::uint32_t> perms_[4];  // QuantSource::perm, copied
};

// One weight op(B) [k x n] (an MLA layer's) quantized per output column
// and group, as the four projections' rows are, for gemm_i8.
class PackedWeightI8 final : public PackedWeight {
 public:
  PackedWeightI8(const GemmKernels& g, const GemmI8Kernels& g8, QuantCodes type, std::size_t group,
                 std::size_t k, std::size_t n, const float* b) {
    const bool uint4 = type == QuantCodes::uint4;
    storage_ = alloc_floats(
        ceil_div(packed_i8_b_bytes(g8, k, n, group, type, "int8 weights"), sizeof(float)));
    std::vector<std::int8_t> codes(k * n);
    std::vector<float> scales(n * quant_groups(k, group)), zeros(uint4 ? scales.size() : 0);
    quantize_columns(g, type, group, k, n, b, codes.data(), scales.data(),
                     uint4 ? zeros.data() : nullptr);
    b_ = pack_i8_b(g8, k, n, group, type, codes.data(), k, scales.data(),
                   uint4 ? zeros.data() : nullptr, storage_.get());
  }
  void apply(std::size_t rows, const float* a, std::size_t lda, float* c,
             std::size_t ldc) const override {
    gemm_i8(rows, a, lda, b_, c, ldc);
  }
  void reserve(std::size_t rows) const override { reserve_gemm_i8(rows, b_); }

 private:
  AlignedFloats storage_;
  PackedI8B b_;
};

class PrecisionI8 final : public Precision {
 public:
  PrecisionI8(const GemmKernels& g, const GemmI8Kernels& g8, bool bf16, QuantCodes type,
              std::size_t group)
      : g_(g), g8_(g8), bf16_(bf16), type_(type), group_(group) {}
  std::unique_ptr<PackedWeight> pack(std::size_t k, std::size_t n, const float* b) const override {
    return std::make_unique<PackedWeightI8>(g_, g8_, type_, group_, k, n, b);
  }
  void round(std::size_t rows, std::size_t cols, float* x, std::size_t ld) const override {
    if (bf16_) round_rows_bf16(rows, cols, x, ld);
  }

 private:
  const GemmKernels& g_;
  const GemmI8Kernels& g8_;
  bool bf16_;
  QuantCodes type_;
  std::size_t group_;
};

}  // namespace

std::unique_ptr<Precision> make_precision_i8(const GemmKernels& g, const GemmI8Kernels& g8,
                                             bool bf16, QuantCodes type, std::size_t group) {
  return std::make_unique<PrecisionI8>(g, g8, bf16, type, group);
}

std::unique_ptr<Projections> make_projections_i8(const GemmKernels& g, const GemmI8Kernels& g8,
                                                 const AttentionShape& s, bool bf16,
                                                 QuantCodes type, std::size_t group,
                                                 const QuantSource (&src)[4],
                                                 const mha_weights& biases) {
  return std::make_unique<ProjectionsI8>(g, g8, s, bf16, type, group, src, biases);
}

}  // namespace mha::detail
