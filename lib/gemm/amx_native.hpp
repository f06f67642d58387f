// The hardware's tile operations as the AMX kernel templates take them
// (bf16_amx.hpp's backend contract): configure, zero, load and store, for
// the objects built with AMX's flags (gemm_bf16_amx_bf16.cpp,
// gemm_i8_amx_int8.cpp), each adding its own products.
//
// GCC 12's tile intrinsics are asm statements whose tile numbers must be
// literals (MHA_TILE_SWITCH), and tileloadd's asm tells the compiler of no
// memory it reads: compiler barriers around each load keep the stores that
// fill a padded tile ahead of it, and the next fill after.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstring>

#include "gemm/amx_tiles.hpp"

#define MHA_TILE_SWITCH(t, op)   \
  if constexpr (t == 0) {        \
    op(0);                       \
  } else if constexpr (t == 1) { \
    op(1);                       \
  } else if constexpr (t == 2) { \
    op(2);                       \
  } else if constexpr (t == 3) { \
    op(3);                       \
  } else if constexpr (t == 4) { \
    op(4);                       \
  } else if constexpr (t == 5) { \
    op(5);                       \
  } else if constexpr (t == 6) { \
    op(6);                       \
  } else {                       \
    static_assert(t == 7);       \
    op(7);                       \
  }

namespace mha::detail::amx {
namespace {  // NOLINT(build/namespaces): each AMX object its own copy

inline void compiler_barrier() {
  __asm__ volatile("" ::: "memory");
}

struct NativeTiles {
  // sttilecfg shows whatever configuration the thread has (all zero
  // before any, or after another library's tilerelease): only a different
  // one is replaced.
  // (Own asm: the intrinsics' operands cover 8 of the 64 bytes.)
  static void configure(const TileConfig& c) {
    alignas(64) unsigned char now[64];
    __asm__ volatile("sttilecfg %0" : "=m"(now));
    if (std::memcmp(now, &c, sizeof now) != 0) {
      __asm__ volatile("ldtilecfg %0" ::"m"(*reinterpret_cast<const unsigned char(*)[64]>(&c)));
    }
  }
  template <int kTile>
  static void zero() {
#define MHA_TILE_ZERO(t) _tile_zero(t)
    MHA_TILE_SWITCH(kTile, MHA_TILE_ZERO)
#undef MHA_TILE_ZERO
  }
  template <int kTile>
  static void load(const void* src, std::size_t stride) {
    compiler_barrier();
#define MHA_TILE_LOAD(t) _tile_loadd(t, src, stride)
    MHA_TILE_SWITCH(kTile, MHA_TILE_LOAD)
#undef MHA_TILE_LOAD
    compiler_barrier();
  }
  template <int kTile>
  static void store(void* dst, std::size_t stride) {
#define MHA_TILE_STORE(t) _tile_stored(t, dst, stride)
    MHA_TILE_SWITCH(kTile, MHA_TILE_STORE)
#undef MHA_TILE_STORE
  }
};

}  // namespace
}  // namespace mha::detail::amx

#undef MHA_TILE_SWITCH
