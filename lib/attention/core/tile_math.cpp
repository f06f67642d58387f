#include "attention/core/tile_math.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/prefetch.hpp"

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

}  // namespace

TaskScratch TaskScratch::carve(const KvType& kv, const CorePlan& plan, std::size_t head_dim,
                               float* base) {
  const std::size_t bq = plan.task_rows;
  TaskScratch t;
  t.s = base;
  t.m = t.s + round_up(bq * plan.s_cols, 16);
  t.l = t.m + round_up(bq, 16);
  t.cm = t.l + round_up(bq, 16);
  t.cl = t.cm + round_up(bq, 16);
  t.co = t.cl + round_up(bq, 16);
  t.qbuf = t.co + round_up(bq * head_dim, 16);
  t.pbuf = t.qbuf + round_up(kv.query_floats(bq, head_dim), 16);
  t.kbuf = t.pbuf + round_up(kv.p_floats(bq, plan.p_cols, head_dim), 16);
  t.vbuf = t.kbuf + plan.gather_layout.k_bytes / sizeof(float);
  t.stage = t.vbuf + plan.gather_layout.v_bytes / sizeof(float);
  return t;
}

SeqAttention::SeqAttention(const KvType& kv, const SoftmaxKernels& sm, const AttentionShape& s,
                           const CorePlan& plan, const CoreCall& call, const CoreSeq& seq)
    : kv_(kv),
      sm_(sm),
      s_(s),
      plan_(plan),
      call_(call),
      seq_(seq),
      mods_(call.mods),
      kv_len_(seq.kv.len),
      scale_(s.scale != 0.f ? s.scale
                            : static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)))),
      causal_offset_(static_cast<std::ptrdiff_t>(seq.kv.len) -
                     static_cast<std::ptrdiff_t>(seq.q_len)) {}

// One past the last key that query row i may see (causal), clamped to kv_len.
std::size_t SeqAttention::visible_end(std::size_t i) const {
  if (!call_.causal) return kv_len_;
  const std::ptrdiff_t last = static_cast<std::ptrdiff_t>(i) + causal_offset_;
  if (last < 0) return 0;
  return std::min(kv_len_, static_cast<std::size_t>(last) + 1);
}

// The first key that query row i may see (sliding window), 0 without one.
// Any window size is valid, so it is compared, never converted to signed.
std::size_t SeqAttention::visible_begin(std::size_t i) const {
  if (mods_.window == 0) return 0;
  const std::ptrdiff_t next = static_cast<std::ptrdiff_t>(i) + causal_offset_ + 1;  // i' + 1
  if (next <= 0 || static_cast<std::size_t>(next) <= mods_.window) return 0;
  return std::min(kv_len_, static_cast<std::size_t>(next) - mods_.window);
}

bool SeqAttention::tile_all_padded(std::size_t k0, std::size_t k1) const {
  if (seq_.padding == nullptr) return false;
  return std::all_of(seq_.padding + k0, seq_.padding + k1, [](unsigned char x) { return x != 0; });
}

// S rows (scores of b's rows for keys k0..k0+n, ld ldsc) get, in the order
// of mha_mods: scale, soft-capping, ALiBi and the additive mask, then -inf
// for causal-, window- and padding-masked keys (after the cap, so a masked
// key stays -inf). Each modifier costs one test per row when off.
void SeqAttention::mask_scores(const RowBlock& b, std::size_t k0, std::size_t n, float* sc,
                               std::size_t ldsc) const {
  const unsigned char* pad = seq_.padding ? seq_.padding + k0 : nullptr;
  for (std::size_t r = 0; r < b.rows(); ++r) {
    const std::size_t h = b.head(r), i = b.query(r);
    float* row = sc + r * ldsc;
    const float* add =
        seq_.additive ? seq_.additive + h * seq_.additive_head_stride + i * kv_len_ + k0 : nullptr;
    if (mods_.softcap != 0.f) {
      sm_.soft_cap(row, n, mods_.softcap);
      if (add) sm_.scale_add(row, add, row, n, 1.0f);
    } else if (add) {
      sm_.scale_add(row, add, row, n, scale_);
    }
    if (mods_.alibi != nullptr) add_alibi(h, i, k0, row, n);
    if (pad) {
      for (std::size_t j = 0; j < n; ++j) {
        if (pad[j]) row[j] = kNegInf;
      }
    }
    const std::size_t end = visible_end(i), begin = visible_begin(i);
    if (end < k0 + n) std::fill(row + (end > k0 ? end - k0 : 0), row + n, kNegInf);
    if (begin > k0) std::fill(row, row + std::min(n, begin - k0), kNegInf);
  }
}

