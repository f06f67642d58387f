// Double-precision oracle of PyTorch nn.MultiheadAttention(batch_first=True)
// in eval mode, written as directly from the definition as possible, plus the
// library's one deliberate difference: a fully masked query row gives zero
// weights and a zero attention output for that head (PyTorch: NaN).
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mha::test {

struct ReferenceResult {
  std::vector<double> out;      // [batch, q_len, E]
  std::vector<double> weights;  // [batch, H, q_len, kv_len], or [batch, q_len, kv_len] averaged
  std::vector<double> lse;      // [batch*q_len, H] (mha_mods.lse), always computed
};

// Same arguments and layouts as mha_attention_forward; config defaults
// (kdim, vdim, num_kv_heads == 0) are resolved as the library resolves them.
// Weights are computed only if `want_weights`. `mods` (may be null) as in
// mha_attention_forward_mods, straight from its definition in mha.h (lse is
// returned in the result, mods->lse is ignored).
ReferenceResult reference_attention(const mha_config& config, const mha_weights& weights,
                                    std::size_t batch, std::size_t q_len, std::size_t kv_len,
                                    const float* query, const float* key, const float* value,
                                    const mha_mask* mask, bool want_weights, bool average_weights,
                                    const mha_mods* mods = nullptr);

// Largest error of an lse output against the reference, absolute over
// max(1, |ref|) (see test_attention_mods.cpp for the bound); infinite where
// one side is infinite or NaN and the other is not the same.
double lse_error(const std::vector<float>& ours, const std::vector<double>& ref);

// Owned random weights for a config (PyTorch-like init: uniform in
// +-1/sqrt(fan_in)), with each bias present or absent; view() gives the
// mha_weights pointing into them.
struct RandomWeights {
  std::vector<float> q, k, v, o, qb, kb, vb, ob;
  RandomWeights(const mha_config& config, bool biases, std::uint64_t seed);
  mha_weights view() const;
  // The four weight matrices rounded to bf16 in place (what a bf16 object
  // stores); the biases stay fp32.
  void round_to_bf16();
};

}  // namespace mha::test
