// AVX-512 SGEMM kernels (xsimd::avx512f, FMA through _mm512_fmadd_ps).
//
// Packed tile 14 x 32: 28 zmm accumulators + 2 for the B row + 1 broadcast
// of the 32 registers. Per k step: 28 FMAs (14 cycles at 2 FMA/cycle)
// against 2 vector loads and 14 broadcasts; 28 independent chains cover the
// FMA latency. In-cache macro-kernel runs (336 x 768 x 256) reach the
// measured FMA-loop peak with 14x32, 7x64, 6x64 and 8x48 alike; 14x32 keeps
// NR small (32 divides head_dim 64; less padding at the N edge).
// Unpacked tile 6 x 64 (the small path): N = 64 (P·V at head_dim 64) is one
// strip, so each A element is broadcast once and only 6 row streams of A are
// read in place. 24 accumulators + 4 B vectors + 1 broadcast = 29 zmm; 7 x 64
// needs 33, and GCC kept one accumulator on the stack (a load-FMA-store chain
// per k step): pv_s512 at 1 thread went from 86 % to 97 % of peak with 6 x 64
// (Zen5), and from 0.79x to 1.0x packing's rate on pv_s2048.
// Cache blocks (48 KiB L1d, 1-2 MiB L2): the KC x MR = 256 x 14 A strip
// (14 KiB) stays in L1, the KC x NC = 256 x 768 B panel (768 KiB) in L2.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_avx512 =
    gemm_ukernel::make_kernels<xsimd::avx512f, 14, 2, 6, 4>(336, 256, 768);

}  // namespace mha::detail
