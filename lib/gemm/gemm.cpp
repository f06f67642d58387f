// BLIS-style SGEMM driver: the portable loops, packing and threading around
// the per-ISA micro-kernels (ukernel.hpp). plan_gemm names the path a call
// takes, from the shape and the thresholds of the ISA's fitted table
// (config.cpp); each path is one driver below, path_<GemmPath> (none's and
// prepacked_b's are the directly called gemm_serial_unpacked and
// gemm_prepacked_b).
// Loop nest of the packing drivers (run_a_blocks, for path both and
// gemm_serial_prepacked_b):
//   MC rows > KC depth (pack the A block) > NC columns > MR strips (the
//     KC x MR A strip, reused across the panel) > NR strips > micro-kernel.
// Each A block is packed once and multiplied by every column panel of B
// (BLIS runs NC outermost; with 512-column panels that re-packed A per
// panel: Xeon m4096 n2304 k768 prepacked 195 -> 203 GFLOP/s).
// Threads split M x N (never K) into blocks; every C element is the same
// sequence of operations whichever path, block and thread computes it
// (ukernel.hpp), so results are bit-identical at any thread count and on
// every path but GEMV.
#include "gemm/gemm.hpp"

#include <algorithm>
#include <atomic>

#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"

namespace mha::detail {
namespace {

const float* a_at(Trans ta, const float* a, std::size_t lda, std::size_t i, std::size_t p) {
  return ta == Trans::N ? a + i * lda + p : a + p * lda + i;
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

Grid make_grid(std::size_t mr, std::size_t nr, std::size_t m, std::size_t n, std::size_t mblocks,
               std::size_t nblocks) {
  const std::size_t mstrips = ceil_div(m, mr), nstrips = ceil_div(n, nr);
  return {m,
          n,
          mr,
          nr,
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
  if (mblocks >= threads) return make_grid(g.mr, g.nr, m, n, round_up(mblocks, threads), 1);
  const std::size_t want = mblocks % threads == 0 ? mblocks : 2 * threads;
  return make_grid(g.mr, g.nr, m, n, mblocks, ceil_div(want, mblocks));
}

// For blocks that each pack (or read in place) all of their A and B rows
// and columns: one block per thread, in the mblocks x nblocks = threads
// grid that packs the fewest floats (A m x k once per column block, B k x n
// once per row block; on a tie, row blocks), as BLIS factors its threads
// over its loops: against two blocks per thread along the longer side, Xeon
// 2 threads NT m512 n2304 k768 376 -> 402 GFLOP/s, Q·Kᵀ S = 512 111 -> 84 us.
Grid split_packing(std::size_t mr, std::size_t nr, std::size_t m, std::size_t n,
                   std::size_t threads) {
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
  return make_grid(mr, nr, m, n, best_m, threads / best_m);
}

// Runs block(i0, j0, rows, cols) over C: once, on the whole of it, at one
// thread; otherwise over split_packing's grid in parallel. For the drivers
// whose blocks each pack (or read) their own operands.
template <class Block>
void run_blocks(std::size_t mr, std::size_t nr, std::size_t m, std::size_t n, std::size_t threads,
                Block&& block) {
  if (threads <= 1) {
    block(0, 0, m, n);
    return;
  }
  const Grid grid = split_packing(mr, nr, m, n, threads);
  parallel_for(grid.tasks(), threads, [&](std::size_t t) {
    block(grid.row0(t), grid.col0(t), grid.rows(t), grid.cols(t));
  });
}

// Packs op(A)'s m x k block at a in strips of h <= g.mr rows (strip s at
// dst + s * k * g.mr), for run_strips with the same h.
void pack_a_strips(const GemmKernels& g, Trans ta, std::size_t m, std::size_t h, std::size_t k,
                   const float* a, std::size_t lda, float* dst) {
  for (std::size_t r = 0; r < m; r += h) {
    g.pack_a(ta == Trans::T, std::min(h, m - r), k, a_at(ta, a, lda, r, 0), lda,
             dst + r / h * k * g.mr);
  }
}

// The strips of h rows of a packed A block (m rows; strip s at a +
// s*a_strip, the k-range of bk) against the NR strips of bk, each A strip
// reused across the panel. bias (the panel's columns), if given, is added by
// the micro-kernel: pass it on the last K block only.
void run_strips(const GemmKernels& g, std::size_t m, std::size_t h, const float* a,
                std::size_t a_strip, const PackedBView& bk, float alpha, float beta, float* c,
                std::size_t ldc, const float* bias = nullptr) {
  const std::size_t nr = g.nr, nb = bk.n;
  for (std::size_t is = 0; is * h < m; ++is) {
    const float* as = a + is * a_strip;
    const std::size_t mm = std::min(h, m - is * h);
    float* ci = c + is * h * ldc;
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

// Columns per B panel (BLIS's NC) for a kc-deep op(B) of n columns; the A
// blocks are packed again for every column panel. Where the ISA's panel
// already exceeds L2, B streams from L3 whatever its width, so a B whose
// panels together take at most GemmKernels::whole_panel_floats is one panel
// (config.cpp). Column panels never change the arithmetic.
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

// The panels of a packed B against an A packed in strips of h rows
// (gemm_serial_prepacked_ab), filling each from `fill` first if given.
void run_panels(const GemmKernels& g, std::size_t m, std::size_t h, const float* a,
                const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                const float* bias, const BFill* fill) {
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
        run_strips(g, m, h, a + p0 * g.mr, b.k * g.mr, panel, alpha, beta_p, c + j0, ldc,
                   last && bias != nullptr ? bias + j0 : nullptr);
      });
}

// The MC x KC blocks of A against a packed B, with B filled from `fill`
// (if given) by the first A block. Each block is packed in strips of
// balanced_strip_rows: prepacked m16 n2304 k768 NT, 1 thread, Zen 4, 606 ->
// 527 us (bf16's driver alike: 287 -> 261).
void run_a_blocks(const GemmKernels& g, Trans ta, std::size_t m, const float* a, std::size_t lda,
                  const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                  const float* bias, const BFill* fill) {
  if (m == 0 || b.n == 0) return;
  if (b.k == 0 || alpha == 0.f) {
    scale_c(m, b.n, beta, c, ldc, bias);
    return;
  }
  const std::size_t k = b.k, mc = std::min(round_up(m, g.mr), g.mc), kc = std::min(k, g.kc);
  float* apack = thread_scratch(ScratchSlot::kGemmA, mc * kc);
  for (std::size_t i0 = 0; i0 < m; i0 += mc) {
    const std::size_t mb = std::min(mc, m - i0), h = balanced_strip_rows(g.mr, mb);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t p1 = std::min(k, p0 + kc);
      pack_a_strips(g, ta, mb, h, p1 - p0, a_at(ta, a, lda, i0, p0), lda, apack);
      const bool filling = fill != nullptr && i0 == 0;
      const BFill fill_k = filling ? fill->from_row(p0, g.nr) : BFill{};
      run_panels(g, mb, h, apack, b.rows(p0, p1), alpha, p0 == 0 ? beta : 1.f, c + i0 * ldc, ldc,
                 p1 == k ? bias : nullptr, filling ? &fill_k : nullptr);
    }
  }
}

// Columns (a multiple of `align`, at least one) of a kc-deep block of B that
// fit in the L2 block (GemmKernels::l2_block_floats).
std::size_t l2_block_cols(const GemmKernels& g, std::size_t kc, std::size_t align) {
  return std::max(align, g.l2_block_floats / kc / align * align);
}

// Whether op(A) [m x k] packed whole takes no more than one MC x KC block:
// the drivers of paths a and a_b_blocks then pack it once for the whole call.
bool a_is_one_block(const GemmKernels& g, std::size_t m, std::size_t k) {
  return packed_a_floats(g, m, k) <= g.mc * g.kc;
}

// Rows a multiple of this many floats (4 KiB) apart all map to one L1 set.
constexpr std::size_t kAliasFloats = 1024;

// Row stride of a Bᵀ made row-major: whole cache lines (rows start 64-byte
// aligned, as the scratch does) plus one, and one more where that would be
// a multiple of 4 KiB (n in 993..1008): reading such a B in place ran at 107
// against 197 GFLOP/s (Xeon m336 n1024 k512).
std::size_t transposed_ld(std::size_t n) {
  const std::size_t ld = round_up(n, 16) + 16;
  return ld % kAliasFloats == 0 ? ld + 16 : ld;
}

// Columns of op(B) per task of the (parallel) transpose: done serially
// first, it cost 2 threads 13 % on the m128 n2304 projection.
constexpr std::size_t kTransposeCols = 256;

// Columns of C per GEMV task.
constexpr std::size_t kGemvCols = 256;

// A slab of B packed by path both holds at most this many floats (8 MiB),
// so that the scratch does not grow with k.
constexpr std::size_t kSlabMaxFloats = std::size_t{1} << 21;

// ---- The paths' serial drivers, one block of C each ---------------------

// Path gemv: each row of C against B read in place by the vector kernels (a
// strided row of op(A) gathered first). B is read once per row: packing it
// would double the traffic of a bandwidth-bound decode step.
void path_gemv(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
               std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
               std::size_t ldb, float beta, float* c, std::size_t ldc) {
  const auto gemv = tb == Trans::N ? g.gemv_n : g.gemv_t;
  for (std::size_t i = 0; i < m; ++i) {
    const float* x = a_at(ta, a, lda, i, 0);
    if (ta == Trans::T && lda != 1) {
      float* xs = thread_scratch(ScratchSlot::kGemmA, k);
      for (std::size_t p = 0; p < k; ++p) xs[p] = x[p * lda];
      x = xs;
    }
    gemv(k, n, alpha, x, b, ldb, beta, c + i * ldc);
  }
}

// Path a_b_blocks: op(A) packed once, whole (its K blocks are views, as in
// gemm_serial_prepacked_ab), and op(B) in blocks of l2_block_cols columns, each
// packed just before use so that it is still in L2 for every A strip
// (packing all of B first went through memory: pack_b('T') of 768 x 2304
// took 0.6 ms, a fifth of the m = 128 projection; Zen 5 NN m128 n2304 k768
// 184 -> 192 GFLOP/s against NC panels that re-packed A each).
void path_a_b_blocks(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
                     std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
                     std::size_t ldb, float beta, float* c, std::size_t ldc) {
  const std::size_t kc = std::min(k, g.kc);
  const std::size_t nc = std::min(round_up(n, g.nr), l2_block_cols(g, kc, g.nr));
  float* apack = thread_scratch(ScratchSlot::kGemmA, packed_a_floats(g, m, k));
  g.pack_a(ta == Trans::T, m, k, a, lda, apack);
  float* bpack = thread_scratch(ScratchSlot::kGemmB, kc * nc);
  for (std::size_t j0 = 0; j0 < n; j0 += nc) {
    const std::size_t nb = std::min(nc, n - j0);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t kb = std::min(kc, k - p0);
      const PackedBView bk = pack_b(g, tb, kb, nb, b_at(tb, b, ldb, p0, j0), ldb, bpack);
      run_strips(g, m, g.mr, apack + p0 * g.mr, k * g.mr, bk, alpha, p0 == 0 ? beta : 1.f, c + j0,
                 ldc);
    }
  }
}

// Path a: op(A) packed once, whole; the packed micro-kernel reads the whole NR-column
// strips of B at their own row stride, and a last, partial strip is packed
// (the kernel reads whole vectors, past column n). Same kernels and K
// blocks as gemm_serial_prepacked_b, so the same bits.
void path_a(const GemmKernels& g, Trans ta, std::size_t m, std::size_t n, std::size_t k,
            float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
            float beta, float* c, std::size_t ldc) {
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

// Path both: each block packs its columns of op(B) in slabs as its first A
// block uses them (run_a_blocks), and its later A blocks read them
// packed. A slab takes every column up to kSlabMaxFloats, else whole NC
// panels, and every row while it stays within that bound; a slab of fewer
// rows is multiplied by the matching columns of A, with the K blocks where
// they were, so the same bits.
std::size_t slab_cols(const GemmKernels& g, std::size_t k, std::size_t n) {
  const std::size_t cols = std::max(g.nc, kSlabMaxFloats / k / g.nc * g.nc);
  return std::min(round_up(n, g.nr), cols);
}

std::size_t slab_rows(const GemmKernels& g, std::size_t k, std::size_t cols) {
  const std::size_t kc = std::min(k, g.kc);
  return std::min(k, std::max(kc, kSlabMaxFloats / round_up(cols, g.nr) / kc * kc));
}

void path_both(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
               std::size_t k, float alpha, const float* a, std::size_t lda, const float* b,
               std::size_t ldb, float beta, float* c, std::size_t ldc) {
  const std::size_t slab = slab_cols(g, k, n), depth = slab_rows(g, k, slab);
  float* bpack = thread_scratch(ScratchSlot::kGemmB, packed_b_floats(g, depth, slab));
  for (std::size_t s0 = 0; s0 < n; s0 += slab) {
    const std::size_t nb = std::min(slab, n - s0);
    for (std::size_t p0 = 0; p0 < k; p0 += depth) {
      const std::size_t kb = std::min(depth, k - p0);
      const BFill fill{tb, b_at(tb, b, ldb, p0, s0), ldb, bpack};
      run_a_blocks(g, ta, m, a_at(ta, a, lda, 0, p0), lda, PackedBView::whole(bpack, kb, nb, g.nr),
                   alpha, p0 == 0 ? beta : 1.f, c + s0, ldc, nullptr, &fill);
    }
  }
}

// Path b: op(B) packed once, whole; each MR-row strip of A runs through all
// its K blocks and B strips, read in place by the strided-A kernel where
// op(A) = A holds a whole strip, else packed first (a short last strip, or
// op(A) = Aᵀ). Same kernels' arithmetic, so the same bits.
void path_b(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n, std::size_t k,
            float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
            float beta, float* c, std::size_t ldc) {
  const std::size_t mr = g.mr, kc = std::min(k, g.kc);
  const PackedBView bp =
      pack_b(g, tb, k, n, b, ldb, thread_scratch(ScratchSlot::kGemmB, packed_b_floats(g, k, n)));
  float* apack = thread_scratch(ScratchSlot::kGemmA, mr * kc);
  for (std::size_t i0 = 0; i0 < m; i0 += mr) {
    const std::size_t mm = std::min(mr, m - i0);
    const bool in_place = ta == Trans::N && mm == mr;
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const PackedBView bk = bp.rows(p0, std::min(k, p0 + kc));
      const float beta_p = p0 == 0 ? beta : 1.f;
      if (!in_place) g.pack_a(ta == Trans::T, mm, bk.k, a_at(ta, a, lda, i0, p0), lda, apack);
      for (std::size_t j0 = 0; j0 < n; j0 += g.nr) {
        const PackedBView strip = bk.cols(j0, std::min(n, j0 + g.nr));
        float* cij = c + i0 * ldc + j0;
        if (in_place) {
          g.ukernel_strided_a(strip.k, a + i0 * lda + p0, lda, strip.data, cij, ldc, strip.n, alpha,
                              beta_p);
        } else {
          g.ukernel(strip.k, apack, strip.data, g.nr, cij, ldc, mm, strip.n, alpha, beta_p,
                    nullptr);
        }
      }
    }
  }
}

// ---- The plan --------------------------------------------------------------

// Whether the unpacked kernel reads op(B) = B in place (path none): N up to
// small_max_n, where B's rows are read from L2 and A's rows stream from L1,
// or one unpacked tile wide; or a product too small for copies to pay.
bool small_problem(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t k) {
  return n <= std::max(g.nr_u, g.small_max_n) ||
         static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <=
             static_cast<double>(g.small_max_madds);
}

// Whether op(B) = Bᵀ is transposed whole for path none: the cap is on the
// scratch, k x transposed_ld.
bool transpose_pays(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t k) {
  const double floats = static_cast<double>(k) * static_cast<double>(transposed_ld(n));
  return floats <= static_cast<double>(a_is_one_block(g, m, k) ? g.transpose_one_block_max_floats
                                                               : g.transpose_max_floats);
}

// Whether a small op(B) = B, A op(A) = A of enough rows per thread block,
// reads A in place against a packed B (path b): one strip of the unpacked
// tile wide (P·V), B in L2, and a packed tile taller than the unpacked one
// (AVX-512; on AVX2 and NEON it is not).
bool strided_a_pays(const GemmKernels& g, Trans ta, std::size_t m, std::size_t n, std::size_t k,
                    std::size_t threads) {
  return ta == Trans::N && g.mr > g.mr_u && n <= g.nr_u &&
         k * g.nr_u <= g.inplace_strip_max_floats &&
         m / threads >= std::max(g.strided_a_min_rows, g.mr);
}

// Whether op(B) = B is read in place by the packed kernel (path a): small
// enough to stay in cache (b_in_place_max_floats, a large L2 only), an A of
// one block, and rows not a multiple of 4 KiB apart.
bool b_in_place_pays(const GemmKernels& g, Trans tb, std::size_t m, std::size_t k,
                     std::size_t ldb) {
  return tb == Trans::N && a_is_one_block(g, m, k) &&
         static_cast<double>(k) * static_cast<double>(ldb) <=
             static_cast<double>(g.b_in_place_max_floats) &&
         ldb % kAliasFloats != 0;
}

// The path tests force (set_gemm_path_override), plus one; 0: none.
std::atomic<unsigned> forced_path{0};

}  // namespace

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

// The threads a call of this shape uses (threads_for): 2mnk flops, and B's
// 4nk bytes, which bound a small-m product (B read once at two flops per
// float per row of A).
std::size_t call_threads(std::size_t m, std::size_t n, std::size_t k, double flop_time) {
  const double nk = static_cast<double>(n) * static_cast<double>(k);
  return threads_for({2.0 * static_cast<double>(m) * nk * flop_time, 4.0 * nk});
}

void run_gemm_blocks(std::size_t mr, std::size_t nr, std::size_t m, std::size_t n,
                     std::size_t threads,
                     FunctionRef<void(std::size_t, std::size_t, std::size_t, std::size_t)> block) {
  run_blocks(mr, nr, m, n, threads, block);
}

std::string_view gemm_path_name(GemmPath p) noexcept {
  // In the order of GemmPath's enumerators.
  static constexpr std::string_view kNames[] = {"gemv",       "none", "b",          "a",
                                                "a_b_blocks", "both", "prepacked_b"};
  return kNames[static_cast<std::size_t>(p)];
}

void set_gemm_path_override(std::optional<GemmPath> path) noexcept {
  forced_path.store(path ? static_cast<unsigned>(*path) + 1 : 0, std::memory_order_relaxed);
}

GemmPlan plan_gemm(const GemmKernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
                   std::size_t k, std::size_t ldb) {
  GemmPlan p{GemmPath::both, call_threads(m, n, k)};
  if (const unsigned f = forced_path.load(std::memory_order_relaxed)) {
    p.path = static_cast<GemmPath>(f - 1);
  } else if (m == 1) {
    p.path = GemmPath::gemv;
  } else if (tb == Trans::T ? transpose_pays(g, m, n, k) : small_problem(g, m, n, k)) {
    p.path =
        tb == Trans::N && strided_a_pays(g, ta, m, n, k, p.threads) ? GemmPath::b : GemmPath::none;
  } else if (b_in_place_pays(g, tb, m, k, ldb)) {
    p.path = GemmPath::a;
  } else if (a_is_one_block(g, m, k)) {
    p.path = GemmPath::a_b_blocks;
  }
  return p;
}

std::size_t packed_b_floats(const GemmKernels& g, std::size_t k, std::size_t n) {
  return ceil_div(n, g.nr) * k * g.nr;
}

PackedBView pack_b(const GemmKernels& g, Trans tb, std::size_t k, std::size_t n, const float* b,
                   std::size_t ldb, float* dst) {
  if (k != 0 && n != 0) g.pack_b(tb == Trans::T, k, n, b, ldb, dst, k * g.nr);
  return PackedBView::whole(dst, k, n, g.nr);
}

// The loop nest of the file's header comment; each C element still sums its
// K blocks in order, so the same bits on every path.
void gemm_serial_prepacked_b(const GemmKernels& g, Trans ta, std::size_t m, const float* a,
                             std::size_t lda, const PackedBView& b, float alpha, float beta,
                             float* c, std::size_t ldc, const float* bias) {
  run_a_blocks(g, ta, m, a, lda, b, alpha, beta, c, ldc, bias, nullptr);
}

std::size_t packed_a_floats(const GemmKernels& g, std::size_t m, std::size_t k) {
  return round_up(m, g.mr) * k;
}

void pack_a(const GemmKernels& g, Trans ta, std::size_t m, std::size_t k, const float* a,
            std::size_t lda, float* dst) {
  if (m != 0 && k != 0) g.pack_a(ta == Trans::T, m, k, a, lda, dst);
}

void gemm_serial_prepacked_ab(const GemmKernels& g, std::size_t m, const float* a,
                              const PackedBView& b, float alpha, float beta, float* c,
                              std::size_t ldc, const float* bias) {
  if (m == 0 || b.n == 0) return;
  if (b.k == 0 || alpha == 0.f) {
    scale_c(m, b.n, beta, c, ldc, bias);
    return;
  }
  run_panels(g, m, g.mr, a, b, alpha, beta, c, ldc, bias, nullptr);
}

// Path none: per block of columns (sized to stay in L2) and KC block, the
// mr_u-row strips of A read in place against the nr_u-column strips of B
// (row p at b + p*ldb, up to column n). Same KC blocking and arithmetic as
// the packed path, so the same bits.
void gemm_serial_unpacked(const GemmKernels& g, Trans ta, std::size_t m, std::size_t n,
                          std::size_t k, float alpha, const float* a, std::size_t lda,
                          const float* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, beta, c, ldc, nullptr);
    return;
  }
  const std::size_t mr = g.mr_u, nr = g.nr_u, kc = std::min(k, g.kc);
  const std::size_t rsa = ta == Trans::N ? lda : 1, csa = ta == Trans::N ? 1 : lda;
  if (n <= nr && k * nr <= g.inplace_strip_max_floats) {
    // One strip of columns whose B stays in L2: each row strip runs all its
    // K blocks in turn (config.cpp, kInplaceStripMaxFloats).
    for (std::size_t i0 = 0; i0 < m; i0 += mr) {
      const std::size_t mm = std::min(mr, m - i0);
      for (std::size_t p0 = 0; p0 < k; p0 += kc) {
        g.ukernel_unpacked(std::min(kc, k - p0), a_at(ta, a, lda, i0, p0), rsa, csa, b + p0 * ldb,
                           ldb, c + i0 * ldc, ldc, mm, n, alpha, p0 == 0 ? beta : 1.f);
      }
    }
    return;
  }
  const std::size_t nc = l2_block_cols(g, kc, nr);
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

