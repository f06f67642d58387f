// bf16 GEMM driver: the plan's two paths (gemm_bf16.hpp). The dot path runs
// the sgemm frame (run_gemm_blocks: one block of whole tiles per thread,
// never a split of K) around the bf16 kernels; inside a block the BLIS loop
// nest NC columns > KC depth (pack the B panel) > MC rows (pack the A block)
// > MR strips > NR strips. Every C element sums its K blocks in order
// through C, each from acc = 0, whichever block and thread computes it, so
// results are bit-identical at any thread count.
#include "gemm/gemm_bf16.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/aligned.hpp"
#include "common/scratch.hpp"
#include "dispatch/cpu_features.hpp"

namespace mha::detail {
namespace {

const std::uint16_t* at(Trans t, const std::uint16_t* x, std::size_t ld, std::size_t row,
                        std::size_t col) {
  return t == Trans::N ? x + row * ld + col : x + col * ld + row;
}

// One block of C (rows x cols from its first element) on the dot path.
void gemm_bf16_block(const GemmBf16Kernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
                     std::size_t k, float alpha, const std::uint16_t* a, std::size_t lda,
                     const std::uint16_t* b, std::size_t ldb, float beta, float* c,
                     std::size_t ldc) {
  const std::size_t kc = std::min(round_up(k, 2), g.kc), kcp = kc / 2;
  const std::size_t nc = std::min(round_up(n, g.nr), round_up(g.nc, g.nr));
  const std::size_t mc = std::min(round_up(m, g.mr), round_up(g.mc, g.mr));
  // One float of scratch holds a pair of bf16.
  auto* bpack = reinterpret_cast<std::uint16_t*>(thread_scratch(ScratchSlot::kGemmB, kcp * nc));
  auto* apack = reinterpret_cast<std::uint32_t*>(thread_scratch(ScratchSlot::kGemmA, kcp * mc));
  for (std::size_t j0 = 0; j0 < n; j0 += nc) {
    const std::size_t nb = std::min(nc, n - j0);
    for (std::size_t p0 = 0; p0 < k; p0 += kc) {
      const std::size_t kb = std::min(kc, k - p0), kp = (kb + 1) / 2;
      const float beta_p = p0 == 0 ? beta : 1.f;
      const std::size_t strip = kp * g.nr * 2;
      g.pack_b(tb == Trans::T, kb, nb, at(tb, b, ldb, p0, j0), ldb, bpack, strip);
      for (std::size_t i0 = 0; i0 < m; i0 += mc) {
        const std::size_t mb = std::min(mc, m - i0);
        g.pack_a(ta == Trans::T, mb, kb, at(ta, a, lda, i0, p0), lda, apack);
        for (std::size_t is = 0; is * g.mr < mb; ++is) {
          const std::size_t mm = std::min(g.mr, mb - is * g.mr);
          float* ci = c + (i0 + is * g.mr) * ldc + j0;
          for (std::size_t js = 0; js * g.nr < nb; ++js) {
            g.ukernel(kp, apack + is * kp * g.mr, bpack + js * strip, ci + js * g.nr, ldc, mm,
                      std::min(g.nr, nb - js * g.nr), alpha, beta_p);
          }
        }
      }
    }
  }
}

// op(X) stored rows x cols at ld, converted to fp32 rows x cols (ld = cols).
const float* as_fp32(ScratchSlot slot, std::size_t rows, std::size_t cols, const std::uint16_t* x,
                     std::size_t ld) {
  float* y = thread_scratch(slot, rows * cols);
  for (std::size_t i = 0; i < rows; ++i) bf16_to_fp32(cols, x + i * ld, y + i * cols);
  return y;
}

// The path tests force (set_gemm_bf16_path_override), plus one; 0: none.
std::atomic<unsigned> forced_path{0};

}  // namespace

const GemmBf16Kernels* gemm_bf16_kernels(Isa isa) noexcept {
#if MHA_BUILD_AVX512BF16
  if (isa == Isa::avx512 && cpu_features().avx512_bf16) return &gemm_bf16_kernels_avx512bf16;
#endif
  (void)isa;
  return nullptr;
}

std::string_view gemm_bf16_path_name(Bf16Path p) noexcept {
  return p == Bf16Path::dot ? "dot" : "fp32";
}

void set_gemm_bf16_path_override(std::optional<Bf16Path> path) noexcept {
  forced_path.store(path ? static_cast<unsigned>(*path) + 1 : 0, std::memory_order_relaxed);
}

Bf16Plan plan_gemm_bf16(const GemmBf16Kernels* g, std::size_t m, std::size_t n, std::size_t k) {
  Bf16Plan p{g != nullptr ? Bf16Path::dot : Bf16Path::fp32, call_threads(m, n, k)};
  if (const unsigned f = forced_path.load(std::memory_order_relaxed); f != 0 && g != nullptr) {
    p.path = static_cast<Bf16Path>(f - 1);
  }
  return p;
}

void gemm_bf16(const GemmBf16Kernels* g, const GemmKernels& f, Trans ta, Trans tb, std::size_t m,
               std::size_t n, std::size_t k, float alpha, const std::uint16_t* a, std::size_t lda,
               const std::uint16_t* b, std::size_t ldb, float beta, float* c, std::size_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, beta, c, ldc, nullptr);
    return;
  }
  const Bf16Plan plan = plan_gemm_bf16(g, m, n, k);
  if (plan.path == Bf16Path::fp32) {
    const std::size_t a_rows = ta == Trans::N ? m : k, a_cols = ta == Trans::N ? k : m;
    const std::size_t b_rows = tb == Trans::N ? k : n, b_cols = tb == Trans::N ? n : k;
    const float* af = as_fp32(ScratchSlot::kBf16AsFp32A, a_rows, a_cols, a, lda);
    const float* bf = as_fp32(ScratchSlot::kBf16AsFp32B, b_rows, b_cols, b, ldb);
    sgemm(f, ta, tb, m, n, k, alpha, af, a_cols, bf, b_cols, beta, c, ldc);
    return;
  }
  run_gemm_blocks(g->mr, g->nr, m, n, plan.threads,
                  [&](std::size_t i0, std::size_t j0, std::size_t rows, std::size_t cols) {
                    gemm_bf16_block(*g, ta, tb, rows, cols, k, alpha, at(ta, a, lda, i0, 0), lda,
                                    at(tb, b, ldb, 0, j0), ldb, beta, c + i0 * ldc + j0, ldc);
                  });
}

void fp32_to_bf16(std::size_t n, const float* x, std::uint16_t* y) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u;
    std::memcpy(&u, &x[i], sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      y[i] = static_cast<std::uint16_t>(u >> 16 | 0x40u);  // NaN: kept, made quiet
    } else {
      y[i] = static_cast<std::uint16_t>((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
    }
  }
}

void bf16_to_fp32(std::size_t n, const std::uint16_t* x, float* y) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(&y[i], &u, sizeof u);
  }
}

}  // namespace mha::detail
