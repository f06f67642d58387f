// Internal bf16 GEMM: C (fp32) = alpha * op(A)·op(B) + beta * C with A and B
// in bf16 (uint16_t bit patterns). Two paths, named by plan_gemm_bf16:
//   dot:  both operands packed in K-pairs for a bf16 dot-product micro-kernel
//         (GemmBf16Kernels, where the CPU has one), in the sgemm drivers'
//         blocking and threading;
//   fp32: both operands converted to fp32 (exact), then sgemm on the ISA's
//         fp32 kernels, whose summation order and rounding they then have;
// and a B packed once for either (PackedBf16B).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mha/isa.hpp>
#include <optional>
#include <string_view>
#include <vector>

#include "gemm/gemm.hpp"

namespace mha::detail {

// What a product does to each block of its C once the block is final (its
// last K block): the bf16 projections' bias and rounding. fn is
// ReshapeKernels::bias_round_rows: columns [0, round_from) of C take the
// bias alone (none if bias is null), columns from round_from on the bias
// and then bf16 rounding; bias holds one float per column of C. The AMX
// panels run it in their deferred finish, on a block still in cache and
// while the next block's tiles compute; the other paths per thread block.
struct Bf16Epilogue {
  void (*fn)(const float* bias, float* x, std::size_t ld, std::size_t rows, std::size_t cols,
             bool round) = nullptr;
  const float* bias = nullptr;
  std::size_t round_from = 0;

