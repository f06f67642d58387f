// Baselines for bench_attention. From a BLAS (OpenBLAS), multi-head attention
// is composed the way a competent engineer composes it: projection GEMMs,
// head-split copies, per-head batched Q·Kᵀ, a plain max-subtracted softmax
// (masking by adding -inf to the full score matrix), per-head batched P·V, a
// head-merge copy and the output GEMM. oneDNN, which has batched strided
// matmuls, attributes and a softmax primitive, is composed from those
// (baseline_onednn.cpp).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace mha::bench {

struct AttentionConfig {
  std::string name;
  std::size_t embed_dim, heads, batch, q_len, kv_len;
  bool causal = false;
  // One new token against a KV cache of kv_len - 1 positions (it sees every
  // key, so `causal` stays false: the FLOP count has the full q·K term).
  bool decode = false;
  // GQA: 0 means `heads`; fewer K/V heads (dividing heads) shrink the K and V
  // projections. Only ours runs these: the baselines here compose MHA alone.
  std::size_t kv_heads = 0;
  std::size_t head_dim() const { return embed_dim / heads; }
  // Width of the K and V projections: kv_heads · head_dim (E without GQA).
  std::size_t kv_dim() const { return (kv_heads == 0 ? heads : kv_heads) * head_dim(); }
  // 4·B·Sq·E·(E + kv_dim) (four projections; for decode only the new token is
  // projected) + 4·B·Sq·Skv·E, with causal work counted as half of the S² term.
  double flops() const;
};

// Row-major GEMM with optional batch: for each i < batch,
// C_i[m x n] = op(A_i)·op(B_i) (+ bias[n]); op(B) = Bᵀ when trans_b.
struct GemmDesc {
  std::size_t batch = 1, m, n, k;
  std::size_t lda, ldb, ldc;
  std::size_t stride_a = 0, stride_b = 0, stride_c = 0;  // per batch item
  bool trans_b = false;
  bool bias = false;
};

class GemmBackend {
 public:
  virtual ~GemmBackend() = default;
  // Registers a GEMM shape before timing (oneDNN creates its primitive here).
  virtual std::size_t add(const GemmDesc& d) = 0;
  virtual void run(std::size_t id, const float* a, const float* b, float* c, const float* bias) = 0;
};

std::unique_ptr<GemmBackend> make_openblas_backend();

// One attention implementation with its weights (PyTorch layout: wq, wk, wv,
// wo, each [E, E], concatenated; biases bq, bk, bv, bo).
class AttentionBaseline {
 public:
  virtual ~AttentionBaseline() = default;
  // x: [B, Sq, E] (self-attention input; for decode the new token), out: [B, Sq, E].
  virtual void forward(const float* x, float* out) = 0;
};

// bf16: the composition in bf16 (see baseline_onednn.cpp); throws
// std::runtime_error where oneDNN cannot build it (no bf16 matmul on this CPU).
std::unique_ptr<AttentionBaseline> make_onednn_attention(const AttentionConfig& c,
                                                         const std::vector<float>& weights,
                                                         const std::vector<float>& biases,
                                                         bool bf16 = false);

class ComposedAttention {
 public:
  // Weights in PyTorch's [out, in] layout: wq, wk, wv, wo each [E, E].
  // weights: wq, wk, wv, wo concatenated; biases: bq, bk, bv, bo. The
  // non-GEMM loops (copies, softmax) run on `threads` TBB threads.
  ComposedAttention(const AttentionConfig& c, std::unique_ptr<GemmBackend> gemm,
                    std::vector<float> weights, std::vector<float> biases, int threads);
  ~ComposedAttention();
  // x: [B, Sq, E] (self-attention input; for decode the new token), out: [B, Sq, E].
  void forward(const float* x, float* out);

 private:
  AttentionConfig c_;
  std::unique_ptr<GemmBackend> gemm_;
  std::vector<float> w_, bias_;
  std::vector<float> q_, k_, v_, qh_, kh_, vh_, scores_, oh_, merged_;
  std::size_t g_q_, g_kv_, g_scores_, g_pv_, g_out_;
  struct Arena;
  std::unique_ptr<Arena> arena_;
};

}  // namespace mha::bench
