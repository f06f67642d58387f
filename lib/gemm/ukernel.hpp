// SGEMM micro-kernels, packing and GEMV, written once and instantiated per ISA
// (gemm_<isa>.cpp). Everything here is a template on the xsimd Arch (or
// scalar_arch), so each ISA's copy is a distinct symbol: the linker can never
// merge code compiled with different -m flags.
//
// The contract (GemmKernels in kernels.hpp points at these):
//
// Packed A strip: op(A) rows [r, r+MR) x k columns, stored [k][MR], i.e. the
//   MR values of column p are contiguous at a + p*MR. Rows past m are zero.
//   Strip s of a packed block lives at dst + s*k*MR.
// Packed B strip: op(B) k rows x columns [c, c+NR), stored [k][NR], the NR
//   values of row p contiguous at b + p*NR. Columns past n are zero. Strip s
//   lives at dst + s*strip_stride (strip_stride >= k*NR, so one packed k x n
//   buffer can be viewed as any k-range or NR-aligned column range).
// Alignment: none required. Packed buffers from thread_scratch are 64-byte
//   aligned, but the kernels use unaligned loads (same speed on aligned data
//   on every target CPU) so views at any row offset work.
// Micro-kernel: C[m x n] = alpha * A·B + beta * C (+ bias[j], if bias is
//   given) for 1 <= m <= MR, 1 <= n <= NR, k >= 1. It is instantiated for
//   every row count 1..MR, so a short strip (M edge, m == 1 decode) computes
//   only its m rows; likewise the N edge computes only the ceil(n/W)
//   vectors that hold columns (the last one over B's zero padding) and
//   stores them with masked (x86) or partial vector stores, never a scalar
//   loop over k and nothing written past column n. beta == 0: C is never
//   read (NaN/Inf in C do not propagate). Every element is alpha*acc + beta*c
//   (the product first, then the sum), then + bias[j] (a separate rounding,
//   as adding the bias to the stored C afterwards would be; drivers pass it
//   on the last K block only), with acc an fma chain over p in order from 0,
//   whatever the tile, its position or the operands' addressing, so results
//   do not depend on how the driver partitions M and N (threads) nor on
//   whether operands were packed.
// Strided-A micro-kernel: the packed one for whole MR-row strips of a
//   row-major op(A) read in place at its row stride (B packed), so that a
//   tall P·V need not pack A; same arithmetic, so the same bits.
// Unpacked micro-kernel (small problems): the same on a tile of its own
//   (MRU x NRU), reading A at any row/column stride and B rows at any stride
//   in place, never past column n: its N edges load B with masked loads and
//   compute only the vectors that hold columns below n.
// Micro-kernels never allocate and never thread.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "gemm/kernels.hpp"
#include "simd/lanes.hpp"
#if defined(MHA_ASAN)
#include <sanitizer/asan_interface.h>

#include <cstdio>
#include <cstdlib>
#endif

namespace mha::detail::gemm_ukernel {

// The lane operations are simd::Lanes<Arch> (simd/lanes.hpp); the kernels
// accumulate with its madd: fma on every vector ISA, unfused on scalar_arch.
using simd::scalar_arch;

#if defined(MHA_ASAN)
// AddressSanitizer builds: instrumenting every access of the unrolled
// micro-kernels made the AVX-512 TU take over 200 s to compile (20 s
// without), so the kernel bodies are not instrumented. Instead each call
// checks, up front, every byte range it will read or write.
#define MHA_GEMM_KERNEL_NO_ASAN __attribute__((no_sanitize_address))
template <class Arch>
void asan_check_bytes(const void* p, std::size_t bytes) {
  if (bytes == 0) return;
  if (void* bad = __asan_region_is_poisoned(const_cast<void*>(p), bytes)) {
    std::fprintf(stderr, "gemm micro-kernel would access poisoned memory at %p\n", bad);
    __asan_describe_address(bad);
    std::abort();
  }
}
template <class Arch>
void asan_check(const void* p, std::size_t floats) {
  asan_check_bytes<Arch>(p, floats * sizeof(float));
}
#else
#define MHA_GEMM_KERNEL_NO_ASAN
#endif

// C = alpha*acc + beta*C (+ bias[j]) for the first n (<= NVT*W) columns of
// a ROWS x NVT-vector tile: each vector stored whole, partly (store_n, the
// N edge) or, past column n, not at all. kBeta false: C is never read.
// Per element: alpha*acc, then + beta*c, then + bias[j] (separate roundings).
// Always inlined, and with no lambda capturing acc: if acc's address escapes
// to a call, GCC keeps the accumulators in memory through the whole k loop
// (a load and a store per FMA; the 6 x 32 edge kernel ran at a third of its
// rate).
template <class S, bool kBeta, std::size_t ROWS, std::size_t NVT>
[[gnu::always_inline]] MHA_GEMM_KERNEL_NO_ASAN inline void update_c(typename S::V (&acc)[ROWS][NVT],
                                                                    float* c, std::size_t ldc,
                                                                    std::size_t n, float alpha,
                                                                    float beta,
                                                                    const float* bias) noexcept {
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  const V va = S::splat(alpha), vb = S::splat(beta);
  V bv[NVT];
#pragma GCC unroll 8
  for (std::size_t j = 0; j < NVT; ++j) {
    const std::size_t lanes = j * W + W <= n ? W : n - j * W;
    bv[j] = bias == nullptr || j * W >= n ? S::splat(0.f)
            : lanes == W                  ? S::load(bias + j * W)
                                          : S::load_n(bias + j * W, lanes);
  }
#pragma GCC unroll 32
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NVT; ++j) {
      if (j * W >= n) continue;
      const std::size_t lanes = j * W + W <= n ? W : n - j * W;
      float* p = c + i * ldc + j * W;
      V x = acc[i][j] * va;
      if constexpr (kBeta) x = x + vb * (lanes == W ? S::load(p) : S::load_n(p, lanes));
      if (bias != nullptr) x = x + bv[j];
      if (lanes == W) {
        S::store(p, x);
      } else {
        S::store_n(p, x, lanes);
      }
    }
  }
}

