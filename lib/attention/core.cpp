#include "attention/core.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"
#include "softmax/kernels.hpp"
#include "softmax/online.hpp"

namespace mha::detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// 0, 1, 2, ...: ALiBi's ramp read from memory. This file is built for the
// baseline ISA, which has no packed size_t -> float conversion, so a ramp of
// static_cast<float>(j) ran scalar and ALiBi cost 7 % of GPT-2 s1024.
constexpr auto kRamp = [] {
  std::array<float, 256> r{};
  for (std::size_t j = 0; j < r.size(); ++j) r[j] = static_cast<float>(j);
  return r;
}();

// Keys per online-softmax step. The S tile (q_block x key_tile floats) and
// the K and V tiles (2 x key_tile x head_dim) stay in L2 (64 + 128 KiB at
// head_dim 64), and the P·V GEMM gets k = key_tile, long enough to amortize
// its C-tile loads and stores.
constexpr std::size_t kKeyTile = 256;
// Query rows per task: the K/V tiles are reused across these rows.
constexpr std::size_t kQueryBlock = 64;
// Split-KV: when (batch x heads x query blocks) gives fewer tasks than this,
// KV is split into chunks of at least kMinChunk keys. A fixed constant, not the
// thread count, so the result does not depend on the machine's threads.
constexpr std::size_t kSplitTargetTasks = 64;
constexpr std::size_t kMinChunk = 512;

// Everything one task needs, resolved once per call.
struct Ctx {
  const GemmKernels& g;
  const SoftmaxKernels& sm;
  const AttentionShape& s;
  const CorePlan& plan;
  const CoreInputs& in;
  std::size_t kv_len;
  float scale;
  bool causal;
  std::ptrdiff_t causal_offset;  // query i sees key j iff j <= i + offset
  const unsigned char* padding;  // [batch, kv_len] or null
  const float* additive;         // or null
  bool additive_per_head;
  const AttentionMods& mods;

  std::size_t group() const { return s.num_heads / s.num_kv_heads; }
  const float* q_rows(std::size_t b, std::size_t h, std::size_t q0) const {
    return in.q + (b * in.q_len + q0) * in.ldq + h * s.head_dim;
  }
  const float* additive_row(std::size_t b, std::size_t h, std::size_t i) const {
    const std::size_t plane = additive_per_head ? (b * s.num_heads + h) : 0;
    return additive + (plane * in.q_len + i) * kv_len;
  }
  // One past the last key that query row i may see (causal), clamped to kv_len.
  std::size_t visible_end(std::size_t i) const {
    if (!causal) return kv_len;
    const std::ptrdiff_t last = static_cast<std::ptrdiff_t>(i) + causal_offset;
    if (last < 0) return 0;
    return std::min(kv_len, static_cast<std::size_t>(last) + 1);
  }
  // The first key that query row i may see (sliding window), 0 without one.
  // Any window size is valid, so it is compared, never converted to signed.
  std::size_t visible_begin(std::size_t i) const {
    if (mods.window == 0) return 0;
    const std::ptrdiff_t next = static_cast<std::ptrdiff_t>(i) + causal_offset + 1;  // i' + 1
    if (next <= 0 || static_cast<std::size_t>(next) <= mods.window) return 0;
    return std::min(kv_len, static_cast<std::size_t>(next) - mods.window);
  }
  bool tile_all_padded(std::size_t b, std::size_t k0, std::size_t k1) const {
    if (padding == nullptr) return false;
    const unsigned char* p = padding + b * kv_len;
    return std::all_of(p + k0, p + k1, [](unsigned char x) { return x != 0; });
  }