void gemm_serial_prepacked_a_strip(const GemmKernels& g, std::size_t m, const float* a,
                                   std::size_t k, const float* b, std::size_t ldb, std::size_t n,
                                   float alpha, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, 0.0f, c, ldc, nullptr);
    return;
  }
  const std::size_t kc = std::min(k, g.kc);
  for (std::size_t p0 = 0; p0 < k; p0 += kc) {
    for (std::size_t i0 = 0; i0 < m; i0 += g.mr) {
      g.ukernel(std::min(kc, k - p0), a + i0 * k + p0 * g.mr, b + p0 * ldb, ldb, c + i0 * ldc, ldc,
                std::min(g.mr, m - i0), n, alpha, p0 == 0 ? 0.0f : 1.0f, nullptr);
    }
  }
}

void gemm_serial_unpacked_runs(const GemmKernels& g, std::size_t m, std::size_t n, std::size_t k,
                               float alpha, const float* a, std::size_t lda, FloatRuns b,
                               float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, beta, c, ldc, nullptr);
    return;
  }
  const std::size_t mr = g.mr_u, nr = g.nr_u, kc = std::min(k, g.kc);
  for (std::size_t p0 = 0; p0 < k; p0 += kc) {
    const std::size_t kb = std::min(kc, k - p0);
    const float beta_p = p0 == 0 ? beta : 1.f;
    for (std::size_t j0 = 0; j0 < n; j0 += nr) {
      FloatRuns bj = b;
      bj.col += j0;
      for (std::size_t i0 = 0; i0 < m; i0 += mr) {
        g.ukernel_unpacked_runs(kb, a + i0 * lda + p0, lda, bj, c + i0 * ldc + j0, ldc,
                                std::min(mr, m - i0), std::min(nr, n - j0), alpha, beta_p);
      }
    }
    if (p0 + kb == k) break;
    // The next K block's first row.
    b.skip += kb;
    while (b.skip >= b.run->rows) b.skip -= (b.run++)->rows;
  }
}

