// The strided row copy behind split/merge heads and the bf16 projections'
// epilogue, written once against the lane layer (simd/lanes.hpp) and
// instantiated per ISA in reshape_<isa>.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "reshape/kernels.hpp"
#include "simd/lanes.hpp"

namespace mha::detail {
namespace {

template <class L>
struct ReshapeImpl {
  static constexpr std::size_t W = L::width;

  template <bool nontemporal>
  static void copy_rows_impl(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                             std::size_t rows, std::size_t cols) {
    for (std::size_t r = 0; r < rows; ++r) {
      const float* s = src + r * src_ld;
      float* d = dst + r * dst_ld;
      std::size_t j = 0;
      auto put = [](float* p, const typename L::V& v) {
        if constexpr (nontemporal) {
          L::stream(p, v);
        } else {
          L::store(p, v);
        }
      };
      if constexpr (nontemporal) {
        // Plain stores up to the first vector-aligned destination address.
        while (j < cols && reinterpret_cast<std::uintptr_t>(d + j) % (W * sizeof(float)) != 0) {
          d[j] = s[j];
          ++j;
        }
      }
      // Four vectors per step: a head row of 64 floats is one step on AVX-512.
      for (; j + 4 * W <= cols; j += 4 * W) {
        const auto a = L::load(s + j), b = L::load(s + j + W), c = L::load(s + j + 2 * W),
                   e = L::load(s + j + 3 * W);
        put(d + j, a);
        put(d + j + W, b);
        put(d + j + 2 * W, c);
        put(d + j + 3 * W, e);
      }
      for (; j + W <= cols; j += W) put(d + j, L::load(s + j));
      for (; j < cols; ++j) d[j] = s[j];
    }
  }

  static void copy_rows(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                        std::size_t rows, std::size_t cols) {
    copy_rows_impl<false>(src, src_ld, dst, dst_ld, rows, cols);
  }
  static void copy_rows_stream(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                               std::size_t rows, std::size_t cols) {
    copy_rows_impl<L::has_stream()>(src, src_ld, dst, dst_ld, rows, cols);
  }

  template <bool kBias, bool kRound>
  static void bias_round_impl(const float* bias, float* x, std::size_t ld, std::size_t rows,
                              std::size_t cols) {
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = x + r * ld;
      for (std::size_t j = 0; j < cols; j += W) {
        const std::size_t lanes = cols - j < W ? cols - j : W;
        auto v = L::load_n(row + j, lanes);
        if constexpr (kBias) v = v + L::load_n(bias + j, lanes);
        if constexpr (kRound) v = L::round_bf16(v);
        L::store_n(row + j, v, lanes);
      }
    }
  }
  static void bias_round_rows(const float* bias, float* x, std::size_t ld, std::size_t rows,
                              std::size_t cols, bool round) {
    if (bias != nullptr && round) return bias_round_impl<true, true>(bias, x, ld, rows, cols);
    if (bias != nullptr) return bias_round_impl<true, false>(bias, x, ld, rows, cols);
    if (round) bias_round_impl<false, true>(bias, x, ld, rows, cols);
  }

  // Element moves, which the compiler vectorizes as it can; AVX-512 has its
  // own (reshape_avx512.cpp).
  static void transpose_pairs(const std::uint16_t* src, std::size_t src_ld, std::uint16_t* dst,
                              std::size_t dst_ld, std::size_t rows, std::size_t cols) {
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t u = 0; u < cols; ++u) {
        const std::uint16_t* x = src + i * src_ld + 4 * u;
        std::uint16_t* y = dst + u * dst_ld + 4 * i;
        y[0] = x[0];
        y[1] = x[2];
        y[2] = x[1];
        y[3] = x[3];
      }
    }
  }

  static constexpr ReshapeKernels table() {
    return ReshapeKernels{&copy_rows, &copy_rows_stream, &L::stream_fence, &bias_round_rows,
                          &transpose_pairs};
  }
};

}  // namespace
}  // namespace mha::detail
