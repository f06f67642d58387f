// Head split/merge for multi-head attention, C++ API (C: mha_split_heads,
// mha_merge_heads, mha_split_qkv in mha.h). All tensors are dense row-major
// float32; outputs must not overlap inputs (MHA_INVALID_ARGUMENT otherwise).
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <mha/error.hpp>

namespace mha {

// [batch, seq, heads*head_dim] -> [batch, heads, seq, head_dim].
MHA_API void split_heads(std::size_t batch, std::size_t seq, std::size_t heads,
                         std::size_t head_dim, const float* x, float* y);
// [batch, heads, seq, head_dim] -> [batch, seq, heads*head_dim].
MHA_API void merge_heads(std::size_t batch, std::size_t seq, std::size_t heads,
                         std::size_t head_dim, const float* x, float* y);
// A packed QKV projection [batch, seq, 3*heads*head_dim] (q, k, v blocks of
// heads*head_dim per token) -> three [batch, heads, seq, head_dim], reading
// qkv once.
MHA_API void split_qkv(std::size_t batch, std::size_t seq, std::size_t heads, std::size_t head_dim,
                       const float* qkv, float* q, float* k, float* v);

}  // namespace mha
