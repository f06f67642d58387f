// The GEMM plan's thresholds and cache blocks, fitted to the CPU: every
// number plan_gemm (gemm.cpp) decides by lives here, with its measured
// reason. "Zen 5" is a 1 MiB-L2 AMD EPYC VM, "Xeon" a 2 MiB-L2 Intel Xeon VM;
// AVX-512, best GFLOP/s of interleaved runs unless stated.
#include <array>
#include <mha/isa.hpp>

#include "dispatch/cpu_features.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/kernels.hpp"

namespace mha::detail {
namespace {

// One panel for a kc-deep B up to 8 MiB where the ISA's KC x NC panel
// already exceeds a 1 MiB L2 (B streams from L3 whatever its width): Zen 5,
// NC 768 vs one panel, sq1024 201 vs 205, sq2048 200 vs 205.
constexpr std::size_t kWholePanelFloats = std::size_t{1} << 21;
// The L2 the ISA tables' blocks were measured on (1 MiB), in floats.
constexpr std::size_t kL2Floats = 256 * 1024;
// Widest op(B) = B read in place (path none) on a 1 MiB L2: Zen 5, % of
// peak, in place vs packed, sq512 96 vs 88-95, sq1024 74 vs 89.
constexpr std::size_t kSmallMaxN = 512;
// Products this small read both operands in place whatever their shape: the
// copies cost as much as the arithmetic (Xeon sq64: 59 GFLOP/s packed, 120
// in place).
constexpr std::size_t kSmallMaxMadds = std::size_t{1} << 20;
// A B block read in place from L2: Zen 5 sq512 at KC 1024 fell from 249 to
// 229 GFLOP/s reading its 1 MiB B whole, 248 in 256-column blocks.
constexpr std::size_t kL2BlockFloats = 128 * 1024;
// One strip of B up to half the L2 is run row strip by row strip, each
// through all its K blocks (C tile in L1, A rows read start to end): Xeon
// m2048 n64 k2048 174-183 -> 187-188.
constexpr std::size_t kInplaceStripMaxFloats = kL2Floats / 2;
// Path b (A's rows in place in 14 x 32 strips against a packed B, P·V) from
// this many rows: the 14 x 32 tile reads B at half the rate of 6 x 64, but
// packing B is paid once per call. Xeon, n 64, us: m2048 k2048 3205 -> 2997,
// m192 k256 37.0 -> 35.2-36.3, but m128 k128 10.5 -> 11.7.
constexpr std::size_t kStridedAMinRows = 160;
// op(B) = Bᵀ transposed whole (path none) up to 4 MiB of scratch: Zen 5,
// packed -> transposed, qk_s128 209-213 -> 232-233, proj m4096 n768 k768
// 245 -> 251; past 1M floats it stops paying (AVX2 m128 n2304 k768 97 vs 102).
constexpr std::size_t kTransposeMaxFloats = std::size_t{1} << 20;
// For an A of one block the transpose is amortized over fewer rows: 1 MiB
// (Zen 5 m128 n2304 k768, 1.8M floats: transposed 184-191 vs packed 197-203).
constexpr std::size_t kTransposeOneBlockMaxFloats = kL2Floats;
// With a large L2, op(B) = B up to 256 KiB read in place by the packed
// kernel (path a) for an A of one block: Xeon, B in place vs packed, m126
// n256 k128 218 vs 204, m504 n512 k512 201 vs 211.
constexpr std::size_t kBInPlaceMaxFloats = 64 * 1024;
// The fewest columns of a B panel kept in a large L2: below it the 1 MiB
// blocks stay (Zen 5 with panels in L2, 256 x 768: sq1024 176-180 against
// 189 at KC 1024 streamed from L3).
constexpr std::size_t kMinL2PanelCols = 512;

}  // namespace

// An L2 that holds an l2_kc x (at least kMinL2PanelCols) panel in half of it
// (BLIS's rule for the block read from L2) keeps B panels there: KC = l2_kc,
// NC filling half the L2 (Xeon, 1 MiB blocks -> KC 512 x NC 512: sq1024
// 173-177 -> 197-205, sq2048 146 -> 195, prepacked m128 n2304 145 -> 180).
// Packed panels in L2 then beat reading B in place except where B fits in
// L1 (in place vs packed: sq64 190 vs 179, sq128 163 vs 183; transposed vs
// packed: qk_s128 202 vs 177, qk_s256 182 vs 200), so path none keeps only
// an unpacked-tile-wide B, tiny products, and a Bᵀ that fits in L1d.
GemmKernels fit_to_caches(GemmKernels g, std::size_t l1d_bytes, std::size_t l2_bytes) noexcept {
  g.whole_panel_floats = g.kc * g.nc > kL2Floats ? kWholePanelFloats : 0;
  g.small_max_n = kSmallMaxN;
  g.small_max_madds = kSmallMaxMadds;
  g.transpose_max_floats = kTransposeMaxFloats;
  g.transpose_one_block_max_floats = kTransposeOneBlockMaxFloats;
  g.b_in_place_max_floats = 0;
  g.strided_a_min_rows = kStridedAMinRows;
  g.l2_block_floats = kL2BlockFloats;
  g.inplace_strip_max_floats = kInplaceStripMaxFloats;
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

const GemmKernels& gemm_kernels(Isa isa) noexcept {
  static const IsaTables<GemmKernels> base{
      &gemm_kernels_scalar, MHA_IF_BUILT_AVX2(gemm_kernels_avx2),
      MHA_IF_BUILT_AVX512(gemm_kernels_avx512), MHA_IF_BUILT_NEON(gemm_kernels_neon)};
  static const std::array<GemmKernels, 4> fitted = [] {
    const CacheSizes& c = cpu_caches();
    std::array<GemmKernels, 4> r{};
    for (Isa i : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon}) {
      r[static_cast<std::size_t>(i)] = fit_to_caches(base(i), c.l1d, c.l2);
    }
    return r;
  }();
  return fitted[static_cast<std::size_t>(isa)];
}

}  // namespace mha::detail
