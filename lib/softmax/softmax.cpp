// Public softmax: argument checks, the per-row rules (masks, -inf rows,
// NaN/+inf rows) and the split of rows into tasks. The arithmetic is the
// per-ISA SoftmaxKernels table.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <limits>
#include <mha/softmax.hpp>

#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"
#include "common/parallel.hpp"
#include "dispatch/cpu_features.hpp"
#include "dispatch/dispatch.hpp"
#include "softmax/kernels.hpp"

namespace mha::detail {

const SoftmaxKernels& softmax_kernels(Isa isa) noexcept {
#if MHA_BUILD_AVX512
  static const SoftmaxKernels* const avx512 =
      cpu_features().avx512_bf16 ? &softmax_kernels_avx512_bf16 : &softmax_kernels_avx512;
#else
  static const SoftmaxKernels* const avx512 = nullptr;
#endif
  static const IsaTables<SoftmaxKernels> tables{&softmax_kernels_scalar,
                                                MHA_IF_BUILT_AVX2(softmax_kernels_avx2), avx512,
                                                MHA_IF_BUILT_NEON(softmax_kernels_neon)};
  return tables(isa);
}
namespace {

// Work per element for threads_for, in flops at AVX-512 peak: the row's exp
// bounds it, not memory. Measured (avx512, 2-core Zen5 shared with other
// jobs, best of 7): a serial call on 16K elements takes 5.8-8.5 us, about
// what 1M flops take at peak, which puts the second thread at 62.5K
// elements; 2 threads with 4K-element tasks never beat 1 thread below 64K
// elements (1t/2t time ratio 0.9-1.35, within noise).
constexpr double kFlopsPerElement = 64;
// A threaded call splits rows into tasks of about this many elements, each
// well above a TBB fork/join (a few us).
constexpr std::size_t kTaskElements = 1 << 14;

// Number of leading columns row i keeps under the causal and padding limits.
std::size_t kept_columns(std::size_t i, std::size_t cols, const SoftmaxOptions& o) {
  std::size_t keep = cols;
  if (o.valid_len != nullptr) keep = std::min(keep, o.valid_len[i]);
  if (o.causal) {
    // Columns j <= i + offset, i.e. i + 1 + offset of them, without overflow.
    if (o.causal_offset >= 0) {
      const auto off = static_cast<std::size_t>(o.causal_offset);
      if (off < cols) keep = std::min(keep, i + 1 + off);
    } else {
      const std::size_t back = std::size_t{0} - static_cast<std::size_t>(o.causal_offset);
      keep = i + 1 <= back ? 0 : std::min(keep, i + 1 - back);
    }
  }
  return keep;
}

void softmax_row(const SoftmaxKernels& k, std::size_t i, std::size_t cols, const float* x, float* y,
                 float s, const SoftmaxOptions& o) {
  const std::size_t keep = kept_columns(i, cols, o);
  std::size_t zero_from = keep;
  if (keep > 0) {
    const float* add = o.additive != nullptr ? o.additive + i * o.additive_ld : nullptr;
    // zmax: the max of the scores z = fl(x*s) (+ mask).
    float zmax;
    const bool fast = add == nullptr && s > 0.f;
    if (fast) {
      // For s > 0, max(fl(x*s)) = fl(s*max(x)) (rounding is monotonic): one
      // read-only pass for the max, then exp(fl(x*s) - zmax) without storing z.
      // Same bits as the masked path below with an all-zero mask.
      zmax = s * k.reduce_max(x, keep);
    } else {
      zmax = k.scale_add_max(x, add, y, keep, s);
    }
    if (!(std::fabs(zmax) <= FLT_MAX)) {
      // reduce_max may skip NaNs, so an all -inf max is checked for them
      // (rare path: fully masked rows; on the fast path also rows whose
      // s * max(x) overflows to -inf, every fl(x*s) then being -inf).
      const float* z = fast ? x : y;
      if (zmax == -std::numeric_limits<float>::infinity() &&
          std::none_of(z, z + keep, [](float v) { return std::isnan(v); })) {
        zero_from = 0;  // every kept value is -inf: fully masked row
      } else {
        std::fill(y, y + keep, std::numeric_limits<float>::quiet_NaN());
      }
    } else {
      const float sum = fast ? k.scale_exp_sum(x, y, keep, s, zmax) : k.exp_sum(y, keep, zmax);
      // sum >= 1 (the max element contributes exp(~0)); NaN if a NaN is kept.
      k.scale(y, keep, 1.f / sum);
    }
  }
  std::fill(y + zero_from, y + cols, 0.f);
}

}  // namespace
}  // namespace mha::detail