  // The block of C at column j0 (of C's columns), rows x cols from c.
  void apply(float* c, std::size_t ldc, std::size_t rows, std::size_t j0, std::size_t cols) const {
    const std::size_t plain =
        round_from <= j0 ? 0 : (round_from - j0 < cols ? round_from - j0 : cols);
    if (plain > 0 && bias != nullptr) fn(bias + j0, c, ldc, rows, plain, false);
    if (plain < cols) {
      fn(bias != nullptr ? bias + j0 + plain : nullptr, c + plain, ldc, rows, cols - plain, true);
    }
  }
  // This epilogue for the columns of C from j0 on.
  Bf16Epilogue from(std::size_t j0) const {
    return {fn, bias != nullptr ? bias + j0 : nullptr, round_from > j0 ? round_from - j0 : 0};
  }
};

// B's k groups for one product as runs: run r holds `pairs` pairs of k
// from b on, its k groups ld elements apart (a packed strip's: nr * k_group;
// a strip narrowed to fewer lanes, KvLayout::k_lanes, has a shorter ld);
// the runs follow one another in k, and each but the last holds whole k
// groups. A paged cache's V read in place, block by block.
struct Bf16Run {
  const std::uint16_t* b;
  std::size_t pairs;
};
struct Bf16Runs {
  const Bf16Run* run;
  std::size_t count;
  std::size_t ld;
};

// How A and B reach the kernels, kp = ceil(k / 2) pairs:
// A comes either packed, in strips of mr rows (ukernel, ukernel_row1 on a
// one-row strip; written by pack_a), or as rows with a stride
// (ukernel_rows, ukernel_row1; written by round_rows, as the attention
// core's Q and P rows). A pair of A, the elements 2p and 2p+1 of a row, is
// one 32-bit word with them in its low and high 16 bits (a_bytes = 2), or
// two fp32 words (a_bytes = 4: kernels without bf16 arithmetic, which then
// broadcast A without widening it); the second half of an odd k's last
// pair is zero.
// Packed A strip, the kernel set's own layout (a_row_pairs):
//   null a_row_pairs: [kp][mr], the pair of row i at p holding op(A)(i, 2p)
//     and op(A)(i, 2p+1), rows past m zero (the broadcast layout);
//   else [mr][a_row_pairs(kp)], row i's pairs from pair i * a_row_pairs(kp)
//     on, exactly what ukernel_rows reads with lda = a_row_pairs(kp): a set
//     that reads A in row tiles uses it (an AMX A tile is 16 rows of 32
//     bf16), and may pad kp to whole tiles.
//   Drivers know no more of it than packed_a_strip_words and
//   packed_a_pair_step below.
// Packed B strip: op(B) columns [c, c+nr), stored [kp][nr][2] in bf16, the
//   two halves of element (p, j) being op(B)(2p, j), op(B)(2p+1, j) (the
//   lanes of vdpbf16ps and of oneDNN's, XNNPACK's and KleidiAI's layouts);
//   columns past n and the odd k's missing row are zero. Strip s lives at
//   dst + s*strip_stride (bf16 elements, >= packed_b_rows(k)*nr).
// Sets with k_group = 4 (BFMMLA's 2 x 4 by 4 x 2 blocks) group k by four
// instead: B strips hold packed_b_rows(k) = round_up(k, 4) rows, element
// (k, j) at ((k/4)*(nr/2) + j/2)*8 + (j%2)*4 + k%4 (per group of 4 k, per
// column pair, column 2c's 4 elements then column 2c+1's: one BFMMLA
// operand), the rows past k zero; packed A strips likewise with rows for
// columns and mr for nr, in pairs (32-bit words), round_up(kp, 2) pairs
// per row. A pair's two elements stay adjacent in either layout
// (packed_b_pair_at). Such a set has no ukernel_row1.
struct GemmBf16Kernels {
  const char* name;    // for mha_kernel_name, e.g. "avx512_bf16"
  std::size_t mr, nr;  // register tile (C block mr x nr)
  // Cache blocks, as GemmKernels' (kc in k elements, even, so that K blocks
  // never split a pair). Results depend on kc (each K block's sum goes
  // through C), so tables meant to give the same bits share it.
  std::size_t mc, kc, nc;
  // C[m x n] = alpha * A·B + beta * C for 1 <= m <= mr, 1 <= n <= nr, kp >= 1
  // pairs; a: packed A strip, b: packed B strip. Per element: acc = 0, then
  // for each pair p in order, acc += A(2p+1)·B(2p+1), acc += A(2p)·B(2p) as
  // vdpbf16ps does (each product exact, each sum rounded to nearest even;
  // with `flush`, bf16 denormal inputs read as zero and denormal sums
  // flushed to zero, else IEEE denormals); then alpha*acc, + beta*c
  // (separate roundings). beta == 0: C is not read.
  void (*ukernel)(std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, float* c,
                  std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta);
  // As ukernel with A unpacked: row i's pairs from pair i*lda on (a row of
  // elements of a_bytes each, read by pairs; an odd k's last pair has a
  // zero second half), the attention core's Q and P rows as round_rows
  // leaves them.
  void (*ukernel_rows)(std::size_t kp, const std::uint32_t* a, std::size_t lda,
                       const std::uint16_t* b, float* c, std::size_t ldc, std::size_t m,
                       std::size_t n, float alpha, float beta);
  // y rows (ldy elements of a_bytes each) = x rows [rows x n] (ld ldx)
  // rounded to bf16 (nearest even, NaN made quiet; with `flush` a denormal
  // becomes a zero of its sign, as the dot products would read it anyway),
  // and y[n] = 0 when n is odd, completing the last pair: A rows for
  // ukernel_rows.
  void (*round_rows)(std::size_t rows, std::size_t n, const float* x, std::size_t ldx, void* y,
                     std::size_t ldy);
  // Packs op(A) [m x k] in strips of mr rows, in the kernel set's layout
  // (above), kp = ceil(k/2).
  void (*pack_a)(bool trans, std::size_t m, std::size_t k, const std::uint16_t* a, std::size_t lda,
                 std::uint32_t* dst);
  // Packs op(B) [k x n] in the layout above.
  void (*pack_b)(bool trans, std::size_t k, std::size_t n, const std::uint16_t* b, std::size_t ldb,
                 std::uint16_t* dst, std::size_t strip_stride);
  // Denormals as vdpbf16ps treats them (above), or IEEE.
  bool flush = true;
  // One row of C, [1 x n] with n <= 4*nr over consecutive strips of B
  // (b_strip elements apart), A's pair p at pair p*as: ukernel's bits for
  // m = 1, with the strips' chains interleaved, since one row's chains alone
  // leave the FMA pipes waiting on latency (decode steps). Optional.
  void (*ukernel_row1)(std::size_t kp, const std::uint32_t* a, std::size_t as,
                       const std::uint16_t* b, std::size_t b_strip, float* c, std::size_t n,
                       float alpha, float beta) = nullptr;
  // Bytes per A element in packed strips and rows (above): 2 or 4.
  std::size_t a_bytes = 2;
  // Pairs per row of a packed A strip of kp pairs in the row-major layout
  // (above; >= kp, and non-decreasing in kp, as the drivers size their
  // scratch for the largest K block), or null for the [kp][mr] layout.
  std::size_t (*a_row_pairs)(std::size_t kp) = nullptr;
  // Elements of k per group of the packed layouts (above): 2 or 4.
  std::size_t k_group = 2;
  // The kernels' per-thread state, or null where they keep none. Called on
  // a thread before that thread's first call of any other member within a
  // driver call (gemm_bf16, gemm_bf16_packed, pack_bf16_b) or an attention
  // task, through prepare_thread; it may be called many times on one
  // thread and must be cheap when that thread is already set up, so the
  // kernel set keeps its own thread_local state and reconfigures only on a
  // change. An AMX set loads its tile configuration (ldtilecfg) here: no
  // function call preserves it and each worker must load its own (oneDNN's
  // brgemm set_hw_context).
  void (*thread_setup)() = nullptr;
  // Optional: C [m x n] = alpha·A·B + beta·C for every block of mr rows
  // against every strip of B (b_strip elements apart) in one call, each
  // block with ukernel's bits (panel: A packed strips, as run_strips walks
  // them) or ukernel_rows' (panel_rows: rows lda pairs apart), for a set
  // whose blocks overlap when run back to back (AMX: a block's epilogue on
  // the vector unit while the tiles compute the next).
  void (*panel)(std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, std::size_t b_strip,
                float* c, std::size_t ldc, std::size_t m, std::size_t n, float alpha,
                float beta) = nullptr;
  // panel_rows also runs ep (if not null) on each block once finished.
  void (*panel_rows)(std::size_t kp, const std::uint32_t* a, std::size_t lda,
                     const std::uint16_t* b, std::size_t b_strip, float* c, std::size_t ldc,
                     std::size_t m, std::size_t n, float alpha, float beta,
                     const Bf16Epilogue* ep) = nullptr;
  // The time of one of its flops against the fp32 kernels', for the thread
  // policy (call_threads), which counts a thread per so many fp32 flops.
  double flop_time = 1.0;
  // Optional: ukernel_rows with B's k groups in runs (kp their pairs in
  // all), and ukernel_rows' bits: the k groups meet A's pairs in the same
  // order whatever the runs.
  void (*ukernel_runs)(const std::uint32_t* a, std::size_t lda, const Bf16Runs& b, float* c,
                       std::size_t ldc, std::size_t m, std::size_t n, float alpha,
                       float beta) = nullptr;
  // 32-bit words per pair of A.
  std::size_t pair_words() const { return a_bytes / 2; }
};

// g with ukernel_runs set: a table's initializer (its member list ends in
// optional ones).
constexpr GemmBf16Kernels with_runs(GemmBf16Kernels g,
                                    decltype(GemmBf16Kernels::ukernel_runs) runs) {
  g.ukernel_runs = runs;
  return g;
}

// Runs g's per-thread setup, if it has one, on the calling thread: before
// the first kernel call of each block or task that may run on a new thread.
inline void prepare_thread(const GemmBf16Kernels& g) {
  if (g.thread_setup != nullptr) g.thread_setup();
}

// 32-bit words of one packed A strip of kp pairs: strip s of a block pack_a
// wrote starts at word s * packed_a_strip_words(g, kp).
inline std::size_t packed_a_strip_words(const GemmBf16Kernels& g, std::size_t kp) {
  if (g.k_group == 4) return (kp + 1) / 2 * 2 * g.mr * g.pair_words();
  return (g.a_row_pairs != nullptr ? g.a_row_pairs(kp) : kp) * g.mr * g.pair_words();
}

// Rows of k a packed B strip holds (k padded to whole groups): a strip of
// k rows takes packed_b_rows(g, k) * nr elements.
inline std::size_t packed_b_rows(const GemmBf16Kernels& g, std::size_t k) {
  return (k + g.k_group - 1) / g.k_group * g.k_group;
}

// The element of a packed B strip (nr columns) holding op(B)(2p, j), with
// op(B)(2p + 1, j) next to it (layouts above).
inline std::size_t packed_b_pair_at(std::size_t k_group, std::size_t nr, std::size_t p,
                                    std::size_t j) {
  if (k_group == 2) return (p * nr + j) * 2;
  return ((p / 2 * (nr / 2) + j / 2) * 2 + j % 2) * 4 + p % 2 * 2;
}

// Pairs between a row's consecutive pairs in a packed A strip: the `as` of
// ukernel_row1 on a one-row strip.
inline std::size_t packed_a_pair_step(const GemmBf16Kernels& g) {
  return g.a_row_pairs != nullptr ? 1 : g.mr;
}

// One row of C (n columns) against consecutive strips of B: ukernel_row1
// where g has it, else a kernel call per strip; `a` a packed A strip
// (pairs packed_a_pair_step apart) or a row (pairs adjacent).
inline void bf16_row(const GemmBf16Kernels& g, bool packed, std::size_t kp, const std::uint32_t* a,
                     const std::uint16_t* b, std::size_t b_strip, float* c, std::size_t n,
                     float alpha, float beta) {
  const std::size_t as = packed ? packed_a_pair_step(g) : 1;  // pairs
  const std::size_t span = g.ukernel_row1 != nullptr ? 4 * g.nr : g.nr;
  for (std::size_t j0 = 0; j0 < n; j0 += span, b += span / g.nr * b_strip) {
    const std::size_t cols = n - j0 < span ? n - j0 : span;
    if (g.ukernel_row1 != nullptr) {
      g.ukernel_row1(kp, a, as, b, b_strip, c + j0, cols, alpha, beta);
    } else if (packed) {
      g.ukernel(kp, a, b, c + j0, 0, 1, cols, alpha, beta);
    } else {
      g.ukernel_rows(kp, a, 0, b, c + j0, 0, 1, cols, alpha, beta);
    }
  }
}

// C [rows x n] (ld ldc) = alpha·A·B + beta·C for A rows as ukernel_rows
// reads them (lda pairs apart) and consecutive strips of B: every strip
// against every block of mr rows, or bf16_row for a single row.
inline void bf16_rows(const GemmBf16Kernels& g, std::size_t rows, std::size_t kp,
                      const std::uint32_t* a, std::size_t lda, const std::uint16_t* b,
                      std::size_t b_strip, float* c, std::size_t ldc, std::size_t n, float alpha,
                      float beta) {
  if (rows == 1) return bf16_row(g, false, kp, a, b, b_strip, c, n, alpha, beta);
  if (g.panel_rows != nullptr)
    return g.panel_rows(kp, a, lda, b, b_strip, c, ldc, rows, n, alpha, beta, nullptr);
  const std::size_t row_words = lda * g.pair_words();
  for (std::size_t j0 = 0; j0 < n; j0 += g.nr, b += b_strip) {
    const std::size_t cols = n - j0 < g.nr ? n - j0 : g.nr;
    for (std::size_t i0 = 0; i0 < rows; i0 += g.mr) {
      g.ukernel_rows(kp, a + i0 * row_words, lda, b, c + i0 * ldc + j0, ldc,
                     rows - i0 < g.mr ? rows - i0 : g.mr, cols, alpha, beta);
    }
  }
}

// C [rows x n] (ld ldc, n <= nr) = alpha·A·B + beta·C for A rows as
// ukernel_rows reads them (lda pairs apart) and B's k groups in runs: every
// block of mr rows, on ukernel_runs (g must have it).
inline void bf16_rows_runs(const GemmBf16Kernels& g, std::size_t rows, const std::uint32_t* a,
                           std::size_t lda, const Bf16Runs& b, float* c, std::size_t ldc,
                           std::size_t n, float alpha, float beta) {
  const std::size_t row_words = lda * g.pair_words();
  for (std::size_t i0 = 0; i0 < rows; i0 += g.mr) {
    g.ukernel_runs(a + i0 * row_words, lda, b, c + i0 * ldc, ldc,
                   rows - i0 < g.mr ? rows - i0 : g.mr, n, alpha, beta);
  }
}

// MC / KC / NC of the bf16 tables: the fp32 AVX-512 blocks (336 / 1024 /
// 768, 1 MiB L2), in elements; not yet measured for bf16, whose operands
// take half the bytes. One set, so every table gives the same bits.
constexpr std::size_t kBf16MC = 336, kBf16KC = 1024, kBf16NC = 768;

// The bf16 kernel sets, each named alike in its file (gemm_bf16_<name>.cpp),
// namespace (gemm_bf16_<name>), table (gemm_bf16_kernels_<name>), CMake
// extension and GemmBf16Kernels::name (mha_kernel_name):
// avx512_bf16: AVX512_BF16's vdpbf16ps (only in builds with AVX-512).
extern const GemmBf16Kernels gemm_bf16_kernels_avx512_bf16;
// avx2_widen: AVX2 + FMA, widening bf16 to fp32 in registers, in
// vdpbf16ps's order but with IEEE denormals (builds with AVX2).
extern const GemmBf16Kernels gemm_bf16_kernels_avx2_widen;
// neon_bf16: FEAT_BF16's BFDOT (aarch64 builds).
extern const GemmBf16Kernels gemm_bf16_kernels_neon_bf16;
// neon_bfmmla: FEAT_BF16's BFMMLA (aarch64 builds), in 4-deep k groups,
// with neon_bf16's bits (emulated_bfdot).
extern const GemmBf16Kernels gemm_bf16_kernels_neon_bfmmla;
// The portable emulations, bit for bit, both in gemm_bf16_emulated.cpp
// (namespace gemm_bf16_emulated), on the hardware tables' blocks: the
// references the tests hold the hardware kernels to. Not dispatched to
// (they run at scalar speed).
// emulated_vdpbf16ps: vdpbf16ps, the reference of avx512_bf16 (and of
// avx2_widen on operands without denormals).
extern const GemmBf16Kernels gemm_bf16_kernels_emulated_vdpbf16ps;
// emulated_bfdot: Arm's BFDOT (products and sums rounded to odd, denormals
// flushed), the reference of neon_bf16 and neon_bfmmla.
extern const GemmBf16Kernels gemm_bf16_kernels_emulated_bfdot;
// emulated_tdpbf16ps: AMX's tdpbf16ps over groups of 16 pairs from each K
// block's first, element by element: the reference of amx_bf16 and of the
// software tiles of amx_emulated.
extern const GemmBf16Kernels gemm_bf16_kernels_emulated_tdpbf16ps;
// amx_emulated: the amx_bf16 kernels over software tiles (the same tiling,
// edges, packing and per-thread tile configuration, each tile instruction a
// scalar model), on every CPU: the AMX code path's tests run everywhere.
// Dispatched to only when MHA_BF16_KERNEL names it.
extern const GemmBf16Kernels gemm_bf16_kernels_amx_emulated;
// Tests: every thread's software tiles become unconfigured, so that a path
// that skips thread_setup aborts on its next tile instruction.
void amx_emulated_forget_tiles() noexcept;
// amx_bf16: AMX-BF16's tdpbf16ps (builds with AVX-512, CPUs with AMX that
// the OS lets this process use).
extern const GemmBf16Kernels gemm_bf16_kernels_amx_bf16;
// Tests: amx_bf16's table wherever this build has it and the CPU has
// AVX-512, AMX or not (else null). Its one-row entries (panel_rows for one
// row, ukernel_row1) run on the vector unit alone, so that they are held to
// the tiles' emulation on every AVX-512 CPU; nothing else of it may run
// there.
const GemmBf16Kernels* amx_bf16_one_row_for_tests();
// avx512_widen: avx2_widen's arithmetic in zmm (builds with AVX-512), for
// AVX-512 CPUs on which vdpbf16ps is slow or absent.
extern const GemmBf16Kernels gemm_bf16_kernels_avx512_widen;

// One tdpbf16ps on one C element: c + the products of `pairs` (<= 16) pairs
// of a (pair p at a[p * a_step]) and b (pair p at b + 2 * p * b_step, the
// even element first), in AMX's order and rounding (above).
float emulated_tdpbf16ps(float c, std::size_t pairs, const std::uint32_t* a, std::size_t a_step,
                         const std::uint16_t* b, std::size_t b_step);
// One BFMMLA (vbfmmlaq_f32, FEAT_BF16 without FEAT_EBF16), as its
// registers hold the operands: c (2 x 2 fp32, row-major) += a (2 x 4 bf16,
// row i at a + 4 * i) times b (4 x 2 bf16, held as its 2 columns, column j
// at b + 4 * j); per output, BFDOT's step over k 0-1, then over k 2-3.
// Two bfdot_pair steps of emulated_bfdot: so neon_bfmmla has its bits.
void emulated_bfmmla(float* c, const std::uint16_t* a, const std::uint16_t* b);
// One pair of vdpbf16ps on one lane: acc + a·b over the pair's two
// elements (the even one in the low 16 bits), in emulated_vdpbf16ps's
// order, rounding and denormal rule (the quantized KV products' dot steps).
float emulated_vdpbf16ps_pair(float acc, std::uint32_t a, std::uint32_t b);
// round_rows of the flushing emulations: nearest even, a denormal input
// becoming a zero of its sign, as vcvtneps2bf16.
void emulated_round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx,
                         void* out, std::size_t ldy);