// ALiBi's term for row i is formed as slope·(j - r), r the visible key the
// slope favours (the last one for slope >= 0), not as slope·(j - i'): the
// softmax is the same, with the row's sink and lse shifted by
// alibi_shift(h, i) = slope·(r - i'), but the keys that carry the weight
// get small terms, which float holds to u·|z|. A non-causal row's last keys
// had slope·(kv_len - i') (1080 at slope 1 in the fuzzer), which left their
// weights off by u·1080 and the output by 1e-5. A causal row's r is i', so
// its terms are unchanged.
std::ptrdiff_t SeqAttention::alibi_ref(std::size_t h, std::size_t i) const {
  const std::size_t end = visible_end(i), begin = visible_begin(i);
  if (begin >= end) return static_cast<std::ptrdiff_t>(i) + causal_offset_;
  return static_cast<std::ptrdiff_t>(mods_.alibi[h] >= 0.f ? end - 1 : begin);
}

float SeqAttention::alibi_shift(std::size_t h, std::size_t i) const {
  if (mods_.alibi == nullptr) return 0.f;
  return mods_.alibi[h] *
         static_cast<float>(alibi_ref(h, i) - static_cast<std::ptrdiff_t>(i) - causal_offset_);
}

// z += slope·(j - r) for keys k0..k0+n: an affine ramp, base + j, with j
// read from kRamp (integers, so every sum is exact below 2^24).
void SeqAttention::add_alibi(std::size_t h, std::size_t i, std::size_t k0, float* row,
                             std::size_t n) const {
  const float slope = mods_.alibi[h];
  const float base = static_cast<float>(static_cast<std::ptrdiff_t>(k0) - alibi_ref(h, i));
  for (std::size_t j0 = 0; j0 < n; j0 += kRamp.size()) {
    const float b0 = base + static_cast<float>(j0);
    float* r = row + j0;
    const std::size_t len = std::min(kRamp.size(), n - j0);
    for (std::size_t j = 0; j < len; ++j) r[j] += slope * (b0 + kRamp[j]);
  }
}

// Scores are produced with the scale folded into the product unless an
// additive mask needs them unscaled first (scale·qk + mask, as PyTorch);
// soft-capping needs them scaled, and then adds the mask unscaled.
float SeqAttention::gemm_alpha() const {
  return seq_.additive && mods_.softcap == 0.f ? 1.0f : scale_;
}

// Whether a tile's scores can stay unscaled until the softmax scales them in
// its exp pass (online_update_scaled, the same bits): nothing between the
// product and the softmax reads their values, only the -inf of masked keys,
// which scaling keeps. It saves the product's epilogue a pass over the tile
// (AMX stores whole blocks from the tiles to S then).
bool SeqAttention::scale_in_softmax() const {
  return !seq_.additive && mods_.softcap == 0.f && mods_.alibi == nullptr && scale_ > 0.f;
}

float SeqAttention::tile_alpha() const {
  return scale_in_softmax() ? 1.0f : gemm_alpha();
}

