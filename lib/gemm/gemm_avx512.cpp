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
// Cache blocks: KC = 1024, against the 256 that keeps the 14-row A strip
// in L1: the strip streams from L2 well, and each K block costs every
// micro-kernel call its epilogue and a round trip of its C tile. Prepacked B,
// 1 thread, Zen5, GFLOP/s at KC 256 / 768 / 1024: m256 n12288 k4096 (GPT-3
// projection, weights from memory) 221 / 232 / 233, m512 n2304 k768 243 /
// 250 / 251, m4096 n2304 k768 230 / 241 / 243 (AVX2 shows no difference).
// The B panel (KC x NC = 3 MiB) is read from L3; the paths that must keep B
// in L2 block N instead (gemm.cpp, kL2BlockFloats), which leaves the
// arithmetic alone. Those are the blocks for Zen5's 1 MiB L2. An L2 of 2 MiB
// or more keeps KC x NC = 512 x (half the L2) panels in L2 instead
// (fit_to_caches, gemm.cpp: sq2048 146 -> 195 GFLOP/s on a 2 MiB-L2 Xeon);
// KC 512 against 384 there, at the same panel size: P·V at S = 2048 (k 2048,
// read in place, a pass over C per K block) 168 vs 165, Q·Kᵀ 200 vs 188,
// sq1024 205 vs 202.
#include "gemm/ukernel.hpp"

namespace mha::detail {

const GemmKernels gemm_kernels_avx512 =
    gemm_ukernel::make_kernels<xsimd::avx512f, 14, 2, 6, 4>(336, 1024, 768, 512);

}  // namespace mha::detail
