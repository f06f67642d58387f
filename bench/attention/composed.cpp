#include "composed.hpp"

#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace mha::bench {

double AttentionConfig::flops() const {
  const double E = static_cast<double>(embed_dim), B = static_cast<double>(batch);
  const double sq = static_cast<double>(q_len), skv = static_cast<double>(kv_len);
  const double core = 4.0 * B * sq * skv * E;
  return 4.0 * B * sq * E * (E + static_cast<double>(kv_dim())) + (causal ? core / 2 : core);
}

struct ComposedAttention::Arena {
  explicit Arena(int t) : arena(t) {}
  tbb::task_arena arena;
};

ComposedAttention::ComposedAttention(const AttentionConfig& c, std::unique_ptr<GemmBackend> gemm,
                                     std::vector<float> weights, std::vector<float> biases,
                                     int threads)
    : c_(c),
      gemm_(std::move(gemm)),
      w_(std::move(weights)),
      bias_(std::move(biases)),
      arena_(std::make_unique<Arena>(threads)) {
  const std::size_t E = c.embed_dim, H = c.heads, d = c.head_dim(), B = c.batch;
  const std::size_t sq = c.q_len, skv = c.kv_len, BH = B * H;
  // Decode projects only the new token; its K/V land in the cache's last slot.
  const std::size_t kv_rows = c.decode ? B : B * skv;
  q_.resize(B * sq * E);
  k_.resize(kv_rows * E);
  v_.resize(kv_rows * E);
  qh_.resize(BH * sq * d);
  kh_.assign(BH * skv * d, 0.01f);
  vh_.assign(BH * skv * d, 0.01f);
  scores_.resize(BH * sq * skv);
  oh_.resize(BH * sq * d);
  merged_.resize(B * sq * E);
  GemmDesc proj{1, B * sq, E, E, E, E, E};
  proj.trans_b = true;
  proj.bias = true;
  g_q_ = gemm_->add(proj);
  proj.m = kv_rows;
  g_kv_ = gemm_->add(proj);
  GemmDesc qk{BH, sq, skv, d, d, d, skv, sq * d, skv * d, sq * skv};
  qk.trans_b = true;
  g_scores_ = gemm_->add(qk);
  g_pv_ = gemm_->add(GemmDesc{BH, sq, d, skv, skv, d, d, sq * skv, skv * d, sq * d});
  proj.m = B * sq;
  g_out_ = gemm_->add(proj);
}

ComposedAttention::~ComposedAttention() = default;

void ComposedAttention::forward(const float* x, float* out) {
  const std::size_t E = c_.embed_dim, H = c_.heads, d = c_.head_dim(), B = c_.batch;
  const std::size_t sq = c_.q_len, skv = c_.kv_len, EE = E * E;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  gemm_->run(g_q_, x, w_.data(), q_.data(), bias_.data());
  gemm_->run(g_kv_, x, w_.data() + EE, k_.data(), bias_.data() + E);
  gemm_->run(g_kv_, x, w_.data() + 2 * EE, v_.data(), bias_.data() + 2 * E);
  arena_->arena.execute([&] {
    // Split heads: [B, S, H, d] -> [B, H, S, d] (decode: append to the cache).
    tbb::parallel_for(std::size_t{0}, B * H, [&](std::size_t bh) {
      const std::size_t b = bh / H, h = bh % H;
      for (std::size_t i = 0; i < sq; ++i) {
        std::memcpy(&qh_[(bh * sq + i) * d], &q_[(b * sq + i) * E + h * d], d * sizeof(float));
      }
      const std::size_t first = c_.decode ? skv - 1 : 0;
      for (std::size_t j = first; j < skv; ++j) {
        const std::size_t src = (c_.decode ? b : b * skv + j) * E + h * d;
        std::memcpy(&kh_[(bh * skv + j) * d], &k_[src], d * sizeof(float));
        std::memcpy(&vh_[(bh * skv + j) * d], &v_[src], d * sizeof(float));
      }
    });
  });
  gemm_->run(g_scores_, qh_.data(), kh_.data(), scores_.data(), nullptr);
  arena_->arena.execute([&] {
    // Plain max-subtracted softmax over the full score matrix, masking by -inf.
    tbb::parallel_for(std::size_t{0}, B * H * sq, [&](std::size_t r) {
      float* row = &scores_[r * skv];
      const std::size_t i = r % sq;
      const std::size_t visible = c_.causal ? std::min(skv, i + (skv - sq) + 1) : skv;
      float mx = -std::numeric_limits<float>::infinity();
      for (std::size_t j = 0; j < skv; ++j) {
        row[j] = j < visible ? row[j] * scale : -std::numeric_limits<float>::infinity();
        mx = std::max(mx, row[j]);
      }
      float sum = 0.0f;
      for (std::size_t j = 0; j < skv; ++j) {
        row[j] = std::exp(row[j] - mx);
        sum += row[j];
      }
      for (std::size_t j = 0; j < skv; ++j) row[j] /= sum;
    });
  });
  gemm_->run(g_pv_, scores_.data(), vh_.data(), oh_.data(), nullptr);
  arena_->arena.execute([&] {
    tbb::parallel_for(std::size_t{0}, B * H, [&](std::size_t bh) {
      const std::size_t b = bh / H, h = bh % H;
      for (std::size_t i = 0; i < sq; ++i) {
        std::memcpy(&merged_[(b * sq + i) * E + h * d], &oh_[(bh * sq + i) * d], d * sizeof(float));
      }
    });
  });
  gemm_->run(g_out_, merged_.data(), w_.data() + 3 * EE, out, bias_.data() + 3 * E);
}

}  // namespace mha::bench
