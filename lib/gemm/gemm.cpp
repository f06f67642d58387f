// BLIS-style SGEMM driver: the portable loops, packing and threading around
// the per-ISA micro-kernels (ukernel.hpp). Loop nest of gemm_serial, for a B
// already packed whole:
//   NC columns (B panel in L3) > KC depth > MC rows (pack A block into L2)
//     > NR strips (B strip in L1) > MR strips (micro-kernel).
// Threads split M x N into blocks whose shape depends only on the problem
// (never on the thread count, never on K), so every C element is the same
// sequence of operations at any thread count.
#include "gemm/gemm.hpp"

#include <algorithm>

#include "common/parallel.hpp"
#include "common/scratch.hpp"

namespace mha::detail {
namespace {

std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}
std::size_t round_up(std::size_t a, std::size_t b) {
  return ceil_div(a, b) * b;
}

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

void add_bias(std::size_t m, std::size_t n, const float* bias, float* c, std::size_t ldc) {
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    for (std::size_t j = 0; j < n; ++j) ci[j] += bias[j];
  }
}

const float* a_at(Trans ta, const float* a, std::size_t lda, std::size_t i, std::size_t p) {
  return ta == Trans::N ? a + i * lda + p : a + p * lda + i;
}

// Work below which one more thread does not pay for its wake-up: about
// 20 us of one core at AVX-512 peak (TBB fork/join costs a few us).
constexpr double kFlopsPerThread = 4.0e6;

std::size_t thread_cap(std::size_t m, std::size_t n, std::size_t k) {
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return static_cast<std::size_t>(std::max(1.0, flops / kFlopsPerThread));
}

}  // namespace

std::size_t packed_b_floats(const GemmKernels& g, std::size_t k, std::size_t n) {
  return ceil_div(n, g.nr) * k * g.nr;
}

PackedBView pack_b(const GemmKernels& g, Trans tb, std::size_t k, std::size_t n, const float* b,
                   std::size_t ldb, float* dst) {
  const std::size_t stride = k * g.nr;
  if (k != 0 && n != 0) g.pack_b(tb == Trans::T, k, n, b, ldb, dst, stride);
  return {dst, k, n, g.nr, stride};
}

void gemm_serial(const GemmKernels& g, Trans ta, std::size_t m, const float* a, std::size_t lda,
                 const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                 const float* bias) {
  const std::size_t n = b.n, k = b.k;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, beta, c, ldc, bias);
    return;
  }
  const std::size_t mr = g.mr, nr = g.nr;
  const std::size_t mc = std::min(round_up(m, mr), g.mc);
  const std::size_t kc = std::min(k, g.kc);
  float* apack = thread_scratch(ScratchSlot::kGemmA, mc * kc);

  for (std::size_t j0 = 0; j0 < n; j0 += g.nc) {
    const std::size_t nb = std::min(g.nc, n - j0);
    const PackedBView panel = b.cols(j0, j0 + nb);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t kb = std::min(kc, k - p0);
      const float beta_p = p0 == 0 ? beta : 1.f;
      const PackedBView bk = panel.rows(p0, p0 + kb);
      for (std::size_t i0 = 0; i0 < m; i0 += mc) {
        const std::size_t mb = std::min(mc, m - i0);
        g.pack_a(ta == Trans::T, mb, kb, a_at(ta, a, lda, i0, p0), lda, apack);
        for (std::size_t js = 0; js * nr < nb; ++js) {
          const float* bs = bk.data + js * bk.strip_stride;
          const std::size_t nn = std::min(nr, nb - js * nr);
          float* cj = c + i0 * ldc + j0 + js * nr;
          for (std::size_t is = 0; is * mr < mb; ++is) {
            g.ukernel(kb, apack + is * kb * mr, bs, cj + is * mr * ldc, ldc,
                      std::min(mr, mb - is * mr), nn, alpha, beta_p);
          }
        }
      }
    }
    if (bias != nullptr) add_bias(m, nb, bias + j0, c + j0, ldc);
  }
}

void gemm_packed(const GemmKernels& g, Trans ta, std::size_t m, const float* a, std::size_t lda,
                 const PackedBView& b, float alpha, float beta, float* c, std::size_t ldc,
                 const float* bias) {
  const std::size_t n = b.n, k = b.k;
  if (m == 0 || n == 0) return;
  const std::size_t threads = std::min(effective_threads(), thread_cap(m, n, k));
  if (threads <= 1) {
    gemm_serial(g, ta, m, a, lda, b, alpha, beta, c, ldc, bias);
    return;
  }
  // Blocks of MC rows x a multiple of NR columns, at least 16 of them when the
  // shape allows (load balance up to 16 threads) but no narrower than 4
  // strips, so re-packing the A block per column block stays under ~1 % of
  // the work. The grid is a function of the shape only.
  const std::size_t mc = std::min(round_up(m, g.mr), g.mc);
  const std::size_t mblocks = ceil_div(m, mc);
  const std::size_t strips = ceil_div(n, g.nr);
  const std::size_t want_n = ceil_div(16, mblocks);
  const std::size_t strips_per_block =
      std::max<std::size_t>(std::min<std::size_t>(strips, 4), ceil_div(strips, want_n));
  const std::size_t nblocks = ceil_div(strips, strips_per_block);
  const std::size_t ncols = strips_per_block * g.nr;

  parallel_for(mblocks * nblocks, threads, [&](std::size_t t) {
    const std::size_t i0 = (t / nblocks) * mc, j0 = (t % nblocks) * ncols;
    const std::size_t mb = std::min(mc, m - i0), j1 = std::min(n, j0 + ncols);
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
  const std::size_t threads = std::min(effective_threads(), thread_cap(m, n, k));

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

  // Pack all of op(B) once into this thread's kGemmB (threads pack disjoint
  // strip ranges), then run the threaded packed driver on it.
  const std::size_t stride = k * g.nr;
  float* bpack = thread_scratch(ScratchSlot::kGemmB, packed_b_floats(g, k, n));
  const std::size_t strips = ceil_div(n, g.nr);
  constexpr std::size_t kStripsPerTask = 8;
  parallel_for(ceil_div(strips, kStripsPerTask), threads, [&](std::size_t t) {
    const std::size_t j0 = t * kStripsPerTask * g.nr;
    const std::size_t nb = std::min(kStripsPerTask * g.nr, n - j0);
    g.pack_b(tb == Trans::T, k, nb, tb == Trans::N ? b + j0 : b + j0 * ldb, ldb,
             bpack + (j0 / g.nr) * stride, stride);
  });
  const PackedBView view{bpack, k, n, g.nr, stride};
  gemm_packed(g, ta, m, a, lda, view, alpha, beta, c, ldc, nullptr);
}

}  // namespace mha::detail