  // S rows (scores of rows q0.. for keys k0..k0+n, ld ldsc) get, in the
  // order of mha_mods: scale, soft-capping, ALiBi and the additive mask, then
  // -inf for causal-, window- and padding-masked keys (after the cap, so a
  // masked key stays -inf). Each modifier costs one test per row when off.
  void mask_scores(std::size_t b, std::size_t h, std::size_t q0, std::size_t rows, std::size_t k0,
                   std::size_t n, float* sc, std::size_t ldsc) const {
    const unsigned char* pad = padding ? padding + b * kv_len + k0 : nullptr;
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = sc + r * ldsc;
      if (mods.softcap != 0.f) {
        sm.soft_cap(row, n, mods.softcap);
        if (additive) sm.scale_add(row, additive_row(b, h, q0 + r) + k0, row, n, 1.0f);
      } else if (additive) {
        sm.scale_add(row, additive_row(b, h, q0 + r) + k0, row, n, scale);
      }
      if (mods.alibi != nullptr) add_alibi(h, q0 + r, k0, row, n);
      if (pad) {
        for (std::size_t j = 0; j < n; ++j) {
          if (pad[j]) row[j] = kNegInf;
        }
      }
      const std::size_t end = visible_end(q0 + r), begin = visible_begin(q0 + r);
      if (end < k0 + n) std::fill(row + (end > k0 ? end - k0 : 0), row + n, kNegInf);
      if (begin > k0) std::fill(row, row + std::min(n, begin - k0), kNegInf);
    }
  }
  // z += -slope·(i' - j) for keys k0..k0+n: an affine ramp, base + j, with j
  // read from kRamp (integers, so every sum is exact below 2^24).
  void add_alibi(std::size_t h, std::size_t i, std::size_t k0, float* row, std::size_t n) const {
    const float slope = mods.alibi[h];
    const float base = static_cast<float>(static_cast<std::ptrdiff_t>(k0) -
                                          static_cast<std::ptrdiff_t>(i) - causal_offset);
    for (std::size_t j0 = 0; j0 < n; j0 += kRamp.size()) {
      const float b0 = base + static_cast<float>(j0);
      float* r = row + j0;
      const std::size_t len = std::min(kRamp.size(), n - j0);
      for (std::size_t j = 0; j < len; ++j) r[j] += slope * (b0 + kRamp[j]);
    }
  }
  // Scores are produced with the scale folded into the GEMM unless an
  // additive mask needs them unscaled first (scale·qk + mask, as PyTorch);
  // soft-capping needs them scaled, and then adds the mask unscaled.
  float gemm_alpha() const { return additive && mods.softcap == 0.f ? 1.0f : scale; }

  // Flash-style pass over keys [kbeg, kend) for query rows [q0, q1) of head h:
  // o (ld ldo) gets the unnormalized sum of exp(s - m)·v, and (m, l) the
  // row's online-softmax state (OnlineRow: running max and sum). Rows that see
  // no key keep m = -inf, l = 0, o = 0. `sc` is a q_block x key_tile scratch
  // tile at the start of the task's scratch, `qpack` room for the packed
  // query block (packed_a_floats(g, q_block, head_dim)).
  void attend_online(std::size_t b, std::size_t h, std::size_t q0, std::size_t q1, std::size_t kbeg,
                     std::size_t kend, float* o, std::size_t ldo, float* m, float* l, float* sc,
                     float* qpack) const {
    const std::size_t rows = q1 - q0, d = s.head_dim, bk = plan.key_tile;
    for (std::size_t r = 0; r < rows; ++r) {
      m[r] = kNegInf;
      l[r] = 0.0f;
      std::fill_n(o + r * ldo, d, 0.0f);
    }
    // Keys past the last row's causal limit are masked for every row: stop.
    kend = std::min(kend, visible_end(q1 - 1));
    // Keys before the first row's window are masked for every row: start at
    // the tile holding its first key (on the same tile grid as without a
    // window, which the packed K strips need).
    kbeg = std::max(kbeg, visible_begin(q0) / bk * bk);
    const std::size_t gh = h / group();
    const bool bf16 = in.kv.g16 != nullptr;
    // The query block is packed (or rounded to bf16) once and multiplies
    // every key tile.
    if (bf16) {
      in.kv.g16->round_rows(rows, d, q_rows(b, h, q0), in.ldq, q16(sc), plan.ldq16);
    } else {
      pack_a(g, Trans::N, rows, d, q_rows(b, h, q0), in.ldq, qpack);
    }
    for (std::size_t k0 = kbeg; k0 < kend; k0 += bk) {
      const std::size_t k1 = std::min(k0 + bk, kend), n = k1 - k0;
      if (tile_all_padded(b, k0, k1)) continue;
      if (bf16) {
        scores_bf16(rows, q16(sc), b, gh, k0, n, sc, bk);
      } else {
        gemm_serial_packed_a(g, rows, qpack, in.kv.key_tile(b, gh, k0, k1), gemm_alpha(), 0.0f, sc,
                             bk);
      }
      mask_scores(b, h, q0, rows, k0, n, sc, bk);
      for (std::size_t r = 0; r < rows; ++r) {
        OnlineRow st{m[r], l[r]};
        online_rescale(sm, o + r * ldo, d, online_update(sm, st, sc + r * bk, n));
        m[r] = st.max;
        l[r] = st.sum;
      }
      if (bf16) {
        values_bf16(rows, sc, bk, p16(sc), b, gh, k0, n, 1.0f, o, ldo);
      } else {
        // P·V straight from the S tile: V is row-major, so neither is packed.
        gemm_serial_inplace(g, Trans::N, rows, d, n, 1.0f, sc, bk, in.kv.value_rows(b, gh, k0),
                            in.kv.ldv, 1.0f, o, ldo);
      }
    }
  }

  // The bf16 core's Q rows and P rows (A rows of the kernels, as 32-bit
  // words) in a task's scratch (`task`, whose start the online path's S
  // tile shares).
  std::uint32_t* q16(float* task) const {
    return reinterpret_cast<std::uint32_t*>(task + plan.bf16_offset);
  }
  std::uint32_t* p16(float* task) const {
    return q16(task) + round_up(plan.q_block * plan.ldq16 / 2 * in.kv.g16->pair_words(), 16);
  }
  // sc rows (ld ldsc) = alpha·Q·Kᵀ for keys k0..k0+n of a bf16 view (k0 a
  // multiple of its strips), Q the bf16 rows `a`.
  void scores_bf16(std::size_t rows, const std::uint32_t* a, std::size_t b, std::size_t gh,
                   std::size_t k0, std::size_t n, float* sc, std::size_t ldsc) const {
    const GemmBf16Kernels& k16 = *in.kv.g16;
    const std::size_t kp = ceil_div(s.head_dim, 2);
    bf16_rows(k16, rows, kp, a, plan.ldq16 / 2, in.kv.key_strips16(b, gh, k0), kp * k16.nr * 2, sc,
              ldsc, n, gemm_alpha(), 0.0f);
  }
  // o = P·V + beta·o for P = sc's rows (keys k0..k0+n, rounded to bf16 into
  // the rows `a`) and a bf16 view's V.
  void values_bf16(std::size_t rows, const float* sc, std::size_t ldsc, std::uint32_t* a,
                   std::size_t b, std::size_t gh, std::size_t k0, std::size_t n, float beta,
                   float* o, std::size_t ldo) const {
    const GemmBf16Kernels& k16 = *in.kv.g16;
    k16.round_rows(rows, n, sc, ldsc, a, plan.ldp16);
    bf16_rows(k16, rows, ceil_div(n, 2), a, plan.ldp16 / 2, in.kv.value_pairs16(b, gh, k0),
              in.kv.v_strip, o, ldo, s.head_dim, 1.0f, beta);
  }

  // o rows /= l (with head h's sink joined): zero for rows that saw no key,
  // NaN for poisoned ones; their log-sum-exp to lse if asked.
  void normalize(std::size_t b, std::size_t h, std::size_t q0, std::size_t rows, float* o,
                 std::size_t ldo, const float* m, const float* l) const {
    for (std::size_t r = 0; r < rows; ++r) {
      OnlineRow st{m[r], l[r]};
      join_sink(h, st, o + r * ldo, s.head_dim);
      online_finalize(sm, st, o + r * ldo, s.head_dim);
      store_lse(b, h, q0 + r, st);
    }
  }
  void join_sink(std::size_t h, OnlineRow& st, float* acc, std::size_t n) const {
    if (mods.sinks != nullptr) online_rescale(sm, acc, n, online_sink(sm, st, mods.sinks[h]));
  }
  void store_lse(std::size_t b, std::size_t h, std::size_t i, const OnlineRow& st) const {
    if (mods.lse != nullptr) mods.lse[(b * in.q_len + i) * s.num_heads + h] = online_lse(st);
  }

  // Zeroes row i's causal- and padding-masked keys in a weights row: a NaN
  // row's weights are NaN only where it keeps keys, as in mha_softmax.
  void zero_masked_keys(std::size_t b, std::size_t i, float* row) const {
    if (padding != nullptr) {
      const unsigned char* pad = padding + b * kv_len;
      for (std::size_t j = 0; j < kv_len; ++j) {
        if (pad[j]) row[j] = 0.0f;
      }
    }
    std::fill(row + visible_end(i), row + kv_len, 0.0f);
    std::fill(row, row + visible_begin(i), 0.0f);
  }

  // Weights requested: the rows of P are the caller's output, so they are
  // computed whole (scores, mask, softmax) and then multiplied by V. No
  // second pass over K, and nothing beyond the rows asked for.
  // `task`: the task's scratch (the bf16 core's Q and P rows).
  void attend_materialized(std::size_t b, std::size_t h, std::size_t q0, std::size_t q1, float* p,
                           std::size_t ldp, float* o, std::size_t ldo, float* task) const {
    const std::size_t rows = q1 - q0;
    const std::size_t gh = h / group();
    const bool bf16 = in.kv.g16 != nullptr;
    if (bf16) {
      in.kv.g16->round_rows(rows, s.head_dim, q_rows(b, h, q0), in.ldq, q16(task), plan.ldq16);
      scores_bf16(rows, q16(task), b, gh, 0, kv_len, p, ldp);
    } else {
      gemm_serial(g, Trans::N, rows, q_rows(b, h, q0), in.ldq, in.kv.keys(b, gh), gemm_alpha(),
                  0.0f, p, ldp);
    }
    mask_scores(b, h, q0, rows, 0, kv_len, p, ldp);
    for (std::size_t r = 0; r < rows; ++r) {
      float* row = p + r * ldp;
      OnlineRow st;
      online_update(sm, st, row, kv_len);
      join_sink(h, st, row, kv_len);
      online_finalize(sm, st, row, kv_len);
      store_lse(b, h, q0 + r, st);
      if (online_poisoned(st)) zero_masked_keys(b, q0 + r, row);
    }
    if (bf16) {
      values_bf16(rows, p, ldp, p16(task), b, gh, 0, kv_len, 0.0f, o, ldo);
    } else {
      gemm_serial_inplace(g, Trans::N, rows, s.head_dim, kv_len, 1.0f, p, ldp, in.kv.values(b, gh),
                          in.kv.ldv, 0.0f, o, ldo);
    }
  }

  float* out_rows(std::size_t b, std::size_t h, std::size_t q0) const {
    return in.out + (b * in.q_len + q0) * in.ldo + h * s.head_dim;
  }
};

