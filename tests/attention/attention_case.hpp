// One attention problem with owned data, run through the public C++ API and
// through the double oracle, and the error metric the suites use.
#pragma once

#include <mha/mha.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mha/attention.hpp>
#include <vector>

#include "support/attention_reference.hpp"
#include "support/reference.hpp"

namespace mha::test {

enum class WeightsOut { none, per_head, averaged };

struct AttentionCase {
  mha_config config{};
  bool biases = true;
  std::size_t batch = 1, q_len = 1, kv_len = 1;
  bool self = false;  // key and value are the query (needs kdim == vdim == E, equal lengths)
  bool causal = false;
  bool padding = false;  // random key padding (never a whole batch row unless pad_all_of)
  int additive = 0;      // 0 none, 1 [q_len, kv_len], 2 per head
  float additive_range = 1.f;
  WeightsOut weights_out = WeightsOut::none;
  std::uint64_t seed = 1;
};

struct CaseData {
  RandomWeights w;
  std::vector<float> query, key, value, additive;
  std::vector<unsigned char> padding;
  mha_mask mask{};
  bool has_mask = false;

  CaseData(const AttentionCase& c)
      : w(c.config, c.biases, c.seed),
        query(random_vector(c.batch * c.q_len * c.config.embed_dim, c.seed * 16 + 9)),
        key(c.self ? query : random_vector(c.batch * c.kv_len * kdim(c), c.seed * 16 + 10)),
        value(c.self ? query : random_vector(c.batch * c.kv_len * vdim(c), c.seed * 16 + 11)) {
    const std::size_t H = c.config.num_heads;
    if (c.additive != 0) {
      const std::size_t planes = c.additive == 2 ? c.batch * H : 1;
      additive = random_vector(planes * c.q_len * c.kv_len, c.seed * 16 + 12, -c.additive_range,
                               c.additive_range);
    }
    if (c.padding) {
      // About a quarter of the keys padded; key 0 of each batch row stays
      // visible so no row is fully masked by padding alone.
      const std::vector<float> r = random_vector(c.batch * c.kv_len, c.seed * 16 + 13, 0.f, 1.f);
      padding.resize(r.size());
      for (std::size_t i = 0; i < r.size(); ++i)
        padding[i] = (i % c.kv_len != 0 && r[i] < 0.25f) ? 1 : 0;
    }
    has_mask = c.causal || c.padding || c.additive != 0;
    mask.causal = c.causal ? 1 : 0;
    mask.key_padding = padding.empty() ? nullptr : padding.data();
    mask.additive = additive.empty() ? nullptr : additive.data();
    mask.additive_per_head = c.additive == 2 ? 1 : 0;
  }
  const mha_mask* mask_ptr() const { return has_mask ? &mask : nullptr; }

  static std::size_t kdim(const AttentionCase& c) {
    return c.config.kdim ? c.config.kdim : c.config.embed_dim;
  }
  static std::size_t vdim(const AttentionCase& c) {
    return c.config.vdim ? c.config.vdim : c.config.embed_dim;
  }
};

inline std::size_t weights_size(const AttentionCase& c) {
  switch (c.weights_out) {
    case WeightsOut::none:
      return 0;
    case WeightsOut::per_head:
      return c.batch * c.config.num_heads * c.q_len * c.kv_len;
    case WeightsOut::averaged:
      return c.batch * c.q_len * c.kv_len;
  }
  return 0;
}

struct CaseResult {
  std::vector<float> out, weights;
};

inline CaseResult run_library(const MultiheadAttention& attn, const AttentionCase& c,
                              const CaseData& d) {
  CaseResult r;
  r.out.assign(c.batch * c.q_len * c.config.embed_dim, NAN);
  r.weights.assign(weights_size(c), NAN);
  attn.forward(c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(), d.value.data(),
               d.mask_ptr(), r.out.data(), r.weights.empty() ? nullptr : r.weights.data(),
               c.weights_out == WeightsOut::averaged);
  return r;
}

inline ReferenceResult run_reference(const AttentionCase& c, const CaseData& d) {
  return reference_attention(c.config, d.w.view(), c.batch, c.q_len, c.kv_len, d.query.data(),
                             d.key.data(), d.value.data(), d.mask_ptr(),
                             c.weights_out != WeightsOut::none,
                             c.weights_out == WeightsOut::averaged);
}

// The error metric of every attention comparison: max_i |ours_i - ref_i|
// divided by max(1, max_i |ref_i|). Outputs and weights are O(1) here
// (weights lie in [0, 1]), so this is a relative error at the tensor's scale
// that does not blow up on the many near-zero elements. NaN anywhere in ours
// gives +inf, so it always fails.
inline double scaled_error(const std::vector<float>& ours, const std::vector<double>& ref) {
  if (ours.size() != ref.size()) return INFINITY;
  double scale = 1, err = 0;
  for (double x : ref) scale = std::max(scale, std::abs(x));
  for (std::size_t i = 0; i < ours.size(); ++i) {
    if (!std::isfinite(ours[i])) return INFINITY;
    err = std::max(err, std::abs(static_cast<double>(ours[i]) - ref[i]));
  }
  return err / scale;
}

}  // namespace mha::test
