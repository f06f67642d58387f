// The tile configuration every AMX kernel set of the library loads (the
// bf16 set, bf16_amx.hpp, and the int8 set, i8_amx.hpp): eight tiles of 16
// rows of 64 bytes. One configuration for both, so that a thread's tiles,
// configured by either, serve the other without a reload.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mha::detail::amx {

constexpr std::size_t kTileRows = 16, kTileBytes = 64;

// Palette 1's 64-byte configuration (Intel SDM, LDTILECFG).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

constexpr TileConfig kConfig = [] {
  TileConfig t;
  for (int i = 0; i < 8; ++i) {
    t.colsb[i] = kTileBytes;
    t.rows[i] = kTileRows;
  }
  return t;
}();

}  // namespace mha::detail::amx