// Split-KV partial results per (batch, head, chunk): O [q_len x d], m, l.
struct Partials {
  float* base;
  std::size_t q_len, d, chunks, heads;
  std::size_t block() const { return q_len * (d + 2); }
  float* o(std::size_t b, std::size_t h, std::size_t c) const {
    return base + ((b * heads + h) * chunks + c) * block();
  }
  float* m(std::size_t b, std::size_t h, std::size_t c) const { return o(b, h, c) + q_len * d; }
  float* l(std::size_t b, std::size_t h, std::size_t c) const { return m(b, h, c) + q_len; }
};

// Merges query row i's partials of (b, h) in chunk order into c's output,
// O = Σ_c e^(m_c - M)·O_c / L, the sink joined to chunk 0's partial (it
// belongs to no chunk's keys); its log-sum-exp to lse if asked.
void merge_row(const Ctx& c, const Partials& parts, std::size_t b, std::size_t h, std::size_t i) {
  const std::size_t d = parts.d;
  if (c.mods.sinks != nullptr) {
    OnlineRow st{parts.m(b, h, 0)[i], parts.l(b, h, 0)[i]};
    c.join_sink(h, st, parts.o(b, h, 0) + i * d, d);
    parts.m(b, h, 0)[i] = st.max;
    parts.l(b, h, 0)[i] = st.sum;
  }
  const auto part = [&](std::size_t ch) {
    return OnlinePart{{parts.m(b, h, ch)[i], parts.l(b, h, ch)[i]}, parts.o(b, h, ch) + i * d};
  };
  c.store_lse(b, h, i, online_merge(c.sm, parts.chunks, part, c.out_rows(b, h, i), d));
}

}  // namespace

