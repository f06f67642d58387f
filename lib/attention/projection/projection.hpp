// The projections of an attention object,
//   Q, K, V = X·Wqᵀ + bq, X·Wkᵀ + bk, X·Wvᵀ + bv      (one product when X is shared)
//   out = O·Woᵀ + bo
// as one entry per compute precision, picked at create: fp32
// (projection_fp32.cpp) or bf16 weights and products (projection_bf16.cpp).
// The pipeline calls the entry and never names a precision.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "attention/core/shape.hpp"
#include "common/aligned.hpp"
#include "gemm/gemm.hpp"
#include "gemm/gemm_bf16.hpp"
#include "gemm/gemm_i8.hpp"

namespace mha::detail {

// Q, K, V in [rows, features] layout in scratch: the attention core reads
// each head as a strided column block, so there is no head-split copy.
struct Projected {
  float *q, *k, *v;  // RoPE rotates q and k in place
  std::size_t ldq, ldkv;
};

class Projections {
 public:
  virtual ~Projections() = default;
  Projections(const Projections&) = delete;
  Projections& operator=(const Projections&) = delete;

  // Whether a shared input (self-attention) is projected by one product
  // over Wq|Wk|Wv packed back to back.
  bool fusable() const { return fused_; }
  // Scratch floats of project(); `fused`: the one product.
  virtual std::size_t scratch_floats(bool fused, std::size_t q_rows, std::size_t kv_rows) const;
  // Q, K and V of q_rows query and kv_rows key/value rows into dst.
  // `rope`: Q and K will be rotated, then finish_rotated.
  virtual Projected project(bool fused, bool rope, std::size_t q_rows, std::size_t kv_rows,
                            const float* query, const float* key, const float* value,
                            float* dst) const = 0;
  // Q and K rows, rotated, as they enter Q·Kᵀ.
  virtual void finish_rotated(const Projected& p, std::size_t q_rows,
                              std::size_t kv_rows) const = 0;
  // out [rows, E] = merged·Woᵀ + bo.
  virtual void project_out(std::size_t rows, const float* merged, float* out) const = 0;
  // Takes the calling thread's scratch that project_out over `rows` uses,
  // so a call that has written other outputs cannot then fail for want of it.
  virtual void reserve_out(std::size_t rows) const = 0;

