// Pre-quantized weights read as their formats store them (llama.cpp's
// blocks, GPTQ's and AWQ's int32-packed nibbles), decoded into codes a byte
// each, with fp32 scales and zero points, for the projections that take
// codes as given (QuantSource).
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace mha::detail {

// One matrix [rows x in]: codes, and scales and zero points per row and
// group [rows x groups] (zeros empty where the format has none); perm
// empty, or the codes' column p is input feature perm[p] (QuantSource).
struct DecodedWeight {
  std::vector<std::int8_t> codes;
  std::vector<float> scales, zeros;
  std::vector<std::uint32_t> perm;
};

// An fp16 bit pattern widened to fp32, exactly.
float fp16_to_float(std::uint16_t h);

// Q4_0 or Q8_0 blocks (mha_block_weights): in a multiple of 32, scales
// checked finite; messages name `name`.
DecodedWeight decode_blocks(mha_block_format format, const void* blocks, std::size_t rows,
                            std::size_t in, const char* name);

// One GPTQ or AWQ layer (mha_checkpoint_matrix) of `rows` output features:
// uint4 codes, zero points 0..16, in groups of `group` (0: whole rows); in
// and rows multiples of 8, scales finite; an act-order g_idx (each group
// `group` inputs, the last one the rest) gives the inputs in group order,
// stable (perm); messages name `name`.
DecodedWeight decode_checkpoint(mha_checkpoint_layout layout, const mha_checkpoint_matrix& m,
                                std::size_t rows, std::size_t in, std::size_t group,
                                const char* name);

}  // namespace mha::detail