// The bf16 kernels that serve `isa` on this CPU, or nullptr where bf16
// operands are converted to fp32 whole for sgemm: avx512: amx_bf16 where
// the OS grants AMX, else avx512_bf16 on AMD CPUs with AVX512_BF16, else
// avx512_widen; avx2: avx2_widen; neon: neon_bfmmla on a CPU with FEAT_BF16
// (BFMMLA doubles BFDOT's rate on Neoverse N2, V1 and V2, by LLVM's
// scheduling models; N1 has neither).
// MHA_BF16_KERNEL=<name> forces any set this CPU runs, for every ISA; a
// name it cannot run makes this throw mha::Error(MHA_UNSUPPORTED), as
// MHA_ISA does. The choice depends on the CPU alone: the same CPU always
// gives the same kernels, and so the same bits.
const GemmBf16Kernels* gemm_bf16_kernels(Isa isa);
// The set named `name` (GemmBf16Kernels::name) if this build has it and
// this CPU runs it, else nullptr; and every such set (amx_emulated on every
// CPU): for tests and benchmarks that run each in turn.
const GemmBf16Kernels* gemm_bf16_kernels_named(std::string_view name);
std::vector<const GemmBf16Kernels*> gemm_bf16_kernel_sets();
// Tests: every ISA gets g (e.g. the emulation, so the dot path and the bf16
// attention core run on CPUs without bf16), until reset with nullptr.
void set_gemm_bf16_kernels_override(const GemmBf16Kernels* g) noexcept;