 protected:
  Projections(const GemmKernels& g, const AttentionShape& s);
  // Copies the biases (the caller's arrays are not referenced later): after
  // the weights, whose sizes are checked first, so a size that cannot be
  // packed fails before anything of its size is allocated.
  void copy_biases(const mha_weights& w);
  const GemmKernels& g_;
  AttentionShape s_;
  // Each section of Wq|Wk|Wv padded to whole strips of the fp32 kernels;
  // the padding columns have zero weights and zero bias.
  std::size_t q_cols_ = 0, k_cols_ = 0, v_cols_ = 0;
  AlignedFloats in_bias_;   // [q_cols + k_cols + v_cols]
  AlignedFloats out_bias_;  // [E], or null
  bool fused_ = false;
};

// The bf16 projections' epilogue on the ISA's vectors: x[i][j] += bias[j]
// (bias may be null) and, from column round_from on, rounding to bf16
// (elementwise: the same bits at any thread count), for gemm_bf16_packed to
// run on each block of C, or apply_epilogue_rows after RoPE.
Bf16Epilogue bf16_epilogue(const float* bias, std::size_t round_from);
// x [rows x cols] (rows ld apart) rounded to bf16 values by that epilogue.
void round_rows_bf16(std::size_t rows, std::size_t cols, float* x, std::size_t ld);

// How an object stores its projection weights (mha_attention_options'
// weight_format).
enum class WeightFormat : unsigned char { as_compute, int8, int4, uint4 };

// How an object is built (mha_attention_options): its compute precision,
// how it stores its projection weights, and whether its projections
// quantize their inputs to int8 (int8 or int4 weights).
struct ObjectOptions {
  bool bf16 = false;
  WeightFormat weights = WeightFormat::as_compute;
  std::size_t group = 0;  // input features per scale (0: the whole row)
  bool int8_activations = false;
};

// Copies and packs the weights for g's kernels.
std::unique_ptr<Projections> make_projections_fp32(const GemmKernels& g, const AttentionShape& s,
                                                   const mha_weights& w);
// The weights rounded to bf16 and packed for g16's kernels (or, with none,
// for the bf16 GEMM's fp32 path on g).
std::unique_ptr<Projections> make_projections_bf16(const GemmKernels& g, const GemmBf16Kernels* g16,
                                                   const AttentionShape& s, const mha_weights& w);

// One quantized weight [out, in]: fp32 values w to quantize (mha.h's rules),
// or codes (a byte each) and their scales, and for uint4 zero points,
// [out x groups] given (mha_int8_weights, mha_block_weights,
// mha_checkpoint_weights); name: the weight's, for messages.
struct QuantSource {
  const float* w = nullptr;
  const std::int8_t* codes = nullptr;
  const float* scales = nullptr;
  const char* name = "";
  const float* zeros = nullptr;
  // Null, or the codes' column p is input feature perm[p] (a GPTQ act-order
  // layer's, in group order): the product gathers its input so.
  const std::uint32_t* perm = nullptr;
};
// Wq, Wk, Wv and Wo so, in `type` codes with a scale per output row and
// group of `group` input features (0: the whole row), packed for
// gemm_quant_b on g's kernels; the biases from `biases` (its weight
// pointers unread). Given scales must be finite. With bf16, Q, K and V
// rounded to bf16 for a bf16 object's core.
std::unique_ptr<Projections> make_projections_quant(const GemmKernels& g, const AttentionShape& s,
                                                    bool bf16, QuantCodes type, std::size_t group,
                                                    const QuantSource (&src)[4],
                                                    const mha_weights& biases);
// mha.h's rules: row j of w [n x k], group q of it, to codes [n x k] (one
// per byte), scales[j * groups + q] and, for uint4, zeros (the zero point,
// as a float; null otherwise); a NaN or infinite weight throws
// MHA_INVALID_ARGUMENT naming `name`[j][p].
void quantize_rows(QuantCodes type, std::size_t group, std::size_t n, std::size_t k, const float* w,
                   std::int8_t* codes, float* scales, float* zeros, const char* name);
// quantize_rows on the columns of op(B) b [k x n] (row-major), an MLA
// layer's weight: codes [n x k], scales and zeros [n x groups].
void quantize_columns(const GemmKernels& g, QuantCodes type, std::size_t group, std::size_t k,
                      std::size_t n, const float* b, std::int8_t* codes, float* scales,
                      float* zeros);

// The codes of a quantized weight format (not as_compute).
QuantCodes quant_codes(WeightFormat f);

// The quantized projections o asks for, on weights of `type` codes in groups
// of `group` (from o, or from the codes given): make_projections_i8 with int8
// activations, else make_projections_quant.
std::unique_ptr<Projections> make_projections_coded(Isa isa, const AttentionShape& s,
                                                    const ObjectOptions& o, QuantCodes type,
                                                    std::size_t group, const QuantSource (&src)[4],
                                                    const mha_weights& biases);

// Wq, Wk, Wv and Wo as int8 or int4 codes (type) with a scale per output
// row and group of `group` input features (quantized by quantize_rows, or
// int8 codes per row given), packed for g8's int8 GEMM, whose products
// quantize each input row to int8 (gemm_i8.hpp); with bf16, Q, K and V
// rounded to bf16 for a bf16 object's core.
std::unique_ptr<Projections> make_projections_i8(const GemmKernels& g, const GemmI8Kernels& g8,
                                                 const AttentionShape& s, bool bf16,
                                                 QuantCodes type, std::size_t group,
                                                 const QuantSource (&src)[4],
                                                 const mha_weights& biases);

// One weight as op(B) [k x n], packed for a precision's products: an MLA
// layer's projections, which are many and of other shapes than the four
// above.
class PackedWeight {
 public:
  virtual ~PackedWeight() = default;
  // c [rows x n] = a [rows x k] · op(B).
  virtual void apply(std::size_t rows, const float* a, std::size_t lda, float* c,
                     std::size_t ldc) const = 0;
  // Takes the calling thread's scratch that apply() over `rows` uses.
  virtual void reserve(std::size_t rows) const = 0;
};

// An object's compute precision, for layers that build their own
// projections (MLA): the pipeline's callers then never name one.
class Precision {
 public:
  virtual ~Precision() = default;
  // b: op(B) [k x n] dense row-major, the caller's temporary.
  virtual std::unique_ptr<PackedWeight> pack(std::size_t k, std::size_t n,
                                             const float* b) const = 0;
  // x [rows x cols] (rows ld apart) as the products read it where it enters
  // the attention core: bf16 values (round_rows_bf16), or fp32 as it is.
  virtual void round(std::size_t rows, std::size_t cols, float* x, std::size_t ld) const = 0;
};
// fp32 weights packed for g's kernels.
std::unique_ptr<Precision> make_precision_fp32(const GemmKernels& g);
// Weights rounded to bf16 and packed as make_projections_bf16 packs them.
std::unique_ptr<Precision> make_precision_bf16(const GemmKernels& g, const GemmBf16Kernels* g16);
// Weights quantized per output column and group of `group` input rows (mha.h's
// rules), as make_projections_quant (fp32 products on the widened codes) or
// make_projections_i8 (int8 activations) quantize theirs; with bf16, a bf16
// core's rounding. A NaN or infinite weight is MHA_INVALID_ARGUMENT.
std::unique_ptr<Precision> make_precision_quant(const GemmKernels& g, bool bf16, QuantCodes type,
                                                std::size_t group);
std::unique_ptr<Precision> make_precision_i8(const GemmKernels& g, const GemmI8Kernels& g8,
                                             bool bf16, QuantCodes type, std::size_t group);
// The precision that options o ask for (ObjectOptions, mha_attention_options).
std::unique_ptr<Precision> make_precision(Isa isa, const ObjectOptions& o);

}  // namespace mha::detail
