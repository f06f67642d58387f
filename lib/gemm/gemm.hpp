// Internal SGEMM driver API, row-major. The public entry points (mha_sgemm,
// mha::sgemm) validate arguments and call these; the attention code calls
// them directly with the kernel set it was created on.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "common/parallel.hpp"
#include "gemm/kernels.hpp"

namespace mha::detail {

enum class Trans : char { N = 'N', T = 'T' };

// Rows per strip where a driver packs an m-row block of A itself: m spread
// evenly over the ceil(m / mr) strips it needs, so that no strip is a short
// remainder (a decode's 16 rows as 8 + 8 rather than 14 + 2, whose tile
// runs too few accumulator chains to keep the FMA pipes busy). A row's
// arithmetic does not depend on its strip, so neither do the bits.
inline std::size_t balanced_strip_rows(std::size_t mr, std::size_t m) {
  const std::size_t strips = (m + mr - 1) / mr;
  return strips == 0 ? mr : (m + strips - 1) / strips;
}

// op(B) [k x n] packed for a given GemmKernels: strips of nr columns, strip s
// at data + s*strip_stride, each laid out [k][nr] (columns past n are zero).
// Because every strip is k-contiguous, a row range (k0..k1) and an nr-aligned
// column range are views into the same buffer, with no repacking.
struct PackedBView {
  const float* data = nullptr;
  std::size_t k = 0, n = 0;
  std::size_t nr = 0;
  std::size_t strip_stride = 0;  // floats between strips, >= k*nr

  // A buffer packed whole for k x n (strip_stride = k*nr), as pack_b does.
  static PackedBView whole(const float* data, std::size_t k, std::size_t n, std::size_t nr) {
    return {data, k, n, nr, k * nr};
  }
  PackedBView rows(std::size_t k0, std::size_t k1) const {
    return {data + k0 * nr, k1 - k0, n, nr, strip_stride};
  }
  // n0 must be a multiple of nr.
  PackedBView cols(std::size_t n0, std::size_t n1) const {
    return {data + (n0 / nr) * strip_stride, k, n1 - n0, nr, strip_stride};
  }
};

// A packed op(B) with room for `capacity` columns, written one column at a
// time (the KV cache's keys, column j being key j), in the layout of
// PackedBView with strip_stride = k*nr. Columns not yet written must be
// zero (the micro-kernels read whole vectors over them).
struct PackedBColumns {
  float* data = nullptr;
  std::size_t k = 0, capacity = 0, nr = 0;

  float* column(std::size_t j) const { return data + (j / nr) * k * nr + j % nr; }
  // op(B)(p, j) = x[p] for p < k.
  void write(std::size_t j, const float* x) const {
    float* col = column(j);
    for (std::size_t p = 0; p < k; ++p) col[p * nr] = x[p];
  }
  // op(B)(p, j) = 0 for p < k: the column is free again.
  void clear(std::size_t j) const {
    float* col = column(j);
    for (std::size_t p = 0; p < k; ++p) col[p * nr] = 0.0f;
  }
  // Zeroes the whole strip holding column j.
  void clear_strip(std::size_t j) const {
    float* strip = data + (j / nr) * k * nr;
    std::fill_n(strip, k * nr, 0.0f);
  }
  // The first n columns.
  PackedBView view(std::size_t n) const { return PackedBView::whole(data, k, n, nr); }
};

// Floats needed to pack a k x n op(B) for these kernels (strip_stride = k*nr).
std::size_t packed_b_floats(const GemmKernels& g, std::size_t k, std::size_t n);
// Packs op(B) into dst (packed_b_floats(g,k,n) floats, 64-byte aligned);
// single-threaded. Returns the view of the result.
PackedBView pack_b(const GemmKernels& g, Trans tb, std::size_t k, std::size_t n, const float* b,
                   std::size_t ldb, float* dst);

// ---- Products on a B packed by the caller (mha_sgemm_packed, the
// attention engine's projections, sgemm's path prepacked_b) --------------

// C[m x n] = alpha * op(A)·B + beta * C (+ bias[j] on every row, if bias is
// non-null) for B packed by pack_b, threaded over M x N blocks with
// detail::parallel_for (never over K, so results do not depend on the
// thread count); A is packed per block into ScratchSlot::kGemmA.
void gemm_prepacked_b(const GemmKernels& g, Trans ta, std::size_t m, const float* a,
                      std::size_t lda, const PackedBView& b, float alpha, float beta, float* c,
                      std::size_t ldc, const float* bias = nullptr);
// Grows the calling thread's scratch to what gemm_prepacked_b over m rows
// of b takes on it (at most), so that a caller that must not fail after
// writing other outputs can allocate it first; throws std::bad_alloc.
void reserve_gemm_prepacked_b(const GemmKernels& g, std::size_t m, const PackedBView& b);

// ---- Quantized weights ----------------------------------------------------

// op(B) [k x n] as codes (QuantCodes) with a scale, and for uint4 a zero
// point, per column and group of `group` rows (group >= k: one per
// column): op(B)(p, j) = (code(p, j) - zero) * scale, rounded to fp32 (one
// multiply). The codes lie as a packed B's floats do (PackedBView: strips of
// nr columns, strip s at codes + s*strip_stride bytes), a strip row (int8)
// or row pair (int4, uint4, rows 2i and 2i + 1 in the low and high nibbles)
// nr bytes, columns past n zero; scales and zeros [groups][strips * nr],
// zero past n.
struct PackedQuantB {
  QuantCodes type = QuantCodes::int8;
  const std::int8_t* codes = nullptr;
  const float* scales = nullptr;
  const float* zeros = nullptr;  // null: all zero
  // Null, or row p of op(B) weighs A's column perm[p] (a GPTQ act-order
  // layer's inputs in group order): C = A[:, perm]·B.
  const std::uint32_t* perm = nullptr;
  std::size_t k = 0, n = 0, nr = 0, group = 0;
  std::size_t strip_stride = 0;  // bytes between strips
  std::size_t scale_stride = 0;  // floats between groups