KvTile SeqAttention::scores(std::size_t rows, std::size_t g, std::size_t k0, std::size_t k1,
                            const TaskScratch& t) const {
  const KvView& kv = seq_.kv;
  const std::size_t d = s_.head_dim, bk = plan_.key_tile;
  if (!plan_.gather || kv.in_place(k0, k1, kv_.strip(), plan_.spans)) {
    const KvTile tile = kv.tile(g, k0, k1);
    kv_.scores(rows, d, t.qbuf, tile, tile_alpha(), t.s, bk);
    return tile;
  }
  // Every block but the first starts at its key 0, on a strip: where the
  // first does too and the KV type prefers it (scores_blocks_in_place), the
  // scores of each block are computed in place (bits per score, whatever
  // the tile) and only V, which P·V reduces over the whole tile, is
  // gathered.
  // A tree row's path (from kv.tail on) is gathered key by key, and so is
  // K in narrowed strips (KvType::block_layout).
  const bool keys_in_place = kv_.scores_blocks_in_place() && k1 <= kv.tail &&
                             kv.local(k0) % kv_.strip() == 0 && kv.layout.k_lanes == 0;
  for (std::size_t a = k0; a < k1;) {
    const std::size_t b =
        a >= kv.tail ? a + 1 : std::min({k1, kv.tail, (a / kv.block_tokens + 1) * kv.block_tokens});
    const std::size_t at = kv.source(a);
    // The next block's K and V while this one is copied: blocks lie anywhere
    // in the pool, where the hardware prefetchers do not follow (b16
    // kv4096 decode in blocks of 16, 1 thread, AMX Xeon: 5-12 % less time).
    if (b < k1 && b < kv.tail) {
      prefetch_bytes(kv.k_block(g, b), kv.layout.k_bytes);
      prefetch_bytes(kv.v_block(g, b), kv.layout.v_bytes);
    }
    kv_.copy_keys(kv.layout, kv.k_block(g, at), kv.v_block(g, at), kv.local(at), b - a,
                  plan_.gather_layout, keys_in_place ? nullptr : t.kbuf, t.vbuf, a - k0, d);
    if (keys_in_place)
      kv_.scores(rows, d, t.qbuf, kv.tile(g, a, b), tile_alpha(), t.s + (a - k0), bk);
    a = b;
  }
  const KvTile tile{&plan_.gather_layout, t.kbuf, t.vbuf, 0, k1 - k0};
  if (!keys_in_place) kv_.scores(rows, d, t.qbuf, tile, tile_alpha(), t.s, bk);
  return tile;
}

void SeqAttention::attend_chunk(const RowBlock& b, std::size_t c0, std::size_t c1, float* o,
                                std::size_t ldo, float* m, float* l, const TaskScratch& t) const {
  const std::size_t d = s_.head_dim, bk = plan_.key_tile, gh = b.h0 / group(), rows = b.rows();
  for (std::size_t r = 0; r < rows; ++r) {
    m[r] = kNegInf;
    l[r] = 0.0f;
    std::fill_n(o + r * ldo, d, 0.0f);
  }
  for (std::size_t k0 = c0; k0 < c1; k0 += bk) {
    const std::size_t k1 = std::min(k0 + bk, c1), n = k1 - k0;
    if (tile_all_padded(k0, k1)) continue;
    const KvTile tile = scores(rows, gh, k0, k1, t);
    mask_scores(b, k0, n, t.s, bk);
    const bool scaled = scale_in_softmax();
    // P in bf16 straight from the exp pass: the separate rounding pass took
    // 11 % of a BERT s512 bf16 core on the AMX Xeon. P that is rounded to
    // bf16 takes exp2's pass (KvType::rounds_p).
    const bool p16 = kv_.bf16_p() && sm_.scale_exp2_sum_bf16 != nullptr;
    const bool p2 = kv_.rounds_p();
    const float ps = scaled ? scale_ : 1.0f;
    // Rows in groups that share one exp call for their alphas.
    constexpr std::size_t kGroup = 64;
    for (std::size_t r0 = 0; r0 < rows; r0 += kGroup) {
      const std::size_t r1 = std::min(rows, r0 + kGroup);
      float e[kGroup], sum[kGroup];
      for (std::size_t r = r0; r < r1; ++r) {
        OnlineRow st{m[r], l[r]};
        float* row = t.s + r * bk;
        float* ts = sum + (r - r0);
        if (p16) {
          e[r - r0] =
              online_begin_bf16(sm_, st, row, n, ps,
                                reinterpret_cast<std::uint16_t*>(t.pbuf) + r * round_up(n, 2), ts);
        } else if (p2 || scaled) {
          e[r - r0] = online_begin_scaled(sm_, st, row, n, ps, ts,
                                          p2 ? sm_.scale_exp2_sum : sm_.scale_exp_sum);
        } else {
          e[r - r0] = online_begin(sm_, st, row, n, ts);
        }
        m[r] = st.max;
        l[r] = st.sum;
      }
      sm_.exp(e, e, r1 - r0);
      for (std::size_t r = r0; r < r1; ++r) {
        OnlineRow st{m[r], l[r]};
        online_finish(st, e[r - r0], sum[r - r0]);
        online_rescale(sm_, o + r * ldo, d, e[r - r0]);
        l[r] = st.sum;
      }
    }
    kv_.values(rows, d, p16 ? nullptr : t.s, bk, tile, 1.0f, o, ldo, t.pbuf);
  }
}