enum class Bf16Path : unsigned char {
  dot,  // both operands packed in K-pairs, the bf16 dot-product kernels
  fp32  // both operands converted to fp32 whole, then sgemm (its own plan)
};
std::string_view gemm_bf16_path_name(Bf16Path p) noexcept;

struct Bf16Plan {
  Bf16Path path;
  std::size_t threads;  // the most threads the dot path uses
};

// The path of a bf16 GEMM: dot wherever there are bf16 kernels (g non-null),
// else fp32; a test override (set_gemm_bf16_path_override) may force fp32.
Bf16Plan plan_gemm_bf16(const GemmBf16Kernels* g, std::size_t m, std::size_t n, std::size_t k);
void set_gemm_bf16_path_override(std::optional<Bf16Path> path) noexcept;

// The full bf16 GEMM, threaded over M x N blocks (never K) on the planned
// path: g's kernels (dot) or f's after converting (fp32). Arguments are
// assumed validated. Bit-identical at any thread count.
void gemm_bf16(const GemmBf16Kernels* g, const GemmKernels& f, Trans ta, Trans tb, std::size_t m,
               std::size_t n, std::size_t k, float alpha, const std::uint16_t* a, std::size_t lda,
               const std::uint16_t* b, std::size_t ldb, float beta, float* c, std::size_t ldc);

