// BLIS-style SGEMM driver: the portable loops, packing and threading around
// the per-ISA micro-kernels (ukernel.hpp). Loop nest of gemm_serial, for a B
// already packed whole:
//   MC rows > KC depth (pack the A block) > NC columns > MR strips (the
//     KC x MR A strip, reused across the panel) > NR strips > micro-kernel.
// The micro-kernel broadcasts A and loads B as vectors. With KC = 256 the A
// strip (14 KiB for AVX-512) stays in L1 and the B panel in L2; keeping the
// 32 KiB B strip in L1 instead left too little room for the A stream in a
// 48 KiB L1 (sq1024, 1 thread: 126 vs 140 GFLOP/s). On AVX2 (4 x 24 tile,
// a 24 KiB B strip) keeping the B strip in L1 was no faster either (2 MiB-L2
// Xeon, 1 thread, best GFLOP/s of alternating processes, A strip in L1 vs B
// strip in L1): sq1024 98.7-100.6 vs 95.8-100.5, NT m512 n2304 k768
// 96.3-99.8 vs 93.6-95.1. The AVX-512 KC is 1024 all the same
// (gemm_avx512.cpp): fewer micro-kernel epilogues and C round trips beat
// cache residency there.
// Threads split M x N (never K) into blocks; every C element is the same
// sequence of operations whichever block and thread computes it, so results
// are bit-identical at any thread count.
#include "gemm/gemm.hpp"

#include <algorithm>

#include "common/aligned.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"

