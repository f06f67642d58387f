// AVX-512 SGEMM kernels (xsimd::avx512f, FMA through _mm512_fmadd_ps).
//
// 14 x 32 register tile: 28 zmm accumulators + 2 for the B row + 1 broadcast
// of the 32 registers. Per k step: 28 FMAs (14 cycles at 2 FMA/cycle) against
// 2 vector loads and 14 broadcasts, so neither the load ports nor the FMA
// latency (4 cycles x 2 pipes = 8 chains needed, 28 available) limit it.
// NR = 32 divides head_dim 64, the attention case.
// Cache blocks (Zen5: 48 KiB L1d, 1 MiB L2): a B strip of KC x NR = 256 x 32
// floats (32 KiB) stays in L1 while the MC x KC = 336 x 256 A block (336 KiB)
// streams from L2.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_avx512 =
    gemm_ukernel::make_kernels<xsimd::avx512f, 14, 2>(336, 256, 4096);

}  // namespace mha::detail
