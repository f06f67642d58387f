// mha::MultiheadAttention: the C++ face of mha_attention_* (include/mha/mha.h).
// Same semantics (PyTorch nn.MultiheadAttention(batch_first=True), eval mode,
// fully masked query rows give zeros) and the same argument checks; failures
// throw mha::Error carrying the status and message the C API would return.
// The header is C++17 so consumers need not build with C++20.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <mha/error.hpp>

namespace mha {

class MHA_API MultiheadAttention {
 public:
  // Validates the configuration and copies (packs) the weights; the caller's
  // arrays are not referenced afterwards. The kernels are those of the ISA in
  // use at construction (MHA_ISA / mha_set_isa). Throws mha::Error:
  // MHA_INVALID_ARGUMENT for a bad config or missing weight,
  // MHA_UNSUPPORTED if the forced ISA cannot run here, MHA_OUT_OF_MEMORY.
  MultiheadAttention(const mha_config& config, const mha_weights& weights);
  // With options (compute = MHA_BF16: see mha_attention_create_ex).
  MultiheadAttention(const mha_config& config, const mha_weights& weights,
                     const mha_attention_options& options);
  // On int8 codes (mha_attention_create_int8), llama.cpp's blocks
  // (mha_attention_create_blocks) or a GPTQ or AWQ checkpoint's layers
  // (mha_attention_create_checkpoint), with options as those take them
  // (NULL: fp32 compute, weight-only).
  MultiheadAttention(const mha_config& config, const mha_int8_weights& weights,
                     const mha_attention_options* options = nullptr);
  MultiheadAttention(const mha_config& config, const mha_block_weights& weights,
                     const mha_attention_options* options = nullptr);
  MultiheadAttention(const mha_config& config, const mha_checkpoint_weights& weights,
                     const mha_attention_options* options = nullptr);
  ~MultiheadAttention();
  MultiheadAttention(MultiheadAttention&& other) noexcept;
  MultiheadAttention& operator=(MultiheadAttention&& other) noexcept;
  MultiheadAttention(const MultiheadAttention&) = delete;
  MultiheadAttention& operator=(const MultiheadAttention&) = delete;

  // out = attention(query, key, value); see mha_attention_forward for the
  // layouts. Safe to call from many threads at once. On error nothing is
  // written to `out` or `attn_weights`.
  void forward(std::size_t batch, std::size_t q_len, std::size_t kv_len, const float* query,
               const float* key, const float* value, const mha_mask* mask, float* out,
               float* attn_weights = nullptr, bool average_weights = false) const;

  // forward with modifiers (mods may be null); see mha_attention_forward_mods.
  void forward_mods(std::size_t batch, std::size_t q_len, std::size_t kv_len, const float* query,
                    const float* key, const float* value, const mha_mask* mask,
                    const mha_mods* mods, float* out, float* attn_weights = nullptr,
                    bool average_weights = false) const;

  // Self-attention: query, key and value are all `x` ([batch, len, E]);
  // requires kdim == vdim == E.
  void forward_self(std::size_t batch, std::size_t len, const float* x, const mha_mask* mask,
                    float* out, float* attn_weights = nullptr, bool average_weights = false) const;

  // mha_attention_forward_ragged; `causal` aligns each sequence's last query
  // with its last key (the C call gets it from its modifiers).
  void forward_ragged(const mha_ragged& seqs, const float* query, const float* key,
                      const float* value, float* out, bool causal = false) const;
  // mha_attention_forward_ragged with modifiers (mods may be null).
  void forward_ragged_mods(const mha_ragged& seqs, const float* query, const float* key,
                           const float* value, const mha_mods* mods, float* out) const;

  // The configuration with defaults resolved (kdim, vdim, num_kv_heads != 0).
  std::size_t embed_dim() const;
  std::size_t num_heads() const;
  std::size_t num_kv_heads() const;
  std::size_t head_dim() const;
  std::size_t kdim() const;
  std::size_t vdim() const;

  // The C handle, for mixing with C code; owned by this object.
  const mha_attention* handle() const noexcept { return handle_; }

 private:
  mha_attention* handle_ = nullptr;
};

// The shorter name, as in the C header (mha_attention): one class, two names.
using Attention = MultiheadAttention;

}  // namespace mha