namespace mha::detail {
namespace {

// C = beta*C (+ bias): what is left of C = alpha*op(A)·B + beta*C + bias when
// k == 0 or alpha == 0 (BLAS semantics: A and B are not read, so NaN in them
// does not propagate). beta == 0 writes zeros without reading C.
void scale_c(std::size_t m, std::size_t n, float beta, float* c, std::size_t ldc,
             const float* bias) {
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    for (std::size_t j = 0; j < n; ++j) {
      float v = beta == 0.f ? 0.f : beta * ci[j];
      if (bias != nullptr) v += bias[j];
      ci[j] = v;
    }
  }
}

const float* a_at(Trans ta, const float* a, std::size_t lda, std::size_t i, std::size_t p) {
  return ta == Trans::N ? a + i * lda + p : a + p * lda + i;
}

// Work below which one more thread does not pay for its wake-up: about
// 10 us of one core at AVX-512 peak, or 20 us reading B at 25 GB/s. The
// second counts where m is small: B is read once at two flops per float per
// row, so a GEMV is bound by memory (or L3), not by the FMA rate. Counted by
// flops alone, m = 1 against a 768 x 3072 B (2 threads allowed) ran on one:
// 306 us, against 150 on two. A TBB fork/join costs 0.4 us back to back but
// 12 us when the worker has slept (calls 200 us apart, this VM), so a
// sporadic call needs about 20 us of work to gain from a second thread: 4M
// flops per thread (as before) kept sq128 (4.2M) on one, 22.5 -> 13.0 us
// in a loop with 2M.
constexpr double kFlopsPerThread = 2.0e6;
constexpr double kBBytesPerThread = 512.0 * 1024;

std::size_t thread_cap(std::size_t m, std::size_t n, std::size_t k) {
  const double nk = static_cast<double>(n) * static_cast<double>(k);
  const double flops = 2.0 * static_cast<double>(m) * nk;
  return static_cast<std::size_t>(
      std::max({1.0, flops / kFlopsPerThread, 4.0 * nk / kBBytesPerThread}));
}

// The threads a call of this shape uses: TBB is not asked when one thread
// is all the work can use (the small products, whose call costs tens of ns).
std::size_t call_threads(std::size_t m, std::size_t n, std::size_t k) {
  const std::size_t cap = thread_cap(m, n, k);
  return cap > 1 ? std::min(effective_threads(), cap) : 1;
}

// A threads' task grid over C: mblocks x nblocks blocks of whole MR x NR
// tiles, spread as evenly as integers allow (block sizes differ by at most
// one tile): sq2048's 147 row strips in 8 blocks take 18 or 19 each, where
// blocks of a rounded-up size (19, and 14 for the last) left one of 2
// threads idle 4 % of the time. The grid may depend on the thread count: an
// element's arithmetic does not depend on which block it falls in
// (ukernel.hpp), so results stay bit-identical.
struct Grid {
  std::size_t m, n, mr, nr, mstrips, nstrips, mblocks, nblocks;
  std::size_t tasks() const { return mblocks * nblocks; }
  // Task t: rows(t) rows from row0(t), cols(t) columns from col0(t).
  std::size_t row0(std::size_t t) const {
    return std::min(m, (t / nblocks) * mstrips / mblocks * mr);
  }
  std::size_t col0(std::size_t t) const {
    return std::min(n, (t % nblocks) * nstrips / nblocks * nr);
  }
  std::size_t rows(std::size_t t) const { return row0(t + nblocks) - row0(t); }
  std::size_t cols(std::size_t t) const {
    return std::min(n, (t % nblocks + 1) * nstrips / nblocks * nr) - col0(t);
  }
};

Grid make_grid(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t mblocks,
               std::size_t nblocks) {
  const std::size_t mstrips = ceil_div(m, g.mr), nstrips = ceil_div(n, g.nr);
  return {m,
          n,
          g.mr,
          g.nr,
          mstrips,
          nstrips,
          std::clamp<std::size_t>(mblocks, 1, mstrips),
          std::clamp<std::size_t>(nblocks, 1, nstrips)};
}

// For a packed B: split M into row blocks of at most MC (B is shared, never
// re-packed), as many as a multiple of the thread count, so that every
// thread gets an equal share (7 MC blocks on 2 threads left one idle an
// eighth of the time).
// Fewer MC blocks than threads: split N as well, into two tasks per thread
// unless the row blocks divide evenly, since each column block re-packs its
// A blocks.
Grid split_m_first(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t threads) {
  const std::size_t mblocks = ceil_div(m, g.mc);
  if (mblocks >= threads) return make_grid(g, m, n, round_up(mblocks, threads), 1);
  const std::size_t want = mblocks % threads == 0 ? mblocks : 2 * threads;
  return make_grid(g, m, n, mblocks, ceil_div(want, mblocks));
}

// For blocks that each pack (or read in place) all of their A and B rows
// and columns: one block per thread, in the mblocks x nblocks = threads
// grid that packs the fewest floats (A m x k once per column block, B k x n
// once per row block; on a tie, row blocks), as BLIS factors its threads
// over its loops. Measured (2 MiB-L2 Xeon, AVX-512, 2 threads, best of
// alternating processes) against the two blocks per thread along the
// longer side used before: NT m512 n2304 k768 376-379 -> 402 GFLOP/s, m512
// n768 374 -> 385, Q·Kᵀ S = 512 111-112 -> 84 us, S = 2048 1437-1442 ->
// 1324 us, sq128 14.7-14.9 -> 13.0-13.1 us, P·V S = 128 5.8 -> 5.5 us;
// sq1024, sq2048, m4096 n768, P·V S = 512 and 2048 within 2 %.
Grid split_packing(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t threads) {
  std::size_t best_m = 1;
  double best = -1;
  for (std::size_t mb = 1; mb <= threads; ++mb) {
    if (threads % mb != 0) continue;
    const double floats =
        static_cast<double>(m) * static_cast<double>(threads / mb) + static_cast<double>(n * mb);
    if (best < 0 || floats <= best) {
      best = floats;
      best_m = mb;
    }
  }
  return make_grid(g, m, n, best_m, threads / best_m);
}

// Runs block(i0, j0, rows, cols) over C: once, on the whole of it, at one
// thread; otherwise over split_packing's grid in parallel. For the drivers
// whose blocks each pack (or read) their own operands.
template <class Block>
void run_blocks(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t threads,
                Block&& block) {
  if (threads <= 1) {
    block(0, 0, m, n);
    return;
  }
  const Grid grid = split_packing(g, m, n, threads);
  parallel_for(grid.tasks(), threads, [&](std::size_t t) {
    block(grid.row0(t), grid.col0(t), grid.rows(t), grid.cols(t));
  });
}

// The MR strips of a packed A block (m rows; strip s at a + s*a_strip, the
// k-range of bk) against the NR strips of bk, each A strip reused across
// the panel. bias (the panel's columns), if given, is added by the
// micro-kernel: pass it on the last K block only.
void run_strips(const GemmKernels& g, std::size_t m, const float* a, std::size_t a_strip,
                const PackedBView& bk, float alpha, float beta, float* c, std::size_t ldc,
                const float* bias = nullptr) {
  const std::size_t mr = g.mr, nr = g.nr, nb = bk.n;
  for (std::size_t is = 0; is * mr < m; ++is) {
    const float* as = a + is * a_strip;
    const std::size_t mm = std::min(mr, m - is * mr);
    float* ci = c + is * mr * ldc;
    std::size_t js = 0;
    if (mm == 1 && g.row_strips > 1) {
      // One row (a decode step through prepacked weights): row_strips B
      // strips per call (ukernel.hpp, kRowStrips), then the rest one by one.
      for (; (js + g.row_strips) * nr <= nb; js += g.row_strips) {
        g.ukernel_row(bk.k, as, bk.data + js * bk.strip_stride, bk.strip_stride, ci + js * nr,
                      alpha, beta, bias != nullptr ? bias + js * nr : nullptr);
      }
    }
    for (; js * nr < nb; ++js) {
      g.ukernel(bk.k, as, bk.data + js * bk.strip_stride, nr, ci + js * nr, ldc, mm,
                std::min(nr, nb - js * nr), alpha, beta,
                bias != nullptr ? bias + js * nr : nullptr);
    }
  }
}

// A kc-deep B panel of this many floats (8 MiB) or fewer is read from L3
// well enough: see panel_cols.
constexpr std::size_t kWholePanelFloats = std::size_t{1} << 21;
// The L2 of the machines the blocks were tuned on (1 MiB), in floats.
constexpr std::size_t kL2Floats = 256 * 1024;
// Rows a multiple of this many floats (4 KiB) apart all map to one L1 set.
constexpr std::size_t kAliasFloats = 1024;

// Columns per B panel (BLIS's NC) for a kc-deep op(B) of n columns. The A
// blocks are packed again for every column panel. Where the ISA's panel
// already exceeds L2 (AVX-512 on a 1 MiB L2: KC x NC = 1024 x 768), B
// streams from L3 whatever its width, so a B whose panels together take at
// most kWholePanelFloats is one panel (GemmKernels::whole_panel_floats).
// Measured (Zen5, AVX-512, 1 thread, best GFLOP/s of interleaved runs, NC
// 768 vs one panel): sq1024 201 vs 205, sq2048 200 vs 205, NN m4096 n2304
// k768 201 vs 207. Where the panel is sized to stay in L2 (AVX2, NEON: 256
// x 768; AVX-512 on a large L2, fit_to_caches) NC is kept: one panel was
// 0-3 % slower there (AVX2 sq1024, sq2048, m4096 n2304 k768). Column panels
// never change the arithmetic.
std::size_t panel_cols(const GemmKernels& g, std::size_t kc, std::size_t n) {
  const std::size_t whole = round_up(n, g.nr);
  return kc * whole <= g.whole_panel_floats ? whole : g.nc;
}

// The NC x KC loops over a packed B (BLIS's 5th and 4th loops), shared by
// the drivers that take one: panel(view, j0, p0, beta_p, last) for each
// KC x NC panel in order, beta_p being beta for the first K block and 1
// after it, last true on a column panel's final K block.
template <class Panel>
void for_each_panel(const GemmKernels& g, const PackedBView& b, float beta, Panel&& panel) {
  const std::size_t n = b.n, k = b.k, kc = std::min(k, g.kc), nc = panel_cols(g, kc, n);
  for (std::size_t j0 = 0; j0 < n; j0 += nc) {
    const PackedBView cols = b.cols(j0, std::min(n, j0 + nc));
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t p1 = std::min(k, p0 + kc);
      panel(cols.rows(p0, p1), j0, p0, p0 == 0 ? beta : 1.f, p1 == k);
    }
  }
}

