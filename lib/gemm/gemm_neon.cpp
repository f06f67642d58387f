// NEON SGEMM kernels (xsimd::neon64, fmla).
//
// 8 x 12 register tile (the BLIS cortex-a57 tile), packed and unpacked:
// 24 q-register accumulators + 3 for the B row + 1 broadcast of the 32
// registers. Not tuned on hardware (only run under qemu here).
// Cache blocks: A strip KC x MR = 256 x 8 floats (8 KiB) in L1, B panel
// KC x NC = 256 x 768 (768 KiB) in L2. NC is a multiple of 12.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_neon =
    gemm_ukernel::make_kernels<xsimd::neon64, 8, 3, 8, 3>(128, 256, 768);

}  // namespace mha::detail
