// The per-ISA reshape kernel table (lib/reshape/kernels.hpp) on the ISA MHA_ISA
// selects: exact copies, nothing written outside the destination rows.
#include <catch2/catch.hpp>
#include <vector>

#include "dispatch/dispatch.hpp"
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