const float* b_at(Trans tb, const float* b, std::size_t ldb, std::size_t p, std::size_t j) {
  return tb == Trans::N ? b + p * ldb + j : b + j * ldb + p;
}

// A packed B (a PackedBView over dst) that is filled panel by panel, each
// just before its first use, from op(B) at b (the view's first row and
// column).
struct BFill {
  Trans tb;
  const float* b;
  std::size_t ldb;
  float* dst;
  // The same fill for the view's rows from p0 on (view.rows(p0, ...)).
  BFill from_row(std::size_t p0, std::size_t nr) const {
    return {tb, b_at(tb, b, ldb, p0, 0), ldb, dst + p0 * nr};
  }
};

// The panels of a packed B against a packed A (gemm_serial_packed_a),
// filling each from `fill` first if given.
void run_panels(const GemmKernels& g, std::size_t m, const float* a, const PackedBView& b,
                float alpha, float beta, float* c, std::size_t ldc, const float* bias,
                const BFill* fill) {
  // Strip s of the packed A is [k][mr] at a + s*k*mr, so the K block from p0
  // is the same strips read from a + p0*mr on.
  for_each_panel(
      g, b, beta,
      [&](const PackedBView& panel, std::size_t j0, std::size_t p0, float beta_p, bool last) {
        if (fill != nullptr) {
          g.pack_b(fill->tb == Trans::T, panel.k, panel.n,
                   b_at(fill->tb, fill->b, fill->ldb, p0, j0), fill->ldb,
                   fill->dst + j0 / g.nr * b.strip_stride + p0 * g.nr, b.strip_stride);
        }
        run_strips(g, m, a + p0 * g.mr, b.k * g.mr, panel, alpha, beta_p, c + j0, ldc,
                   last && bias != nullptr ? bias + j0 : nullptr);
      });
}

// gemm_serial, with B filled from `fill` (if given) by the first A block.
void gemm_serial_filling(const GemmKernels& g, Trans ta, std::size_t m, const float* a,
                         std::size_t lda, const PackedBView& b, float alpha, float beta, float* c,
                         std::size_t ldc, const float* bias, const BFill* fill) {
  if (m == 0 || b.n == 0) return;
  if (b.k == 0 || alpha == 0.f) {
    scale_c(m, b.n, beta, c, ldc, bias);
    return;
  }
  const std::size_t k = b.k, mc = std::min(round_up(m, g.mr), g.mc), kc = std::min(k, g.kc);
  float* apack = thread_scratch(ScratchSlot::kGemmA, mc * kc);
  for (std::size_t i0 = 0; i0 < m; i0 += mc) {
    const std::size_t mb = std::min(mc, m - i0);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t p1 = std::min(k, p0 + kc);
      g.pack_a(ta == Trans::T, mb, p1 - p0, a_at(ta, a, lda, i0, p0), lda, apack);
      const bool filling = fill != nullptr && i0 == 0;
      const BFill fill_k = filling ? fill->from_row(p0, g.nr) : BFill{};
      run_panels(g, mb, apack, b.rows(p0, p1), alpha, p0 == 0 ? beta : 1.f, c + i0 * ldc, ldc,
                 p1 == k ? bias : nullptr, filling ? &fill_k : nullptr);
    }
  }
}

// Floats of an in-place B block (the small path) that the row strips read
// from L2, on a 1 MiB L2: sq512 with KC = 1024 fell from 249 to 229 GFLOP/s
// reading its 1 MiB B whole, and is back at 248 in two 256-column blocks.
// Blocking N changes no element's arithmetic (unlike KC).
constexpr std::size_t kL2BlockFloats = 128 * 1024;

// Columns (a multiple of `align`, at least one) of a kc-deep block of B that
// fit in kL2BlockFloats.
std::size_t l2_block_cols(std::size_t kc, std::size_t align) {
  return std::max(align, kL2BlockFloats / kc / align * align);
}

// Whether op(A) [m x k] packed whole takes no more than one MC x KC block:
// gemm_serial_unpacked then packs it once for the whole call.
bool a_is_one_block(const GemmKernels& g, std::size_t m, std::size_t k) {
  return packed_a_floats(g, m, k) <= g.mc * g.kc;
}

