// Portable SGEMM kernels (plain float, unfused multiply-add): the reference
// every other ISA is tested against, and the fallback on any CPU.
//
// 4 x 4 register tile: 16 accumulators fit the 16 SSE registers of baseline
// x86-64 (which the compiler may use as scalars) without spilling.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_scalar =
    gemm_ukernel::make_kernels<simd::scalar_arch, 4, 4, 4, 4>(64, 256, 768);

}  // namespace mha::detail