void reserve_gemm_prepacked_b(const GemmKernels& g, std::size_t m, const PackedBView& b) {
  // run_a_blocks's request for its largest block of rows.
  if (m != 0 && b.n != 0 && b.k != 0) {
    thread_scratch(ScratchSlot::kGemmA, std::min(round_up(m, g.mr), g.mc) * std::min(b.k, g.kc));
  }
}

void gemm_prepacked_b(const GemmKernels& g, Trans ta, std::size_t m, const float* a,
                      std::size_t lda, const PackedBView& b, float alpha, float beta, float* c,
                      std::size_t ldc, const float* bias) {
  const std::size_t n = b.n, k = b.k;
  if (m == 0 || n == 0) return;
  const std::size_t threads = call_threads(m, n, k);
  if (threads <= 1) {
    gemm_serial_prepacked_b(g, ta, m, a, lda, b, alpha, beta, c, ldc, bias);
    return;
  }
  const Grid grid = split_m_first(g, m, n, threads);
  parallel_for(grid.tasks(), threads, [&](std::size_t t) {
    const std::size_t i0 = grid.row0(t), j0 = grid.col0(t);
    const std::size_t mb = grid.rows(t), j1 = j0 + grid.cols(t);
    gemm_serial_prepacked_b(g, ta, mb, a_at(ta, a, lda, i0, 0), lda, b.cols(j0, j1), alpha, beta,
                            c + i0 * ldc + j0, ldc, bias != nullptr ? bias + j0 : nullptr);
  });
}