// gemm_serial for an unpacked B and an A of one block (a_is_one_block): A
// is packed once, whole (its K blocks are views, as in
// gemm_serial_packed_a), and B in blocks of l2_block_cols columns, each
// packed into this thread's kGemmB just before use so that it is still in
// L2 for every A strip (packing all of B first went through memory:
// pack_b('T') of 768 x 2304 took 0.6 ms, a fifth of the m = 128
// projection). Same KC blocking and kernels as gemm_serial, so the same
// bits. Measured (Zen5, AVX-512, 1 thread, best GFLOP/s of runs interleaved
// with NC = 768 panels that re-packed A each): NN m128 n2304 k768 184 ->
// 192, m64 n4096 k512 164 -> 172, m256 n1024 k1024 198 -> 204, m300 n2304
// k2000 192 either way.
void gemm_serial_unpacked(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
                          std::size_t k, float alpha, const float* a, std::size_t lda,
                          const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  const std::size_t kc = std::min(k, g.kc);
  const std::size_t nc = std::min(round_up(n, g.nr), l2_block_cols(kc, g.nr));
  float* apack = thread_scratch(ScratchSlot::kGemmA, packed_a_floats(g, m, k));
  g.pack_a(ta == Trans::T, m, k, a, lda, apack);
  float* bpack = thread_scratch(ScratchSlot::kGemmB, kc * nc);
  for (std::size_t j0 = 0; j0 < n; j0 += nc) {
    const std::size_t nb = std::min(nc, n - j0);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t kb = std::min(kc, k - p0);
      const PackedBView bk = pack_b(g, tb, kb, nb, b_at(tb, b, ldb, p0, j0), ldb, bpack);
      run_strips(g, m, apack + p0 * g.mr, k * g.mr, bk, alpha, p0 == 0 ? beta : 1.f, c + j0, ldc);
    }
  }
}

// Whether sgemm reads op(B) = B in place with the packed micro-kernel
// (GemmKernels::b_in_place_max_floats): a B small enough to stay in cache,
// an A of one block, and rows not a multiple of 4 KiB apart.
bool b_in_place_pays(const GemmKernels& g, Trans tb, std::size_t m, std::size_t k,
                     std::size_t ldb) {
  return tb == Trans::N && a_is_one_block(g, m, k) &&
         static_cast<double>(k) * static_cast<double>(ldb) <=
             static_cast<double>(g.b_in_place_max_floats) &&
         ldb % kAliasFloats != 0;
}

// gemm_serial for an A of one block and a B read in place (b_in_place_pays):
// A is packed once, whole; the packed micro-kernel reads the whole NR-column
// strips of B at their own row stride, and a last, partial strip is packed
// (the kernel reads whole vectors, past column n). Same kernels and K
// blocks as gemm_serial, so the same bits.
void gemm_serial_b_in_place(const GemmKernels& g, Trans ta, std::size_t m, std::size_t n,
                            std::size_t k, float alpha, const float* a, std::size_t lda,
                            const float* b, std::size_t ldb, float beta, float* c,
                            std::size_t ldc) {
  const std::size_t mr = g.mr, nr = g.nr, kc = std::min(k, g.kc), full = n / nr * nr;
  float* apack = thread_scratch(ScratchSlot::kGemmA, packed_a_floats(g, m, k));
  g.pack_a(ta == Trans::T, m, k, a, lda, apack);
  float* edge = full < n ? thread_scratch(ScratchSlot::kGemmB, kc * nr) : nullptr;
  for (std::size_t p0 = 0; p0 < k; p0 += kc) {
    const std::size_t kb = std::min(kc, k - p0);
    const float beta_p = p0 == 0 ? beta : 1.f;
    const float* bk = b + p0 * ldb;
    if (edge != nullptr) g.pack_b(false, kb, n - full, bk + full, ldb, edge, kb * nr);
    for (std::size_t i0 = 0; i0 < m; i0 += mr) {
      const float* as = apack + i0 * k + p0 * mr;  // strip i0 / mr, K block p0
      const std::size_t mm = std::min(mr, m - i0);
      float* ci = c + i0 * ldc;
      for (std::size_t j0 = 0; j0 < full; j0 += nr) {
        g.ukernel(kb, as, bk + j0, ldb, ci + j0, ldc, mm, nr, alpha, beta_p, nullptr);
      }
      if (edge != nullptr) {
        g.ukernel(kb, as, edge, nr, ci + full, ldc, mm, n - full, alpha, beta_p, nullptr);
      }
    }
  }
}

// Columns of op(B) that an sgemm block packs at once for an A of several
// blocks: all of them up to kWholePanelFloats (8 MiB), else slabs of whole
// NC panels. Each A block is packed once per slab.
std::size_t slab_cols(const GemmKernels& g, std::size_t k, std::size_t n) {
  const std::size_t cols = std::max(g.nc, kWholePanelFloats / k / g.nc * g.nc);
  return std::min(round_up(n, g.nr), cols);
}

// Rows of op(B), whole KC blocks, that such a slab packs at once: all of
// them while the slab stays within kWholePanelFloats, so that the scratch
// does not grow with k. A slab of fewer rows is multiplied by the matching
// columns of A; the K blocks stay where they were, so the same bits.
std::size_t slab_rows(const GemmKernels& g, std::size_t k, std::size_t cols) {
  const std::size_t kc = std::min(k, g.kc);
  return std::min(k, std::max(kc, kWholePanelFloats / round_up(cols, g.nr) / kc * kc));
}

