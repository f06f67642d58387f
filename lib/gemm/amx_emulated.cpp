// The software tiles' per-thread state (amx_emulated.hpp).
#include "gemm/amx_emulated.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace amx {
namespace {

thread_local SoftTiles tiles;
std::atomic<unsigned> generation{1};

bool is_configured() {
  return tiles.generation == generation.load(std::memory_order_relaxed);
}

}  // namespace

SoftTiles& soft_tiles() {
  if (!is_configured()) {
    std::fputs("mha: amx_emulated: a tile instruction before the thread's tile configuration\n",
               stderr);
    std::abort();
  }
  return tiles;
}

void soft_configure(const TileConfig& c) {
  if (is_configured() && std::memcmp(&tiles.config, &c, sizeof c) == 0) return;
  tiles.config = c;
  tiles.generation = generation.load(std::memory_order_relaxed);
}

}  // namespace amx

void amx_emulated_forget_tiles() noexcept {
  amx::generation.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace mha::detail
