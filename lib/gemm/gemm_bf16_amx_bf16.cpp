// amx_bf16: the AMX kernel set (bf16_amx.hpp) on the hardware's tiles.
//
// A loop of tdpbf16ps into four accumulator tiles runs at 937 GFLOP/s per
// core on an Emerald Rapids Xeon, against 79-83 for vdpbf16ps and 153-176
// for fp32 FMA there (FACTS.md).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm/amx_native.hpp"
#include "gemm/bf16_amx.hpp"
#include "gemm/bf16_amx_rows_avx512.hpp"
#include "gemm/bf16_pack_avx512.hpp"
#include "gemm/bf16_round_avx512.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace gemm_bf16_amx_bf16 {
namespace {

struct amx_bf16_tag {};

struct Backend : amx::NativeTiles {
  template <int kC, int kA, int kB>
  static void dp() {
    if constexpr (kC == 0 && kA == 4 && kB == 6) {
      _tile_dpbf16ps(0, 4, 6);
    } else if constexpr (kC == 1 && kA == 4 && kB == 7) {
      _tile_dpbf16ps(1, 4, 7);
    } else if constexpr (kC == 2 && kA == 5 && kB == 6) {
      _tile_dpbf16ps(2, 5, 6);
    } else {
      static_assert(kC == 3 && kA == 5 && kB == 7);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  static void finish(const float* acc, std::size_t lda, float* c, std::size_t ldc, std::size_t m,
                     std::size_t n, float alpha, float beta) {
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    for (std::size_t i = 0; i < m; ++i) {
      for (std::size_t j = 0; j < n; j += 16) {
        const std::size_t lanes = n - j < 16 ? n - j : 16;
        const auto mask = static_cast<__mmask16>((1u << lanes) - 1u);
        float* p = c + i * ldc + j;
        __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, acc + i * lda + j), va);
        if (beta != 0.f) x = _mm512_add_ps(x, _mm512_mul_ps(vb, _mm512_maskz_loadu_ps(mask, p)));
        _mm512_mask_storeu_ps(p, mask, x);
      }
    }
  }
};

// A quarter of an fp32 flop's time: the tiles' GEMM ran sq1024 at 5.1-5.4x
// sgemm's rate (2-core AMX Xeon, 1 thread), and split by fp32 flops the
// projections of a tiny forward (E 256, 4 heads, s32) took a second thread
// for a few us of work: 0.063-0.069 ms at 2 threads, 0.032-0.034 at 1.
constexpr double kFlopTime = 0.25;

// One row on the vector unit (bf16_amx_rows_avx512.hpp), more on the tiles.
void panel_rows(std::size_t kp, const std::uint32_t* a, std::size_t lda, const std::uint16_t* b,
                std::size_t b_strip, float* c, std::size_t ldc, std::size_t m, std::size_t n,
                float alpha, float beta, const Bf16Epilogue* ep) {
  if (m == 1) {
    bf16_amx_rows::row<Backend>(kp, a, 1, b, b_strip, c, n, alpha, beta, ep);
    return;
  }
  bf16_amx::panel_rows<Backend>(kp, a, lda, b, b_strip, c, ldc, m, n, alpha, beta, ep);
}

void ukernel_row1(std::size_t kp, const std::uint32_t* a, std::size_t as, const std::uint16_t* b,
                  std::size_t b_strip, float* c, std::size_t n, float alpha, float beta) {
  bf16_amx_rows::row<Backend>(kp, a, as, b, b_strip, c, n, alpha, beta, nullptr);
}

constexpr GemmBf16Kernels table() {
  GemmBf16Kernels g = bf16_amx::kernels<Backend, amx_bf16_tag>(
      "amx_bf16", &bf16_round_avx512::round_rows<amx_bf16_tag>,
      &bf16_pack_avx512::pack_b<amx_bf16_tag, bf16_amx::kNR>, kFlopTime);
  g.panel_rows = &panel_rows;
  g.ukernel_row1 = &ukernel_row1;
  return g;
}

}  // namespace
}  // namespace gemm_bf16_amx_bf16

const GemmBf16Kernels gemm_bf16_kernels_amx_bf16 = gemm_bf16_amx_bf16::table();

}  // namespace mha::detail