// Widest op(B) = B read in place (in blocks of l2_block_cols) on a 1 MiB
// L2. Measured (Zen5, AVX-512, 1 thread, % of the FMA-loop peak, unpacked
// vs packed): sq128 93 vs 83, sq256 97 vs 90, sq512 96 vs 88-95, sq1024 74
// vs 89 (the 4 KiB row stride of B maps every row of a strip to one L1 set).
constexpr std::size_t kSmallMaxN = 512;

// Where packing does not pay back, for op(B) = B: N up to
// GemmKernels::small_max_n, where B's rows are read in place from L2 and A's
// row streams from L1, or one unpacked tile wide; and any problem so small
// that the copies cost as much as the arithmetic (sq64 on the Xeon VM, 1
// thread: 59 GFLOP/s packed, 120 unpacked).
bool small_problem(const GemmKernels& g, Trans tb, std::size_t m, std::size_t n, std::size_t k) {
  if (tb != Trans::N) return false;
  return n <= std::max(g.nr_u, g.small_max_n) ||
         static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <= 1 << 20;
}

// The one-strip P·V shape (below) runs its A rows in strips of the packed
// tile, read in place, against B packed into nr-column strips, where that
// tile is taller than the in-place one: per k step the 14 x 32 AVX-512 tile
// reads 2 B vectors for 28 FMAs, the 6 x 64 one 4 for 24, so B streams from
// L2 at half the rate. Packing B (k x n floats) is paid once per call, so
// only from this many rows of A. Measured (2 MiB-L2 Xeon, AVX-512, NN, n
// 64, best of 200 in alternating processes, us, 6 x 64 in place -> 14 x
// 32): 1 thread m512 k512 192-198 -> 171-175, m2048 k2048 3205-3217 ->
// 2997-3003, m256 k256 47.7 -> 43.6-44.4; 2 threads m512 k512 100 -> 91,
// m2048 k2048 1633-1662 -> 1522-1545. Where it starts to pay (1 thread):
// m192 k256 37.0 -> 35.2-36.3, m168 k1024 133 -> 132, m128 k512 50.7 ->
// 49.6, but m128 k128 10.5 -> 11.7 and m64 k64 2.6 -> 3.1.
constexpr std::size_t kStridedAMinRows = 160;

// Whether gemm_serial_inplace's one-strip path reads A that way: op(A)
// row-major (its rows are what the kernel strides over), enough rows, and
// a packed tile taller than the in-place one (AVX-512; on AVX2 and NEON it
// is not).
bool strided_a_pays(const GemmKernels& g, Trans ta, std::size_t m) {
  return ta == Trans::N && g.mr > g.mr_u && m >= std::max(kStridedAMinRows, g.mr);
}

// op(B) = Bᵀ (a stored [n, k] B, as attention's K or a weight matrix) is
// transposed whole into row-major scratch and multiplied in place, instead
// of packed per panel, while that scratch is at most this many floats
// (4 MiB per calling thread), or kTransposeOneBlockMaxFloats for an A of one
// block: the limits on a 1 MiB L2 (GemmKernels::transpose_max_floats).
// Measured (Zen5, AVX-512, GFLOP/s, packed -> transposed; 1 thread):
// qk_s128 209-213 -> 232-233, qk_s512 235-237 -> 240-246, qk_s2048
// 234-237 -> 240-247, proj m4096 n768 k768 245 -> 251, m128 n768 216-219 ->
// 220-227. Past 1M floats it stops paying (best GFLOP/s of interleaved
// runs, transposed vs packed, k768 n2304 = 1.8M floats): AVX2 m128 97 vs
// 102, m512 104 vs 106, m4096 107 vs 105; AVX-512 m512 202 vs 203, m4096
// 213 vs 211.
constexpr std::size_t kTransposeMaxFloats = std::size_t{1} << 20;
// An A of one block (a_is_one_block) amortizes the transpose over fewer rows,
// and gemm_serial_unpacked packs it once: past this many floats (1 MiB, the
// L2) B is packed per L2 panel instead. Measured (Zen5, AVX-512, GFLOP/s,
// transposed vs packed): 1 thread, best of interleaved runs, m128 n2304 k768
// (1.8M floats) 184-191 vs 197-203, m128 n1536 k768 195 vs 202, qk_s128 (12K)
// 200 vs 181, m512 n2304 k768 (two A blocks) 204 vs 200; m128 n768 k768
// (0.64M), bench medians, 1 thread 778 vs 767-788 us, 2 threads 522 vs 419-427
// us (its 3 transpose slices of 256 columns split 2:1).
constexpr std::size_t kTransposeOneBlockMaxFloats = kL2Floats;
// Columns of op(B) per task of the (parallel) transpose: done serially
// first, it cost 2 threads 13 % on the m128 n2304 projection.
constexpr std::size_t kTransposeCols = 256;

// Row stride of the transposed B: whole cache lines (rows start 64-byte
// aligned, as the scratch does) plus one, and one more where that would be
// a multiple of 4 KiB (n in 993..1008), whose rows all map to one L1 set
// (see b_in_place_pays: 107 vs 197 GFLOP/s reading such a B in place).
std::size_t transposed_ld(std::size_t n) {
  const std::size_t ld = round_up(n, 16) + 16;
  return ld % kAliasFloats == 0 ? ld + 16 : ld;
}

// The cap is on the scratch, k x transposed_ld, not on B.
bool transpose_pays(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t k) {
  const double floats = static_cast<double>(k) * static_cast<double>(transposed_ld(n));
  return floats <= static_cast<double>(a_is_one_block(g, m, k) ? g.transpose_one_block_max_floats
                                                               : g.transpose_max_floats);
}

