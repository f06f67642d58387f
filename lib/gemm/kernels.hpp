// Per-ISA SGEMM kernel table. Contract of the packed layouts and micro-kernel
// is documented in lib/gemm/ukernel.hpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mha/isa.hpp>

namespace mha::detail {

// Rows of a B read in place in runs: run r holds `rows` (>= 1) rows from b
// on, ld floats apart; the product's rows start `skip` (< run[0].rows) rows
// into run[0] and go on through the runs in order, its columns `col`
// floats into each row (a paged cache's V, block by block).
struct FloatRun {
  const float* b;
  std::size_t rows;
};
struct FloatRuns {
  const FloatRun* run;
  std::size_t skip, ld, col;
};

// Quantized weights' codes: int8; int4 (two's complement, -8..7) or uint4
// (0..15), two per byte, rows p and p + 1 of a column in the low and high
// nibbles of one byte.
enum class QuantCodes : unsigned char { int8, int4, uint4 };
constexpr std::size_t kQuantCodes = 3;

// A K block of quantized strips as the kernels read it: op(B)(p, j) =
// (code(p, j) - zero) * scale, rounded to fp32 (one multiply; the
// subtraction of two small integers is exact), scale and zero those of
// (p's group, j). codes: the block's first row of the first strip, strips
// strip_stride bytes apart, each row (int8) or row pair (int4) nr bytes;
// scales, zeros (null: 0): the block's first group, nr per strip, groups
// scale_stride floats apart; the first group has `first` rows left in the
// block (even for int4), later ones `group`.
struct QuantStrips {
  const std::int8_t* codes;
  std::size_t strip_stride;
  const float* scales;
  const float* zeros;
  std::size_t scale_stride, group, first;
};

struct GemmKernels {
  std::size_t mr, nr;  // register tile of the micro-kernel (C block mr x nr)
  // Cache blocks: A block mc x kc, B panel kc x nc. An ISA's table gives the
  // blocks measured on a 1 MiB L2; fit_to_caches() keeps them or, with l2_kc
  // and an L2 that holds such panels, replaces them.
  std::size_t mc, kc, nc;
  // KC of the B panels that fit_to_caches() keeps in a large L2; 0: this
  // ISA's blocks stay as given on any L2 (no other L2 was measured).
  std::size_t l2_kc;
  // The plan's thresholds (plan_gemm, gemm.cpp), set by fit_to_caches()
  // (zero in the ISA tables before that); config.cpp gives each one's
  // measured reason. A kc-deep op(B) of at most whole_panel_floats is one
  // panel (0: panels of nc columns); op(B) = B up to small_max_n columns, or
  // any product of at most small_max_madds multiply-adds, is read in place
  // (path none); op(B) = Bᵀ is transposed whole into scratch of at most
  // transpose_max_floats, or transpose_one_block_max_floats for an A of one
  // MC x KC block (path none); op(B) = B of at most b_in_place_max_floats (k
  // x ldb) is read in place by ukernel for an A of one block (path a); a
  // P·V-shaped product of at least strided_a_min_rows rows reads A in place
  // against a packed B (path b); B blocks read in place from L2 take at most
  // l2_block_floats, and one strip of B up to inplace_strip_max_floats is
  // run row strip by row strip.
  std::size_t whole_panel_floats, small_max_n, small_max_madds;
  std::size_t transpose_max_floats, transpose_one_block_max_floats;
  std::size_t b_in_place_max_floats, strided_a_min_rows;
  std::size_t l2_block_floats, inplace_strip_max_floats;
  // C[m x n] = alpha * A·B + beta * C (then + bias[j] if bias is non-null,
  // n floats), for m <= mr, n <= nr, k >= 1. a: packed A strip [k][mr];
  // b: B strip, row p at b + p*ldb (ldb = nr: packed [k][nr]), of which
  // ceil(n/W) whole vectors are read (a packed strip's zero padding past
  // n); beta == 0: C not read.
  void (*ukernel)(std::size_t k, const float* a, const float* b, std::size_t ldb, float* c,
                  std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta,
                  const float* bias);
  // ukernel for m == 1 and n == row_strips*nr: the first row of packed A
  // strip a against the row_strips full B strips at b + s*strip_stride, with
  // the same arithmetic per element as ukernel, so the same bits.
  std::size_t row_strips;
  void (*ukernel_row)(std::size_t k, const float* a, const float* b, std::size_t strip_stride,
                      float* c, float alpha, float beta, const float* bias);
  // ukernel for a row-major op(A) read in place, m == mr rows: A(i, p) at
  // a[i*lda + p], against a packed B strip (row p at b + p*nr), n <= nr. The
  // same arithmetic per element as ukernel, so the same bits.
  void (*ukernel_strided_a)(std::size_t k, const float* a, std::size_t lda, const float* b,
                            float* c, std::size_t ldc, std::size_t n, float alpha, float beta);
  // The same for unpacked operands (the small-problem path), on its own
  // register tile mr_u x nr_u (m <= mr_u, n <= nr_u): op(A)(i, p) at
  // a[i*rsa + p*csa] (rsa == 1 or csa == 1), row p of B at b + p*ldb, of
  // which only the first n floats are read. Every element gets the same
  // arithmetic as in ukernel, so the same bits.
  std::size_t mr_u, nr_u;
  void (*ukernel_unpacked)(std::size_t k, const float* a, std::size_t rsa, std::size_t csa,
                           const float* b, std::size_t ldb, float* c, std::size_t ldc,
                           std::size_t m, std::size_t n, float alpha, float beta);
  // ukernel_unpacked for a row-major op(A) (A(i, p) at a[i*lda + p]) and
  // B's k rows in runs: the same arithmetic per element, so the bits of B
  // read in one run.
  void (*ukernel_unpacked_runs)(std::size_t k, const float* a, std::size_t lda, const FloatRuns& b,
                                float* c, std::size_t ldc, std::size_t m, std::size_t n,
                                float alpha, float beta);
  // Packs op(A) [m x k] (m <= mr*strips) into strips of mr rows: strip s at
  // dst + s*k*mr, laid out [k][mr], rows past m zero.
  void (*pack_a)(bool trans, std::size_t m, std::size_t k, const float* a, std::size_t lda,
                 float* dst);
  // Packs op(B) [k x n] into strips of nr columns: strip s at dst + s*strip_stride,
  // laid out [k][nr], columns past n zero. strip_stride >= k*nr.
  void (*pack_b)(bool trans, std::size_t k, std::size_t n, const float* b, std::size_t ldb,
                 float* dst, std::size_t strip_stride);
  // GEMV for m == 1 (a decode step), unpacked: c[j] = alpha * sum_p a[p] * op(B)(p, j)
  // + beta * c[j] for j < n, with a contiguous [k], k >= 1, and op(B)(p, j) =
  // b[p*ldb + j] (gemv_n) or b[j*ldb + p] (gemv_t). beta == 0: c not read.
  void (*gemv_n)(std::size_t k, std::size_t n, float alpha, const float* a, const float* b,
                 std::size_t ldb, float beta, float* c);
  void (*gemv_t)(std::size_t k, std::size_t n, float alpha, const float* a, const float* b,
                 std::size_t ldb, float beta, float* c);
  // dst[p*ldd + j] = src[j*lds + p] for p < k, j < n (a stored Bᵀ made
  // row-major for the in-place path).
  void (*transpose)(std::size_t k, std::size_t n, const float* src, std::size_t lds, float* dst,
                    std::size_t ldd);
  // Quantized weights (PackedQuantB, gemm.hpp), indexed by QuantCodes:
  // widen_quant writes a strip's first k rows from b's K block on as fp32
  // values, a packed B strip (dst, [k][nr]); ukernel_row_quant is
  // ukernel_row (strips == row_strips) or ukernel with m == 1 (strips == 1,
  // n <= nr) on strips of codes widened in registers, with A's row
  // contiguous (a[p]): each B value formed as widen_quant forms it, then the
  // fp32 kernels' arithmetic, so their bits on the widened strips.
  void (*widen_quant[kQuantCodes])(const QuantStrips& b, std::size_t k, float* dst);
  void (*ukernel_row_quant[kQuantCodes])(const QuantStrips& b, std::size_t k, const float* a,
                                         std::size_t strips, float* c, std::size_t n, float alpha,
                                         float beta, const float* bias);
};

// The ISA tables, before fit_to_caches().
extern const GemmKernels gemm_kernels_scalar;
extern const GemmKernels gemm_kernels_avx2;
extern const GemmKernels gemm_kernels_avx512;
extern const GemmKernels gemm_kernels_neon;

// An ISA table with the plan's thresholds set for one core's L1d and L2
// sizes (bytes, 0 if unknown) (config.cpp).
GemmKernels fit_to_caches(GemmKernels g, std::size_t l1d_bytes, std::size_t l2_bytes) noexcept;

// The table the drivers use for an ISA that can run here (isa_runnable),
// fitted to this CPU's caches once.
const GemmKernels& gemm_kernels(Isa isa) noexcept;

}  // namespace mha::detail
