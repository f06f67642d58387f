// The bf16 projections: the four weights rounded to bf16 (nearest even) at
// create and packed for the bf16 GEMM, in one allocation; with bf16 kernels
// and whole strips, Wq, Wk and Wv packed back to back are one B (wqkv16), as
// in fp32. Inputs are rounded to bf16 by the products, the biases added in
// fp32, and Q, K, V rounded again where they enter the core.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "attention/projection/projection.hpp"
#include "common/checked.hpp"

namespace mha::detail {
namespace {

class ProjectionsBf16 final : public Projections {
 public:
  ProjectionsBf16(const GemmKernels& g, const GemmBf16Kernels* g16, const AttentionShape& s,
                  const mha_weights& w)
      : Projections(g, s) {
    const std::size_t E = s.embed_dim, kv = s.kv_dim();
    struct Weight {
      const float* w;
      std::size_t out, in;
      PackedBf16B* dst;
    };
    const Weight weights[] = {{w.q_weight, E, E, &wq16_},
                              {w.k_weight, kv, s.kdim, &wk16_},
                              {w.v_weight, kv, s.vdim, &wv16_},
                              {w.out_weight, E, E, &wo16_}};
    std::size_t floats = 0, largest = 0;
    for (const Weight& x : weights) {
      // Either packed layout (bf16 pairs or fp32, strips of at most 64
      // columns) takes at most (out + 64) x (in + 2) floats: checked first, so
      // packed_bf16_b_bytes cannot wrap; sections 64-byte aligned.
      float_bytes(checked_mul(checked_add(x.out, 64, "packed bf16 weights"),
                              checked_add(x.in, 2, "packed bf16 weights"), "packed bf16 weights"),
                  "packed bf16 weights");
      floats = checked_add(
          floats, round_up(ceil_div(packed_bf16_b_bytes(g16, g, x.in, x.out), sizeof(float)), 16),
          "packed bf16 weights");
      largest = std::max(largest, x.out * x.in);
    }
    float_bytes(floats, "packed bf16 weights");
    weights_ = alloc_floats(floats);
    std::vector<std::uint16_t> rounded(largest);
    float* dst = weights_.get();
    for (const Weight& x : weights) {
      fp32_to_bf16(x.out * x.in, x.w, rounded.data());
      *x.dst = pack_bf16_b(g16, g, Trans::T, x.in, x.out, rounded.data(), x.in, dst);
      dst += round_up(ceil_div(packed_bf16_b_bytes(g16, g, x.in, x.out), sizeof(float)), 16);
    }
    // Wk's strips right after Wq's, and Wv's after Wk's: then they are the
    // strips of one [E x (E + 2 kv)] B.
    const auto follows = [&](const PackedBf16B& a, const PackedBf16B& b) {
      return static_cast<const char*>(a.data) + packed_bf16_b_bytes(g16, g, a.k, a.n) == b.data;
    };
    fused_ = g16 != nullptr && s.kdim == E && s.vdim == E && E % g16->nr == 0 &&
             kv % g16->nr == 0 && follows(wq16_, wk16_) && follows(wk16_, wv16_);
    if (fused_) wqkv16_ = {g16, &g, E, E + 2 * kv, wq16_.data};
    copy_biases(w);
    // The fused product's C has Q, K and V's columns back to back, where the
    // packed biases have each section padded to whole fp32 strips.
    if (fused_) {
      qkv_bias_ = alloc_floats(E + 2 * kv);
      std::copy_n(in_bias_.get(), E, qkv_bias_.get());
      std::copy_n(in_bias_.get() + q_cols_, kv, qkv_bias_.get() + E);
      std::copy_n(in_bias_.get() + q_cols_ + k_cols_, kv, qkv_bias_.get() + E + kv);
    }
  }