PackedQuantB PackedQuantB::cols(std::size_t n0, std::size_t n1) const {
  PackedQuantB v = *this;
  v.codes += n0 / nr * strip_stride;
  v.scales += n0;
  if (zeros != nullptr) v.zeros += n0;
  v.n = n1 - n0;
  return v;
}

QuantStrips PackedQuantB::block(std::size_t p0, std::size_t s) const {
  const std::size_t rows = type == QuantCodes::int8 ? p0 : p0 / 2;
  const std::size_t at = p0 / group * scale_stride + s * nr;
  return {codes + s * strip_stride + rows * nr,
          strip_stride,
          scales + at,
          zeros != nullptr ? zeros + at : nullptr,
          scale_stride,
          group,
          group - p0 % group};
}

namespace {

// Strip rows of nr bytes that k rows of codes take: a row each (int8), or
// a row pair (int4, uint4).
std::size_t code_rows(QuantCodes type, std::size_t k) {
  return type == QuantCodes::int8 ? k : k / 2 + k % 2;
}

}  // namespace

std::size_t quant_groups(std::size_t k, std::size_t group) {
  return group == 0 || group >= k ? 1 : ceil_div(k, group);
}

std::size_t packed_quant_b_bytes(const GemmKernels& g, QuantCodes type, std::size_t k,
                                 std::size_t n, const char* what) {
  return checked_mul(checked_round_up(n, g.nr, what), code_rows(type, k), what);
}