// B rows ahead that the micro-kernel prefetches (one prefetch per cache line
// of the row). The hardware prefetchers leave a packed B strip streamed from
// L2 short: on a 2 MiB-L2 Xeon (1 thread, best of alternating processes),
// both operands packed, 336 x 512 x 512 in L2 219 -> 235 GFLOP/s (AVX-512;
// 96 % of peak in L1), prepacked B 1024^3 193 -> 206-209, AVX2 sgemm 1024^3
// 107 -> 113; 4, 8 and 16 rows ahead within noise of each other.
// Not with row-strided A (the small path reading A and B in place): there B
// is mostly in L1 and the prefetches cost issue slots (sq64 203 -> 192, sq96
// 198 -> 188), for 2-4 % on P·V with k >= 512, within this machine's noise.
constexpr std::size_t kBPrefetchRows = 8;
constexpr std::size_t kFloatsPerLine = 16;

// B's rows in order, one after another at ldb (the packed and in-place
// kernels), or in runs (FloatRuns: a paged cache's V, block by block).
struct StridedRows {
  const float* b;
  std::size_t ldb;
  const float* row() const { return b; }
  void next() { b += ldb; }
};
struct RunRows {
  const FloatRun* run;
  const float* b;
  std::size_t left, ldb, col;
  explicit RunRows(const FloatRuns& r)
      : run(r.run),
        b(r.run->b + r.skip * r.ld + r.col),
        left(r.run->rows - r.skip),
        ldb(r.ld),
        col(r.col) {}
  // The next run is entered only when a row of it is read, so the kernel
  // never reads the run past its k rows.
  const float* row() {
    if (left == 0) {
      ++run;
      b = run->b + col;
      left = run->rows;
    }
    return b;
  }
  void next() {
    b += ldb;
    --left;
  }
};

// The micro-kernel for exactly ROWS (<= MR) rows: short strips (the M edge,
// m == 1 decode steps) cost ROWS/MR of a full one instead of a full one.
// A is read at a[p*sa + i] (kRowStridedA == false: a packed strip with
// sa = MR, or a column-major op(A)) or a[i*sa + p] (kRowStridedA: row-major
// op(A), unpacked); row p of B at b + p*ldb (ldb = NR when packed). The
// addressing never changes the arithmetic, so packed and unpacked calls give
// the same bits. kPartialB: B is read in place and this tile is its N edge,
// NV vectors wide with n - (NV-1)*W columns in the last, which is loaded
// with load_n so that nothing past column n is read (a packed strip is
// zero-padded instead and computed full width). STRIPS > 1 computes that
// many B strips side by side (strip s at b + s*bstride, its columns at
// c + s*NV*W): what the one-row kernel below uses; every column still gets
// its own fma chain, so the same bits. Rows: how B's rows follow each other
// (StridedRows: b + p*ldb), which never changes the arithmetic either.
template <class Arch, std::size_t NV, std::size_t ROWS, bool kRowStridedA, bool kPartialB = false,
          std::size_t STRIPS = 1, class Rows = StridedRows>
MHA_GEMM_KERNEL_NO_ASAN void ukernel_rows_of(std::size_t k, const float* a, std::size_t sa,
                                             Rows brows, float* c, std::size_t ldc, std::size_t n,
                                             float alpha, float beta, const float* bias,
                                             std::size_t bstride) {
  using S = simd::Lanes<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  constexpr std::size_t NVT = STRIPS * NV;  // vectors across the tile
  constexpr std::size_t NR = NVT * W;
  static_assert(!kPartialB || STRIPS == 1, "a partial B tile is one strip");
  const std::size_t tail = kPartialB ? n - (NV - 1) * W : W;  // columns in the last vector
#if defined(MHA_ASAN)
  if (bias != nullptr) asan_check<Arch>(bias, n);
  for (std::size_t i = 0; i < ROWS; ++i) {
    if (kRowStridedA) asan_check<Arch>(a + i * sa, k);
    asan_check<Arch>(c + i * ldc, n);
  }
  Rows check = brows;
  for (std::size_t p = 0; p < k; ++p, check.next()) {
    if (!kRowStridedA) asan_check<Arch>(a + p * sa, ROWS);
    for (std::size_t s = 0; s < STRIPS; ++s) {
      asan_check<Arch>(check.row() + s * bstride, kPartialB ? n : NV * W);
    }
  }
#endif
  // alpha and beta are needed only after the k loop: held through it as
  // integers that an empty asm hides the origin of. Left as floats, GCC kept
  // them in two vector registers, and the AVX2 4 x 24 tile (16 ymm live)
  // then read its B row from memory for every FMA: sq1024 17 % slower. The
  // builtin, not std::bit_cast: an out-of-line std::bit_cast (ASan builds)
  // is a weak function shared by every ISA's object (tests/tools/
  // check_symbols.sh).
  auto alpha_bits = __builtin_bit_cast(std::uint32_t, alpha);
  auto beta_bits = __builtin_bit_cast(std::uint32_t, beta);
  asm("" : "+r"(alpha_bits), "+r"(beta_bits));
  V acc[ROWS][NVT];
#pragma GCC unroll 32
  for (std::size_t i = 0; i < ROWS; ++i) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NVT; ++j) acc[i][j] = S::splat(0.f);
  }
  // Row-strided A: row i at column p is row_base[i / 4][(i % 4) * sa], with
  // a base per 4 rows that moves along k and three loop-invariant offsets:
  // 7 registers for the 14-row AVX-512 tile. Written as a[i*sa + p], GCC
  // kept one pointer per row and spilled four of them (a stack load per k
  // step each); with a base per 8 rows (2 + 7 registers) it still spilled
  // two.
  constexpr std::size_t kRowsPerBase = 4;
  constexpr std::size_t kBases = kRowStridedA ? (ROWS + kRowsPerBase - 1) / kRowsPerBase : 1;
  const float* row_base[kBases];
