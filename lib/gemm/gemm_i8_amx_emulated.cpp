// amx_emulated: the AMX-INT8 kernel set (i8_amx.hpp) over software tiles
// (amx_emulated.hpp), tdpbusd modelled element by element, on any CPU.
// Not dispatched to (it runs at scalar speed): gemm_i8_kernel_sets lists it,
// so the tests hold the AMX path to the scalar set's bits everywhere.
#include <cstdint>
#include <cstring>

#include "gemm/amx_emulated.hpp"
#include "gemm/gemm_i8.hpp"
#include "gemm/i8_amx.hpp"

namespace mha::detail {
namespace {

struct Backend : amx::EmulatedTiles {
  // C(i, j) += the sum over p of A(i, p) (unsigned) times B(p / 4, 4j + p % 4)
  // (signed), for A's colsb bytes, in uint32 (int32 that wraps).
  template <int kC, int kA, int kB>
  static void dp() {
    amx::SoftTiles& t = amx::soft_tiles();
    const std::size_t rows = t.config.rows[kA], cols = t.config.colsb[kB] / 4;
    const std::size_t bytes = t.config.colsb[kA];
    // B by k, each k's columns side by side, so the inner loop runs along C's row.
    std::int32_t b[64][16];
    for (std::size_t p = 0; p < bytes; ++p) {
      for (std::size_t j = 0; j < cols; ++j) {
        b[p][j] = static_cast<std::int8_t>(t.data[kB][p / 4 * amx::kTileBytes + 4 * j + p % 4]);
      }
    }
    for (std::size_t i = 0; i < rows; ++i) {
      std::uint32_t c[16];
      std::memcpy(c, t.data[kC] + i * amx::kTileBytes, sizeof c);
      const unsigned char* a = t.data[kA] + i * amx::kTileBytes;
      for (std::size_t p = 0; p < bytes; ++p) {
        const std::int32_t x = a[p];
        for (std::size_t j = 0; j < cols; ++j) c[j] += static_cast<std::uint32_t>(x * b[p][j]);
      }
      std::memcpy(t.data[kC] + i * amx::kTileBytes, c, sizeof c);
    }
  }
};

void quantize(std::size_t k, const float* a, void* codes, float* scale) {
  quantize_i8_scalar_offset(k, a, static_cast<int>(i8_amx::kAOffset), codes, scale);
}

}  // namespace

const GemmI8Kernels gemm_i8_kernels_amx_emulated = {"amx_emulated",
                                                    i8_amx::kMR,
                                                    i8_amx::kNR,
                                                    4,
                                                    1,
                                                    static_cast<int>(i8_amx::kAOffset),
                                                    &i8_amx::ukernel<Backend>,
                                                    &quantize,
                                                    &i8_amx::ukernel_groups<Backend>};

}  // namespace mha::detail
