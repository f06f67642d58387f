// NEON SGEMM kernels (xsimd::neon64, fmla).
//
// 8 x 12 register tile (the BLIS cortex-a57 tile), packed and unpacked:
// 24 q-register accumulators + 3 for the B row + 2 of packed A, multiplied
// by lane (Lanes::madd_by_lane), of the 32 registers; with 8 broadcasts
// instead, GCC spilled 3 accumulators every k step (llvm-mca: 27-28 against
// 31 FLOP/cycle on Neoverse V1/V2). Not timed on hardware (only run under
// qemu here).
// Cache blocks: A strip KC x MR = 256 x 8 floats (8 KiB) in L1, B panel
// KC x NC = 256 x 768 (768 KiB) in L2. NC is a multiple of 12.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_neon =
    gemm_ukernel::make_kernels<xsimd::neon64, 8, 3, 8, 3>(128, 256, 768);

}  // namespace mha::detail
