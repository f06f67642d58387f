// Online softmax (Milakov & Gimelshein 2018): the one softmax of the attention
// core, on every path: a row's scores one key tile at a time, partial results
// of a row merged across split-KV chunks, and whole rows when the weights are
// returned (one tile).
//
//   OnlineRow st;                                  // max -inf, sum 0
//   for each tile t of the row:
//     alpha = online_update(k, st, s_t, n_t);      // s_t <- exp(s_t - max)
//     online_rescale(k, acc, acc_n, alpha);        // acc *= exp(m_old - m_new)
//     acc += s_t · V_t                             // caller's GEMM
//   online_finalize(k, st, acc, acc_n);            // acc /= sum, 0 or NaN
//
// The rule for a row's scores (masked ones are -inf), as mha_softmax's:
// a row with no score above -inf ends as zeros; a NaN or +inf among them
// makes the row NaN. The per-element work is the SoftmaxKernels table's vector
// passes; the rule costs O(1) scalar work per row and tile, since the max is
// +inf or NaN, or the sum of exp(s - max) NaN, exactly when a score is NaN or
// +inf. The result equals the one-pass softmax within the same bound
// (tests/softmax/test_softmax.cpp); sums are taken in an order fixed by the
// tile sizes, never by the thread count.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

#include "softmax/kernels.hpp"

namespace mha::detail {

// Running state of one row. A row is poisoned (ends NaN) once sum is NaN.
struct OnlineRow {
  float max = -std::numeric_limits<float>::infinity();  // running max of the scores seen
  float sum = 0.f;  // running sum of exp(score - max) over the scores seen
};

inline bool online_poisoned(const OnlineRow& st) {
  return std::isnan(st.sum);
}

namespace online_impl {

// online_update with the tile's max and its exp_sum(shift) given, but for
// alpha's exp: returns alpha's exponent (0, whose exp is exactly 1, while
// the max stays or no earlier score was above -inf; NaN once poisoned) and
// leaves st.sum for finish() with alpha = exp(exponent) and *tile_sum. A
// block of rows then shares one exp call (elementwise, so the same bits).
template <class ExpSum>
float begin(OnlineRow& st, float* s, std::size_t n, float tile_max, const ExpSum& exp_sum,
            float* tile_sum) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  // A max above FLT_MAX or NaN means a +inf or NaN score (reduce_max may also
  // skip NaNs: the sum below catches those).
  if (online_poisoned(st) || !(tile_max <= FLT_MAX)) {
    std::fill(s, s + n, std::numeric_limits<float>::quiet_NaN());
    st.max = st.sum = *tile_sum = std::numeric_limits<float>::quiet_NaN();
    return st.max;
  }
  const float m = st.max < tile_max ? tile_max : st.max;
  // While every score is -inf, exp(s - 0) turns the tile into zeros, and the
  // sum is NaN exactly when a NaN is among them.
  *tile_sum = exp_sum(m == kNegInf ? 0.f : m);
  const float e = st.max != kNegInf && m != st.max ? st.max - m : 0.f;
  st.max = m;
  return e;
}
inline void finish(OnlineRow& st, float alpha, float tile_sum) {
  st.sum = st.sum * alpha + tile_sum;
}

// alpha from begin()'s exponent e, and st finished: exp(e), skipped at
// e = 0 (alpha 1, the max did not move).
inline float complete(const SoftmaxKernels& k, OnlineRow& st, float e, float tile_sum) {
  float alpha = 1.f;
  if (e != 0.f) k.exp(&e, &alpha, 1);
  finish(st, alpha, tile_sum);
  return alpha;
}

}  // namespace online_impl

