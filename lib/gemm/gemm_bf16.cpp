// bf16 GEMM driver: the plan's two paths (gemm_bf16.hpp) and the products
// with a prepacked B. The dot path runs the sgemm frame (run_gemm_blocks:
// one block of whole tiles per thread, never a split of K) around the bf16
// kernels; inside a block, the fp32 drivers' loop nest (gemm.cpp): per slab
// of B, MC rows > KC depth (pack the A block) > NC columns (the first A
// block packs each B panel, later ones reuse it) > MR strips > NR strips.
// Measured against BLIS's NC > KC > MC (which re-packed A for every NC
// panel) on Zen 4 (EPYC, family 25 model 17), 1 thread, bench_gemm's bf16
// rows, 6 interleaved pairs per round, GFLOP/s medians, on a machine shared
// with other builds (load 5-9 on 2 cores; single pairs spread up to 10 %):
//   avx512_bf16, two rounds: sq1024 164 -> 168 and 185 -> 191, sq2048
//     175 -> 179 and 182 -> 191, projections (NT, k768) m128 n2304
//     134 -> 139 and 135 -> 137, m512 n2304 182 -> 186 and 183 -> 186,
//     m4096 n2304 204 -> 209 and 205 -> 212; m4096 n768 and qk s2048
//     (n <= NC) unchanged;
//   avx2_widen, two rounds: paired ratios' medians 0.97-1.01, single pairs
//     0.84-1.10, so noise, but sq2048, 102 -> 99 and 102 -> 100 (all 12
//     pairs lower; perhaps its 6 MiB slab of B, read from L3, against the
//     1.5 MiB NC x KC panel: not measured apart).
// The avx512_bf16 gains decided it; avx2_widen serves CPUs without
// AVX512_BF16, and this one measures it on Zen 4 only.
// Every C element sums its K blocks in order through C, each from acc = 0,
// whichever order, block and thread computes it, so results are
// bit-identical at any thread count and in either loop order.
#include "gemm/gemm_bf16.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/aligned.hpp"
#include "common/error.hpp"
#include "common/scratch.hpp"
#include "dispatch/cpu_features.hpp"
#include "simd/lanes.hpp"

