// An attention object's shape and a call's modifiers, both resolved and
// validated by the entry points (api/): what every folder of
// lib/attention below api/ reads of an object and of a call.
#pragma once

#include <cstddef>

namespace mha::detail {

// mha_config with every default resolved (kdim/vdim/num_kv_heads != 0).
struct AttentionShape {
  std::size_t embed_dim = 0;  // E
  std::size_t num_heads = 0;  // H
  std::size_t kdim = 0, vdim = 0;
  std::size_t num_kv_heads = 0;  // divides H
  std::size_t head_dim = 0;      // E / H
  // The softmax scale: 0 means head_dim^-0.5 (an object whose heads are
  // not what its scores are normalized by, MLA's, sets its own).
  float scale = 0.f;
  std::size_t kv_dim() const { return num_kv_heads * head_dim; }
};

// mha_mods resolved (rope_theta defaulted) and validated; the zero value is
// "no modifiers".
struct AttentionMods {
  bool causal = false;
  std::size_t window = 0;
  const float* alibi = nullptr;  // [H] slopes
  float softcap = 0.f;
  const float* sinks = nullptr;  // [H] logits
  std::size_t rope_dim = 0;
  float rope_theta = 10000.f;
  bool rope_interleaved = false;
  // Set only by objects that own them (MLA's YaRN), never from mha_mods:
  // the rope_dim/2 frequencies (null: rope_theta's), the amplitude that
  // multiplies cos and sin, and the position of a call's first token.
  const double* rope_inv_freq = nullptr;
  double rope_amplitude = 1.0;
  std::ptrdiff_t rope_offset = 0;
  float* lse = nullptr;  // [rows, H]
};

}  // namespace mha::detail