// Takes the next tile s[0..n) (n >= 1) of scaled and masked scores, replaces it
// by exp(s - new max) and updates st. Returns alpha, the factor by which
// everything accumulated from earlier tiles must be scaled (st.sum is already
// rescaled): exp(old max - new max), or 1 while no earlier score was above
// -inf (their weights are 0, so the accumulator holds only zeros). A tile
// holding a NaN or +inf poisons the row, and online_finalize and online_merge
// then give NaN whatever was accumulated; later tiles become NaN, alpha too.
//
// Each online_update* is its online_begin*, which returns alpha's exponent
// (0 for alpha 1, NaN once poisoned) and the tile's sum, then exp of that
// exponent and online_finish: a block of rows shares one exp call that way,
// with the same bits (one call per row and tile cost 3-4 % of a BERT s512
// bf16 core on the AMX Xeon).
inline float online_begin(const SoftmaxKernels& k, OnlineRow& st, float* s, std::size_t n,
                          float* tile_sum) {
  return online_impl::begin(
      st, s, n, k.reduce_max(s, n), [&](float shift) { return k.exp_sum(s, n, shift); }, tile_sum);
}
inline float online_update(const SoftmaxKernels& k, OnlineRow& st, float* s, std::size_t n) {
  float tile_sum;
  const float e = online_begin(k, st, s, n, &tile_sum);
  return online_impl::complete(k, st, e, tile_sum);
}

// online_update of the scores fl(x·scale) (scale > 0) from the tile x of
// unscaled ones, bit for bit, with the scaling folded into the exp pass
// (scale_exp_sum) rather than a pass of its own: rounding is monotonic, so
// the max of the scaled scores is fl(max(x)·scale). x becomes exp(fl(x·scale)
// - new max). online_begin_scaled takes the pass: scale_exp_sum, or
// scale_exp2_sum for products that round P to bf16 (KvType::rounds_p), whose
// st and sum are then those of exp2 (2^-18 relative, 2^-9 below bf16's
// rounding).
inline float online_begin_scaled(const SoftmaxKernels& k, OnlineRow& st, float* x, std::size_t n,
                                 float scale, float* tile_sum,
                                 decltype(SoftmaxKernels::scale_exp_sum) pass) {
  return online_impl::begin(
      st, x, n, k.reduce_max(x, n) * scale,
      [&](float shift) { return pass(x, x, n, scale, shift); }, tile_sum);
}
inline float online_update_scaled(const SoftmaxKernels& k, OnlineRow& st, float* x, std::size_t n,
                                  float scale) {
  float tile_sum;
  const float e = online_begin_scaled(k, st, x, n, scale, &tile_sum, k.scale_exp_sum);
  return online_impl::complete(k, st, e, tile_sum);
}

// online_begin_scaled on scale_exp2_sum with its tile rounded to bf16 into
// y by k.scale_exp2_sum_bf16 (not null), x left as it was: the same bits,
// the tile rounded to nearest even. A poisoned row's y is NaN.
inline float online_begin_bf16(const SoftmaxKernels& k, OnlineRow& st, float* x, std::size_t n,
                               float scale, std::uint16_t* y, float* tile_sum) {
  const float e = online_impl::begin(
      st, x, n, k.reduce_max(x, n) * scale,
      [&](float shift) { return k.scale_exp2_sum_bf16(x, y, n, scale, shift); }, tile_sum);
  if (online_poisoned(st)) std::fill(y, y + (n + 1) / 2 * 2, std::uint16_t{0x7FC0});
  return e;
}

// st finished with alpha = exp(e) of its online_begin*'s exponent e.
inline void online_finish(OnlineRow& st, float alpha, float tile_sum) {
  online_impl::finish(st, alpha, tile_sum);
}

// acc[0..n) *= alpha (skipped when alpha is exactly 1: the max did not move).
inline void online_rescale(const SoftmaxKernels& k, float* acc, std::size_t n, float alpha) {
  if (alpha != 1.f) k.scale(acc, n, alpha);
}

// acc[0..n) /= st.sum; zeros if no score above -inf was seen (st.sum == 0),
// NaN if the row is poisoned.
inline void online_finalize(const SoftmaxKernels& k, const OnlineRow& st, float* acc,
                            std::size_t n) {
  if (st.sum == 0.f) {
    std::fill(acc, acc + n, 0.f);
  } else {
    k.scale(acc, n, 1.f / st.sum);
  }
}

