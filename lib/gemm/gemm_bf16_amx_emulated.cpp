// amx_emulated: the AMX kernel set (bf16_amx.hpp) over software tiles
// (amx_emulated.hpp), tdpbf16ps emulated_tdpbf16ps per element.
#include <cstring>

#include "gemm/amx_emulated.hpp"
#include "gemm/bf16_amx.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_amx_emulated {
namespace {

struct amx_emulated_tag {};

struct Backend : amx::EmulatedTiles {
  // C[m][n] = tdpbf16ps over A's colsb / 4 pairs of row m and B's column n
  // (B row p holds pair p of every column).
  template <int kC, int kA, int kB>
  static void dp() {
    amx::SoftTiles& t = amx::soft_tiles();
    const std::size_t rows = t.config.rows[kA], cols = t.config.colsb[kB] / 4;
    const std::size_t pairs = t.config.colsb[kA] / 4;
    std::uint16_t b[16 * 32];
    std::memcpy(b, t.data[kB], sizeof b);
    for (std::size_t i = 0; i < rows; ++i) {
      std::uint32_t a[16];
      std::memcpy(a, t.data[kA] + i * 64, sizeof a);
      for (std::size_t j = 0; j < cols; ++j) {
        float c;
        std::memcpy(&c, t.data[kC] + i * 64 + j * 4, sizeof c);
        c = emulated_tdpbf16ps(c, pairs, a, 1, b + 2 * j, 16);
        std::memcpy(t.data[kC] + i * 64 + j * 4, &c, sizeof c);
      }
    }
  }
  static void finish(const float* acc, std::size_t lda, float* c, std::size_t ldc, std::size_t m,
                     std::size_t n, float alpha, float beta) {
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; ++j) {
        const float r = alpha * acc[i * lda + j];
        float& cij = c[i * ldc + j];
        cij = beta == 0.f ? r : r + beta * cij;
      }
    }
  }
};

}  // namespace
}  // namespace gemm_bf16_amx_emulated

const GemmBf16Kernels gemm_bf16_kernels_amx_emulated =
    bf16_amx::kernels<gemm_bf16_amx_emulated::Backend, gemm_bf16_amx_emulated::amx_emulated_tag>(
        "amx_emulated", &emulated_round_rows,
        &bf16_pack::pack_b<gemm_bf16_amx_emulated::amx_emulated_tag, bf16_amx::kNR>, 1.0);

}  // namespace mha::detail