// op(B) [k x n] packed once for many products (mha_gemm_bf16_pack_b): in
// the dot layout for g (strips of kp*nr*2 elements, kp = ceil(k/2), whose
// K blocks of KC rows are views at data + p0*nr), or, with no g, converted
// to fp32 and packed for f (PackedBView).
struct PackedBf16B {
  const GemmBf16Kernels* g = nullptr;  // the dot kernels, or nullptr: fp32
  const GemmKernels* f = nullptr;      // the fp32 kernels of the fp32 path
  std::size_t k = 0, n = 0;
  const void* data = nullptr;  // bf16 (dot) or float (fp32), 64-byte aligned
};
// Bytes the packed op(B) takes, and the packing into dst (that many bytes,
// 64-byte aligned); single-threaded.
std::size_t packed_bf16_b_bytes(const GemmBf16Kernels* g, const GemmKernels& f, std::size_t k,
                                std::size_t n);
PackedBf16B pack_bf16_b(const GemmBf16Kernels* g, const GemmKernels& f, Trans tb, std::size_t k,
                        std::size_t n, const std::uint16_t* b, std::size_t ldb, void* dst);
// C[m x n] = alpha * op(A)·B + beta * C with B packed by pack_bf16_b and A in
// bf16 (a16) or in fp32 (a32, rounded to bf16 first; exactly one is
// non-null): the bits of gemm_bf16 on the same kernels with that bf16 A (for
// m >= 2 on the fp32 path, where gemm_bf16's m == 1 runs sgemm's GEMV);
// then ep (if not null) on C, with the bits of apply_epilogue_rows after it.
void gemm_bf16_packed(Trans ta, std::size_t m, float alpha, const std::uint16_t* a16,
                      const float* a32, std::size_t lda, const PackedBf16B& b, float beta, float* c,
                      std::size_t ldc, const Bf16Epilogue* ep = nullptr);

// ep on C [m x n] (rows ldc apart), in blocks of 32 rows over the threads
// its bytes earn (threads_for).
void apply_epilogue_rows(const Bf16Epilogue& ep, float* c, std::size_t ldc, std::size_t m,
                         std::size_t n);

// Takes the calling thread's scratch that gemm_bf16_packed(ta = N, m, a32
// non-null, b) uses, so that call cannot then fail for want of it.
void reserve_gemm_bf16_packed(std::size_t m, const PackedBf16B& b);

// fp32 -> bf16, rounded to nearest even (NaN stays NaN, made quiet), and
// bf16 -> fp32 (exact).
void fp32_to_bf16(std::size_t n, const float* x, std::uint16_t* y) noexcept;
void bf16_to_fp32(std::size_t n, const std::uint16_t* x, float* y) noexcept;

}  // namespace mha::detail