#pragma GCC unroll 4
  for (std::size_t r = 0; r < kBases; ++r)
    row_base[r] = kRowStridedA ? a + r * kRowsPerBase * sa : a;
  std::size_t row_off[kRowsPerBase];
#pragma GCC unroll 4
  for (std::size_t r = 0; r < kRowsPerBase; ++r) row_off[r] = r * sa;
  for (std::size_t p = 0; p < k; ++p) {
    if constexpr (kRowStridedA) {
      // ROWS row streams of A at an arbitrary stride: fetch each row 64
      // floats ahead; near the end of k, the start of the rows below (the
      // next strip, which the small path multiplies next). Addresses are
      // computed as integers: they may lie past A, which a prefetch allows.
      if (p % 16 == 0) {
        const std::size_t q = p + 64;
        const std::size_t ahead = q < k ? q : (q - k) + ROWS * sa;
#pragma GCC unroll 32
        for (std::size_t i = 0; i < ROWS; ++i) {
          const auto addr = reinterpret_cast<std::uintptr_t>(a) + (i * sa + ahead) * sizeof(float);
          __builtin_prefetch(reinterpret_cast<const void*>(addr));
        }
      }
    }
    const float* b = brows.row();
    if constexpr (STRIPS == 1 && !kRowStridedA && std::is_same_v<Rows, StridedRows>) {
      // B's row kBPrefetchRows steps ahead, one prefetch per cache line.
#pragma GCC unroll 8
      for (std::size_t j = 0; j < NVT; j += kFloatsPerLine / W) {
        const auto addr = reinterpret_cast<std::uintptr_t>(b) +
                          (kBPrefetchRows * brows.ldb + j * W) * sizeof(float);
        __builtin_prefetch(reinterpret_cast<const void*>(addr));
      }
    }
    V bv[NVT];
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NVT; ++j) {
      const float* bj = b + (j / NV) * bstride + (j % NV) * W;
      bv[j] = kPartialB && j == NVT - 1 ? S::load_n(bj, tail) : S::load(bj);
    }
    if constexpr (simd::kMaddByLane<Arch> && !kRowStridedA && ROWS % 4 == 0) {
      S::template madd_by_lane<ROWS, NVT>(a, bv, acc);
    } else {
#pragma GCC unroll 32
      for (std::size_t i = 0; i < ROWS; ++i) {
        const V av =
            S::splat(kRowStridedA ? row_base[i / kRowsPerBase][row_off[i % kRowsPerBase]] : a[i]);
#pragma GCC unroll 8
        for (std::size_t j = 0; j < NVT; ++j) acc[i][j] = S::madd(av, bv[j], acc[i][j]);
      }
    }
    if constexpr (kRowStridedA) {
#pragma GCC unroll 4
      for (std::size_t r = 0; r < kBases; ++r) ++row_base[r];
    } else {
      a += sa;
    }
    brows.next();
  }
  alpha = __builtin_bit_cast(float, alpha_bits);
  beta = __builtin_bit_cast(float, beta_bits);
  // A whole tile with n known at compile time, so update_c has no lane
  // arithmetic; the N edge with masked (or partial) stores.
  if (n == NR) {
    if (beta == 0.f) {
      update_c<S, false>(acc, c, ldc, NR, alpha, beta, bias);
    } else {
      update_c<S, true>(acc, c, ldc, NR, alpha, beta, bias);
    }
  } else if (beta == 0.f) {
    update_c<S, false>(acc, c, ldc, n, alpha, beta, bias);
  } else {
    update_c<S, true>(acc, c, ldc, n, alpha, beta, bias);
  }
}

// ukernel_rows_of on B rows ldb apart.
template <class Arch, std::size_t NV, std::size_t ROWS, bool kRowStridedA, bool kPartialB = false,
          std::size_t STRIPS = 1>
void ukernel_rows(std::size_t k, const float* a, std::size_t sa, const float* b, std::size_t ldb,
                  float* c, std::size_t ldc, std::size_t n, float alpha, float beta,
                  const float* bias, std::size_t bstride) {
  ukernel_rows_of<Arch, NV, ROWS, kRowStridedA, kPartialB, STRIPS>(
      k, a, sa, StridedRows{b, ldb}, c, ldc, n, alpha, beta, bias, bstride);
}

// Every ukernel_rows instantiation has this signature.
using RowsFn = void (*)(std::size_t, const float*, std::size_t, const float*, std::size_t, float*,
                        std::size_t, std::size_t, float, float, const float*, std::size_t);

// ukernel_rows<ROWS = r + 1> at [r], for any row count 1..MR.
template <class Arch, std::size_t MR, std::size_t NV, bool kRowStridedA, bool kPartialB>
constexpr auto kRows = []<std::size_t... R>(std::index_sequence<R...>) {
  return std::array<RowsFn, MR>{&ukernel_rows<Arch, NV, R + 1, kRowStridedA, kPartialB>...};
}
(std::make_index_sequence<MR>{});

