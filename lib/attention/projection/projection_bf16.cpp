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
  }

  Projected project(bool fused, bool rope, std::size_t q_rows, std::size_t kv_rows,
                    const float* query, const float* key, const float* value,
                    float* dst) const override {
    const std::size_t E = s_.embed_dim, kvd = s_.kv_dim();
    const float* bias = in_bias_.get();
    Projected p{dst, dst + q_rows * E, dst + q_rows * E + kv_rows * kvd, E, kvd};
    if (fused) {
      p = {dst, dst + E, dst + E + kvd, E + 2 * kvd, E + 2 * kvd};
      gemm_bf16_packed(Trans::N, q_rows, 1.0f, nullptr, query, E, wqkv16_, 0.0f, dst, p.ldq);
    } else {
      gemm_bf16_packed(Trans::N, q_rows, 1.0f, nullptr, query, E, wq16_, 0.0f, p.q, E);
      gemm_bf16_packed(Trans::N, kv_rows, 1.0f, nullptr, key, s_.kdim, wk16_, 0.0f, p.k, kvd);
      gemm_bf16_packed(Trans::N, kv_rows, 1.0f, nullptr, value, s_.vdim, wv16_, 0.0f, p.v, kvd);
    }
    // Q and K are rounded after RoPE rotates them (finish_rotated), V now.
    finish_rows(q_rows, E, bias, p.q, p.ldq, !rope);
    finish_rows(kv_rows, kvd, bias + q_cols_, p.k, p.ldkv, !rope);
    finish_rows(kv_rows, kvd, bias + q_cols_ + k_cols_, p.v, p.ldkv, true);
    return p;
  }
  void finish_rotated(const Projected& p, std::size_t q_rows, std::size_t kv_rows) const override {
    finish_rows(q_rows, s_.embed_dim, nullptr, p.q, p.ldq, true);
    finish_rows(kv_rows, s_.kv_dim(), nullptr, p.k, p.ldkv, true);
  }
  void project_out(std::size_t rows, const float* merged, float* out) const override {
    const std::size_t E = s_.embed_dim;
    gemm_bf16_packed(Trans::N, rows, 1.0f, nullptr, merged, E, wo16_, 0.0f, out, E);
    finish_rows(rows, E, out_bias_.get(), out, E, false);
  }
  void reserve_out(std::size_t rows) const override { reserve_gemm_bf16_packed(rows, wo16_); }

 private:
  AlignedFloats weights_;
  PackedBf16B wq16_, wk16_, wv16_, wo16_, wqkv16_;
};

}  // namespace

std::unique_ptr<Projections> make_projections_bf16(const GemmKernels& g, const GemmBf16Kernels* g16,
                                                   const AttentionShape& s, const mha_weights& w) {
  return std::make_unique<ProjectionsBf16>(g, g16, s, w);
}

}  // namespace mha::detail