// op(B) = B of at most this many floats (k x ldb, 256 KiB) is read in place
// by the packed micro-kernel, with a large L2 (fit_to_caches), for an A of
// one block: packing B cost more than its rows read at their own stride.
// Measured (2 MiB-L2 Xeon, AVX-512, 1 thread, best GFLOP/s; A packed, B in
// place vs B packed): m126 n128 k128 205 vs 192, m126 n256 k128 218 vs 204,
// m252 n256 k256 220 vs 211, m504 n256 k512 (512 KiB) 203 vs 203, m504 n512
// k512 201 vs 211, m126 n768 k512 138 vs 182. A row stride of a multiple of
// 4 KiB puts every row of a strip in one L1 set (m336 n1024 k512: 107 vs
// 197): such a B is packed whatever its size. Through mha_sgemm (best of
// alternating processes, 1 thread): sq128 22.5 -> 21.2 us, m128 n256 k128
// 42.2 -> 39.7 us, m64 n200 k300 45.5 -> 41.5 us, sq256 157 -> 153 us.
constexpr std::size_t kBInPlaceMaxFloats = 64 * 1024;

// The fewest columns of a B panel kept in a large L2: below this (Zen5's
// 1 MiB L2 holds 256 columns at KC 512 in half of it) the blocks made for
// a 1 MiB L2 stay. On Zen5, panels kept in its L2 (KC x NC 256 x 768, 384 x
// 512) ran sq1024 at 176-180 GFLOP/s against 189 for KC 1024 streamed from
// L3 (AVX-512, 1 thread, interleaved).
constexpr std::size_t kMinL2PanelCols = 512;

}  // namespace

// The blocks of the ISA's table and the limits above were measured on a
// 1 MiB L2 (Zen5), whose L3 feeds a streamed B panel well. An L2 that holds
// a panel of l2_kc x at least kMinL2PanelCols in half of it (BLIS's rule for
// the block read from L2) keeps B there instead: KC = l2_kc, NC filling half
// the L2. Measured on a 2 MiB L2 (Xeon, AVX-512, 1 thread, best GFLOP/s of
// runs interleaved in one process, 1 MiB-L2 blocks -> KC 512 x NC 512):
// sq1024 173-177 -> 197-205, sq2048 146 -> 195, NT m512 n2304 k768 164 ->
// 195-196, prepacked m128 n2304 145 -> 180; NC 768 (a 1.5 MiB panel) was
// 2-4 % slower than 512. With B panels in L2 the packed path also beats
// the in-place kernel, which reads B rows from L2 at 4 cache lines per k
// step, everywhere except where B fits in L1: in-place vs packed, sq64 190
// vs 179, sq96 173 vs 173, sq128 163 vs 183, sq256 186 vs 213, sq512 167 vs
// 211; transposed Bᵀ vs packed, qk_s128 (40 KiB of scratch) 202 vs 177,
// qk_s256 (72 KiB) 182 vs 200, qk_s2048 184 vs 206, NT m4096 n768 k768 173
// vs 204. So the small path keeps only unpacked-tile-wide B (and problems
// under 1M multiply-adds), and the transposed path a B that fits in L1d.
GemmKernels fit_to_caches(GemmKernels g, std::size_t l1d_bytes, std::size_t l2_bytes) noexcept {
  g.whole_panel_floats = g.kc * g.nc > kL2Floats ? kWholePanelFloats : 0;
  g.small_max_n = kSmallMaxN;
  g.transpose_max_floats = kTransposeMaxFloats;
  g.transpose_one_block_max_floats = kTransposeOneBlockMaxFloats;
  if (g.l2_kc == 0) return g;
  const std::size_t nc = l2_bytes / 2 / (g.l2_kc * sizeof(float)) / g.nr * g.nr;
  if (nc < kMinL2PanelCols) return g;
  g.kc = g.l2_kc;
  g.nc = nc;
  g.whole_panel_floats = 0;
  g.small_max_n = 0;
  // An unknown L1d counts as 32 KiB, the smallest of the AVX-512 cores.
  const std::size_t l1d_floats = (l1d_bytes != 0 ? l1d_bytes : 32 * 1024) / sizeof(float);
  g.transpose_max_floats = l1d_floats;
  g.transpose_one_block_max_floats = l1d_floats;
  g.b_in_place_max_floats = kBInPlaceMaxFloats;
  return g;
}

std::size_t packed_b_floats(const GemmKernels& g, std::size_t k, std::size_t n) {
  return ceil_div(n, g.nr) * k * g.nr;
}

PackedBView pack_b(const GemmKernels& g, Trans tb, std::size_t k, std::size_t n, const float* b,
                   std::size_t ldb, float* dst) {
  const std::size_t stride = k * g.nr;
  if (k != 0 && n != 0) g.pack_b(tb == Trans::T, k, n, b, ldb, dst, stride);
  return {dst, k, n, g.nr, stride};
}

