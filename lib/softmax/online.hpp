// Online softmax (Milakov & Gimelshein 2018) building blocks, for flash-style
// attention that sees a row's scores one column tile at a time:
//
//   OnlineRow st;                                  // max -inf, sum 0
//   for each tile t of the row:
//     alpha = online_update(k, st, s_t, n_t);      // s_t <- exp(s_t - max)
//     online_rescale(k, acc, acc_n, alpha);        // acc *= exp(m_old - m_new)
//     acc += s_t · V_t                             // caller's GEMM
//   online_finalize(k, st, acc, acc_n);            // acc /= sum, or 0
//
// Same rules as mha::softmax: a row whose every score is -inf ends as zeros;
// NaN or +inf among the scores makes the row NaN. The result equals the
// one-pass softmax within the same bound (tests/softmax/test_softmax.cpp,
// "online softmax over tiles equals one-pass softmax"); sums are taken in an
// order fixed by the tile sizes, never by the thread count.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <limits>

#include "softmax/kernels.hpp"

namespace mha::detail {

struct OnlineRow {
  float max = -std::numeric_limits<float>::infinity();  // running max of the scores seen
  float sum = 0.f;  // running sum of exp(score - max) over the scores seen
};

// Takes the next tile s[0..n) (n >= 1) of scaled and masked scores, replaces it
// by exp(s - new max) and updates st. Returns alpha = exp(old max - new max),
// the factor by which everything accumulated from earlier tiles must be scaled
// (st.sum is already rescaled): 0 while the row's scores are all -inf so far
// (and the tile is then all zeros), NaN once a NaN or +inf was seen.
inline float online_update(const SoftmaxKernels& k, OnlineRow& st, float* s, std::size_t n) {
  const float tile_max = k.reduce_max(s, n);
  const float m = std::max(st.max, tile_max);
  // reduce_max may skip NaNs: an all -inf tile is checked for them.
  const bool none_finite = m == -std::numeric_limits<float>::infinity();
  if (none_finite && std::none_of(s, s + n, [](float v) { return std::isnan(v); })) {
    std::fill(s, s + n, 0.f);
    return 0.f;
  }
  if (none_finite || !(m <= FLT_MAX) || std::isnan(tile_max) || std::isnan(st.max)) {
    // +inf or NaN seen (now or before): the row is NaN.
    std::fill(s, s + n, std::numeric_limits<float>::quiet_NaN());
    st.max = st.sum = std::numeric_limits<float>::quiet_NaN();
    return st.max;
  }
  float alpha = st.max - m;  // -inf while nothing finite was seen: exp gives 0
  k.exp(&alpha, &alpha, 1);
  const float tile_sum = k.exp_sum(s, n, m);
  st.sum = st.sum * alpha + tile_sum;
  st.max = m;
  return alpha;
}

// acc[0..n) *= alpha (skipped when alpha is exactly 1: the max did not move).
inline void online_rescale(const SoftmaxKernels& k, float* acc, std::size_t n, float alpha) {
  if (alpha != 1.f) k.scale(acc, n, alpha);
}

// acc[0..n) /= st.sum; zeros if no finite score was seen (st.sum == 0).
inline void online_finalize(const SoftmaxKernels& k, const OnlineRow& st, float* acc,
                            std::size_t n) {
  if (st.sum == 0.f) {
    std::fill(acc, acc + n, 0.f);
  } else {
    k.scale(acc, n, 1.f / st.sum);
  }
}

}  // namespace mha::detail