void SeqAttention::attend_online(const RowBlock& b, std::size_t kbeg, std::size_t kend, float* o,
                                 std::size_t ldo, float* m, float* l, const TaskScratch& t) const {
  const std::size_t rows = b.rows(), d = s_.head_dim, bk = plan_.key_tile;
  const std::size_t grid = plan_.chunk_keys;
  // Keys past the last row's causal limit are masked for every row: stop.
  kend = std::min(kend, visible_end(b.last_query()));
  // Keys before the first row's window are masked for every row: start at
  // the tile holding its first key (on the key grid's tiles).
  kbeg = std::max(kbeg, visible_begin(b.q0) / bk * bk);
  if (kbeg >= kend) {
    attend_chunk(b, kbeg, kbeg, o, ldo, m, l, t);
    return;
  }
  // The query block is prepared once and multiplies every key tile.
  kv_.prepare_queries(rows, d, q_rows(b.h0, b.q0), b.heads > 1 ? d : call_.ldq, t.qbuf);
  // The first chunk straight into (o, m, l); each later one from a fresh
  // state, then folded in.
  for (std::size_t c0 = kbeg; c0 < kend;) {
    const std::size_t c1 = std::min(kend, (c0 / grid + 1) * grid);
    if (c0 == kbeg) {
      attend_chunk(b, c0, c1, o, ldo, m, l, t);
    } else {
      attend_chunk(b, c0, c1, t.co, d, t.cm, t.cl, t);
      fold_rows(rows, o, ldo, m, l, t);
    }
    c0 = c1;
  }
}

void SeqAttention::attend_shared(std::size_t g, std::size_t rows, const float* q, std::size_t k0,
                                 std::size_t k1, float* o, float* m, float* l,
                                 const TaskScratch& t) const {
  // As a bundle of `rows` heads at this sequence's decode row: mask_scores
  // then applies the soft-cap alone, the one modifier a shared row can have.
  const RowBlock b{g * group(), rows, seq_.q_len - 1, seq_.q_len};
  kv_.prepare_queries(rows, s_.head_dim, q, s_.head_dim, t.qbuf);
  attend_chunk(b, k0, k1, o, s_.head_dim, m, l, t);
}

