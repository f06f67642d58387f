// amx_emulated: the AMX kernel set (bf16_amx.hpp) over software tiles. Each
// thread holds eight 1 KiB tiles and a configuration as the hardware does,
// tile loads and stores follow the configured rows and bytes (a load zeroes
// the rest of its tile), and tdpbf16ps is emulated_tdpbf16ps per element.
// A tile instruction on a thread whose tiles are unconfigured aborts, as the
// hardware faults (#UD); amx_emulated_forget_tiles unconfigures every
// thread's, so that tests see each path run thread_setup on each thread.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "gemm/bf16_amx.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_amx_emulated {
namespace {

struct amx_emulated_tag {};

struct Tiles {
  bf16_amx::TileConfig config;
  unsigned generation = 0;  // configured while it equals `generation` below
  alignas(64) unsigned char data[8][1024];
};

thread_local Tiles tiles;
std::atomic<unsigned> generation{1};

bool is_configured() {
  return tiles.generation == generation.load(std::memory_order_relaxed);
}

Tiles& configured() {
  if (!is_configured()) {
    std::fputs("mha: amx_emulated: a tile instruction before the thread's tile configuration\n",
               stderr);
    std::abort();
  }
  return tiles;
}

struct Backend {
  static void configure(const bf16_amx::TileConfig& c) {
    if (is_configured() && std::memcmp(&tiles.config, &c, sizeof c) == 0) return;
    tiles.config = c;
    tiles.generation = generation.load(std::memory_order_relaxed);
  }
  template <int kTile>
  static void zero() {
    std::memset(configured().data[kTile], 0, sizeof tiles.data[kTile]);
  }
  template <int kTile>
  static void load(const void* src, std::size_t stride) {
    Tiles& t = configured();
    std::memset(t.data[kTile], 0, sizeof t.data[kTile]);
    for (std::size_t r = 0; r < t.config.rows[kTile]; ++r) {
      std::memcpy(t.data[kTile] + r * 64, static_cast<const unsigned char*>(src) + r * stride,
                  t.config.colsb[kTile]);
    }
  }
  template <int kTile>
  static void store(void* dst, std::size_t stride) {
    Tiles& t = configured();
    for (std::size_t r = 0; r < t.config.rows[kTile]; ++r) {
      std::memcpy(static_cast<unsigned char*>(dst) + r * stride, t.data[kTile] + r * 64,
                  t.config.colsb[kTile]);
    }
  }
  // C[m][n] = tdpbf16ps over A's colsb / 4 pairs of row m and B's column n
  // (B row p holds pair p of every column).
  template <int kC, int kA, int kB>
  static void dp() {
    Tiles& t = configured();
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

void amx_emulated_forget_tiles() noexcept {
  gemm_bf16_amx_emulated::generation.fetch_add(1, std::memory_order_relaxed);
}

const GemmBf16Kernels gemm_bf16_kernels_amx_emulated =
    bf16_amx::kernels<gemm_bf16_amx_emulated::Backend, gemm_bf16_amx_emulated::amx_emulated_tag>(
        "amx_emulated", &emulated_round_rows,
        &bf16_pack::pack_b<gemm_bf16_amx_emulated::amx_emulated_tag, bf16_amx::kNR>, 1.0);

}  // namespace mha::detail