// The packed kernels by [v - 1][rows - 1], v = 1..NV vectors wide.
template <class Arch, std::size_t MR, std::size_t NV>
constexpr auto kPackedRows = []<std::size_t... V>(std::index_sequence<V...>) {
  return std::array<std::array<RowsFn, MR>, NV>{kRows<Arch, MR, V + 1, false, false>...};
}
(std::make_index_sequence<NV>{});

// GemmKernels::ukernel: packed A and B. An N edge runs the kernel of
// ceil(n/W) vectors over the strip (row stride NR; the columns it reads
// past n are the strip's zero padding), so no all-padding vector is
// computed: n = 80 on AVX-512 (strips of 32, 32 and 16) did 96 columns of
// work. Measured (2 MiB-L2 Xeon, AVX-512, 1 thread, sgemm NN, best GFLOP/s
// over alternating processes): m 1024 k 1024 n 80 149 -> 167, n 112 164 ->
// 180; m 512 n 144 k 512 175 -> 189; m 300 n 80 k 700 151 -> 169.
template <class Arch, std::size_t MR, std::size_t NV>
void ukernel(std::size_t k, const float* a, const float* b, std::size_t ldb, float* c,
             std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta,
             const float* bias) {
  constexpr std::size_t W = simd::Lanes<Arch>::width, NR = NV * W;
  if (m == MR && n == NR) {
    ukernel_rows<Arch, NV, MR, false>(k, a, MR, b, ldb, c, ldc, n, alpha, beta, bias, 0);
  } else {
    kPackedRows<Arch, MR, NV>[(n + W - 1) / W - 1][m - 1](k, a, MR, b, ldb, c, ldc, n, alpha, beta,
                                                          bias, 0);
  }
}

// B strips per ukernel_row call: as many as keep the tile at 8 vectors (4 on
// AVX-512, 2 on AVX2 and NEON). Measured (Zen5, 1 thread, m = 1 against a
// prepacked 768 x 2304 B, best of 200, interleaved; the same bits): AVX-512
// 91-94 -> 73-76 us, AVX2 97 -> 91 us. The scalar kernel keeps one strip (two
// ran slower: 3.8 -> 5.9 us at n 300, k 77).
template <class Arch, std::size_t NV>
constexpr std::size_t kRowStrips = std::is_same_v<Arch, scalar_arch> || NV >= 8 ? 1 : 8 / NV;

// GemmKernels::ukernel_row: one row of a packed A strip against kRowStrips
// consecutive full packed B strips. A one-row call (m == 1: a decode step
// through prepacked weights) has only NV fma chains and one B stream per
// strip; kRowStrips strips at once put that many times more in flight.
template <class Arch, std::size_t MR, std::size_t NV>
void ukernel_row(std::size_t k, const float* a, const float* b, std::size_t strip_stride, float* c,
                 float alpha, float beta, const float* bias) {
  constexpr std::size_t NR = NV * simd::Lanes<Arch>::width;
  ukernel_rows<Arch, NV, 1, false, false, kRowStrips<Arch, NV>>(
      k, a, MR, b, NR, c, 0, kRowStrips<Arch, NV> * NR, alpha, beta, bias, strip_stride);
}

// GemmKernels::ukernel_strided_a: a whole MR-row strip of a row-major A read
// in place against a packed B strip; an N edge (n < NR) is computed over
// the strip's zero padding and stored masked, as in ukernel.
template <class Arch, std::size_t MR, std::size_t NV>
void ukernel_strided_a(std::size_t k, const float* a, std::size_t lda, const float* b, float* c,
                       std::size_t ldc, std::size_t n, float alpha, float beta) {
  constexpr std::size_t NR = NV * simd::Lanes<Arch>::width;
  ukernel_rows<Arch, NV, MR, true>(k, a, lda, b, NR, c, ldc, n, alpha, beta, nullptr, 0);
}

// The in-place kernels by [v][rows - 1]: v = 0 the full-width tile, v >= 1
// the N edge of v vectors. One table lookup per call.
template <class Arch, std::size_t MR, std::size_t NV, bool kRowStridedA>
constexpr auto kInPlaceRows = []<std::size_t... V>(std::index_sequence<V...>) {
  return std::array<std::array<RowsFn, MR>, NV + 1>{kRows<Arch, MR, NV, kRowStridedA, false>,
                                                    kRows<Arch, MR, V + 1, kRowStridedA, true>...};
}
(std::make_index_sequence<NV>{});

// GemmKernels::ukernel_unpacked: op(A)(i, p) at a[i*rsa + p*csa] with
// rsa == 1 or csa == 1, B rows at b + p*ldb, read up to column n only. A
// whole tile (n == NV*W) runs the full-width kernel; an N edge runs the one
// of ceil(n/W) vectors, its last loaded partly (kPartialB), so narrow
// products (n = 8 or 40 on AVX-512) compute no padding columns. Measured
// against the full-width edge tile it replaces (copied B strip, C through a
// stack tile; Zen5, AVX-512, 1 thread, NN squares through mha_sgemm, ns per
// call): s = 8 248-261 -> 48, 16 521-535 -> 85-87, 32 1312 -> 349-358,
// 96 12885-12951 -> 8078-8236 (OpenBLAS 25-29, 67-89, 307-331, 7876-8573).
template <class Arch, std::size_t MR, std::size_t NV>
void ukernel_unpacked(std::size_t k, const float* a, std::size_t rsa, std::size_t csa,
                      const float* b, std::size_t ldb, float* c, std::size_t ldc, std::size_t m,
                      std::size_t n, float alpha, float beta) {
  constexpr std::size_t W = simd::Lanes<Arch>::width;
  const std::size_t v = n == NV * W ? 0 : (n + W - 1) / W;
  if (csa == 1 && rsa != 1) {
    kInPlaceRows<Arch, MR, NV, true>[v][m - 1](k, a, rsa, b, ldb, c, ldc, n, alpha, beta, nullptr,
                                               0);
  } else {
    kInPlaceRows<Arch, MR, NV, false>[v][m - 1](k, a, csa, b, ldb, c, ldc, n, alpha, beta, nullptr,
                                                0);
  }
}

