// The strided row copy behind split/merge heads, written once against a lane
// policy (softmax/lanes.hpp) and instantiated per ISA in reshape_<isa>.cpp.
#pragma once

#include <cstddef>

#include "reshape/kernels.hpp"
#include "softmax/lanes.hpp"

namespace mha::detail {
namespace {

template <class L>
struct ReshapeImpl {
  static constexpr std::size_t W = L::width;

  static void copy_rows(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                        std::size_t rows, std::size_t cols) {
    for (std::size_t r = 0; r < rows; ++r) {
      const float* s = src + r * src_ld;
      float* d = dst + r * dst_ld;
      std::size_t j = 0;
      // Four vectors per step: a head row of 64 floats is one step on AVX-512.
      for (; j + 4 * W <= cols; j += 4 * W) {
        const auto a = L::load(s + j), b = L::load(s + j + W), c = L::load(s + j + 2 * W),
                   e = L::load(s + j + 3 * W);
        L::store(d + j, a);
        L::store(d + j + W, b);
        L::store(d + j + 2 * W, c);
        L::store(d + j + 3 * W, e);
      }
      for (; j + W <= cols; j += W) L::store(d + j, L::load(s + j));
      for (; j < cols; ++j) d[j] = s[j];
    }
  }

  static constexpr ReshapeKernels table() { return ReshapeKernels{&copy_rows}; }
};

}  // namespace
}  // namespace mha::detail