std::size_t packed_quant_b_scales(const GemmKernels& g, std::size_t k, std::size_t n,
                                  std::size_t group, const char* what) {
  return checked_mul(checked_round_up(n, g.nr, what), quant_groups(k, group), what);
}

PackedQuantB pack_quant_b(const GemmKernels& g, QuantCodes type, std::size_t k, std::size_t n,
                          std::size_t group, const std::int8_t* w, std::size_t ldw,
                          const float* scales, const float* zeros, std::int8_t* codes,
                          float* scales_dst, float* zeros_dst) {
  const std::size_t nr = g.nr, strips = ceil_div(n, nr), cols = strips * nr;
  const std::size_t groups = quant_groups(k, group);
  const std::size_t grp = groups == 1 ? std::max<std::size_t>(k, 1) : group;
  const bool pairs = type != QuantCodes::int8;
  const std::size_t rows = code_rows(type, k);
  for (std::size_t s = 0; s < strips; ++s) {
    std::int8_t* strip = codes + s * rows * nr;
    for (std::size_t j = 0; j < nr; ++j) {
      const std::size_t col = s * nr + j;
      for (std::size_t r = 0; r < rows; ++r) {
        if (col >= n) {
          strip[r * nr + j] = 0;
        } else if (!pairs) {
          strip[r * nr + j] = w[col * ldw + r];
        } else {
          const unsigned lo = static_cast<unsigned char>(w[col * ldw + 2 * r]) & 15u;
          const unsigned hi =
              2 * r + 1 < k ? static_cast<unsigned char>(w[col * ldw + 2 * r + 1]) & 15u : 0u;
          strip[r * nr + j] = static_cast<std::int8_t>(lo | hi << 4);
        }
      }
    }
  }
  for (std::size_t q = 0; q < groups; ++q) {
    for (std::size_t col = 0; col < cols; ++col) {
      scales_dst[q * cols + col] = col < n ? scales[col * groups + q] : 0.0f;
      if (zeros != nullptr) zeros_dst[q * cols + col] = col < n ? zeros[col * groups + q] : 0.0f;
    }
  }
  return {type, codes,     scales_dst, zeros != nullptr ? zeros_dst : nullptr, nullptr, k, n, nr,
          grp,  rows * nr, cols};
}

