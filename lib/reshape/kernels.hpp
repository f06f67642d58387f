// Per-ISA copy kernel behind split/merge heads (reshape_kernels.hpp,
// tables defined in reshape_<isa>.cpp). Single-threaded, never allocates.
#pragma once

#include <cstddef>

namespace mha::detail {

struct ReshapeKernels {
  // dst[r*dst_ld + j] = src[r*src_ld + j] for r < rows, j < cols.
  void (*copy_rows)(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                    std::size_t rows, std::size_t cols);
  // copy_rows with non-temporal stores where the ISA has them (x86: from
  // the first vector-aligned address of each row, then an sfence), so a
  // destination far larger than the cache is written without first being
  // read for ownership: 2 instead of 3 bytes of traffic per byte copied.
  // Elsewhere the same as copy_rows.
  void (*copy_rows_stream)(const float* src, std::size_t src_ld, float* dst, std::size_t dst_ld,
                           std::size_t rows, std::size_t cols);
};

extern const ReshapeKernels reshape_kernels_scalar;
extern const ReshapeKernels reshape_kernels_avx2;
extern const ReshapeKernels reshape_kernels_avx512;
extern const ReshapeKernels reshape_kernels_neon;

}  // namespace mha::detail
