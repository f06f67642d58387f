// AVX2 SGEMM kernels (xsimd::fma3<xsimd::avx2>, native FMA).
//
// 6 x 16 register tile (the BLIS haswell tile): 12 ymm accumulators + 2 for
// the B row + 1 broadcast of the 16 registers; 12 independent FMA chains cover
// 2 pipes x 4 cycles of latency.
// Cache blocks: B strip KC x NR = 256 x 16 floats (16 KiB) in L1, A block
// MC x KC = 168 x 256 (168 KiB) in L2.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_avx2 =
    gemm_ukernel::make_kernels<xsimd::fma3<xsimd::avx2>, 6, 2>(168, 256, 4096);

}  // namespace mha::detail
