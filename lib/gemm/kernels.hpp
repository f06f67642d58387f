// Per-ISA SGEMM kernel table. Contract of the packed layouts and micro-kernel
// is documented in lib/gemm/ukernel.hpp.
#pragma once

#include <cstddef>

namespace mha::detail {

struct GemmKernels {
  std::size_t mr, nr;      // register tile of the micro-kernel (C block mr x nr)
  std::size_t mc, kc, nc;  // cache blocks: A block mc x kc (L2), B panel kc x nc (L3)
  // C[m x n] = alpha * A·B + beta * C, for m <= mr, n <= nr, k >= 1.
  // a: packed A strip [k][mr]; b: packed B strip [k][nr]; beta == 0: C not read.
  void (*ukernel)(std::size_t k, const float* a, const float* b, float* c, std::size_t ldc,
                  std::size_t m, std::size_t n, float alpha, float beta);
  // Packs op(A) [m x k] (m <= mr*strips) into strips of mr rows: strip s at
  // dst + s*k*mr, laid out [k][mr], rows past m zero.
  void (*pack_a)(bool trans, std::size_t m, std::size_t k, const float* a, std::size_t lda,
                 float* dst);
  // Packs op(B) [k x n] into strips of nr columns: strip s at dst + s*strip_stride,
  // laid out [k][nr], columns past n zero. strip_stride >= k*nr.
  void (*pack_b)(bool trans, std::size_t k, std::size_t n, const float* b, std::size_t ldb,
                 float* dst, std::size_t strip_stride);
};

extern const GemmKernels gemm_kernels_scalar;
extern const GemmKernels gemm_kernels_avx2;
extern const GemmKernels gemm_kernels_avx512;
extern const GemmKernels gemm_kernels_neon;

}  // namespace mha::detail
