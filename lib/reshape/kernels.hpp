// Per-ISA row kernels: the copy behind split/merge heads and the bf16
// projections' epilogue (reshape_kernels.hpp, tables defined in
// reshape_<isa>.cpp). Single-threaded, never allocate.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mha/isa.hpp>

namespace mha::detail {

struct ReshapeKernels {
  // dst[r*dst_ld + j] = src[r*src_ld + j] for r < rows, j < cols.
  void (*copy_rows)(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                    std::size_t rows, std::size_t cols);
  // copy_rows with non-temporal stores where the ISA has them (x86: from
  // the first vector-aligned address of each row), so a destination far
  // larger than the cache is written without first being read for
  // ownership: 2 instead of 3 bytes of traffic per byte copied. Elsewhere the
  // same as copy_rows. The stores are weakly ordered: the thread that made
  // them calls stream_fence() once after its last one, before the data is
  // read elsewhere. (A fence per call, one per token in split_heads' streamed
  // order, made that 2.2 ms against memcpy's 1.0 ms at B4 S2048 H12 d64.)
  void (*copy_rows_stream)(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                           std::size_t rows, std::size_t cols);
  void (*stream_fence)();
  // x[r*ld + j] += bias[j] (bias may be null; one fp32 addition), then with
  // `round` rounded to the nearest bf16 value (nearest even, a NaN made
  // quiet, a denormal rounded as any other value), in place, for r < rows,
  // j < cols: the bf16 projections' epilogue (gemm_bf16.hpp's Bf16Epilogue).
  void (*bias_round_rows)(const float* bias, float* x, std::size_t ld, std::size_t rows,
                          std::size_t cols, bool round);
  // Units of 4 bf16 (two keys' pairs of two channels, as a V group row of
  // the bf16 dot kernels holds them) transposed, their middle elements
  // swapped: unit (i, u) = (a0, a1, b0, b1) at src + i*src_ld + 4u becomes
  // (a0, b0, a1, b1) at dst + u*dst_ld + 4i, for i < rows, u < cols (lds in
  // elements): K strips from V rows (kv_bf16.cpp, shared).
  void (*transpose_pairs)(const std::uint16_t* src, std::size_t src_ld, std::uint16_t* dst,
                          std::size_t dst_ld, std::size_t rows, std::size_t cols);
};

extern const ReshapeKernels reshape_kernels_scalar;
extern const ReshapeKernels reshape_kernels_avx2;
extern const ReshapeKernels reshape_kernels_avx512;
extern const ReshapeKernels reshape_kernels_neon;

// The table for an ISA that can run here (isa_runnable).
const ReshapeKernels& reshape_kernels(Isa isa) noexcept;

}  // namespace mha::detail
