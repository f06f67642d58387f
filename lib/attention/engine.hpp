// Internal contract between the public attention API (api.cpp: validation,
// C/C++ wrappers) and the implementation behind it (the fused engine).
// Arguments reaching the engine are already validated.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <memory>

#include "dispatch/dispatch.hpp"

namespace mha::detail {

// mha_config with every default resolved (kdim/vdim/num_kv_heads != 0).
struct AttentionShape {
  std::size_t embed_dim = 0;     // E
  std::size_t num_heads = 0;     // H
  std::size_t kdim = 0, vdim = 0;
  std::size_t num_kv_heads = 0;  // divides H
  std::size_t head_dim = 0;      // E / H
  std::size_t kv_dim() const { return num_kv_heads * head_dim; }
};

struct ForwardArgs {
  std::size_t batch = 0, q_len = 0, kv_len = 0;
  const float* query = nullptr;  // [batch, q_len, E]
  const float* key = nullptr;    // [batch, kv_len, kdim]
  const float* value = nullptr;  // [batch, kv_len, vdim]
  const mha_mask* mask = nullptr;
  float* out = nullptr;           // [batch, q_len, E]
  float* attn_weights = nullptr;  // optional, see mha_attention_forward
  bool average_weights = false;
};

class AttentionEngine {
 public:
  // Copies/packs the weights; the caller's arrays are not referenced later.
  AttentionEngine(const KernelSet& kernels, const AttentionShape& shape, const mha_weights& w);
  ~AttentionEngine();
  AttentionEngine(const AttentionEngine&) = delete;
  AttentionEngine& operator=(const AttentionEngine&) = delete;

  // Thread-safe: any number of concurrent calls on one engine.
  void forward(const ForwardArgs& args) const;

  const AttentionShape& shape() const { return shape_; }
  const KernelSet& kernels() const { return kernels_; }

 private:
  struct Impl;
  const KernelSet& kernels_;
  AttentionShape shape_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mha::detail
