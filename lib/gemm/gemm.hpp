// Internal SGEMM driver API, row-major. The public entry points (mha_sgemm,
// mha::sgemm) validate arguments and call these; the attention code calls
// them directly with the kernel set it was created on.
#pragma once

#include <cstddef>

#include "gemm/kernels.hpp"

namespace mha::detail {

enum class Trans : char { N = 'N', T = 'T' };

// op(B) [k x n] packed for a given GemmKernels: strips of nr columns, strip s
// at data + s*strip_stride, each laid out [k][nr] (columns past n are zero).
// Because every strip is k-contiguous, a row range (k0..k1) and an nr-aligned
// column range are views into the same buffer, with no repacking.
struct PackedBView {
  const float* data = nullptr;
  std::size_t k = 0, n = 0;
  std::size_t nr = 0;
  std::size_t strip_stride = 0;  // floats between strips, >= k*nr

  PackedBView rows(std::size_t k0, std::size_t k1) const {
    return {data + k0 * nr, k1 - k0, n, nr, strip_stride};
  }
  // n0 must be a multiple of nr.
  PackedBView cols(std::size_t n0, std::size_t n1) const {
    return {data + (n0 / nr) * strip_stride, k, n1 - n0, nr, strip_stride};
  }
};

// Floats needed to pack a k x n op(B) for these kernels (strip_stride = k*nr).
std::size_t packed_b_floats(const GemmKernels& g, std::size_t k, std::size_t n);
// Packs op(B) into dst (packed_b_floats(g,k,n) floats, 64-byte aligned);
// single-threaded. Returns the view of the result.
PackedBView pack_b(const GemmKernels& g, Trans tb, std::size_t k, std::size_t n, const float* b,
                   std::size_t ldb, float* dst);

// C[m x n] = alpha * op(A)·B + beta * C (+ bias[j] on every row, if bias is
// non-null), single-threaded, no allocation in steady state (packs A into
// this thread's ScratchSlot::kGemmA). beta == 0: C is not read (NaN ignored).
void gemm_serial(const GemmKernels& g, Trans ta, std::size_t m, const float* a, std::size_t lda,
                 const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                 const float* bias = nullptr);
// Grows the calling thread's scratch to what gemm_packed over m rows of b
// takes on it (at most), so that a caller that must not fail after writing
// other outputs can allocate it first; throws std::bad_alloc.
void reserve_gemm_packed(const GemmKernels& g, std::size_t m, const PackedBView& b);

// op(A) [m x k] packed once by the caller for gemm_serial_packed_a, when the
// same rows multiply several B (the attention core's query block against
// each key tile): packed_a_floats(g, m, k) floats, 64-byte aligned.
std::size_t packed_a_floats(const GemmKernels& g, std::size_t m, std::size_t k);
void pack_a(const GemmKernels& g, Trans ta, std::size_t m, std::size_t k, const float* a,
            std::size_t lda, float* dst);

// gemm_serial with A packed by pack_a (m rows, b.k columns), bias included:
// the same bits, and no packing or allocation at all.
void gemm_serial_packed_a(const GemmKernels& g, std::size_t m, const float* a, const PackedBView& b,
                          float alpha, float beta, float* c, std::size_t ldc,
                          const float* bias = nullptr);

// C[m x n] = alpha * op(A)·B + beta * C with both operands read in place by
// the unpacked micro-kernel (row p of B at b + p*ldb), single-threaded, no
// packing or allocation: for a B that is already row-major in cache, as V in
// the attention core. Only the first n floats of each row of B are read.
// The same bits as gemm_serial.
void gemm_serial_inplace(const GemmKernels& g, Trans ta, std::size_t m, std::size_t n,
                         std::size_t k, float alpha, const float* a, std::size_t lda,
                         const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

// gemm_serial, threaded over M x N blocks with detail::parallel_for (never over
// K, so results do not depend on the thread count).
void gemm_packed(const GemmKernels& g, Trans ta, std::size_t m, const float* a, std::size_t lda,
                 const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                 const float* bias = nullptr);

// Full SGEMM, threaded: packs what pays to pack, uses the small/no-pack and
// GEMV paths where they are faster. Arguments are assumed validated. Packs B
// into ScratchSlot::kGemmB (gemm_serial and gemm_packed use only kGemmA, so a
// caller may keep its own packed B in kGemmB while calling them). For m >= 2
// it gives the same bits as pack_b + gemm_packed on the same kernels.
void sgemm(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k,
           float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
           float beta, float* c, std::size_t ldc);

}  // namespace mha::detail