  // n0 must be a multiple of nr.
  PackedQuantB cols(std::size_t n0, std::size_t n1) const;
  // The K block from row p0 (even for int4, uint4) of strip s.
  QuantStrips block(std::size_t p0, std::size_t s) const;
};

// Groups of `group` rows in a k-row column (group 0 or >= k: one).
std::size_t quant_groups(std::size_t k, std::size_t group);
// Bytes of codes, and floats of scales (and of zeros), that
// pack_quant_b writes for a k x n op(B) in groups of `group` rows (0: k),
// checked against overflow (messages name `what`).
std::size_t packed_quant_b_bytes(const GemmKernels& g, QuantCodes type, std::size_t k,
                                 std::size_t n, const char* what);
std::size_t packed_quant_b_scales(const GemmKernels& g, std::size_t k, std::size_t n,
                                  std::size_t group, const char* what);
// Packs op(B) = wᵀ for codes w [n x k] (one per byte, row j ldw apart, a
// column's k codes), scales and zeros (null: none) [n x groups], into codes,
// scales_dst and zeros_dst; single-threaded.
PackedQuantB pack_quant_b(const GemmKernels& g, QuantCodes type, std::size_t k, std::size_t n,
                          std::size_t group, const std::int8_t* w, std::size_t ldw,
                          const float* scales, const float* zeros, std::int8_t* codes,
                          float* scales_dst, float* zeros_dst);

// C[m x n] = A·B (+ bias[j] on every row, if bias is non-null) for A
// [m x k] row-major: gemm_prepacked_b's bits on the B that widen_quant forms
// (the same K blocks and arithmetic per element, at any thread count). One
// row widens B in registers (ukernel_row_quant); more widen each strip's K
// block once into this thread's ScratchSlot::kGemmQuantB for the fp32
// kernels.
void gemm_quant_b(const GemmKernels& g, std::size_t m, const float* a, std::size_t lda,
                  const PackedQuantB& b, float* c, std::size_t ldc, const float* bias = nullptr);
// Grows the calling thread's scratch to what gemm_quant_b over m rows of b
// takes on it (at most); throws std::bad_alloc.
void reserve_gemm_quant_b(const GemmKernels& g, std::size_t m, const PackedQuantB& b);

// A [m x k] with its columns in perm's order, into the calling thread's
// ScratchSlot::kGemmGatheredA ([m x k], lda k) when perm is non-null; else
// a itself. reserve_gathered_a takes that scratch first.
const float* gathered_a(std::size_t m, std::size_t k, const float* a, std::size_t lda,
                        const std::uint32_t* perm, std::size_t* lda_out);
void reserve_gathered_a(std::size_t m, std::size_t k, const std::uint32_t* perm);

// ---- Kernels the attention core calls directly, not planned ------------
// Single-threaded (the core's tasks are the threads), each for the form its
// operands already have, named by what the caller prepared; all give the
// bits of gemm_prepacked_b on the same kernels.

// gemm_prepacked_b on the calling thread alone: Q·Kᵀ against the cache's
// packed keys. No allocation in steady state (packs A into this thread's
// ScratchSlot::kGemmA). beta == 0: C is not read (NaN ignored).
void gemm_serial_prepacked_b(const GemmKernels& g, Trans ta, std::size_t m, const float* a,
                             std::size_t lda, const PackedBView& b, float alpha, float beta,
                             float* c, std::size_t ldc, const float* bias = nullptr);

// op(A) [m x k] packed once by the caller for gemm_serial_prepacked_ab,
// when the same rows multiply several B (the attention core's query block
// against each key tile): packed_a_floats(g, m, k) floats, 64-byte aligned.
std::size_t packed_a_floats(const GemmKernels& g, std::size_t m, std::size_t k);
void pack_a(const GemmKernels& g, Trans ta, std::size_t m, std::size_t k, const float* a,
            std::size_t lda, float* dst);

// gemm_serial_prepacked_b with A packed by pack_a too (m rows, b.k
// columns), bias included: no packing or allocation at all.
void gemm_serial_prepacked_ab(const GemmKernels& g, std::size_t m, const float* a,
                              const PackedBView& b, float alpha, float beta, float* c,
                              std::size_t ldc, const float* bias = nullptr);

// C[m x n] = alpha * op(A)·B + beta * C with both operands read in place by
// the unpacked micro-kernel (row p of B at b + p*ldb), no packing or
// allocation: for a B that is already row-major in cache, as V in the
// attention core's P·V. Only the first n floats of each row of B are read.
// Also sgemm's path none, block by block.
void gemm_serial_unpacked(const GemmKernels& g, Trans ta, std::size_t m, std::size_t n,
                          std::size_t k, float alpha, const float* a, std::size_t lda,
                          const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

// C = alpha * A·B for A packed by pack_a (m rows, k columns) and n <= g.nr
// columns of a B strip read in place, row p at b + p*ldb, of which
// ceil(n/W) whole vectors are read (a paged cache's K strip narrowed to its
// block): gemm_serial_prepacked_ab's K blocks and arithmetic, so its bits.
void gemm_serial_prepacked_a_strip(const GemmKernels& g, std::size_t m, const float* a,
                                   std::size_t k, const float* b, std::size_t ldb, std::size_t n,
                                   float alpha, float* c, std::size_t ldc);

// gemm_serial_unpacked for a row-major A (lda) with B's k rows in runs
// (FloatRuns: a paged cache's V, read block by block in place): the same K
// blocks and arithmetic, so the bits of B in one piece.
void gemm_serial_unpacked_runs(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t k,
                               float alpha, const float* a, std::size_t lda, FloatRuns b,
                               float beta, float* c, std::size_t ldc);

// ---- sgemm: planned paths -----------------------------------------------

// The paths of sgemm, named by what they pack. Every path computes every
// shape and transpose; plan_gemm picks the fastest (config.cpp has the
// measurements), tests force each one. Path p's driver is path_<p> in
// gemm.cpp, but for none and prepacked_b, whose drivers are also called
// directly (above).
enum class GemmPath : unsigned char {
  gemv,        // nothing: each row of C by the GEMV kernels, B read in place
  none,        // nothing: the unpacked kernel reads A and B in place (a Bᵀ made
               // row-major first): gemm_serial_unpacked
  b,           // B once, whole; A's whole strips read in place (P·V)
  a,           // A once, whole; B's whole strips read in place by the packed
               // kernel, a partial last strip packed (a Bᵀ made row-major first)
  a_b_blocks,  // A once, whole; B per L2-sized column block just before use
  both,        // both: B in slabs as each block's first A block uses them, A per
               // MC x KC block
  prepacked_b  // B packed whole first, as mha_sgemm_pack_b does, then
               // gemm_prepacked_b
};
std::string_view gemm_path_name(GemmPath p) noexcept;

struct GemmPlan {
  GemmPath path;
  std::size_t threads;  // the most threads the call uses
};

// The one place sgemm's path and thread count are decided, from the shape,
// the transposes and g's thresholds (or the test override).
GemmPlan plan_gemm(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
                   std::size_t k, std::size_t ldb);

// For tests: every later plan_gemm, on every thread, returns `path` (nullopt:
// the plan's own choice again).
void set_gemm_path_override(std::optional<GemmPath> path) noexcept;

// The drivers' shared frame, also run by the bf16 GEMM (gemm_bf16.cpp):
// C = beta*C (+ bias[j]), what k == 0 or alpha == 0 leaves (A and B unread;
// beta == 0 writes zeros without reading C);
void scale_c(std::size_t m, std::size_t n, float beta, float* c, std::size_t ldc,
             const float* bias);
// the threads a call of this shape uses (about 10 us of work per thread),
// its flops weighted by the kernels' time per flop against the fp32
// kernels' (GemmBf16Kernels::flop_time);
std::size_t call_threads(std::size_t m, std::size_t n, std::size_t k, double flop_time = 1.0);
// block(i0, j0, rows, cols) over C [m x n]: once, whole, at one thread, else
// one block of whole mr x nr tiles per thread in parallel, in the grid that
// packs the fewest elements of A and B.
void run_gemm_blocks(std::size_t mr, std::size_t nr, std::size_t m, std::size_t n,
                     std::size_t threads,
                     FunctionRef<void(std::size_t, std::size_t, std::size_t, std::size_t)> block);

// Full SGEMM, threaded, on the path plan_gemm names. Arguments are assumed
// validated. Packs into ScratchSlot::kGemmB and kGemmTransposedB
// (gemm_serial_prepacked_b and gemm_prepacked_b use only kGemmA, so a caller may keep its own
// packed B in kGemmB while calling them). Every path but gemv gives the same
// bits as pack_b + gemm_prepacked_b on the same kernels.
void sgemm(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k,
           float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
           float beta, float* c, std::size_t ldc);

}  // namespace mha::detail