// Every runs kernel (ukernel_rows_of on RunRows, row-major A) has this
// signature.
using RunsFn = void (*)(std::size_t, const float*, std::size_t, const FloatRuns&, float*,
                        std::size_t, std::size_t, float, float);

template <class Arch, std::size_t NV, std::size_t ROWS, bool kPartialB>
void ukernel_rows_runs(std::size_t k, const float* a, std::size_t lda, const FloatRuns& b, float* c,
                       std::size_t ldc, std::size_t n, float alpha, float beta) {
  ukernel_rows_of<Arch, NV, ROWS, true, kPartialB, 1, RunRows>(k, a, lda, RunRows(b), c, ldc, n,
                                                               alpha, beta, nullptr, 0);
}

// The runs kernels by [v][rows - 1], as kInPlaceRows.
template <class Arch, std::size_t MR, std::size_t NV, bool kPartialB>
constexpr auto kRunsRows = []<std::size_t... R>(std::index_sequence<R...>) {
  return std::array<RunsFn, MR>{&ukernel_rows_runs<Arch, NV, R + 1, kPartialB>...};
}
(std::make_index_sequence<MR>{});
template <class Arch, std::size_t MR, std::size_t NV>
constexpr auto kRunsTable = []<std::size_t... V>(std::index_sequence<V...>) {
  return std::array<std::array<RunsFn, MR>, NV + 1>{kRunsRows<Arch, MR, NV, false>,
                                                    kRunsRows<Arch, MR, V + 1, true>...};
}
(std::make_index_sequence<NV>{});

// GemmKernels::ukernel_unpacked_runs: ukernel_unpacked for a row-major A
// with B's rows in runs.
template <class Arch, std::size_t MR, std::size_t NV>
void ukernel_unpacked_runs(std::size_t k, const float* a, std::size_t lda, const FloatRuns& b,
                           float* c, std::size_t ldc, std::size_t m, std::size_t n, float alpha,
                           float beta) {
  constexpr std::size_t W = simd::Lanes<Arch>::width;
  kRunsTable<Arch, MR, NV>[n == NV * W ? 0 : (n + W - 1) / W][m - 1](k, a, lda, b, c, ldc, n, alpha,
                                                                     beta);
}

// Transposes `rows` (a multiple of W, <= 64) rows of length >= p0 + W into
// columns: for r < W, column p0 + r of the block goes to dst + r*ld (rows
// values). Rows are read at src[i] + p0. Used by both packers below.
template <class Arch>
inline void transpose_block(const float* const* src, std::size_t rows, std::size_t p0, float* dst,
                            std::size_t ld) {
  using S = simd::Lanes<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  for (std::size_t g = 0; g < rows; g += W) {
    V t[W];
#pragma GCC unroll 16
    for (std::size_t r = 0; r < W; ++r) t[r] = S::load(src[g + r] + p0);
    S::transpose(t);
#pragma GCC unroll 16
    for (std::size_t r = 0; r < W; ++r) S::store(dst + r * ld + g, t[r]);
  }
}

// transpose_block over columns [0, end) in whole W-column blocks; where end
// is not a multiple of W, the last block ends at `end`, over columns already
// transposed (it stores the same values). Returns the columns done: end, or
// 0 for end < W (left to the caller's element loop). Left to that loop, the
// columns short of a whole block were a quarter of a k = 64 strip (Q·Kᵀ at
// head_dim 64): pack_a, AVX-512, best of 1000, 512 x 64 6.5-6.9 -> 5.0-5.1
// us, 128 x 128 2.8-2.9 -> 2.4 us.
template <class Arch>
inline std::size_t transpose_columns(const float* const* src, std::size_t rows, std::size_t end,
                                     float* dst, std::size_t ld) {
  constexpr std::size_t W = simd::Lanes<Arch>::width;
  if (end < W) return 0;
  for (std::size_t p = 0; p + W <= end; p += W) {
    transpose_block<Arch>(src, rows, p, dst + p * ld, ld);
  }
  if (end % W != 0) transpose_block<Arch>(src, rows, end - W, dst + (end - W) * ld, ld);
  return end;
}

// Packs op(A) [m x k] into ceil(m/MR) strips of [k][MR]. op(A)(r, p) is
// a[r*lda + p] (trans == false) or a[p*lda + r] (trans == true).
template <class Arch, std::size_t MR>
void pack_a(bool trans, std::size_t m, std::size_t k, const float* a, std::size_t lda, float* dst) {
  constexpr std::size_t W = simd::Lanes<Arch>::width;
  // Rows rounded up to whole vectors for the transposes; the extra rows
  // re-read row 0 and their lanes are overwritten (see below).
  constexpr std::size_t RV = (MR + W - 1) / W * W;
  // One vector group when padded: transpose_block stores group by group, so
  // with several groups a padded one would overwrite its neighbours' data.
  static_assert(RV == MR || RV == W, "MR must be a multiple of W or less than W");
  for (std::size_t r0 = 0; r0 < m; r0 += MR) {
    const std::size_t mr = m - r0 < MR ? m - r0 : MR;
    if (trans) {
      // Column p of the strip is contiguous in memory: a plain copy.
      for (std::size_t p = 0; p < k; ++p) {
        const float* src = a + p * lda + r0;
        float* d = dst + p * MR;
        std::size_t i = 0;
        for (; i < mr; ++i) d[i] = src[i];
        for (; i < MR; ++i) d[i] = 0.f;
      }
    } else {
      const float* rows[RV];
      for (std::size_t i = 0; i < RV; ++i) rows[i] = a + (r0 + (i < mr ? i : 0)) * lda;
      std::size_t p = 0;
      if (mr == MR && W > 1) {
        // With RV > MR each column's store runs RV - MR floats into the next
        // column's slot, which the next store overwrites; the strip's last
        // column is left to the scalar loop so nothing is written past it.
        const std::size_t end = RV == MR ? k : (k > 0 ? k - 1 : 0);
        p = transpose_columns<Arch>(rows, RV, end, dst, MR);
      }
      for (; p < k; ++p) {
        float* d = dst + p * MR;
        for (std::size_t i = 0; i < MR; ++i) d[i] = i < mr ? rows[i][p] : 0.f;
      }
    }
    dst += k * MR;
  }
}