// MC rows > KC depth (pack the A block) > NC columns > strips: each A block
// is packed once and multiplied by every column panel of B. Packed per
// column panel instead (NC > KC > MC, as in BLIS, whose NC is several
// thousand), A was re-packed for each 512-column panel that a 2 MiB L2
// holds. Measured (2 MiB-L2 Xeon, AVX-512, 1 thread, best GFLOP/s of three
// alternating processes, before -> after; prepacked B, then unpacked NT
// through sgemm, which then packed B whole for gemm_packed): NT m128 n2304
// k768 201 -> 211, 193 either way; m512 n2304 200 -> 204, 196 -> 202;
// m4096 n768 200 -> 208, 204 -> 209; m4096 n2304 195 -> 203, 198 -> 208;
// sq1024 205 -> 214, 205 -> 207; sq2048 195 -> 199, 201 -> 204 (NN 199 ->
// 194). Each C element still sums its K blocks in order, so the same bits.
void gemm_serial(const GemmKernels& g, Trans ta, std::size_t m, const float* a, std::size_t lda,
                 const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                 const float* bias) {
  gemm_serial_filling(g, ta, m, a, lda, b, alpha, beta, c, ldc, bias, nullptr);
}

std::size_t packed_a_floats(const GemmKernels& g, std::size_t m, std::size_t k) {
  return round_up(m, g.mr) * k;
}

void pack_a(const GemmKernels& g, Trans ta, std::size_t m, std::size_t k, const float* a,
            std::size_t lda, float* dst) {
  if (m != 0 && k != 0) g.pack_a(ta == Trans::T, m, k, a, lda, dst);
}

void gemm_serial_packed_a(const GemmKernels& g, std::size_t m, const float* a, const PackedBView& b,
                          float alpha, float beta, float* c, std::size_t ldc, const float* bias) {
  if (m == 0 || b.n == 0) return;
  if (b.k == 0 || alpha == 0.f) {
    scale_c(m, b.n, beta, c, ldc, bias);
    return;
  }
  run_panels(g, m, a, b, alpha, beta, c, ldc, bias, nullptr);
}

// Per block of columns (sized to stay in L2) and KC block, the mr_u-row
// strips of A read in place against the nr_u-column strips of B (row p at
// b + p*ldb, up to column n). Same KC blocking and arithmetic as the packed
// path, so the same bits.
void gemm_serial_inplace(const GemmKernels& g, Trans ta, std::size_t m, std::size_t n,
                         std::size_t k, float alpha, const float* a, std::size_t lda,
                         const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, beta, c, ldc, nullptr);
    return;
  }
  const std::size_t mr = g.mr_u, nr = g.nr_u, kc = std::min(k, g.kc);
  const std::size_t rsa = ta == Trans::N ? lda : 1, csa = ta == Trans::N ? 1 : lda;
  if (n <= nr && k * nr <= kL2Floats / 2) {
    // One strip of columns (P·V at head_dim 64) whose B stays in L2 whole:
    // each row strip runs all its K blocks in turn, so that its C tile stays
    // in L1 and its A rows are read from start to end, instead of a pass
    // over C and a jump in A per K block. Measured (2 MiB-L2 Xeon, AVX-512,
    // best GFLOP/s of runs interleaved in one process): m2048 n64 k2048, 1
    // thread 174-183 -> 187-188, 2 threads 372 either way; with B at 1 MiB
    // (m1024 n64 k4096) it was 2-3 % slower at 2 threads.
    std::size_t i0 = 0;
    if (strided_a_pays(g, ta, m)) {
      // Whole strips of the packed tile first (then the rest of the rows as
      // below), B packed once (into A's slot: A is not packed here).
      const PackedBView bp = pack_b(g, Trans::N, k, n, b, ldb,
                                    thread_scratch(ScratchSlot::kGemmA, packed_b_floats(g, k, n)));
      for (; i0 + g.mr <= m; i0 += g.mr) {
        for (std::size_t p0 = 0; p0 < k; p0 += kc) {
          const PackedBView bk = bp.rows(p0, std::min(k, p0 + kc));
          for (std::size_t j0 = 0; j0 < n; j0 += g.nr) {
            const PackedBView strip = bk.cols(j0, std::min(n, j0 + g.nr));
            g.ukernel_strided_a(strip.k, a + i0 * lda + p0, lda, strip.data, c + i0 * ldc + j0, ldc,
                                strip.n, alpha, p0 == 0 ? beta : 1.f);
          }
        }
      }
    }
    for (; i0 < m; i0 += mr) {
      const std::size_t mm = std::min(mr, m - i0);
      for (std::size_t p0 = 0; p0 < k; p0 += kc) {
        g.ukernel_unpacked(std::min(kc, k - p0), a_at(ta, a, lda, i0, p0), rsa, csa, b + p0 * ldb,
                           ldb, c + i0 * ldc, ldc, mm, n, alpha, p0 == 0 ? beta : 1.f);
      }
    }
    return;
  }
  const std::size_t nc = l2_block_cols(kc, nr);
  for (std::size_t jb = 0; jb < n; jb += nc) {
    const std::size_t jend = std::min(n, jb + nc);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t kb = std::min(kc, k - p0);
      const float beta_p = p0 == 0 ? beta : 1.f;
      for (std::size_t i0 = 0; i0 < m; i0 += mr) {
        const float* ai = a_at(ta, a, lda, i0, p0);
        const std::size_t mm = std::min(mr, m - i0);
        float* ci = c + i0 * ldc;
        for (std::size_t j0 = jb; j0 < jend; j0 += nr) {
          g.ukernel_unpacked(kb, ai, rsa, csa, b + p0 * ldb + j0, ldb, ci + j0, ldc, mm,
                             std::min(nr, n - j0), alpha, beta_p);
        }
      }
    }
  }
}

void reserve_gemm_packed(const GemmKernels& g, std::size_t m, const PackedBView& b) {
  // gemm_serial_filling's request for its largest block of rows.
  if (m != 0 && b.n != 0 && b.k != 0) {
    thread_scratch(ScratchSlot::kGemmA, std::min(round_up(m, g.mr), g.mc) * std::min(b.k, g.kc));
  }
}