  Projected project(bool fused, bool rope, std::size_t q_rows, std::size_t kv_rows,
                    const float* query, const float* key, const float* value,
                    float* dst) const override {
    const std::size_t E = s_.embed_dim, kvd = s_.kv_dim();
    const float* bias = in_bias_.get();
    Projected p{dst, dst + q_rows * E, dst + q_rows * E + kv_rows * kvd, E, kvd};
    // Bias, and rounding where nothing follows: Q and K are rounded after
    // RoPE rotates them (finish_rotated).
    if (fused) {
      p = {dst, dst + E, dst + E + kvd, E + 2 * kvd, E + 2 * kvd};
      const Bf16Epilogue ep = bf16_epilogue(qkv_bias_.get(), rope ? E + kvd : 0);
      gemm_bf16_packed(Trans::N, q_rows, 1.0f, nullptr, query, E, wqkv16_, 0.0f, dst, p.ldq, &ep);
    } else {
      const Bf16Epilogue q = bf16_epilogue(bias, rope ? E : 0),
                         k = bf16_epilogue(bias + q_cols_, rope ? kvd : 0),
                         v = bf16_epilogue(bias + q_cols_ + k_cols_, 0);
      gemm_bf16_packed(Trans::N, q_rows, 1.0f, nullptr, query, E, wq16_, 0.0f, p.q, E, &q);
      gemm_bf16_packed(Trans::N, kv_rows, 1.0f, nullptr, key, s_.kdim, wk16_, 0.0f, p.k, kvd, &k);
      gemm_bf16_packed(Trans::N, kv_rows, 1.0f, nullptr, value, s_.vdim, wv16_, 0.0f, p.v, kvd, &v);
    }
    return p;
  }
  void finish_rotated(const Projected& p, std::size_t q_rows, std::size_t kv_rows) const override {
    round_rows_bf16(q_rows, s_.embed_dim, p.q, p.ldq);
    round_rows_bf16(kv_rows, s_.kv_dim(), p.k, p.ldkv);
  }
  void project_out(std::size_t rows, const float* merged, float* out) const override {
    const std::size_t E = s_.embed_dim;
    const Bf16Epilogue ep = bf16_epilogue(out_bias_.get(), E);
    gemm_bf16_packed(Trans::N, rows, 1.0f, nullptr, merged, E, wo16_, 0.0f, out, E,
                     out_bias_ != nullptr ? &ep : nullptr);
  }
  void reserve_out(std::size_t rows) const override { reserve_gemm_bf16_packed(rows, wo16_); }

 private:
  AlignedFloats weights_;
  PackedBf16B wq16_, wk16_, wv16_, wo16_, wqkv16_;
  AlignedFloats qkv_bias_;  // [E + 2 kv] when fused_
};

class PackedWeightBf16 final : public PackedWeight {
 public:
  PackedWeightBf16(const GemmKernels& g, const GemmBf16Kernels* g16, std::size_t k, std::size_t n,
                   const float* b) {
    // As ProjectionsBf16: (n + 64) x (k + 2) floats bound either layout.
    float_bytes(checked_mul(checked_add(n, 64, "packed bf16 weights"),
                            checked_add(k, 2, "packed bf16 weights"), "packed bf16 weights"),
                "packed bf16 weights");
    data_ = alloc_floats(ceil_div(packed_bf16_b_bytes(g16, g, k, n), sizeof(float)));
    std::vector<std::uint16_t> rounded(k * n);
    fp32_to_bf16(k * n, b, rounded.data());
    b_ = pack_bf16_b(g16, g, Trans::N, k, n, rounded.data(), n, data_.get());
  }
  void apply(std::size_t rows, const float* a, std::size_t lda, float* c,
             std::size_t ldc) const override {
    gemm_bf16_packed(Trans::N, rows, 1.0f, nullptr, a, lda, b_, 0.0f, c, ldc);
  }
  void reserve(std::size_t rows) const override { reserve_gemm_bf16_packed(rows, b_); }

 private:
  AlignedFloats data_;
  PackedBf16B b_;
};

class PrecisionBf16 final : public Precision {
 public:
  PrecisionBf16(const GemmKernels& g, const GemmBf16Kernels* g16) : g_(g), g16_(g16) {}
  std::unique_ptr<PackedWeight> pack(std::size_t k, std::size_t n, const float* b) const override {
    return std::make_unique<PackedWeightBf16>(g_, g16_, k, n, b);
  }
  void round(std::size_t rows, std::size_t cols, float* x, std::size_t ld) const override {
    round_rows_bf16(rows, cols, x, ld);
  }

 private:
  const GemmKernels& g_;
  const GemmBf16Kernels* g16_;
};

}  // namespace

std::unique_ptr<Projections> make_projections_bf16(const GemmKernels& g, const GemmBf16Kernels* g16,
                                                   const AttentionShape& s, const mha_weights& w) {
  return std::make_unique<ProjectionsBf16>(g, g16, s, w);
}

std::unique_ptr<Precision> make_precision_bf16(const GemmKernels& g, const GemmBf16Kernels* g16) {
  return std::make_unique<PrecisionBf16>(g, g16);
}

}  // namespace mha::detail
