// Straightforward float AttentionEngine: plain loops, one task per
// (batch, head), the out-projection one task per (batch, query row). It is the
// portable baseline the fused engine replaces; it uses no ISA kernels.
//
// Per task (b, h), with g = h / (H / kv_heads) the head's K/V group:
//   Q_h = query[b] Wq_h^T + bq_h    K_g = key[b] Wk_g^T + bk_g    V_g likewise
//   s_ij = (Q_h[i] . K_g[j]) / sqrt(head_dim) + masks;  P = softmax_j(s)
//   ctx[b, i, h*d:(h+1)*d] = P V_g          (zero where row i is fully masked)
// then out[b, i] = Wo ctx[b, i] + bo.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "attention/engine.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"

namespace mha::detail {
namespace {

float dot(const float* a, const float* b, std::size_t n) {
  float s = 0.f;
  for (std::size_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y[r, 0:rows] = x[r, :] W^T + bias for r < n; W is [rows, in] row-major.
void project(const float* x, std::size_t n, std::size_t in, const float* w, const float* bias,
             std::size_t rows, float* y) {
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t o = 0; o < rows; ++o)
      y[r * rows + o] = dot(x + r * in, w + o * in, in) + bias[o];
}

std::vector<float> copy_or_zero(const float* p, std::size_t n) {
  return p != nullptr ? std::vector<float>(p, p + n) : std::vector<float>(n, 0.f);
}

}  // namespace

struct AttentionEngine::Impl {
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo;
};

AttentionEngine::AttentionEngine(const KernelSet& kernels, const AttentionShape& shape,
                                 const mha_weights& w)
    : kernels_(kernels), shape_(shape), impl_(std::make_unique<Impl>()) {
  const std::size_t e = shape.embed_dim, kv = shape.kv_dim();
  impl_->wq.assign(w.q_weight, w.q_weight + e * e);
  impl_->wk.assign(w.k_weight, w.k_weight + kv * shape.kdim);
  impl_->wv.assign(w.v_weight, w.v_weight + kv * shape.vdim);
  impl_->wo.assign(w.out_weight, w.out_weight + e * e);
  impl_->bq = copy_or_zero(w.q_bias, e);
  impl_->bk = copy_or_zero(w.k_bias, kv);
  impl_->bv = copy_or_zero(w.v_bias, kv);
  impl_->bo = copy_or_zero(w.out_bias, e);
}

AttentionEngine::~AttentionEngine() = default;

void AttentionEngine::forward(const ForwardArgs& a) const {
  const AttentionShape& s = shape_;
  const Impl& m = *impl_;
  const std::size_t E = s.embed_dim, H = s.num_heads, d = s.head_dim;
  const std::size_t group = H / s.num_kv_heads;
  const std::size_t L = a.q_len, S = a.kv_len;
  const float scale = 1.f / std::sqrt(static_cast<float>(d));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const mha_mask* mask = a.mask;

  // Concatenated head outputs, read by the out-projection; held by the
  // calling thread (workers use the kAttentionTask slot).
  float* ctx = thread_scratch(ScratchSlot::kAttention, a.batch * L * E);

  // Scores and probabilities of row i of head h in batch b, into p[0:S];
  // returns false if every key is masked (p is then all zero).
  auto row_probs = [&](std::size_t b, std::size_t h, std::size_t i, const float* q, const float* k,
                       float* p) {
    float mx = neg_inf;
    for (std::size_t j = 0; j < S; ++j) {
      float v = dot(q, k + j * d, d) * scale;
      if (mask != nullptr) {
        if (mask->additive != nullptr) {
          const std::size_t plane = mask->additive_per_head ? (b * H + h) * L * S : 0;
          v += mask->additive[plane + i * S + j];
        }
        if (mask->key_padding != nullptr && mask->key_padding[b * S + j] != 0) v = neg_inf;
        if (mask->causal && j + L > i + S) v = neg_inf;  // j > i + (S - L), unsigned-safe
      }
      p[j] = v;
      mx = std::max(mx, v);
    }
    if (mx == neg_inf) {
      std::fill(p, p + S, 0.f);
      return false;
    }
    float sum = 0.f;
    for (std::size_t j = 0; j < S; ++j) sum += (p[j] = std::exp(p[j] - mx));
    const float inv = 1.f / sum;
    for (std::size_t j = 0; j < S; ++j) p[j] *= inv;
    return true;
  };

  // One head: writes its ctx columns and, unless averaging, its weights.
  // With averaging, `acc` (the [L, S] average plane of batch b) gets += p.
  auto head = [&](std::size_t b, std::size_t h, float* acc) {
    const std::size_t g = h / group;
    float* buf = thread_scratch(ScratchSlot::kAttentionTask, (L + 2 * S) * d + S);
    float *q = buf, *k = q + L * d, *v = k + S * d, *p = v + S * d;
    project(a.query + b * L * E, L, E, m.wq.data() + h * d * E, m.bq.data() + h * d, d, q);
    project(a.key + b * S * s.kdim, S, s.kdim, m.wk.data() + g * d * s.kdim, m.bk.data() + g * d, d,
            k);
    project(a.value + b * S * s.vdim, S, s.vdim, m.wv.data() + g * d * s.vdim, m.bv.data() + g * d,
            d, v);
    for (std::size_t i = 0; i < L; ++i) {
      row_probs(b, h, i, q + i * d, k, p);
      float* c = ctx + (b * L + i) * E + h * d;
      std::fill(c, c + d, 0.f);
      for (std::size_t j = 0; j < S; ++j)
        for (std::size_t t = 0; t < d; ++t) c[t] += p[j] * v[j * d + t];
      if (a.attn_weights == nullptr) continue;
      if (acc != nullptr) {
        for (std::size_t j = 0; j < S; ++j) acc[i * S + j] += p[j];
      } else {
        std::copy(p, p + S, a.attn_weights + ((b * H + h) * L + i) * S);
      }
    }
  };

  if (a.attn_weights != nullptr && a.average_weights) {
    // The head average is a sum over heads: one task per batch element adds
    // its heads in order, so the result never depends on the thread count.
    parallel_for(a.batch, 0, [&](std::size_t b) {
      float* acc = a.attn_weights + b * L * S;
      std::fill(acc, acc + L * S, 0.f);
      for (std::size_t h = 0; h < H; ++h) head(b, h, acc);
      for (std::size_t i = 0; i < L * S; ++i) acc[i] /= static_cast<float>(H);
    });
  } else {
    parallel_for(a.batch * H, 0, [&](std::size_t t) { head(t / H, t % H, nullptr); });
  }

  parallel_for(a.batch * L, 0, [&](std::size_t r) {
    project(ctx + r * E, 1, E, m.wo.data(), m.bo.data(), E, a.out + r * E);
  });
}

}  // namespace mha::detail