namespace mha {

void softmax(std::size_t rows, std::size_t cols, const float* x, std::size_t ldx, float* y,
             std::size_t ldy, const SoftmaxOptions& options) {
  using namespace detail;
  if (rows == 0 || cols == 0) return;
  check_arg(x != nullptr, "softmax: x is null (expected ", rows, " x ", cols, " floats)");
  check_arg(y != nullptr, "softmax: y is null (expected ", rows, " x ", cols, " floats)");
  check_arg(ldx >= cols, "softmax: ldx = ", ldx, " (expected >= cols = ", cols, ")");
  check_arg(ldy >= cols, "softmax: ldy = ", ldy, " (expected >= cols = ", cols, ")");
  const Extent ex = matrix_extent(x, rows, cols, ldx, "softmax: x");
  const Extent ey = matrix_extent(y, rows, cols, ldy, "softmax: y");
  check_arg(std::isfinite(options.scale), "softmax: scale = ", options.scale,
            " (expected a finite value; 0 means 1)");
  Extent eadd{nullptr, 0};
  if (options.additive != nullptr) {
    check_arg(options.additive_ld == 0 || options.additive_ld >= cols,
              "softmax: additive_ld = ", options.additive_ld,
              " (expected 0 to broadcast one row, or >= cols = ", cols, ")");
    // additive_ld == 0 broadcasts one row.
    eadd =
        matrix_extent(options.additive, options.additive_ld == 0 ? 1 : rows, cols,
                      options.additive_ld == 0 ? cols : options.additive_ld, "softmax: additive");
  }
  const Extent evalid =
      tensor_extent(options.valid_len, {rows}, "softmax: valid_len", sizeof(std::size_t));
  check_arg((x == y && ldx == ldy) || !overlaps(ey, ex),
            "softmax: y overlaps x (expected in place with x == y and ldx == ldy, or disjoint)");
  check_no_overlap(ey, eadd, false, "softmax: y", "additive");
  check_no_overlap(ey, evalid, false, "softmax: y", "valid_len");

  const SoftmaxKernels& k = softmax_kernels(active_isa());
  const float s = options.scale == 0.f ? 1.f : options.scale;
  const std::size_t elements = checked_mul(rows, cols, "softmax: rows x cols");
  // Rows are independent, so any split is bit-identical; this one only keeps
  // tasks large enough to amortise scheduling.
  const std::size_t threads = threads_for({kFlopsPerElement * static_cast<double>(elements)});
  const std::size_t rows_per_task =
      threads == 1 ? rows : std::max<std::size_t>(1, kTaskElements / cols);
  const std::size_t tasks = ceil_div(rows, rows_per_task);
  parallel_for(tasks, threads, [&](std::size_t t) {
    const std::size_t end = std::min(rows, (t + 1) * rows_per_task);
    for (std::size_t i = t * rows_per_task; i < end; ++i) {
      softmax_row(k, i, cols, x + i * ldx, y + i * ldy, s, options);
    }
  });
}

}  // namespace mha

extern "C" MHA_API mha_status mha_softmax(size_t rows, size_t cols, const float* x, size_t ldx,
                                          float* y, size_t ldy, const mha_softmax_options* opt) {
  return mha::detail::guarded([&] {
    mha::SoftmaxOptions o;
    if (opt != nullptr) {
      o.scale = opt->scale;
      o.additive = opt->additive;
      o.additive_ld = opt->additive_ld;
      o.causal = opt->causal != 0;
      o.causal_offset = opt->causal_offset;
      o.valid_len = opt->valid_len;
    }
    mha::softmax(rows, cols, x, ldx, y, ldy, o);
  });
}