namespace {

// gemm_quant_b on the calling thread, for a block of its rows and columns.
void gemm_serial_quant_b(const GemmKernels& g, std::size_t m, const float* a, std::size_t lda,
                         const PackedQuantB& b, float* c, std::size_t ldc, const float* bias) {
  const std::size_t k = b.k, n = b.n, nr = g.nr, kc = std::min(k, g.kc);
  const auto type = static_cast<std::size_t>(b.type);
  if (m == 0 || n == 0) return;
  if (k == 0) {
    scale_c(m, n, 0.0f, c, ldc, bias);
    return;
  }
  if (m == 1) {
    // run_a_blocks's K blocks and strip groups (run_strips), B widened in
    // registers.
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t kb = std::min(kc, k - p0);
      const float beta = p0 == 0 ? 0.0f : 1.0f;
      const float* bias_k = p0 + kb == k ? bias : nullptr;
      for (std::size_t js = 0; js * nr < n;) {
        const std::size_t strips = (js + g.row_strips) * nr <= n ? g.row_strips : 1;
        g.ukernel_row_quant[type](b.block(p0, js), kb, a + p0, strips, c + js * nr,
                                  std::min(strips * nr, n - js * nr), 1.0f, beta,
                                  bias_k != nullptr ? bias_k + js * nr : nullptr);
        js += strips;
      }
    }
    return;
  }
  const std::size_t mc = std::min(round_up(m, g.mr), g.mc);
  float* apack = thread_scratch(ScratchSlot::kGemmA, mc * kc);
  float* widened = thread_scratch(ScratchSlot::kGemmQuantB, kc * nr);
  for (std::size_t i0 = 0; i0 < m; i0 += mc) {
    const std::size_t mb = std::min(mc, m - i0), h = balanced_strip_rows(g.mr, mb);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t kb = std::min(kc, k - p0);
      pack_a_strips(g, Trans::N, mb, h, kb, a + i0 * lda + p0, lda, apack);
      for (std::size_t j0 = 0; j0 < n; j0 += nr) {
        g.widen_quant[type](b.block(p0, j0 / nr), kb, widened);
        const PackedBView strip{widened, kb, std::min(nr, n - j0), nr, kb * nr};
        run_strips(g, mb, h, apack, kb * g.mr, strip, 1.0f, p0 == 0 ? 0.0f : 1.0f,
                   c + i0 * ldc + j0, ldc, p0 + kb == k && bias != nullptr ? bias + j0 : nullptr);
      }
    }
  }
}

}  // namespace