namespace {

// The bf16 core's scratch after a task's own: Q rows, then P rows of p_cols
// keys (a key tile's, or all keys' with the weights), in the kernels' A
// elements (a_bytes each).
void add_bf16_rows(CorePlan& p, const AttentionShape& s, const GemmBf16Kernels& g16,
                   std::size_t p_cols) {
  p.ldq16 = round_up(s.head_dim, 2);
  p.ldp16 = round_up(p_cols, 2);
  p.bf16_offset = p.task_floats;
  p.task_floats += round_up(p.q_block * p.ldq16 / 2 * g16.pair_words(), 16) +
                   round_up(p.q_block * p.ldp16 / 2 * g16.pair_words(), 16);
}

}  // namespace

KvPacking kv_packing(const GemmKernels& g, const AttentionShape& s, std::size_t batch,
                     std::size_t capacity, const GemmBf16Kernels* g16) {
  // Checked: a KV cache's capacity comes straight from the caller's max_len.
  const char* what = "KV cache layout (batch x kv_heads x padded max_len x padded head_dim)";
  KvPacking p;
  if (g16 != nullptr) {
    // bf16 elements, each block rounded up to whole cache lines (32 elements).
    const std::size_t nr = g16->nr, d = s.head_dim;
    const std::size_t k_elems =
        checked_mul(checked_mul(ceil_div(capacity, nr), ceil_div(d, 2), what), 2 * nr, what);
    p.v_strip = checked_mul(checked_round_up(capacity, 2, what), nr, what);
    const std::size_t v_elems = checked_mul(ceil_div(d, nr), p.v_strip, what);
    p.k_stride = checked_round_up(k_elems, 32, what) / 2;
    p.v_stride = checked_round_up(v_elems, 32, what) / 2;
    p.g16 = g16;
  } else {
    p.k_stride = checked_round_up(
        checked_mul(checked_round_up(capacity, g.nr, what), s.head_dim, what), 16, what);
    p.ldv = round_up(s.head_dim, 16);
    p.v_stride = checked_round_up(checked_mul(capacity, p.ldv, what), 16, what);
  }
  p.floats = checked_mul(checked_mul(batch, s.num_kv_heads, what),
                         checked_add(p.k_stride, p.v_stride, what), what);
  float_bytes(p.floats, what);
  return p;
}

KvCacheView kv_view(const GemmKernels& g, const AttentionShape& s, const KvPacking& p,
                    std::size_t batch, std::size_t len, float* dst) {
  KvCacheView v{dst,        dst + batch * s.num_kv_heads * p.k_stride,
                len,        s.num_kv_heads,
                s.head_dim, g.nr,
                p.k_stride, p.v_stride,
                p.ldv};
  v.g16 = p.g16;
  v.v_strip = p.v_strip;
  return v;
}

void put_key_bf16(const KvCacheView& view, std::size_t b, std::size_t g, std::size_t j,
                  const float* k, const float* v) {
  const GemmBf16Kernels& g16 = *view.g16;
  const std::size_t nr = g16.nr, d = view.head_dim, kp = ceil_div(d, 2);
  auto* kb = const_cast<std::uint16_t*>(view.key_strips16(b, g, j));
  auto* vb = const_cast<std::uint16_t*>(view.value_pairs16(b, g, j));
  j = view.local(j);
  if (j % nr == 0) std::fill_n(kb, kp * nr * 2, std::uint16_t{0});
  // Rounded in chunks on the stack: K's pairs go to column j of its strip
  // (32-bit stores), V's elements to the j-th half of their pairs.
  constexpr std::size_t kChunk = 256;
  alignas(64) std::uint16_t row[kChunk + 2];
  std::uint32_t* const k32 = reinterpret_cast<std::uint32_t*>(kb) + j % nr;
  for (std::size_t c0 = 0; c0 < d; c0 += kChunk) {
    const std::size_t n = std::min(kChunk, d - c0);
    fp32_to_bf16(n, k + c0, row);
    row[n] = 0;
    for (std::size_t p = 0; p < ceil_div(n, 2); ++p) {
      std::uint32_t pair;
      std::memcpy(&pair, row + 2 * p, sizeof pair);
      k32[(c0 / 2 + p) * nr] = pair;
    }
    fp32_to_bf16(n, v + c0, row);
    for (std::size_t c = 0; c < n; ++c) {
      const std::size_t col = c0 + c;
      std::uint16_t* pair = vb + col / nr * view.v_strip + col % nr * 2;
      pair[j % 2] = row[c];
      if (j % 2 == 0) pair[1] = 0;
    }
  }
}

