// Multi-head Latent Attention (DeepSeek-V2/V3/R1, Kimi K2; mha_mla_* in
// mha.h) as two attention engines over projections of its own (mla.cpp):
//   - prefill (mha_mla_forward), the model's own form: K and V
//     decompressed per head by kv_b_proj, each head [rope | nope] for Q·Kᵀ
//     and V padded to the same width, per-call K/V;
//   - steps, the absorbed form over a latent cache of [k_pe | c] per token
//     (dr + r values, one kv head shared by every query head): q_lat[h] =
//     W_UK[h]ᵀ q_nope[h] makes each query head [q_pe | q_lat], V is the
//     cached row itself, and o[h] = W_UV[h] · o_lat[h].
// Everything else (RoPE, the core, caches, paging, split-KV, the GQA decode
// bundle) is the attention pipeline's.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "attention/engine/engine.hpp"

namespace mha::detail {

// mha_mla_config, validated and with its defaults resolved.
struct MlaShape {
  std::size_t E = 0, H = 0, q_lora = 0, r = 0, dn = 0, dr = 0, dv = 0;
  double eps = 1e-6;
  double theta = 10000.0;
  bool halves = false;
  double yarn_factor = 0.0;  // 0: plain RoPE
  double yarn_original = 0.0, beta_fast = 32.0, beta_slow = 1.0;
  double mscale = 0.0, mscale_all_dim = 0.0;  // 0: absent

  // A prefill head: [rope | nope], V padded to the same width.
  std::size_t head() const { return dn + dr > dv ? dn + dr : dv; }
  // A latent row: [k_pe | c].
  std::size_t latent() const { return dr + r; }
};

class MlaWeights;

class MlaModel {
 public:
  // o: the compute type and weight format (mha_attention_options).
  MlaModel(Isa isa, const MlaShape& s, const mha_mla_weights& w, const ObjectOptions& o);
  ~MlaModel();
  MlaModel(const MlaModel&) = delete;
  MlaModel& operator=(const MlaModel&) = delete;

  const MlaShape& shape() const { return s_; }
  const AttentionEngine& prefill() const { return *prefill_; }
  // The engine of steps: its caches are the latent caches.
  const AttentionEngine& decode() const { return *decode_; }
  // Causal, with the model's RoPE, the call's first token at `position`.
  AttentionMods mods(std::ptrdiff_t position) const;
  // The softmax scale and RoPE amplitude (YaRN's mscale rules).
  float scale() const { return scale_; }
  double amplitude() const { return amplitude_; }

 private:
  MlaShape s_;
  std::vector<double> inv_freq_;  // [dr / 2]
  double amplitude_ = 1.0;
  float scale_ = 0.f;
  std::unique_ptr<MlaWeights> weights_;  // both engines' projections use them
  std::unique_ptr<AttentionEngine> prefill_, decode_;
};

}  // namespace mha::detail

struct mha_mla {
  std::unique_ptr<mha::detail::MlaModel> model;
};