// Packs op(B) [k x n] into ceil(n/NR) strips of [k][NR], strip s at
// dst + s*strip_stride. op(B)(p, j) is b[p*ldb + j] (trans == false) or
// b[j*ldb + p] (trans == true).
template <class Arch, std::size_t NR>
void pack_b(bool trans, std::size_t k, std::size_t n, const float* b, std::size_t ldb, float* dst,
            std::size_t strip_stride) {
  using S = simd::Lanes<Arch>;
  constexpr std::size_t W = S::width;
  for (std::size_t c0 = 0; c0 < n; c0 += NR) {
    const std::size_t nr = n - c0 < NR ? n - c0 : NR;
    if (!trans) {
      for (std::size_t p = 0; p < k; ++p) {
        const float* src = b + p * ldb + c0;
        float* d = dst + p * NR;
        if (nr == NR) {
#pragma GCC unroll 8
          for (std::size_t j = 0; j < NR; j += W) S::store(d + j, S::load(src + j));
        } else {
          std::size_t j = 0;
          for (; j < nr; ++j) d[j] = src[j];
          for (; j < NR; ++j) d[j] = 0.f;
        }
      }
    } else {
      // NR rows of the stored B, each read sequentially, transposed W x W at
      // a time (NR is a multiple of W).
      const float* cols[NR];
      for (std::size_t j = 0; j < NR; ++j) cols[j] = b + (c0 + (j < nr ? j : 0)) * ldb;
      std::size_t p = 0;
      if (nr == NR && W > 1) {
        p = transpose_columns<Arch>(cols, NR, k, dst, NR);
      }
      for (; p < k; ++p) {
        float* d = dst + p * NR;
        for (std::size_t j = 0; j < NR; ++j) d[j] = j < nr ? cols[j][p] : 0.f;
      }
    }
    dst += strip_stride;
  }
}

// GEMV, B not transposed: c[j] = alpha * sum_p a[p]*b[p*ldb + j] + beta*c[j]
// for j < n (a is contiguous). Streams B once, row by row, 4 vectors of
// columns at a time; each c[j] is an fma chain over p in order.
template <class Arch>
void gemv_n(std::size_t k, std::size_t n, float alpha, const float* a, const float* b,
            std::size_t ldb, float beta, float* c) {
  using S = simd::Lanes<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  constexpr std::size_t NB = 4 * W;
  const V va = S::splat(alpha);
  const V vb = S::splat(beta);
  std::size_t j0 = 0;
  for (; j0 + NB <= n; j0 += NB) {
    V acc[4] = {S::splat(0.f), S::splat(0.f), S::splat(0.f), S::splat(0.f)};
    const float* bp = b + j0;
    for (std::size_t p = 0; p < k; ++p, bp += ldb) {
      const V ap = S::splat(a[p]);
#pragma GCC unroll 4
      for (std::size_t v = 0; v < 4; ++v) acc[v] = S::madd(ap, S::load(bp + v * W), acc[v]);
    }
#pragma GCC unroll 4
    for (std::size_t v = 0; v < 4; ++v) {
      float* cv = c + j0 + v * W;
      S::store(cv, beta == 0.f ? acc[v] * va : acc[v] * va + vb * S::load(cv));
    }
  }
  for (; j0 + W <= n; j0 += W) {
    V acc = S::splat(0.f);
    const float* bp = b + j0;
    for (std::size_t p = 0; p < k; ++p, bp += ldb) acc = S::madd(S::splat(a[p]), S::load(bp), acc);
    float* cv = c + j0;
    S::store(cv, beta == 0.f ? acc * va : acc * va + vb * S::load(cv));
  }
  for (; j0 < n; ++j0) {
    float acc = 0.f;
    for (std::size_t p = 0; p < k; ++p) acc += a[p] * b[p * ldb + j0];
    const float r = acc * alpha;
    c[j0] = beta == 0.f ? r : r + beta * c[j0];
  }
}

// GEMV, B transposed: c[j] = alpha * dot(a, b + j*ldb) + beta*c[j] for j < n.
// Four rows of B at a time share each load of a; each dot product is split
// over the vector lanes and reduced once, in a fixed order.
template <class Arch>
void gemv_t(std::size_t k, std::size_t n, float alpha, const float* a, const float* b,
            std::size_t ldb, float beta, float* c) {
  using S = simd::Lanes<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  const std::size_t kv = k / W * W;
  auto finish = [&](std::size_t j, const V& acc, const float* row) {
    float s = S::hadd(acc);
    for (std::size_t p = kv; p < k; ++p) s += a[p] * row[p];
    const float r = s * alpha;
    c[j] = beta == 0.f ? r : r + beta * c[j];
  };
  std::size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* r0 = b + j * ldb;
    const float* r1 = r0 + ldb;
    const float* r2 = r1 + ldb;
    const float* r3 = r2 + ldb;
    V a0 = S::splat(0.f), a1 = a0, a2 = a0, a3 = a0;
    for (std::size_t p = 0; p < kv; p += W) {
      const V x = S::load(a + p);
      a0 = S::madd(x, S::load(r0 + p), a0);
      a1 = S::madd(x, S::load(r1 + p), a1);
      a2 = S::madd(x, S::load(r2 + p), a2);
      a3 = S::madd(x, S::load(r3 + p), a3);
    }
    finish(j, a0, r0);
    finish(j + 1, a1, r1);
    finish(j + 2, a2, r2);
    finish(j + 3, a3, r3);
  }
  for (; j < n; ++j) {
    const float* r0 = b + j * ldb;
    V a0 = S::splat(0.f);
    for (std::size_t p = 0; p < kv; p += W) a0 = S::madd(S::load(a + p), S::load(r0 + p), a0);
    finish(j, a0, r0);
  }
}

