// Peak loop for AMX-BF16: tdpbf16ps into four accumulator tiles from
// operand tiles that stay resident (nothing loaded in the loop), the rate
// the tiles compute at and the ceiling of the amx_bf16 kernel set (3359
// GFLOP/s on one core of the 2-core Xeon; FACTS.md). Each instruction is
// 16 x 16 outputs over 32 bf16 products. Run only where the library picked
// amx_bf16, which has been granted the tile state for this process.
#include <immintrin.h>

#include <cstdint>

#include "gemm/bf16_amx.hpp"
#include "peak.hpp"

namespace mha::bench::detail::amx_bf16 {

double tdpbf16_loop(std::uint64_t iterations, float* sink) {
  // The kernel set's configuration: tiles 0-7 of 16 rows x 64 bytes.
  _tile_loadconfig(&mha::detail::bf16_amx::kConfig);
  // 2^-10 in every bf16: products of 2^-20 stay far from overflow and
  // from the denormals the tiles flush.
  alignas(64) std::uint16_t ones[16 * 32];
  for (auto& x : ones) x = 0x3a80;
  alignas(64) float acc[16 * 16] = {};
  _tile_loadd(4, ones, 64);
  _tile_loadd(5, ones, 64);
  _tile_loadd(6, ones, 64);
  _tile_loadd(7, ones, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (std::uint64_t i = 0; i < iterations; ++i) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  float sum = 0.0f;
  const auto add = [&] {
    for (float x : acc) sum += x;
  };
  _tile_stored(0, acc, 64);
  add();
  _tile_stored(1, acc, 64);
  add();
  _tile_stored(2, acc, 64);
  add();
  _tile_stored(3, acc, 64);
  add();
  _tile_release();
  *sink = sum;
  return 2.0 * 16 * 16 * 32 * 4 * static_cast<double>(iterations);
}

}  // namespace mha::bench::detail::amx_bf16