namespace mha::detail {
namespace {

const std::uint16_t* at(Trans t, const std::uint16_t* x, std::size_t ld, std::size_t row,
                        std::size_t col) {
  return t == Trans::N ? x + row * ld + col : x + col * ld + row;
}

// Packs op(A)'s mb x kb block at a into apack: in strips of
// balanced_strip_rows rows, strip s at word s * packed_a_strip_words, for
// run_strips; whole, for a set with its own panel kernel (AMX).
void pack_a_block(const GemmBf16Kernels& g, Trans ta, std::size_t mb, std::size_t kb,
                  const std::uint16_t* a, std::size_t lda, std::uint32_t* apack) {
  if (g.panel != nullptr) return g.pack_a(ta == Trans::T, mb, kb, a, lda, apack);
  const std::size_t h = balanced_strip_rows(g.mr, mb);
  const std::size_t words = packed_a_strip_words(g, (kb + 1) / 2);
  for (std::size_t r = 0; r < mb; r += h) {
    g.pack_a(ta == Trans::T, std::min(h, mb - r), kb, at(ta, a, lda, r, 0), lda,
             apack + r / h * words);
  }
}

// One K block (kp pairs) of an A block of mb rows packed by pack_a_block
// against n columns of packed B (strips b_strip elements apart): every A
// strip against every B strip, or bf16_row for a single row.
void run_strips(const GemmBf16Kernels& g, std::size_t mb, std::size_t kp,
                const std::uint32_t* apack, const std::uint16_t* bk, std::size_t b_strip, float* c,
                std::size_t ldc, std::size_t n, float alpha, float beta) {
  if (mb == 1) return bf16_row(g, true, kp, apack, bk, b_strip, c, n, alpha, beta);
  if (g.panel != nullptr) return g.panel(kp, apack, bk, b_strip, c, ldc, mb, n, alpha, beta);
  const std::size_t a_strip = packed_a_strip_words(g, kp), h = balanced_strip_rows(g.mr, mb);
  for (std::size_t is = 0; is * h < mb; ++is) {
    const std::size_t mm = std::min(h, mb - is * h);
    float* ci = c + is * h * ldc;
    for (std::size_t js = 0; js * g.nr < n; ++js) {
      g.ukernel(kp, apack + is * a_strip, bk + js * b_strip, ci + js * g.nr, ldc, mm,
                std::min(g.nr, n - js * g.nr), alpha, beta);
    }
  }
}

// The dot kernels' K-block loop over a B already packed for them whole
// (strips of b_strip elements, k rows; column j0's strip first): for each K
// block, each MC block of A packed and run against every strip of B.
void run_packed_b(const GemmBf16Kernels& g, Trans ta, std::size_t m, std::size_t n, std::size_t k,
                  float alpha, const std::uint16_t* a, std::size_t lda, const std::uint16_t* b,
                  std::size_t b_strip, float beta, float* c, std::size_t ldc) {
  const std::size_t kc = std::min(packed_b_rows(g, k), g.kc), kcp = kc / 2;
  const std::size_t mc = std::min(round_up(m, g.mr), round_up(g.mc, g.mr));
  auto* apack = reinterpret_cast<std::uint32_t*>(
      thread_scratch(ScratchSlot::kGemmA, mc / g.mr * packed_a_strip_words(g, kcp)));
  for (std::size_t p0 = 0; p0 < k; p0 += kc) {
    const std::size_t kb = std::min(kc, k - p0), kp = (kb + 1) / 2;
    const float beta_p = p0 == 0 ? beta : 1.f;
    const std::uint16_t* bk = b + p0 * g.nr;  // p0 rows of nr elements
    for (std::size_t i0 = 0; i0 < m; i0 += mc) {
      const std::size_t mb = std::min(mc, m - i0);
      pack_a_block(g, ta, mb, kb, at(ta, a, lda, i0, p0), lda, apack);
      run_strips(g, mb, kp, apack, bk, b_strip, c + i0 * ldc, ldc, n, alpha, beta_p);
    }
  }
}

// run_packed_b for A rows as ukernel_rows reads them (lda pairs apart), with
// no packing: the same K blocks, so the same bits.
// ep (if not null) on the last K block.
void run_rows_b(const GemmBf16Kernels& g, std::size_t m, std::size_t n, std::size_t k, float alpha,
                const std::uint32_t* a, std::size_t lda, const std::uint16_t* b,
                std::size_t b_strip, float beta, float* c, std::size_t ldc,
                const Bf16Epilogue* ep) {
  const std::size_t kc = std::min(packed_b_rows(g, k), g.kc);
  const std::size_t mc = round_up(g.mc, g.mr);
  for (std::size_t p0 = 0; p0 < k; p0 += kc) {
    const std::size_t kp = (std::min(kc, k - p0) + 1) / 2;
    for (std::size_t i0 = 0; i0 < m; i0 += mc) {
      g.panel_rows(kp, a + i0 * lda + p0 / 2, lda, b + p0 * g.nr, b_strip, c + i0 * ldc, ldc,
                   std::min(mc, m - i0), n, alpha, p0 == 0 ? beta : 1.f,
                   p0 + kc >= k ? ep : nullptr);
    }
  }
}

// Whether gemm_bf16_packed takes an fp32 A as rows of the set's own
// rounding (round_rows, vectorized) and runs them unpacked (panel_rows):
// a set that reads A in row tiles (AMX), whose packed strips are those rows
// anyway. Rounding by fp32_to_bf16 (baseline ISA) and packing took 7.7 % of
// a BERT s512 bf16 forward on AMX.
bool a_as_rows(const GemmBf16Kernels& g, Trans ta, const float* a32) {
  return a32 != nullptr && ta == Trans::N && g.panel_rows != nullptr && g.a_bytes == 2;
}

// A slab of B packed by a block holds at most this many pairs (8 MiB), as
// the fp32 driver's slabs (gemm.cpp, kSlabMaxFloats), so that the scratch
// does not grow with k.
constexpr std::size_t kSlabMaxPairs = std::size_t{1} << 21;

// One block of C (rows x cols from its first element) on the dot path, in
// the fp32 driver's order: per slab of B (every column and row while it
// fits kSlabMaxPairs, else whole NC panels and KC blocks), MC rows > KC
// depth (pack the A block) > NC panels (the first A block packs each panel
// of the slab, the later ones read it packed).
void gemm_bf16_block(const GemmBf16Kernels& g, Trans ta, Trans tb, std::size_t m, std::size_t n,
                     std::size_t k, float alpha, const std::uint16_t* a, std::size_t lda,
                     const std::uint16_t* b, std::size_t ldb, float beta, float* c,
                     std::size_t ldc) {
  const std::size_t k2 = packed_b_rows(g, k), kc = std::min(k2, g.kc);
  const std::size_t mc = std::min(round_up(m, g.mr), round_up(g.mc, g.mr));
  const std::size_t nc = std::min(round_up(n, g.nr), round_up(g.nc, g.nr));
  const std::size_t slab =
      std::min(round_up(n, g.nr), std::max(nc, kSlabMaxPairs * 2 / k2 / nc * nc));
  const std::size_t depth = std::min(k2, std::max(kc, kSlabMaxPairs * 2 / slab / kc * kc));
  // One float of scratch holds a pair of bf16.
  auto* bpack =
      reinterpret_cast<std::uint16_t*>(thread_scratch(ScratchSlot::kGemmB, depth / 2 * slab));
  auto* apack = reinterpret_cast<std::uint32_t*>(
      thread_scratch(ScratchSlot::kGemmA, mc / g.mr * packed_a_strip_words(g, kc / 2)));
  for (std::size_t s0 = 0; s0 < n; s0 += slab) {
    const std::size_t ns = std::min(slab, n - s0);
    for (std::size_t d0 = 0; d0 < k; d0 += depth) {
      const std::size_t kd = std::min(depth, k - d0), strip = packed_b_rows(g, kd) * g.nr;
      for (std::size_t i0 = 0; i0 < m; i0 += mc) {
        const std::size_t mb = std::min(mc, m - i0);
        for (std::size_t p0 = d0; p0 < d0 + kd; p0 += kc) {
          const std::size_t kb = std::min(kc, d0 + kd - p0), kp = (kb + 1) / 2;
          const float beta_p = p0 == 0 ? beta : 1.f;
          pack_a_block(g, ta, mb, kb, at(ta, a, lda, i0, p0), lda, apack);
          for (std::size_t j0 = 0; j0 < ns; j0 += nc) {
            const std::size_t nb = std::min(nc, ns - j0);
            std::uint16_t* bk = bpack + j0 / g.nr * strip + (p0 - d0) * g.nr;
            if (i0 == 0) {
              g.pack_b(tb == Trans::T, kb, nb, at(tb, b, ldb, p0, s0 + j0), ldb, bk, strip);
            }
            run_strips(g, mb, kp, apack, bk, strip, c + i0 * ldc + s0 + j0, ldc, nb, alpha, beta_p);
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
// The kernels tests force (set_gemm_bf16_kernels_override), or null.
std::atomic<const GemmBf16Kernels*> forced_kernels{nullptr};

// op(A) stored rows x cols at ld, rounded to bf16 (ld = cols).
const std::uint16_t* rounded_bf16(std::size_t rows, std::size_t cols, const float* x,
                                  std::size_t ld) {
  auto* y = reinterpret_cast<std::uint16_t*>(
      thread_scratch(ScratchSlot::kBf16RoundedA, ceil_div(rows * cols, 2)));
  for (std::size_t i = 0; i < rows; ++i) fp32_to_bf16(cols, x + i * ld, y + i * cols);
  return y;
}

}  // namespace

std::size_t packed_bf16_b_bytes(const GemmBf16Kernels* g, const GemmKernels& f, std::size_t k,
                                std::size_t n) {
  if (g != nullptr)
    return ceil_div(n, g->nr) * packed_b_rows(*g, k) * g->nr * sizeof(std::uint16_t);
  return packed_b_floats(f, k, n) * sizeof(float);
}

PackedBf16B pack_bf16_b(const GemmBf16Kernels* g, const GemmKernels& f, Trans tb, std::size_t k,
                        std::size_t n, const std::uint16_t* b, std::size_t ldb, void* dst) {
  if (g != nullptr) {
    prepare_thread(*g);
    g->pack_b(tb == Trans::T, k, n, b, ldb, static_cast<std::uint16_t*>(dst),
              packed_b_rows(*g, k) * g->nr);
  } else {
    const std::size_t rows = tb == Trans::N ? k : n, cols = tb == Trans::N ? n : k;
    const float* bf = as_fp32(ScratchSlot::kBf16AsFp32B, rows, cols, b, ldb);
    pack_b(f, tb, k, n, bf, cols, static_cast<float*>(dst));
  }
  return {g, &f, k, n, dst};
}

void gemm_bf16_packed(Trans ta, std::size_t m, float alpha, const std::uint16_t* a16,
                      const float* a32, std::size_t lda, const PackedBf16B& b, float beta, float* c,
                      std::size_t ldc, const Bf16Epilogue* ep) {
  const std::size_t n = b.n, k = b.k;
  if (m == 0 || n == 0) return;
  if (k == 0 || alpha == 0.f) {
    scale_c(m, n, beta, c, ldc, nullptr);
    if (ep != nullptr) apply_epilogue_rows(*ep, c, ldc, m, n);
    return;
  }
  const std::size_t rows = ta == Trans::N ? m : k, cols = ta == Trans::N ? k : m;
  if (b.g != nullptr && a_as_rows(*b.g, ta, a32)) {
    const GemmBf16Kernels& g = *b.g;
    const std::size_t ld16 = round_up(k, 2), strip = packed_b_rows(g, k) * g.nr;
    auto* a_rows =
        reinterpret_cast<std::uint32_t*>(thread_scratch(ScratchSlot::kBf16RoundedA, m * ld16 / 2));
    prepare_thread(g);
    g.round_rows(m, k, a32, lda, a_rows, ld16);
    const auto* data = static_cast<const std::uint16_t*>(b.data);
    run_gemm_blocks(g.mr, g.nr, m, n, call_threads(m, n, k, g.flop_time),
                    [&](std::size_t i0, std::size_t j0, std::size_t bm, std::size_t bn) {
                      prepare_thread(g);
                      const Bf16Epilogue block_ep = ep != nullptr ? ep->from(j0) : Bf16Epilogue{};
                      run_rows_b(g, bm, bn, k, alpha, a_rows + i0 * ld16 / 2, ld16 / 2,
                                 data + j0 / g.nr * strip, strip, beta, c + i0 * ldc + j0, ldc,
                                 ep != nullptr ? &block_ep : nullptr);
                    });
    return;
  }
  if (a32 != nullptr) {
    a16 = rounded_bf16(rows, cols, a32, lda);
    lda = cols;
  }
  if (b.g == nullptr) {
    const float* af = as_fp32(ScratchSlot::kBf16AsFp32A, rows, cols, a16, lda);
    gemm_prepacked_b(*b.f, ta, m, af, cols,
                     PackedBView::whole(static_cast<const float*>(b.data), k, n, b.f->nr), alpha,
                     beta, c, ldc);
    if (ep != nullptr) apply_epilogue_rows(*ep, c, ldc, m, n);
    return;
  }
  const GemmBf16Kernels& g = *b.g;
  const auto* data = static_cast<const std::uint16_t*>(b.data);
  const std::size_t strip = packed_b_rows(g, k) * g.nr;
  run_gemm_blocks(g.mr, g.nr, m, n, call_threads(m, n, k, g.flop_time),
                  [&](std::size_t i0, std::size_t j0, std::size_t bm, std::size_t bn) {
                    prepare_thread(g);
                    run_packed_b(g, ta, bm, bn, k, alpha, at(ta, a16, lda, i0, 0), lda,
                                 data + j0 / g.nr * strip, strip, beta, c + i0 * ldc + j0, ldc);
                    if (ep != nullptr) ep->apply(c + i0 * ldc + j0, ldc, bm, j0, bn);
                  });
}

// In blocks of 32 rows per task, on the ISA's vectors (the baseline ISA's
// loop took 0.45 ms of a BERT s512 bf16 forward's 5.8 on the AMX Xeon).
void apply_epilogue_rows(const Bf16Epilogue& ep, float* c, std::size_t ldc, std::size_t m,
                         std::size_t n) {
  constexpr std::size_t kRows = 32;
  const double bytes = 8.0 * static_cast<double>(m) * static_cast<double>(n);
  parallel_for(ceil_div(m, kRows), threads_for({0, bytes}), [&](std::size_t t) {
    const std::size_t r0 = t * kRows;
    ep.apply(c + r0 * ldc, ldc, std::min(kRows, m - r0), 0, n);
  });
}

void reserve_gemm_bf16_packed(std::size_t m, const PackedBf16B& b) {
  const std::size_t n = b.n, k = b.k;
  if (m == 0 || n == 0 || k == 0) return;
  thread_scratch(ScratchSlot::kBf16RoundedA, m * round_up(k, 2) / 2);
  if (b.g == nullptr) {
    thread_scratch(ScratchSlot::kBf16AsFp32A, m * k);
    reserve_gemm_prepacked_b(*b.f, m,
                             PackedBView::whole(static_cast<const float*>(b.data), k, n, b.f->nr));
    return;
  }
  // run_packed_b's packed A block.
  const GemmBf16Kernels& g = *b.g;
  thread_scratch(ScratchSlot::kGemmA,
                 std::min(round_up(m, g.mr), round_up(g.mc, g.mr)) / g.mr *
                     packed_a_strip_words(g, std::min(packed_b_rows(g, k), g.kc) / 2));
}

const GemmBf16Kernels* amx_bf16_one_row_for_tests() {
#if MHA_BUILD_AMX_BF16
  if (cpu_features().avx512) return &gemm_bf16_kernels_amx_bf16;
#endif
  return nullptr;
}

namespace {

// The kernel sets this build has, and whether this CPU runs each.
struct Bf16Set {
  const GemmBf16Kernels* g;
  bool runs;
};

std::vector<Bf16Set> find_sets() {
  [[maybe_unused]] const CpuFeatures& f = cpu_features();
  std::vector<Bf16Set> sets;
#if MHA_BUILD_AMX_BF16
  sets.push_back({&gemm_bf16_kernels_amx_bf16, f.amx_bf16});
#endif
#if MHA_BUILD_AVX512_BF16
  sets.push_back({&gemm_bf16_kernels_avx512_bf16, f.avx512_bf16});
#endif
#if MHA_BUILD_AVX512_WIDEN
  sets.push_back({&gemm_bf16_kernels_avx512_widen, f.avx512});
#endif
#if MHA_BUILD_AVX2_WIDEN
  sets.push_back({&gemm_bf16_kernels_avx2_widen, f.avx2_fma});
#endif
#if MHA_BUILD_NEON_BFMMLA
  sets.push_back({&gemm_bf16_kernels_neon_bfmmla, f.neon_bf16});
#endif
#if MHA_BUILD_NEON_BF16
  sets.push_back({&gemm_bf16_kernels_neon_bf16, f.neon_bf16});
#endif
  sets.push_back({&gemm_bf16_kernels_amx_emulated, true});
  return sets;
}

// Made once: calls look sets up without allocating.
const std::vector<Bf16Set>& built_sets() {
  static const std::vector<Bf16Set> sets = find_sets();
  return sets;
}

const GemmBf16Kernels* runnable_set(std::string_view name) {
  for (const Bf16Set& s : built_sets()) {
    if (s.runs && name == s.g->name) return s.g;
  }
  return nullptr;
}

// The set MHA_BF16_KERNEL names, or a message saying why it cannot run;
// neither when it is unset.
struct Bf16Choice {
  const GemmBf16Kernels* forced = nullptr;
  std::string error;
};

Bf16Choice env_choice() {
  Bf16Choice c;
  const char* env = std::getenv("MHA_BF16_KERNEL");
  if (env == nullptr || *env == '\0') return c;
  c.forced = runnable_set(env);
  if (c.forced != nullptr) return c;
  const std::vector<Bf16Set>& sets = built_sets();
  const bool known = std::any_of(sets.begin(), sets.end(), [&](const Bf16Set& s) {
    return std::string_view(env) == s.g->name;
  });
  c.error =
      std::string("MHA_BF16_KERNEL=") + env +
      (known ? " is not supported by this CPU/OS" : " is not a bf16 kernel set of this build") +
      "; supported here:";
  for (const Bf16Set& s : sets) {
    if (s.runs) c.error += std::string(" ") + s.g->name;
  }
  return c;
}

const Bf16Choice& env_kernels() {
  static const Bf16Choice c = env_choice();
  return c;
}

}  // namespace

const GemmBf16Kernels* gemm_bf16_kernels(Isa isa) {
  if (const GemmBf16Kernels* f = forced_kernels.load(std::memory_order_relaxed)) return f;
  if (const Bf16Choice& env = env_kernels(); env.forced != nullptr || !env.error.empty()) {
    if (env.forced == nullptr) fail(MHA_UNSUPPORTED, env.error);
    return env.forced;
  }
  [[maybe_unused]] const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::avx512:
      if (f.amx_bf16) return runnable_set("amx_bf16");
      // vdpbf16ps is full-rate on AMD (Zen 4: 229 GFLOP/s per core against
      // 113 for fp32 FMA) and half-rate on Intel (Emerald Rapids: 79-83
      // against 153-176), where widening to fp32 runs at the fp32 rate.
      if (f.avx512_bf16 && !f.intel) return runnable_set("avx512_bf16");
      return runnable_set("avx512_widen");
    case Isa::avx2:
      return runnable_set("avx2_widen");
    case Isa::neon:
      // BFMMLA: 100-124 FLOP per cycle on Neoverse V1/V2 and 56-63 on N2,
      // against BFDOT's 63 and 32 (llvm-mca, docs/performance.md).
      return runnable_set("neon_bfmmla");
    case Isa::scalar:
      break;
  }
  return nullptr;
}

const GemmBf16Kernels* gemm_bf16_kernels_named(std::string_view name) {
  return runnable_set(name);
}

std::vector<const GemmBf16Kernels*> gemm_bf16_kernel_sets() {
  std::vector<const GemmBf16Kernels*> r;
  for (const Bf16Set& s : built_sets()) {
    if (s.runs) r.push_back(s.g);
  }
  return r;
}

std::string_view gemm_bf16_path_name(Bf16Path p) noexcept {
  return p == Bf16Path::dot ? "dot" : "fp32";
}

void set_gemm_bf16_kernels_override(const GemmBf16Kernels* g) noexcept {
  forced_kernels.store(g, std::memory_order_relaxed);
}

void set_gemm_bf16_path_override(std::optional<Bf16Path> path) noexcept {
  forced_path.store(path ? static_cast<unsigned>(*path) + 1 : 0, std::memory_order_relaxed);
}

Bf16Plan plan_gemm_bf16(const GemmBf16Kernels* g, std::size_t m, std::size_t n, std::size_t k) {
  Bf16Plan p{g != nullptr ? Bf16Path::dot : Bf16Path::fp32,
             call_threads(m, n, k, g != nullptr ? g->flop_time : 1.0)};
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
                    prepare_thread(*g);
                    gemm_bf16_block(*g, ta, tb, rows, cols, k, alpha, at(ta, a, lda, i0, 0), lda,
                                    at(tb, b, ldb, 0, j0), ldb, beta, c + i0 * ldc + j0, ldc);
                  });
}

void fp32_to_bf16(std::size_t n, const float* x, std::uint16_t* y) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const float r = simd::Lanes<simd::scalar_arch>::round_bf16(x[i]);
    std::uint32_t u;
    std::memcpy(&u, &r, sizeof u);
    y[i] = static_cast<std::uint16_t>(u >> 16);
  }
}

void bf16_to_fp32(std::size_t n, const std::uint16_t* x, float* y) noexcept {
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t u = static_cast<std::uint32_t>(x[i]) << 16;
    std::memcpy(&y[i], &u, sizeof u);
  }
}

}  // namespace mha::detail