void clear_key_bf16(const KvCacheView& view, std::size_t b, std::size_t g, std::size_t j) {
  const std::size_t nr = view.g16->nr;
  auto* kb = const_cast<std::uint16_t*>(view.key_strips16(b, g, j));
  auto* vb = const_cast<std::uint16_t*>(view.value_pairs16(b, g, j));
  j = view.local(j);
  for (std::size_t p = 0; p < ceil_div(view.head_dim, 2); ++p) {
    kb[(p * nr + j % nr) * 2] = kb[(p * nr + j % nr) * 2 + 1] = 0;
  }
  for (std::size_t c = 0; c < view.head_dim; ++c)
    vb[c / nr * view.v_strip + c % nr * 2 + j % 2] = 0;
}

KvCacheView pack_kv(const GemmKernels& g, const AttentionShape& s, const KvPacking& p,
                    std::size_t batch, std::size_t kv_len, const float* k, const float* v,
                    std::size_t ld, float* dst) {
  const std::size_t kvh = s.num_kv_heads, d = s.head_dim;
  const KvCacheView view = kv_view(g, s, p, batch, kv_len, dst);
  // K and V read once and written once packed (4 bytes each per element).
  const std::size_t threads =
      threads_for({0, 16.0 * static_cast<double>(batch * kv_len * kvh * d)});
  parallel_for(batch * kvh, threads, [&](std::size_t t) {
    const std::size_t b = t / kvh, gh = t % kvh;
    const std::size_t src = b * kv_len * ld + gh * d;
    if (view.g16 != nullptr) {
      for (std::size_t j = 0; j < kv_len; ++j) {
        put_key_bf16(view, b, gh, j, k + src + j * ld, v + src + j * ld);
      }
      return;
    }
    pack_b(g, Trans::T, d, kv_len, k + src, ld, dst + t * p.k_stride);
    float* vt = dst + batch * kvh * p.k_stride + t * p.v_stride;
    for (std::size_t j = 0; j < kv_len; ++j) {
      std::copy_n(v + src + j * ld, d, vt + j * p.ldv);
    }
  });
  return view;
}

CorePlan plan_core(const GemmKernels& g, const AttentionShape& s, std::size_t batch,
                   std::size_t q_len, std::size_t kv_len, bool weights, bool average,
                   std::size_t window, const GemmBf16Kernels* g16) {
  CorePlan p;
  p.materialize = weights;
  p.key_tile = std::max(g.nr, kKeyTile / g.nr * g.nr);
  if (g16 != nullptr) p.key_tile = round_up(p.key_tile, g16->nr);
  // Short query sets stay one block: splitting 80 rows as 64 + 16 would run
  // the second block's GEMMs at a quarter of the micro-kernel's rows.
  // Longer ones use blocks of whole micro-tiles (56 rows for AVX-512's 14-row
  // tile rather than 64 = 4 x 14 + 8, whose last pass runs at 8/14).
  p.q_block =
      q_len <= kQueryBlock + kQueryBlock / 2 ? q_len : std::max(g.mr, kQueryBlock / g.mr * g.mr);
  const std::size_t q_blocks = ceil_div(q_len, p.q_block);
  std::size_t tasks = batch * (weights && average ? 1 : s.num_heads) * q_blocks;
  // Query 0 (position kv_len - q_len) sees no key before its window, and
  // later rows' windows start later: the keys before are nobody's, so a
  // decode step with a window splits only the keys it reads.
  if (window != 0 && kv_len >= q_len && kv_len - q_len >= window) {
    p.key_begin = (kv_len - q_len - window + 1) / p.key_tile * p.key_tile;
  }
  const std::size_t span = kv_len - p.key_begin;
  p.chunk_len = round_up(span, p.key_tile);
  if (!weights && tasks < kSplitTargetTasks && span >= 2 * kMinChunk) {
    const std::size_t want = std::min(ceil_div(kSplitTargetTasks, tasks), span / kMinChunk);
    p.chunk_len = round_up(ceil_div(span, want), p.key_tile);
    p.chunks = ceil_div(span, p.chunk_len);
    tasks *= p.chunks;
  }
  // Keys each row reads: a window bounds them.
  const std::size_t seen = window != 0 ? std::min(span, window) : span;
  const double flops = 4.0 * static_cast<double>(batch * s.num_heads * q_len) *
                       static_cast<double>(seen * s.head_dim);
  p.max_threads = std::min(tasks, threads_for({flops}));
  p.workspace_floats = p.chunks > 1 ? batch * s.num_heads * p.chunks * q_len * (s.head_dim + 2) : 0;
  if (weights) {
    p.task_floats = average ? round_up(p.q_block * kv_len, 16) : 0;
  } else {
    p.task_floats = round_up(p.q_block * p.key_tile, 16) + 2 * round_up(p.q_block, 16) +
                    round_up(packed_a_floats(g, p.q_block, s.head_dim), 16);
  }
  if (g16 != nullptr) add_bf16_rows(p, s, *g16, weights ? kv_len : p.key_tile);
  return p;
}

