#include "attention/api/coded_weights.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/checked.hpp"
#include "common/error.hpp"
#include "gemm/gemm.hpp"

namespace mha::detail {

float fp16_to_float(std::uint16_t h) {
  const int exponent = h >> 10 & 31, mantissa = h & 1023;
  const float sign = (h & 0x8000u) != 0 ? -1.0f : 1.0f;
  if (exponent == 31) {
    return mantissa != 0 ? std::numeric_limits<float>::quiet_NaN()
                         : sign * std::numeric_limits<float>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
  return sign * std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
}

DecodedWeight decode_blocks(mha_block_format format, const void* blocks, std::size_t rows,
                            std::size_t in, const char* name) {
  check_arg(blocks != nullptr, name, ": expected an array of blocks, got NULL");
  check_arg(in % 32 == 0, name, ": expected an input width that is a multiple of 32, got ", in);
  const bool q8 = format == MHA_BLOCKS_Q8_0;
  const std::size_t per_row = in / 32, block_bytes = q8 ? 34 : 18;
  const std::size_t count = checked_mul(rows, per_row, name);
  checked_mul(count, block_bytes, name);
  DecodedWeight d;
  d.codes.resize(checked_mul(rows, in, name));
  d.scales.resize(count);
  const auto* bytes = static_cast<const unsigned char*>(blocks);
  for (std::size_t b = 0; b < count; ++b) {
    const unsigned char* block = bytes + b * block_bytes;
    const float scale = fp16_to_float(static_cast<std::uint16_t>(block[0] | block[1] << 8));
    check_arg(std::isfinite(scale), name, ": block [", b / per_row, "][", b % per_row,
              "]: expected a finite scale, got ", scale);
    d.scales[b] = scale;
    std::int8_t* out = d.codes.data() + b * 32;
    for (std::size_t j = 0; j < 32; ++j) {
      out[j] =
          q8 ? static_cast<std::int8_t>(block[2 + j])
             : static_cast<std::int8_t>((j < 16 ? block[2 + j] & 15 : block[2 + j - 16] >> 4) - 8);
    }
  }
  return d;
}

namespace {

// Nibble t (0..7) of a packed int32, as its bits 4t .. 4t + 3.
int nibble(std::int32_t word, unsigned t) {
  return static_cast<int>(static_cast<std::uint32_t>(word) >> (4 * t) & 15u);
}

// AWQ's order: output 8j + t in nibble kAwqNibble[t].
constexpr unsigned kAwqNibble[8] = {0, 4, 1, 5, 2, 6, 3, 7};

}  // namespace

DecodedWeight decode_checkpoint(mha_checkpoint_layout layout, const mha_checkpoint_matrix& m,
                                std::size_t rows, std::size_t in, std::size_t group,
                                const char* name) {
  const bool awq = layout == MHA_CHECKPOINT_AWQ;
  check_arg(m.qweight != nullptr, name, ".qweight: expected an array, got NULL");
  check_arg(m.qzeros != nullptr, name, ".qzeros: expected an array, got NULL");
  check_arg(m.scales != nullptr, name, ".scales: expected an array, got NULL");
  check_arg(in % 8 == 0, name, ": expected input features in a multiple of 8, got ", in);
  check_arg(rows % 8 == 0, name, ": expected output features in a multiple of 8, got ", rows);
  const std::size_t groups = quant_groups(in, group), len = groups == 1 ? in : group;
  DecodedWeight d;
  if (m.g_idx != nullptr) {
    check_arg(!awq, name, ".g_idx: expected NULL for an AWQ layer");
    std::vector<std::size_t> count(groups, 0);
    bool identity = true;
    for (std::size_t p = 0; p < in; ++p) {
      const std::int32_t gi = m.g_idx[p];
      check_arg(gi >= 0 && static_cast<std::size_t>(gi) < groups, name, ".g_idx[", p,
                "]: expected a group in [0, ", groups, "), got ", gi);
      ++count[static_cast<std::size_t>(gi)];
      identity = identity && static_cast<std::size_t>(gi) == p / len;
    }
    for (std::size_t g = 0; g < groups && !identity; ++g) {
      const std::size_t want = std::min(len, in - g * len);
      check_arg(count[g] == want, name, ".g_idx: group ", g, " holds ", count[g],
                " input features, expected ", want);
    }
    if (!identity) {
      // The inputs in group order, each group's in their own order.
      std::vector<std::size_t> next(groups);
      for (std::size_t g = 0; g < groups; ++g) next[g] = g * len;
      d.perm.resize(in);
      for (std::size_t p = 0; p < in; ++p) {
        d.perm[next[static_cast<std::size_t>(m.g_idx[p])]++] = static_cast<std::uint32_t>(p);
      }
    }
  }
  d.codes.resize(checked_mul(rows, in, name));
  d.scales.resize(checked_mul(rows, groups, name));
  d.zeros.resize(d.scales.size());
  for (std::size_t g = 0; g < groups; ++g) {
    for (std::size_t j = 0; j < rows; ++j) {
      const float scale = fp16_to_float(m.scales[g * rows + j]);
      check_arg(std::isfinite(scale), name, ".scales[", g, "][", j,
                "]: expected a finite scale, got ", scale);
      const std::int32_t word = m.qzeros[g * (rows / 8) + j / 8];
      const int z = nibble(word, awq ? kAwqNibble[j % 8] : static_cast<unsigned>(j % 8));
      d.scales[j * groups + g] = scale;
      d.zeros[j * groups + g] = static_cast<float>(layout == MHA_CHECKPOINT_GPTQ ? z + 1 : z);
    }
  }
  for (std::size_t q = 0; q < in; ++q) {
    const std::size_t p = d.perm.empty() ? q : d.perm[q];
    for (std::size_t j = 0; j < rows; ++j) {
      const int code = awq ? nibble(m.qweight[p * (rows / 8) + j / 8], kAwqNibble[j % 8])
                           : nibble(m.qweight[p / 8 * rows + j], static_cast<unsigned>(p % 8));
      d.codes[j * in + q] = static_cast<std::int8_t>(code);
    }
  }
  return d;
}

}  // namespace mha::detail
