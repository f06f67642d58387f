// Rotary position embeddings (RoPE) on projected Q and K rows, in place: the
// first rope_dim features of every head, pair t rotated by the angle
// position · theta^(-2t/rope_dim) (mha_mods in mha.h), or by an object's own
// frequencies and amplitude (AttentionMods::rope_inv_freq, MLA's YaRN).
#pragma once

#include <cstddef>

#include "attention/core/shape.hpp"

namespace mha::detail {

// Floats of the cos/sin table for `positions` consecutive positions.
std::size_t rope_table_floats(const AttentionMods& m, std::size_t positions);

// table[p] = cos of the rope_dim/2 angles of position first + p, then their
// sin; angles and cos/sin in double, rounded once to float.
void rope_table(const AttentionMods& m, std::ptrdiff_t first, std::size_t positions, float* table);

// Rotates `heads` heads (head g at column g*head_dim) of rows [batch * len,
// ld], row b*len + t at position pos0 + t, with the table of rope_table
// starting at position table_first (<= pos0).
void rope_apply(const AttentionMods& m, const float* table, std::ptrdiff_t table_first,
                std::ptrdiff_t pos0, std::size_t batch, std::size_t len, std::size_t heads,
                std::size_t head_dim, float* x, std::size_t ld);

}  // namespace mha::detail