void run_core(const GemmKernels& g, const SoftmaxKernels& sm, const AttentionShape& s,
              const CorePlan& plan, const CoreInputs& in, float* weights, bool average,
              float* workspace) {
  const mha_mask* mask = in.mask;
  const std::size_t kv_len = in.kv.len;
  const Ctx c{g,
              sm,
              s,
              plan,
              in,
              kv_len,
              static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim))),
              (mask && mask->causal) || in.mods.causal,
              static_cast<std::ptrdiff_t>(kv_len) - static_cast<std::ptrdiff_t>(in.q_len),
              mask ? mask->key_padding : nullptr,
              mask ? mask->additive : nullptr,
              mask && mask->additive_per_head,
              in.mods};
  const std::size_t H = s.num_heads, d = s.head_dim, bq = plan.q_block;
  const std::size_t q_blocks = ceil_div(in.q_len, bq);

  if (plan.materialize) {
    if (!average) {
      parallel_for(in.batch * H * q_blocks, plan.max_threads, [&](std::size_t t) {
        const std::size_t qb = t % q_blocks, bh = t / q_blocks, b = bh / H, h = bh % H;
        const std::size_t q0 = qb * bq, q1 = std::min(in.q_len, q0 + bq);
        float* p = weights + ((b * H + h) * in.q_len + q0) * kv_len;
        float* task = plan.task_floats != 0
                          ? thread_scratch(ScratchSlot::kAttentionTask, plan.task_floats)
                          : nullptr;
        c.attend_materialized(b, h, q0, q1, p, kv_len, c.out_rows(b, h, q0), in.ldo, task);
      });
      return;
    }
    // Averaged weights: one task owns all heads of its rows, so the sum over
    // heads runs in a fixed order (h = 0, 1, ...) with no cross-task races.
    parallel_for(in.batch * q_blocks, plan.max_threads, [&](std::size_t t) {
      const std::size_t b = t / q_blocks, q0 = (t % q_blocks) * bq;
      const std::size_t q1 = std::min(in.q_len, q0 + bq), rows = q1 - q0;
      float* p = thread_scratch(ScratchSlot::kAttentionTask, plan.task_floats);
      float* acc = weights + (b * in.q_len + q0) * kv_len;
      for (std::size_t h = 0; h < H; ++h) {
        c.attend_materialized(b, h, q0, q1, h == 0 ? acc : p, kv_len, c.out_rows(b, h, q0), in.ldo,
                              p);
        if (h == 0) continue;
        for (std::size_t r = 0; r < rows; ++r) {
          c.sm.scale_add(p + r * kv_len, acc + r * kv_len, acc + r * kv_len, kv_len, 1.0f);
        }
      }
      for (std::size_t r = 0; r < rows; ++r) {
        c.sm.scale(acc + r * kv_len, kv_len, 1.0f / static_cast<float>(H));
      }
    });
    return;
  }

  const std::size_t chunks = plan.chunks;
  const Partials parts{workspace, in.q_len, d, chunks, H};
  parallel_for(in.batch * H * q_blocks * chunks, plan.max_threads, [&](std::size_t t) {
    const std::size_t ch = t % chunks, qb = (t / chunks) % q_blocks;
    const std::size_t bh = t / (chunks * q_blocks), b = bh / H, h = bh % H;
    const std::size_t q0 = qb * bq, q1 = std::min(in.q_len, q0 + bq);
    const std::size_t k0 = plan.key_begin + ch * plan.chunk_len;
    const std::size_t k1 = std::min(kv_len, k0 + plan.chunk_len);
    float* sc = thread_scratch(ScratchSlot::kAttentionTask, plan.task_floats);
    float* m = sc + round_up(bq * plan.key_tile, 16);
    float* l = m + round_up(bq, 16);
    float* qpack = l + round_up(bq, 16);
    if (chunks == 1) {
      float* o = c.out_rows(b, h, q0);
      c.attend_online(b, h, q0, q1, k0, k1, o, in.ldo, m, l, sc, qpack);
      c.normalize(b, h, q0, q1 - q0, o, in.ldo, m, l);
    } else {
      c.attend_online(b, h, q0, q1, k0, k1, parts.o(b, h, ch) + q0 * d, d, parts.m(b, h, ch) + q0,
                      parts.l(b, h, ch) + q0, sc, qpack);
    }
  });
  if (chunks == 1) return;

  parallel_for(in.batch * H, plan.max_threads, [&](std::size_t t) {
    for (std::size_t i = 0; i < in.q_len; ++i) merge_row(c, parts, t / H, t % H, i);
  });
}

namespace {

// A key tile that never straddles blocks of block_tokens keys: a whole block
// if it is no longer than the usual tile, else the longest whole number of
// strips (nr keys) dividing it, so tiles start on strips; failing both, a
// whole block (its first column starts a strip).
std::size_t paged_key_tile(std::size_t nr, std::size_t tile, std::size_t block_tokens) {
  if (block_tokens <= tile) return block_tokens;
  for (std::size_t t = tile / nr * nr; t >= nr; t -= nr) {
    if (block_tokens % t == 0) return t;
  }
  return block_tokens;
}

}  // namespace