// online_fold of the chunk's rows (t.cm, t.cl, t.co) into (m, l, o), with
// one exp call for the block (one per row cost 2-3 % of a BERT s2048 bf16
// forward); t.s holds the exponents and whether a row needs them.
void SeqAttention::fold_rows(std::size_t rows, float* o, std::size_t ldo, float* m, float* l,
                             const TaskScratch& t) const {
  const std::size_t d = s_.head_dim;
  float* f = t.s;
  float* need = t.s + 2 * rows;
  for (std::size_t r = 0; r < rows; ++r) {
    OnlineRow st{m[r], l[r]};
    f[2 * r] = f[2 * r + 1] = 0.f;
    need[r] = online_fold_args(st, o + r * ldo, {t.cm[r], t.cl[r]}, t.co + r * d, d, f + 2 * r)
                  ? 1.f
                  : 0.f;
    m[r] = st.max;
    l[r] = st.sum;
  }
  sm_.exp(f, f, 2 * rows);
  for (std::size_t r = 0; r < rows; ++r) {
    if (need[r] == 0.f) continue;
    OnlineRow st{m[r], l[r]};
    online_fold_apply(sm_, st, o + r * ldo, {t.cm[r], t.cl[r]}, t.co + r * d, d, f + 2 * r);
    m[r] = st.max;
    l[r] = st.sum;
  }
}

void SeqAttention::normalize(const RowBlock& b, float* o, std::size_t ldo, const float* m,
                             const float* l) const {
  for (std::size_t r = 0; r < b.rows(); ++r) {
    OnlineRow st{m[r], l[r]};
    join_sink(b.head(r), b.query(r), st, o + r * ldo, s_.head_dim);
    online_finalize(sm_, st, o + r * ldo, s_.head_dim);
    store_lse(b.head(r), b.query(r), st);
  }
}

float SeqAttention::sink(std::size_t h, std::size_t i) const {
  return mods_.sinks[h] - alibi_shift(h, i);
}

void SeqAttention::join_sink(std::size_t h, std::size_t i, OnlineRow& st, float* acc,
                             std::size_t n) const {
  if (mods_.sinks != nullptr) online_rescale(sm_, acc, n, online_sink(sm_, st, sink(h, i)));
}

void SeqAttention::store_lse(std::size_t h, std::size_t i, const OnlineRow& st) const {
  if (seq_.lse != nullptr) seq_.lse[i * s_.num_heads + h] = online_lse(st) + alibi_shift(h, i);
}

// Zeroes row i's causal- and padding-masked keys in a weights row: a NaN
// row's weights are NaN only where it keeps keys, as in mha_softmax.
void SeqAttention::zero_masked_keys(std::size_t i, float* row) const {
  if (seq_.padding != nullptr) {
    for (std::size_t j = 0; j < kv_len_; ++j) {
      if (seq_.padding[j]) row[j] = 0.0f;
    }
  }
  std::fill(row + visible_end(i), row + kv_len_, 0.0f);
  std::fill(row, row + visible_begin(i), 0.0f);
}

void SeqAttention::attend_materialized(std::size_t h, std::size_t q0, std::size_t q1, float* p,
                                       std::size_t ldp, float* o, std::size_t ldo,
                                       const TaskScratch& t) const {
  const std::size_t rows = q1 - q0, d = s_.head_dim;
  const KvTile all = seq_.kv.tile(h / group(), 0, kv_len_);
  kv_.prepare_queries(rows, d, q_rows(h, q0), call_.ldq, t.qbuf);
  kv_.scores(rows, d, t.qbuf, all, gemm_alpha(), p, ldp);
  mask_scores({h, 1, q0, q1}, 0, kv_len_, p, ldp);
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = p + r * ldp;
    OnlineRow st;
    online_update(sm_, st, row, kv_len_);
    join_sink(h, q0 + r, st, row, kv_len_);
    online_finalize(sm_, st, row, kv_len_);
    store_lse(h, q0 + r, st);
    if (online_poisoned(st)) zero_masked_keys(q0 + r, row);
  }
  kv_.values(rows, d, p, ldp, all, 0.0f, o, ldo, t.pbuf);
}

}  // namespace mha::detail