const float* gathered_a(std::size_t m, std::size_t k, const float* a, std::size_t lda,
                        const std::uint32_t* perm, std::size_t* lda_out) {
  *lda_out = lda;
  if (perm == nullptr) return a;
  float* dst = thread_scratch(ScratchSlot::kGemmGatheredA, m * k);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t p = 0; p < k; ++p) dst[i * k + p] = a[i * lda + perm[p]];
  }
  *lda_out = k;
  return dst;
}

void reserve_gathered_a(std::size_t m, std::size_t k, const std::uint32_t* perm) {
  if (perm != nullptr && m != 0) thread_scratch(ScratchSlot::kGemmGatheredA, m * k);
}

void reserve_gemm_quant_b(const GemmKernels& g, std::size_t m, const PackedQuantB& b) {
  reserve_gathered_a(m, b.k, b.perm);
  if (m > 1 && b.n != 0 && b.k != 0) {
    const std::size_t kc = std::min(b.k, g.kc);
    thread_scratch(ScratchSlot::kGemmA, std::min(round_up(m, g.mr), g.mc) * kc);
    thread_scratch(ScratchSlot::kGemmQuantB, kc * g.nr);
  }
}

void gemm_quant_b(const GemmKernels& g, std::size_t m, const float* a_in, std::size_t lda_in,
                  const PackedQuantB& b, float* c, std::size_t ldc, const float* bias) {
  const std::size_t n = b.n, k = b.k;
  if (m == 0 || n == 0) return;
  std::size_t lda;
  const float* a = gathered_a(m, k, a_in, lda_in, b.perm, &lda);
  const std::size_t threads = call_threads(m, n, k);
  if (threads <= 1) {
    gemm_serial_quant_b(g, m, a, lda, b, c, ldc, bias);
    return;
  }
  const Grid grid = split_m_first(g, m, n, threads);
  parallel_for(grid.tasks(), threads, [&](std::size_t t) {
    const std::size_t i0 = grid.row0(t), j0 = grid.col0(t);
    gemm_serial_quant_b(g, grid.rows(t), a + i0 * lda, lda, b.cols(j0, j0 + grid.cols(t)),
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
  const GemmPlan plan = plan_gemm(g, ta, tb, m, n, k, ldb);
  const std::size_t threads = plan.threads;
  switch (plan.path) {
    case GemmPath::gemv: {
      const std::size_t col_blocks = ceil_div(n, kGemvCols);
      parallel_for(m * col_blocks, threads, [&](std::size_t t) {
        const std::size_t i = t / col_blocks, j0 = t % col_blocks * kGemvCols;
        path_gemv(g, ta, tb, 1, std::min(kGemvCols, n - j0), k, alpha, a_at(ta, a, lda, i, 0), lda,
                  b_at(tb, b, ldb, 0, j0), ldb, beta, c + i * ldc + j0, ldc);
      });
      return;
    }
    case GemmPath::prepacked_b: {
      const PackedBView packed = pack_b(
          g, tb, k, n, b, ldb, thread_scratch(ScratchSlot::kGemmB, packed_b_floats(g, k, n)));
      gemm_prepacked_b(g, ta, m, a, lda, packed, alpha, beta, c, ldc);
      return;
    }
    default:
      break;
  }
  // The paths that read op(B) = B in place take a Bᵀ made row-major first.
  const bool reads_b = plan.path == GemmPath::none || plan.path == GemmPath::a;
  const float* bi = b;
  std::size_t ldbi = ldb;
  Trans tbi = tb;
  if (reads_b && tb == Trans::T) {
    const std::size_t ldt = transposed_ld(n);
    float* bt = thread_scratch(ScratchSlot::kGemmTransposedB, k * ldt);
    parallel_for(ceil_div(n, kTransposeCols), threads, [&](std::size_t t) {
      const std::size_t j0 = t * kTransposeCols, j1 = std::min(n, j0 + kTransposeCols);
      g.transpose(k, j1 - j0, b + j0 * ldb, ldb, bt + j0, ldt);
    });
    bi = bt;
    ldbi = ldt;
    tbi = Trans::N;
  }
  run_blocks(
      g.mr, g.nr, m, n, threads,
      [&](std::size_t i0, std::size_t j0, std::size_t rows, std::size_t cols) {
        const float* ai = a_at(ta, a, lda, i0, 0);
        const float* bj = b_at(tbi, bi, ldbi, 0, j0);
        float* cij = c + i0 * ldc + j0;
        switch (plan.path) {
          case GemmPath::none:
            gemm_serial_unpacked(g, ta, rows, cols, k, alpha, ai, lda, bj, ldbi, beta, cij, ldc);
            break;
          case GemmPath::b:
            path_b(g, ta, tbi, rows, cols, k, alpha, ai, lda, bj, ldbi, beta, cij, ldc);
            break;
          case GemmPath::a:
            path_a(g, ta, rows, cols, k, alpha, ai, lda, bj, ldbi, beta, cij, ldc);
            break;
          case GemmPath::a_b_blocks:
            path_a_b_blocks(g, ta, tbi, rows, cols, k, alpha, ai, lda, bj, ldbi, beta, cij, ldc);
            break;
          default:
            path_both(g, ta, tbi, rows, cols, k, alpha, ai, lda, bj, ldbi, beta, cij, ldc);
            break;
        }
      });
}

}  // namespace mha::detail
