// Software tiles for the AMX kernel templates (bf16_amx.hpp's backend
// contract), on any CPU: the amx_emulated sets of the bf16 and int8 GEMMs
// (gemm_bf16_amx_emulated.cpp, gemm_i8_amx_emulated.cpp) add their products
// to these. Each thread holds eight 1 KiB tiles and one configuration, as
// the hardware does, shared by both sets; loads and stores follow the
// configured rows and bytes (a load zeroes the rest of its tile). A tile
// instruction on a thread whose tiles are unconfigured aborts, as the
// hardware faults (#UD); amx_emulated_forget_tiles (gemm_bf16.hpp)
// unconfigures every thread's.
#pragma once

#include <cstddef>
#include <cstring>

#include "gemm/amx_tiles.hpp"

namespace mha::detail::amx {

struct SoftTiles {
  TileConfig config;
  unsigned generation = 0;  // configured while it equals the current generation
  alignas(64) unsigned char data[8][1024];
};

// The calling thread's tiles, configured (else the process aborts).
SoftTiles& soft_tiles();
void soft_configure(const TileConfig& c);

struct EmulatedTiles {
  static void configure(const TileConfig& c) { soft_configure(c); }
  template <int kTile>
  static void zero() {
    std::memset(soft_tiles().data[kTile], 0, sizeof SoftTiles::data[kTile]);
  }
  template <int kTile>
  static void load(const void* src, std::size_t stride) {
    SoftTiles& t = soft_tiles();
    std::memset(t.data[kTile], 0, sizeof t.data[kTile]);
    for (std::size_t r = 0; r < t.config.rows[kTile]; ++r) {
      std::memcpy(t.data[kTile] + r * kTileBytes,
                  static_cast<const unsigned char*>(src) + r * stride, t.config.colsb[kTile]);
    }
  }
  template <int kTile>
  static void store(void* dst, std::size_t stride) {
    SoftTiles& t = soft_tiles();
    for (std::size_t r = 0; r < t.config.rows[kTile]; ++r) {
      std::memcpy(static_cast<unsigned char*>(dst) + r * stride, t.data[kTile] + r * kTileBytes,
                  t.config.colsb[kTile]);
    }
  }
};

}  // namespace mha::detail::amx
