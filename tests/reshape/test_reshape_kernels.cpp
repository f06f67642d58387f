// The per-ISA reshape kernel table (lib/reshape/kernels.hpp) on the ISA MHA_ISA
// selects: exact copies and the projections' epilogue, nothing written
// outside the destination rows.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "dispatch/dispatch.hpp"
#include "gemm/gemm_bf16.hpp"
#include "reshape/kernels.hpp"
#include "support/reference.hpp"

TEST_CASE("copy_rows and copy_rows_stream copy exactly and stay inside the rows", "[reshape]") {
  const auto& k = mha::detail::reshape_kernels(mha::current_isa());
  for (auto copy : {k.copy_rows, k.copy_rows_stream})
    for (std::size_t cols :
         {1, 2, 3, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 80, 96, 128, 129, 257}) {
      for (std::size_t rows : {1, 2, 5}) {
        const std::size_t src_ld = cols + 3, dst_ld = cols + 5;
        const auto src = mha::test::random_vector(rows * src_ld, cols * 10 + rows);
        std::vector<float> dst(rows * dst_ld, -7.f);
        // dst_ld = cols + 5 puts rows at every alignment.
        copy(src.data(), src_ld, dst.data(), dst_ld, rows, cols);
        k.stream_fence();
        INFO("rows=" << rows << " cols=" << cols);
        for (std::size_t r = 0; r < rows; ++r) {
          for (std::size_t j = 0; j < dst_ld; ++j) {
            const float want = j < cols ? src[r * src_ld + j] : -7.f;
            if (dst[r * dst_ld + j] != want) FAIL("row " << r << " col " << j);
          }
        }
      }
    }
}

TEST_CASE("bias_round_rows adds the bias and rounds as fp32_to_bf16, inside the rows",
          "[reshape]") {
  const auto& k = mha::detail::reshape_kernels(mha::current_isa());
  constexpr float kInf = std::numeric_limits<float>::infinity();
  // Values that exercise the rounding: ties (both parities), their
  // neighbours, denormals, NaNs with payloads, infinities, and the largest
  // floats (which round up to infinity).
  std::vector<std::uint32_t> special = {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F807FFFu,
                                        0x00000001u, 0x807FFFFFu, 0x00018000u, 0x7FC00001u,
                                        0xFF812345u, 0x7F800001u, 0x7F7FFFFFu, 0xFF7FFFFFu,
                                        0x7F7F8000u, 0x80000000u, 0x00000000u};
  for (std::size_t cols : {1, 2, 7, 15, 16, 17, 31, 33, 64, 65, 129}) {
    for (std::size_t rows : {1, 3}) {
      const std::size_t ld = cols + 3;
      auto x = mha::test::random_vector(rows * ld, cols * 7 + rows, -4.f, 4.f);
      for (std::size_t i = 0; i < special.size() && i < cols; ++i) {
        std::memcpy(&x[(i * 5) % cols], &special[i], sizeof(float));
      }
      x[cols / 2] = -kInf;
      const auto bias = mha::test::random_vector(cols, cols + 1, -1.f, 1.f);
      for (const bool with_bias : {false, true}) {
        for (const bool round : {false, true}) {
          std::vector<float> y = x;
          k.bias_round_rows(with_bias ? bias.data() : nullptr, y.data(), ld, rows, cols, round);
          INFO("rows=" << rows << " cols=" << cols << " bias=" << with_bias << " round=" << round);
          std::size_t wrong = 0;
          for (std::size_t r = 0; r < rows; ++r) {
            for (std::size_t j = 0; j < ld; ++j) {
              float want = x[r * ld + j];
              if (j < cols) {
                if (with_bias) want += bias[j];
                if (round) {
                  std::uint16_t b;
                  mha::detail::fp32_to_bf16(1, &want, &b);
                  mha::detail::bf16_to_fp32(1, &b, &want);
                }
              }
              std::uint32_t got_bits, want_bits;
              std::memcpy(&got_bits, &y[r * ld + j], sizeof got_bits);
              std::memcpy(&want_bits, &want, sizeof want_bits);
              wrong += got_bits != want_bits;
            }
          }
          CHECK(wrong == 0);
        }
      }
    }
  }
}

// Every block edge of the AVX-512 form (8 x 8 units) and past it, odd
// strides, and elements outside the units untouched.
TEST_CASE("transpose_pairs moves each unit across, its middle elements swapped", "[reshape]") {
  const auto& k = mha::detail::reshape_kernels(mha::current_isa());
  for (std::size_t rows : {1, 3, 8, 9, 16, 17})
    for (std::size_t cols : {1, 5, 8, 12, 16, 21}) {
      const std::size_t src_ld = 4 * cols + 3, dst_ld = 4 * rows + 5;
      std::vector<std::uint16_t> src(rows * src_ld), dst(cols * dst_ld, 0xbeef);
      for (std::size_t e = 0; e < src.size(); ++e) src[e] = static_cast<std::uint16_t>(e * 7 + 1);
      k.transpose_pairs(src.data(), src_ld, dst.data(), dst_ld, rows, cols);
      INFO("rows " << rows << " cols " << cols);
      for (std::size_t u = 0; u < cols; ++u) {
        for (std::size_t j = 0; j < dst_ld; ++j) {
          std::uint16_t want = 0xbeef;
          if (j < 4 * rows) {
            const std::size_t i = j / 4, w = j % 4;
            want = src[i * src_ld + 4 * u + (w == 1 ? 2 : w == 2 ? 1 : w)];
          }
          if (dst[u * dst_ld + j] != want) FAIL("unit row " << u << " element " << j);
        }
      }
    }
}