// dst[p*ldd + j] = src[j*lds + p] for p < k, j < n: op(B) = Bᵀ made
// row-major, for the in-place kernel. W x W register transposes
// (transpose_columns), element copies at the N edge and for k < W.
template <class Arch>
void transpose(std::size_t k, std::size_t n, const float* src, std::size_t lds, float* dst,
               std::size_t ldd) {
  constexpr std::size_t W = simd::Lanes<Arch>::width;
  std::size_t j0 = 0;
  if constexpr (W > 1) {
    for (; j0 + W <= n; j0 += W) {
      const float* rows[W];
      for (std::size_t r = 0; r < W; ++r) rows[r] = src + (j0 + r) * lds;
      for (std::size_t p = transpose_columns<Arch>(rows, W, k, dst + j0, ldd); p < k; ++p) {
        for (std::size_t r = 0; r < W; ++r) dst[p * ldd + j0 + r] = rows[r][p];
      }
    }
  }
  for (; j0 < n; ++j0) {
    for (std::size_t p = 0; p < k; ++p) dst[p * ldd + j0] = src[j0 * lds + p];
  }
}

// Quantized weights (QuantStrips): NVT vectors of one K block row (int8) or
// row pair (int4, uint4), strip s's vectors at codes + s*strip_stride,
// widened to (code - zero) * scale with the group's scale and zero vectors
// sv, zv: lo for row p, hi for row p + 1.
template <class Arch, QuantCodes C, std::size_t NV, std::size_t NVT>
[[gnu::always_inline]] inline void widen_codes(const std::int8_t* codes, std::size_t strip_stride,
                                               const typename simd::Lanes<Arch>::V (&sv)[NVT],
                                               const typename simd::Lanes<Arch>::V (&zv)[NVT],
                                               bool zeros, typename simd::Lanes<Arch>::V (&lo)[NVT],
                                               typename simd::Lanes<Arch>::V (&hi)[NVT]) {
  using S = simd::Lanes<Arch>;
  constexpr std::size_t W = S::width;
#pragma GCC unroll 8
  for (std::size_t j = 0; j < NVT; ++j) {
    const std::int8_t* p = codes + (j / NV) * strip_stride + (j % NV) * W;
    if constexpr (C == QuantCodes::int8) {
      lo[j] = S::widen_i8(p);
    } else if constexpr (C == QuantCodes::int4) {
      S::widen_s4(p, lo[j], hi[j]);
    } else {
      S::widen_u4(p, lo[j], hi[j]);
    }
    if (zeros) {
      lo[j] = lo[j] - zv[j];
      if constexpr (C != QuantCodes::int8) hi[j] = hi[j] - zv[j];
    }
    lo[j] = lo[j] * sv[j];
    if constexpr (C != QuantCodes::int8) hi[j] = hi[j] * sv[j];
  }
}

// A K block's groups in order: the scale and zero vectors of NVT vectors
// (strip s's at s*NR), reloaded where a group begins.
template <class Arch, std::size_t NV, std::size_t NVT>
struct QuantGroups {
  using S = simd::Lanes<Arch>;
  using V = typename S::V;
  static constexpr std::size_t NR = NV * S::width;
  const float* scales;
  const float* zeros;
  std::size_t stride, group, left;
  V sv[NVT], zv[NVT];
  explicit QuantGroups(const QuantStrips& b)
      : scales(b.scales), zeros(b.zeros), stride(b.scale_stride), group(b.group), left(b.first) {
    load();
  }
  void load() {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NVT; ++j) {
      const std::size_t at = (j / NV) * NR + (j % NV) * S::width;
      sv[j] = S::load(scales + at);
      zv[j] = zeros != nullptr ? S::load(zeros + at) : S::splat(0.f);
    }
  }
  // Before rows [p, p + rows) (rows 1 or 2, within one group).
  void advance(std::size_t rows) {
    if (left == 0) {
      scales += stride;
      if (zeros != nullptr) zeros += stride;
      left = group;
      load();
    }
    left -= rows < left ? rows : left;
  }
};

// Rows per step of a code type: one int8 row, or an int4 row pair.
template <QuantCodes C>
constexpr std::size_t kCodeRows = C == QuantCodes::int8 ? 1 : 2;

// GemmKernels::widen_quant: a strip's K block rows, as fp32.
template <class Arch, std::size_t NR, QuantCodes C>
void widen_quant(const QuantStrips& b, std::size_t k, float* dst) {
  using S = simd::Lanes<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width, NV = NR / W;
  QuantGroups<Arch, NV, NV> groups(b);
  const std::int8_t* codes = b.codes;
  for (std::size_t p = 0; p < k; p += kCodeRows<C>, codes += NR) {
    groups.advance(kCodeRows<C>);
    V lo[NV], hi[NV];
    widen_codes<Arch, C, NV>(codes, b.strip_stride, groups.sv, groups.zv, b.zeros != nullptr, lo,
                             hi);
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NV; ++j) S::store(dst + p * NR + j * W, lo[j]);
    if (kCodeRows<C> == 2 && p + 1 < k) {
#pragma GCC unroll 8
      for (std::size_t j = 0; j < NV; ++j) S::store(dst + (p + 1) * NR + j * W, hi[j]);
    }
  }
}

