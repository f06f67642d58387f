// NEON SGEMM kernels (xsimd::neon64, fmla).
//
// 8 x 12 register tile (the BLIS cortex-a57 tile): 24 q-register accumulators
// + 3 for the B row + 1 broadcast of the 32 registers.
// Cache blocks: B strip KC x NR = 256 x 12 floats (12 KiB) in L1, A block
// MC x KC = 128 x 256 (128 KiB) in L2. NC is a multiple of 12.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_neon =
    gemm_ukernel::make_kernels<xsimd::neon64, 8, 3>(128, 256, 4092);

}  // namespace mha::detail
