// The grouped int8 kernels' arithmetic (gemm_i8.hpp, I8Strip) in plain C++:
// the scalar set's, which is every set's emulation, and the grouped kernel of
// the sets that have no vector one, instantiated with their layout.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "gemm/gemm_i8.hpp"

namespace mha::detail {

// NR, KG: the set's strip width and k_group; ABYTES, AOFF: its activation
// codes' bytes and offset (gemm_i8.hpp).
template <std::size_t NR, std::size_t KG, std::size_t ABYTES, int AOFF>
void ukernel_groups_portable(const I8Strip& b, const std::uint8_t* a, std::size_t lda,
                             const float* sa, const float* bias, float* c, std::size_t ldc,
                             std::size_t m, std::size_t n) {
  const auto a_code = [&](std::size_t i, std::size_t p) -> int {
    const std::uint8_t* row = a + i * lda;
    if constexpr (ABYTES == 2) {
      std::int16_t v;
      __builtin_memcpy(&v, row + 2 * p, 2);
      return v;
    } else if constexpr (AOFF == 128) {
      return row[p];
    } else {
      return static_cast<std::int8_t>(row[p]);
    }
  };
  const auto b_code = [&](std::size_t p, std::size_t j, std::size_t r) -> int {
    if (!b.int4) return b.codes[((4 * p + r) / KG * NR + j) * KG + (4 * p + r) % KG];
    const auto byte = static_cast<std::uint8_t>(b.codes[(p / 2 * NR + j) * 4 + r]);
    return (p % 2 != 0 ? byte >> 4 : byte & 15) - 8;
  };
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      float t = 0.0f;
      for (std::size_t g = 0, p0 = 0; p0 < b.kq; ++g, p0 += b.group_kq) {
        std::int64_t acc = b.start[g * b.stride + j];
        if (b.zeros != nullptr) {
          std::int32_t sum;
          __builtin_memcpy(&sum, a + i * lda + b.sums_at + 4 * g, 4);
          acc -= static_cast<std::int64_t>(b.zeros[g * b.stride + j]) * sum;
        }
        for (std::size_t p = p0; p < p0 + b.group_kq && p < b.kq; ++p) {
          for (std::size_t r = 0; r < 4; ++r) acc += a_code(i, 4 * p + r) * b_code(p, j, r);
        }
        t = std::fma(static_cast<float>(static_cast<std::int32_t>(acc)), b.scales[g * b.stride + j],
                     t);
      }
      const float y = t * sa[i];
      c[i * ldc + j] = bias != nullptr ? y + bias[j] : y;
    }
  }
}

// The Arm sets' grouped kernels (strips of 16, signed byte codes; k_group
// 4 and 8) and the scalar set's quantize, which they share, compiled for
// the baseline in gemm_i8.cpp so that no set's extension flags reach a copy
// another set calls.
void quantize_i8_scalar(std::size_t k, const float* a, void* codes, float* scale);
void ukernel_groups_nr16_k4(const I8Strip& b, const std::uint8_t* a, std::size_t lda,
                            const float* sa, const float* bias, float* c, std::size_t ldc,
                            std::size_t m, std::size_t n);
void ukernel_groups_nr16_k8(const I8Strip& b, const std::uint8_t* a, std::size_t lda,
                            const float* sa, const float* bias, float* c, std::size_t ldc,
                            std::size_t m, std::size_t n);

}  // namespace mha::detail
