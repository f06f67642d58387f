// AVX2 SGEMM kernels (xsimd::fma3<xsimd::avx2>, native FMA).
//
// Packed tile 4 x 24: 12 ymm accumulators + 3 for the B row + 1 broadcast
// fill the 16 registers; per k step 12 FMAs against 3 loads + 4 broadcasts.
// In-cache macro-kernel (168 x 768 x 256, 1 thread, max of 4 rounds):
// 85-87 GFLOP/s against 77-82 for the BLIS haswell tile 6 x 16 (8 loads per
// 12 FMAs), with an AVX2 FMA peak of about 90 on the test machine.
// Unpacked tile 6 x 16 (the small path): 16 divides head_dim 64, so P·V
// needs no partial strip.
// Cache blocks: A strip KC x MR = 256 x 4 floats in L1, B panel KC x NC =
// 256 x 768 (768 KiB) in L2.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_avx2 =
    gemm_ukernel::make_kernels<xsimd::fma3<xsimd::avx2>, 4, 3, 6, 2>(168, 256, 768);

}  // namespace mha::detail