void gemm_packed(const GemmKernels& g, Trans ta, std::size_t m, const float* a, std::size_t lda,
                 const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                 const float* bias) {
  const std::size_t n = b.n, k = b.k;
  if (m == 0 || n == 0) return;
  const std::size_t threads = call_threads(m, n, k);
  if (threads <= 1) {
    gemm_serial(g, ta, m, a, lda, b, alpha, beta, c, ldc, bias);
    return;
  }
  const Grid grid = split_m_first(g, m, n, threads);
  parallel_for(grid.tasks(), threads, [&](std::size_t t) {
    const std::size_t i0 = grid.row0(t), j0 = grid.col0(t);
    const std::size_t mb = grid.rows(t), j1 = j0 + grid.cols(t);
    gemm_serial(g, ta, mb, a_at(ta, a, lda, i0, 0), lda, b.cols(j0, j1), alpha, beta,
                c + i0 * ldc + j0, ldc, bias != nullptr ? bias + j0 : nullptr);
  });
}

void sgemm(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k,
           float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
           float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, beta, c, ldc, nullptr);
    return;
  }
  const std::size_t threads = call_threads(m, n, k);

  if (m == 1) {
    // GEMV (a decode step): B is read once, so packing it would double the
    // memory traffic of a bandwidth-bound operation. Threads split N into
    // fixed 256-column blocks.
    const float* x = a;
    if (ta == Trans::T && lda != 1) {
      float* xs = thread_scratch(ScratchSlot::kGemmA, k);
      for (std::size_t p = 0; p < k; ++p) xs[p] = a[p * lda];
      x = xs;
    }
    const auto gemv = tb == Trans::N ? g.gemv_n : g.gemv_t;
    constexpr std::size_t kCols = 256;
    parallel_for(ceil_div(n, kCols), threads, [&](std::size_t t) {
      const std::size_t j0 = t * kCols, nb = std::min(kCols, n - j0);
      gemv(k, nb, alpha, x, tb == Trans::N ? b + j0 : b + j0 * ldb, ldb, beta, c + j0);
    });
    return;
  }

  const bool transposed = tb == Trans::T && transpose_pays(g, m, n, k);
  if (transposed || small_problem(g, tb, m, n, k)) {
    // Both operands read in place, neither packed per block. A transposed B
    // is made row-major once first.
    const float* bi = b;
    std::size_t ldbi = ldb;
    if (transposed) {
      const std::size_t ldt = transposed_ld(n);
      float* bt = thread_scratch(ScratchSlot::kGemmB, k * ldt);
      parallel_for(ceil_div(n, kTransposeCols), threads, [&](std::size_t t) {
        const std::size_t j0 = t * kTransposeCols, j1 = std::min(n, j0 + kTransposeCols);
        g.transpose(k, j1 - j0, b + j0 * ldb, ldb, bt + j0, ldt);
      });
      bi = bt;
      ldbi = ldt;
    }
    run_blocks(g, m, n, threads,
               [&](std::size_t i0, std::size_t j0, std::size_t rows, std::size_t cols) {
                 gemm_serial_inplace(g, ta, rows, cols, k, alpha, a_at(ta, a, lda, i0, 0), lda,
                                     bi + j0, ldbi, beta, c + i0 * ldc + j0, ldc);
               });
    return;
  }
  if (b_in_place_pays(g, tb, m, k, ldb)) {
    run_blocks(g, m, n, threads,
               [&](std::size_t i0, std::size_t j0, std::size_t rows, std::size_t cols) {
                 gemm_serial_b_in_place(g, ta, rows, cols, k, alpha, a_at(ta, a, lda, i0, 0), lda,
                                        b + j0, ldb, beta, c + i0 * ldc + j0, ldc);
               });
    return;
  }
  if (a_is_one_block(g, m, k)) {
    run_blocks(g, m, n, threads,
               [&](std::size_t i0, std::size_t j0, std::size_t rows, std::size_t cols) {
                 gemm_serial_unpacked(g, ta, tb, rows, cols, k, alpha, a_at(ta, a, lda, i0, 0), lda,
                                      b_at(tb, b, ldb, 0, j0), ldb, beta, c + i0 * ldc + j0, ldc);
               });
    return;
  }
  // Several A blocks: each thread block packs B (its columns, in slabs) as
  // its first A block uses it, and its later A blocks read it packed.
  run_blocks(
      g, m, n, threads, [&](std::size_t i0, std::size_t j0, std::size_t rows, std::size_t cols) {
        const std::size_t slab = slab_cols(g, k, cols), depth = slab_rows(g, k, slab);
        float* bpack = thread_scratch(ScratchSlot::kGemmB, packed_b_floats(g, depth, slab));
        for (std::size_t s0 = 0; s0 < cols; s0 += slab) {
          const std::size_t nb = std::min(slab, cols - s0);
          for (std::size_t p0 = 0; p0 < k; p0 += depth) {
            const std::size_t kb = std::min(depth, k - p0);
            const BFill fill{tb, b_at(tb, b, ldb, p0, j0 + s0), ldb, bpack};
            gemm_serial_filling(g, ta, rows, a_at(ta, a, lda, i0, p0), lda,
                                {bpack, kb, nb, g.nr, kb * g.nr}, alpha, p0 == 0 ? beta : 1.f,
                                c + i0 * ldc + j0 + s0, ldc, nullptr, &fill);
          }
        }
      });
}

}  // namespace mha::detail