// Joins an attention sink (a logit with no value) to the row: st takes it as
// one more score whose value row is zero, so acc needs only the returned
// alpha (online_rescale). Done once per row, before online_finalize, or on one
// part before online_merge. The sink is finite.
inline float online_sink(const SoftmaxKernels& k, OnlineRow& st, float sink) {
  return online_update(k, st, &sink, 1);
}

// log of the row's sum of exp(score): -inf if no score above -inf was seen,
// NaN if the row is poisoned.
inline float online_lse(const OnlineRow& st) {
  if (st.sum == 0.f) return -std::numeric_limits<float>::infinity();
  return st.max + std::log(st.sum);
}

// One partial result of a row over a range of its keys: the state and the
// accumulator that online_update and online_rescale left (not finalized).
struct OnlinePart {
  OnlineRow st;
  const float* acc;
};

// Folds a partial result (part, pacc) over later keys into the row's state
// and accumulator (st, acc), as if both had been accumulated together:
//   M = max(st.max, part.max), acc = e^(st.max - M)·acc + e^(part.max - M)·pacc.
// A part that saw no score above -inf changes nothing (pacc is not read);
// into a state that saw none it is copied exactly; a poisoned side poisons st.
// Every row's keys are folded in fixed chunks of the key grid (the attention
// core's chunk_keys), whoever computes them, so that a row's bits do not
// depend on how a call's work is split.
//
// In two halves, so that a block of rows can share one exp call (elementwise,
// so the same bits): online_fold_args does the folds that need no exp (an
// empty or poisoned side) and returns false, or writes the two exponents
// into f[0..2) and returns true; online_fold_apply then finishes with f
// holding their exp.
inline bool online_fold_args(OnlineRow& st, float* acc, const OnlineRow& part, const float* pacc,
                             std::size_t n, float* f) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  if (online_poisoned(st)) return false;
  if (online_poisoned(part)) {
    st = part;
    return false;
  }
  if (part.max == kNegInf) return false;
  if (st.max == kNegInf) {
    st = part;
    std::copy(pacc, pacc + n, acc);
    return false;
  }
  const float m = st.max < part.max ? part.max : st.max;
  f[0] = st.max - m;
  f[1] = part.max - m;
  return true;
}
inline void online_fold_apply(const SoftmaxKernels& k, OnlineRow& st, float* acc,
                              const OnlineRow& part, const float* pacc, std::size_t n,
                              const float* f) {
  st.sum = st.sum * f[0] + part.sum * f[1];
  st.max = st.max < part.max ? part.max : st.max;
  online_rescale(k, acc, n, f[0]);
  k.scale_add(pacc, acc, acc, n, f[1]);
}
inline void online_fold(const SoftmaxKernels& k, OnlineRow& st, float* acc, const OnlineRow& part,
                        const float* pacc, std::size_t n) {
  float f[2];
  if (!online_fold_args(st, acc, part, pacc, n, f)) return;
  k.exp(f, f, 2);
  online_fold_apply(k, st, acc, part, pacc, n, f);
}

// out[0..n) = the row's result from `count` partial results over consecutive
// ranges of its keys (split-KV), part(c) giving part c: folded in part order
// (online_fold, from no keys), then the sink joined (if non-null) and the
// row finalized as online_finalize does. Returns the final state (for
// online_lse).
template <class Part>
OnlineRow online_merge(const SoftmaxKernels& k, std::size_t count, const Part& part, float* out,
                       std::size_t n, const float* sink = nullptr) {
  OnlineRow st;
  for (std::size_t c = 0; c < count; ++c) {
    const OnlinePart p = part(c);
    online_fold(k, st, out, p.st, p.acc, n);
  }
  if (st.max == -std::numeric_limits<float>::infinity() && !online_poisoned(st)) {
    std::fill(out, out + n, 0.f);
  }
  if (sink != nullptr) online_rescale(k, out, n, online_sink(k, st, *sink));
  online_finalize(k, st, out, n);
  return st;
}

}  // namespace mha::detail
