// amx_int8: the AMX-INT8 kernel set (i8_amx.hpp) on the hardware's tiles.
// Its operands are the avx512_vnni set's, which quantizes its rows and
// takes its blocks of few rows: a tile product costs as much for one row
// as for 16, where vpdpbusd pays per row (the bf16 set found one row
// faster on the vector unit, bf16_amx_rows_avx512.hpp; for int8 the
// threshold is estimated from the instructions' rates, not measured).
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "gemm/amx_native.hpp"
#include "gemm/gemm_i8.hpp"
#include "gemm/i8_amx.hpp"

namespace mha::detail {
namespace {

struct Backend : amx::NativeTiles {
  template <int kC, int kA, int kB>
  static void dp() {
    if constexpr (kC == 0 && kA == 4 && kB == 6) {
      _tile_dpbusd(0, 4, 6);
    } else if constexpr (kC == 1 && kA == 4 && kB == 7) {
      _tile_dpbusd(1, 4, 7);
    } else if constexpr (kC == 2 && kA == 5 && kB == 6) {
      _tile_dpbusd(2, 5, 6);
    } else {
      static_assert(kC == 3 && kA == 5 && kB == 7);
      _tile_dpbusd(3, 5, 7);
    }
  }
};

// Rows per block that go to vpdpbusd: a 16-row tdpbusd (16 cycles' issue
// for 16 x 16 x 64 multiply-adds) yields 64 a cycle per row it holds, which
// vpdpbusd matches at one or two rows (64 a cycle per port).
constexpr std::size_t kVectorRows = 2;

void ukernel(std::size_t kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
             const std::int32_t* start, const float* sa, const float* sb, const float* bias,
             float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  if (m <= kVectorRows) {
    gemm_i8_kernels_avx512_vnni.ukernel(kq, a, lda, b, start, sa, sb, bias, c, ldc, m, n);
    return;
  }
  i8_amx::ukernel<Backend>(kq, a, lda, b, start, sa, sb, bias, c, ldc, m, n);
}

void ukernel_groups(const I8Strip& b, const std::uint8_t* a, std::size_t lda, const float* sa,
                    const float* bias, float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  if (m <= kVectorRows) {
    gemm_i8_kernels_avx512_vnni.ukernel_groups(b, a, lda, sa, bias, c, ldc, m, n);
    return;
  }
  i8_amx::ukernel_groups<Backend>(b, a, lda, sa, bias, c, ldc, m, n);
}

void quantize(std::size_t k, const float* a, void* codes, float* scale) {
  gemm_i8_kernels_avx512_vnni.quantize(k, a, codes, scale);
}

}  // namespace

const GemmI8Kernels gemm_i8_kernels_amx_int8 = {
    "amx_int8", i8_amx::kMR, i8_amx::kNR,    4, 1, static_cast<int>(i8_amx::kAOffset),
    &ukernel,   &quantize,   &ukernel_groups};

}  // namespace mha::detail