// One row of A against STRIPS quantized strips, each B vector widened as
// widen_quant widens it, then ukernel_rows_of's fma chain and update_c: its
// bits. A decode step's B streams from memory once, so it is widened in
// registers rather than through a buffer.
template <class Arch, std::size_t NV, std::size_t STRIPS, QuantCodes C>
MHA_GEMM_KERNEL_NO_ASAN void row_quant_strips(const QuantStrips& b, std::size_t k, const float* a,
                                              float* c, std::size_t n, float alpha, float beta,
                                              const float* bias) {
  using S = simd::Lanes<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width, NR = NV * W, NVT = STRIPS * NV;
#if defined(MHA_ASAN)
  asan_check<Arch>(a, k);
  asan_check<Arch>(c, n);
  if (bias != nullptr) asan_check<Arch>(bias, n);
  const std::size_t spanned = 1 + (k > b.first ? (k - b.first + b.group - 1) / b.group : 0);
  for (std::size_t g = 0; g < spanned; ++g) {
    asan_check<Arch>(b.scales + g * b.scale_stride, STRIPS * NR);
    if (b.zeros != nullptr) asan_check<Arch>(b.zeros + g * b.scale_stride, STRIPS * NR);
  }
  const std::size_t rows = (k + kCodeRows<C> - 1) / kCodeRows<C>;
  for (std::size_t s = 0; s < STRIPS; ++s)
    asan_check_bytes<Arch>(b.codes + s * b.strip_stride, rows * NR);
#endif
  QuantGroups<Arch, NV, NVT> groups(b);
  const bool zeros = b.zeros != nullptr;
  V acc[1][NVT];
#pragma GCC unroll 8
  for (std::size_t j = 0; j < NVT; ++j) acc[0][j] = S::splat(0.f);
  const std::int8_t* codes = b.codes;
  for (std::size_t p = 0; p < k; p += kCodeRows<C>, codes += NR) {
    groups.advance(kCodeRows<C>);
    V lo[NVT], hi[NVT];
    widen_codes<Arch, C, NV>(codes, b.strip_stride, groups.sv, groups.zv, zeros, lo, hi);
    const V a0 = S::splat(a[p]);
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NVT; ++j) acc[0][j] = S::madd(a0, lo[j], acc[0][j]);
    if (kCodeRows<C> == 2 && p + 1 < k) {
      const V a1 = S::splat(a[p + 1]);
#pragma GCC unroll 8
      for (std::size_t j = 0; j < NVT; ++j) acc[0][j] = S::madd(a1, hi[j], acc[0][j]);
    }
  }
  if (n == NVT * W) {
    if (beta == 0.f) {
      update_c<S, false>(acc, c, 0, NVT * W, alpha, beta, bias);
    } else {
      update_c<S, true>(acc, c, 0, NVT * W, alpha, beta, bias);
    }
  } else if (beta == 0.f) {
    update_c<S, false>(acc, c, 0, n, alpha, beta, bias);
  } else {
    update_c<S, true>(acc, c, 0, n, alpha, beta, bias);
  }
}

// GemmKernels::ukernel_row_quant.
template <class Arch, std::size_t NV, QuantCodes C>
void ukernel_row_quant(const QuantStrips& b, std::size_t k, const float* a, std::size_t strips,
                       float* c, std::size_t n, float alpha, float beta, const float* bias) {
  if (strips == 1) {
    row_quant_strips<Arch, NV, 1, C>(b, k, a, c, n, alpha, beta, bias);
  } else {
    row_quant_strips<Arch, NV, kRowStrips<Arch, NV>, C>(b, k, a, c, n, alpha, beta, bias);
  }
}

// One ISA's table: an MR x (NV vectors) micro-kernel for packed operands,
// an MRU x (NVU vectors) one for unpacked operands, the cache blocks for a
// 1 MiB L2 and the KC for a large one (GemmKernels::l2_kc).
template <class Arch, std::size_t MR, std::size_t NV, std::size_t MRU, std::size_t NVU>
constexpr GemmKernels make_kernels(std::size_t mc, std::size_t kc, std::size_t nc,
                                   std::size_t l2_kc = 0) {
  constexpr std::size_t W = simd::Lanes<Arch>::width;
  return GemmKernels{
      MR,
      NV * W,
      mc,
      kc,
      nc,
      l2_kc,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      0,
      &ukernel<Arch, MR, NV>,
      kRowStrips<Arch, NV>,
      &ukernel_row<Arch, MR, NV>,
      &ukernel_strided_a<Arch, MR, NV>,
      MRU,
      NVU * W,
      &ukernel_unpacked<Arch, MRU, NVU>,
      &ukernel_unpacked_runs<Arch, MRU, NVU>,
      &pack_a<Arch, MR>,
      &pack_b<Arch, NV * W>,
      &gemv_n<Arch>,
      &gemv_t<Arch>,
      &transpose<Arch>,
      {&widen_quant<Arch, NV * W, QuantCodes::int8>, &widen_quant<Arch, NV * W, QuantCodes::int4>,
       &widen_quant<Arch, NV * W, QuantCodes::uint4>},
      {&ukernel_row_quant<Arch, NV, QuantCodes::int8>,
       &ukernel_row_quant<Arch, NV, QuantCodes::int4>,
       &ukernel_row_quant<Arch, NV, QuantCodes::uint4>}};
}

}  // namespace mha::detail::gemm_ukernel