RaggedArrays RaggedArrays::take(std::size_t num) {
  // One block, size_t arrays first: 5 of [num + 1] then the views.
  const std::size_t n1 = checked_add(num, 1, "ragged sequences");
  const std::size_t words = checked_mul(5, n1, "ragged sequences");
  const std::size_t view_words = ceil_div(sizeof(KvCacheView), sizeof(std::size_t));
  auto* w = thread_scratch_array<std::size_t>(
      ScratchSlot::kRagged,
      checked_add(words, checked_mul(num, view_words, "ragged sequences"), "ragged sequences"));
  static_assert(alignof(KvCacheView) <= alignof(std::size_t));
  return {w, w + n1, w + 2 * n1, w + 3 * n1, w + 4 * n1, reinterpret_cast<KvCacheView*>(w + words)};
}

RaggedPlan plan_ragged(const GemmKernels& g, const AttentionShape& s, const RaggedSeqs& seqs,
                       std::size_t block_tokens, const RaggedArrays& arr,
                       const GemmBf16Kernels* g16) {
  RaggedPlan r;
  CorePlan& p = r.core;
  const std::size_t n = seqs.num, H = s.num_heads, d = s.head_dim;
  std::size_t max_q = 0, max_kv = 0;
  double pairs = 0.0;
  for (std::size_t b = 0; b < n; ++b) {
    max_q = std::max(max_q, seqs.q_len(b));
    max_kv = std::max(max_kv, seqs.kv_len(b));
    pairs += static_cast<double>(seqs.q_len(b)) * static_cast<double>(seqs.kv_len(b));
  }
  const std::size_t strip = g16 != nullptr ? g16->nr : g.nr;
  p.key_tile = std::max(g.nr, kKeyTile / g.nr * g.nr);
  if (g16 != nullptr) p.key_tile = round_up(p.key_tile, g16->nr);
  if (block_tokens != 0) p.key_tile = paged_key_tile(strip, p.key_tile, block_tokens);
  // plan_core's rule on the longest sequence: shorter ones are one block.
  p.q_block = max_q <= kQueryBlock + kQueryBlock / 2 ? std::max<std::size_t>(max_q, 1)
                                                     : std::max(g.mr, kQueryBlock / g.mr * g.mr);
  std::size_t tasks = 0;
  for (std::size_t b = 0; b < n; ++b) tasks += H * ceil_div(seqs.q_len(b), p.q_block);
  // Split-KV as in plan_core, one chunk length for every sequence (short
  // query sets against long histories, e.g. a decode step).
  p.chunk_len = std::max(p.key_tile, round_up(max_kv, p.key_tile));
  if (tasks != 0 && tasks < kSplitTargetTasks && max_kv >= 2 * kMinChunk) {
    const std::size_t want = std::min(ceil_div(kSplitTargetTasks, tasks), max_kv / kMinChunk);
    p.chunk_len = round_up(ceil_div(max_kv, want), p.key_tile);
  }
  std::size_t* key_col = arr.key_col;
  std::size_t* task_begin = arr.task_begin;
  std::size_t* chunks = arr.chunks;
  std::size_t* part_begin = arr.part_begin;
  key_col[0] = task_begin[0] = 0;
  p.chunks = 1;
  std::size_t parts = 0;
  for (std::size_t b = 0; b < n; ++b) {
    const std::size_t q = seqs.q_len(b), kv = seqs.kv_len(b);
    chunks[b] = kv > p.chunk_len ? ceil_div(kv, p.chunk_len) : 1;
    p.chunks = std::max(p.chunks, chunks[b]);
    key_col[b + 1] = key_col[b] + round_up(kv, strip);
    task_begin[b + 1] = task_begin[b] + H * ceil_div(q, p.q_block) * chunks[b];
    part_begin[b] = parts;
    if (chunks[b] > 1) parts += H * chunks[b] * q * (d + 2);
  }
  r.key_col = key_col;
  r.task_begin = task_begin;
  r.chunks = chunks;
  r.part_begin = part_begin;
  p.max_threads = std::min(task_begin[n], threads_for({4.0 * static_cast<double>(H * d) * pairs}));
  p.workspace_floats = parts;
  p.task_floats = round_up(p.q_block * p.key_tile, 16) + 2 * round_up(p.q_block, 16) +
                  round_up(packed_a_floats(g, p.q_block, d), 16);
  if (g16 != nullptr) add_bf16_rows(p, s, *g16, p.key_tile);
  r.packing = kv_packing(g, s, 1, r.key_col[n], g16);
  return r;
}

void pack_kv_ragged(const GemmKernels& g, const AttentionShape& s, const RaggedPlan& plan,
                    const RaggedSeqs& seqs, const float* k, const float* v, std::size_t ld,
                    float* dst, KvCacheView* views) {
  const std::size_t kvh = s.num_kv_heads, d = s.head_dim;
  const KvPacking& p = plan.packing;
  // Sequence b alone: its keys start a strip, so they are a view of their
  // own, offset from the whole block's by key_col[b] keys (bf16: that many
  // keys' whole strips of K, and pairs of V).
  const KvCacheView all = kv_view(g, s, p, 1, plan.key_col[seqs.num], dst);
  for (std::size_t b = 0; b < seqs.num; ++b) {
    const std::size_t col = plan.key_col[b];
    views[b] = all;
    views[b].len = seqs.kv_len(b);
    if (p.g16 != nullptr) {
      views[b].k += col * ceil_div(d, 2);  // col / nr strips of kp * nr pairs
      views[b].v += col * p.g16->nr / 2;   // col / 2 pairs of nr columns
    } else {
      views[b].k += col * d;
      views[b].v += col * p.ldv;
    }
  }
  const std::size_t rows = seqs.kv_start[seqs.num];
  const std::size_t threads = threads_for({0, 16.0 * static_cast<double>(rows * kvh * d)});
  parallel_for(seqs.num * kvh, threads, [&](std::size_t t) {
    const std::size_t b = t / kvh, gh = t % kvh, len = seqs.kv_len(b);
    const std::size_t src = seqs.kv_start[b] * ld + gh * d;
    if (p.g16 != nullptr) {
      for (std::size_t j = 0; j < len; ++j) {
        put_key_bf16(views[b], 0, gh, j, k + src + j * ld, v + src + j * ld);
      }
      return;
    }
    if (len == 0) return;
    pack_b(g, Trans::T, d, len, k + src, ld, const_cast<float*>(views[b].keys(0, gh).data));
    float* vt = const_cast<float*>(views[b].values(0, gh));
    for (std::size_t j = 0; j < len; ++j) std::copy_n(v + src + j * ld, d, vt + j * p.ldv);
  });
}

void run_core_ragged(const GemmKernels& g, const SoftmaxKernels& sm, const AttentionShape& s,
                     const RaggedPlan& plan, const RaggedSeqs& seqs, const float* q,
                     std::size_t ldq, const KvCacheView* kv, const AttentionMods& mods, float* out,
                     std::size_t ldo, float* workspace) {
  const std::size_t H = s.num_heads, d = s.head_dim, bq = plan.core.q_block;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  // Sequence b alone, as a batch of one (its rows of lse too).
  const auto inputs = [&](std::size_t b) {
    const std::size_t row = seqs.q_start[b];
    CoreInputs in{q + row * ldq, ldq, 1, seqs.q_len(b), kv[b], nullptr, out + row * ldo, ldo, mods};
    if (mods.lse != nullptr) in.mods.lse = mods.lse + row * H;
    return in;
  };
  const auto context = [&](const CoreInputs& in) {
    return Ctx{g,
               sm,
               s,
               plan.core,
               in,
               in.kv.len,
               scale,
               mods.causal,
               static_cast<std::ptrdiff_t>(in.kv.len) - static_cast<std::ptrdiff_t>(in.q_len),
               nullptr,
               nullptr,
               false,
               in.mods};
  };
  const auto partials = [&](std::size_t b) {
    return Partials{workspace + plan.part_begin[b], seqs.q_len(b), d, plan.chunks[b], H};
  };
  const std::size_t* task_end = plan.task_begin + seqs.num + 1;
  parallel_for(plan.task_begin[seqs.num], plan.core.max_threads, [&](std::size_t t) {
    const std::size_t* it = std::upper_bound(plan.task_begin, task_end, t);
    const std::size_t b = static_cast<std::size_t>(it - plan.task_begin) - 1;
    const CoreInputs in = inputs(b);
    const Ctx c = context(in);
    const std::size_t chunks = plan.chunks[b], local = t - plan.task_begin[b];
    const std::size_t q_blocks = ceil_div(in.q_len, bq);
    const std::size_t ch = local % chunks, qb = (local / chunks) % q_blocks;
    const std::size_t h = local / (chunks * q_blocks);
    const std::size_t q0 = qb * bq, q1 = std::min(in.q_len, q0 + bq);
    const std::size_t k0 = ch * plan.core.chunk_len;
    const std::size_t k1 = std::min(in.kv.len, k0 + plan.core.chunk_len);
    float* sc = thread_scratch(ScratchSlot::kAttentionTask, plan.core.task_floats);
    float* m = sc + round_up(bq * plan.core.key_tile, 16);
    float* l = m + round_up(bq, 16);
    float* qpack = l + round_up(bq, 16);
    if (chunks == 1) {
      float* o = c.out_rows(0, h, q0);
      c.attend_online(0, h, q0, q1, k0, k1, o, ldo, m, l, sc, qpack);
      c.normalize(0, h, q0, q1 - q0, o, ldo, m, l);
    } else {
      const Partials parts = partials(b);
      c.attend_online(0, h, q0, q1, k0, k1, parts.o(0, h, ch) + q0 * d, d, parts.m(0, h, ch) + q0,
                      parts.l(0, h, ch) + q0, sc, qpack);
    }
  });
  if (plan.core.chunks == 1) return;

  // Merge the chunks of each split sequence's rows in chunk order.
  parallel_for(seqs.num * H, plan.core.max_threads, [&](std::size_t t) {
    const std::size_t b = t / H, h = t % H;
    if (plan.chunks[b] == 1) return;
    const CoreInputs in = inputs(b);
    const Ctx c = context(in);
    const Partials parts = partials(b);
    for (std::size_t i = 0; i < in.q_len; ++i) merge_row(c, parts, 0, h, i);
  });
}

}  // namespace mha::detail
