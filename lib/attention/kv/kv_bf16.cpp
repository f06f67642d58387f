// The bf16 K/V entry, in the bf16 kernels' packed-B layout (gemm_bf16.hpp):
// K as op(B) = Kᵀ (pairs along head_dim, strips of nr keys), V as op(B) = V
// (groups of k_group consecutive keys, strips of nr columns v_strip elements
// apart), so both products run the dot kernels on the stored K and V. The
// slots of a V group past the keys written are zero.
// Shared (MLA's latent rows, K = V): V alone is stored, and each score chunk's
// K strips are built from it in task scratch, byte for byte what the
// two-copy entry stores (the same rounding of the same row), so the bits
// are the two-copy entry's at half its bytes.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "attention/kv/kv_type.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/prefetch.hpp"
#include "reshape/kernels.hpp"

namespace mha::detail {
namespace {

class KvBf16 final : public KvType {
 public:
  KvBf16(const GemmKernels& g, const GemmBf16Kernels& g16, const ReshapeKernels* shared)
      : g_(g), g16_(g16), rk_(shared) {}
  const char* name() const override { return shared() ? "bf16 shared K/V" : "bf16"; }
  std::size_t strip() const override { return g16_.nr; }
  std::size_t row_tile() const override { return g16_.mr; }
  // Not on panels (AMX), whose per-call set-up a block of 16 keys does not
  // amortize: Llama-1B-like decode, b16 kv4096, blocks of 16, 1 thread, AMX
  // Xeon, 36.4-37.4 ms in place, 31.5-33.0 gathered (the dot sets, Zen 5:
  // 15-18 in place, 17-23 gathered).
  bool scores_blocks_in_place() const override { return g16_.panel_rows == nullptr; }
  std::size_t key_tile() const override { return round_up(key_tile_for(g_.nr), g16_.nr); }
  // On a kernel set with ukernel_runs: K block by block in its strips
  // (narrowed or not), V's k groups block by block within one product, so
  // blocks of whole k groups. Llama-1B-like decode, b16 kv4096, blocks of
  // 16, Zen 4, interleaved: 16.1-16.4 ms gathered, 12.5-13.3 in place at 1
  // thread; 8.98-9.40 and 7.40-7.63 at 2.
  bool spans_blocks(std::size_t block_tokens) const override {
    return !shared() && g16_.ukernel_runs != nullptr && block_tokens % g16_.k_group == 0 &&
           ceil_div(key_tile(), block_tokens) < kMaxRuns;
  }

  // Each head-block rounded up to whole cache lines (32 elements).
  KvLayout layout(std::size_t d, std::size_t capacity) const override {
    const char* what = "KV cache layout (batch x kv_heads x padded max_len x padded head_dim)";
    const std::size_t nr = g16_.nr;
    KvLayout l;
    l.capacity = capacity;
    const std::size_t k_elems =
        checked_mul(checked_mul(ceil_div(capacity, nr), packed_b_rows(g16_, d), what), nr, what);
    l.v_strip = checked_mul(checked_round_up(capacity, g16_.k_group, what), nr, what);
    const std::size_t v_elems = checked_mul(ceil_div(d, nr), l.v_strip, what);
    l.k_bytes = shared() ? 0 : float_bytes(checked_round_up(k_elems, 32, what) / 2, what);
    l.v_bytes = float_bytes(checked_round_up(v_elems, 32, what) / 2, what);
    return l;
  }
  // K strips of the block's keys, rounded up to pairs of lanes (BFMMLA's).
  KvLayout block_layout(std::size_t d, std::size_t block_tokens) const override {
    KvLayout l = layout(d, block_tokens);
    if (shared() || block_tokens % g16_.nr == 0) return l;
    l.k_lanes = round_up(block_tokens, 2);
    l.k_bytes =
        float_bytes(round_up(packed_b_rows(g16_, d) * l.k_lanes, 32) / 2, "KV cache layout");
    return l;
  }

  // Rounded in chunks on the stack: K's pairs go to lane j of its strip
  // (32-bit stores nr pairs apart), V's elements to slot j % k_group of
  // their column in each column strip; the group's first key also zeroes
  // the others' slots. No division per element: one per column of V made
  // put() and its conversions 18 % of a BERT s512 bf16 forward on AMX
  // (1.8 ms of 10.2; the forward took 1.0 ms less without them).
  void put(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t d, const float* key,
           const float* value) const override {
    if (!shared() && j % l.key_lanes(g16_.nr) == 0) clear_strip(l, k, j, d);
    put_key(l, k, v, j, d, key, value, j % g16_.k_group == 0);
  }
  // put() for each key, a strip of nr keys at a time: rounded into rows on
  // the stack and packed by the kernel set's pack_b, K as the columns of
  // op(B) = Kᵀ and V as the rows of op(B) = V, which zeroes a strip's lanes
  // and a group's slots past the keys and its rows past d's pairs. (Key by
  // key, the stores of put() were 8 % of a BERT s512 bf16 forward on AMX.)
  void put_rows(const KvLayout& l, void* k, void* v, std::size_t j0, std::size_t n, std::size_t d,
                const float* key, const float* value, std::size_t ld) const override {
    const std::size_t nr = g16_.nr;
    // Up to a strip's start, key by key; every key of narrowed strips
    // (block_layout), which pack_b does not write.
    std::size_t i = 0;
    for (; i < n && (l.k_lanes != 0 || (j0 + i) % nr != 0); ++i) {
      put(l, k, v, j0 + i, d, key + i * ld, value + i * ld);
    }
    // Columns per pass: whole V strips and whole k groups of K pairs.
    constexpr std::size_t kBuf = 8192;
    const std::size_t chunk = kBuf / nr / (2 * nr) * (2 * nr);
    alignas(64) std::uint16_t rows[kBuf];
    for (; i < n; i += nr) {
      const std::size_t keys = std::min(nr, n - i), j = j0 + i;
      for (std::size_t c0 = 0; c0 < d; c0 += chunk) {
        const std::size_t cols = std::min(chunk, d - c0), ldr = round_up(cols, 2);
        if (!shared()) {
          round(keys, cols, key + i * ld + c0, ld, rows, ldr);
          g16_.pack_b(true, cols, keys, rows, ldr, key_strip(l, k, j, d) + c0 * nr, 0);
        }
        round(keys, cols, value + i * ld + c0, ld, rows, ldr);
        g16_.pack_b(false, keys, cols, rows, ldr, value_group(v, j) + c0 / nr * l.v_strip,
                    l.v_strip);
      }
    }
  }
  // V too: its pairs are read, times a zero P, so they must not keep a
  // stale infinity or NaN.
  void clear(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t d) const override {
    const std::size_t lanes = l.key_lanes(g16_.nr), kg = g16_.k_group;
    std::uint16_t* vb = value_group(v, j);
    for (std::size_t p = 0; p < ceil_div(d, 2) && !shared(); ++p) {
      std::fill_n(key_strip(l, k, j, d) + packed_b_pair_at(kg, lanes, p, j % lanes), 2,
                  std::uint16_t{0});
    }
    for (std::size_t c = 0; c < d; ++c) vb[value_slots_at(l, c) + j % kg] = 0;
  }

  // K by runs of lanes, a k group (k_group elements per column) at a time,
  // which are contiguous in both layouts where a BFMMLA run keeps its
  // column pairs whole; V by whole key groups where both sides start one,
  // else key by key (a block of an odd size). Lanes past the tile's keys
  // are never stored by the scores; the V slots of its last group are a
  // copied source's (zero past a block's or the sequence's keys) or zero.
  void copy_keys(const KvLayout& from, const void* k, const void* v, std::size_t j, std::size_t n,
                 const KvLayout& l, void* k_to, void* v_to, std::size_t to,
                 std::size_t d) const override {
    const std::size_t nr = g16_.nr, kg = g16_.k_group, rows = packed_b_rows(g16_, d);
    const std::size_t fl = from.key_lanes(nr), tl = l.key_lanes(nr);
    const auto* ks = static_cast<const std::uint16_t*>(k);
    const auto* vs = static_cast<const std::uint16_t*>(v);
    auto* kd = shared() ? nullptr : static_cast<std::uint16_t*>(k_to);
    auto* vd = static_cast<std::uint16_t*>(v_to);
    if (kd != nullptr)
      for_each_lane_run(j, to, n, fl, tl, [&](std::size_t a, std::size_t b, std::size_t r) {
        const std::uint16_t* src = ks + key_strip_at(from, a, d);
        std::uint16_t* dst = kd + key_strip_at(l, b, d);
        if (r == fl && fl == tl) {
          std::copy_n(src, rows * r, dst);
          return;
        }
        if (kg == 2 || (a % 2 == 0 && b % 2 == 0 && r % 2 == 0)) {
          for (std::size_t q = 0; q < rows / kg; ++q) {
            std::copy_n(src + (q * fl + a % fl) * kg, r * kg, dst + (q * tl + b % tl) * kg);
          }
          return;
        }
        for (std::size_t i = 0; i < r; ++i) {
          for (std::size_t p = 0; p < ceil_div(d, 2); ++p) {
            std::copy_n(src + packed_b_pair_at(kg, fl, p, (a + i) % fl), 2,
                        dst + packed_b_pair_at(kg, tl, p, (b + i) % tl));
          }
        }
      });
    if (j % kg == 0 && to % kg == 0) {
      for (std::size_t c = 0; c < d; c += nr) {
        std::copy_n(vs + c / nr * from.v_strip + j * nr, round_up(n, kg) * nr,
                    vd + c / nr * l.v_strip + to * nr);
      }
      return;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t a = j + i, b = to + i;
      for (std::size_t c = 0; c < d; ++c) {
        std::uint16_t* slots = vd + value_group_at(b) + value_slots_at(l, c);
        if (b % kg == 0) std::fill_n(slots, kg, std::uint16_t{0});
        slots[b % kg] = vs[value_group_at(a) + value_slots_at(from, c) + a % kg];
      }
    }
  }

  // Q and P rows in the kernels' A elements (a_bytes each), pairs complete;
  // shared, then room for one chunk's K strips (and its rows, for pack_b).
  std::size_t query_floats(std::size_t rows, std::size_t d) const override {
    const std::size_t q = a_floats(rows, d);
    if (!shared()) return q;
    const std::size_t strips = round_up(packed_b_rows(g16_, d) * chunk_keys(), 32) / 2;
    return q + strips + (g16_.k_group == 2 ? 0 : chunk_keys() * round_up(d, 2) / 2);
  }
  std::size_t p_floats(std::size_t rows, std::size_t keys, std::size_t) const override {
    return a_floats(rows, keys);
  }
  void prepare_queries(std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                       float* qbuf) const override {
    g16_.round_rows(rows, d, q, ldq, qbuf, round_up(d, 2));
  }
  void scores(std::size_t rows, std::size_t d, float* qbuf, const KvTile& t, float alpha, float* s,
              std::size_t lds) const override {
    const std::size_t kp = ceil_div(d, 2), b_strip = packed_b_rows(g16_, d) * g16_.nr;
    const auto* q = reinterpret_cast<const std::uint32_t*>(qbuf);
    if (in_blocks(t)) {
      scores_in_blocks(rows, d, q, t, alpha, s, lds);
      return;
    }
    if (!shared()) {
      bf16_rows(g16_, rows, kp, q, kp,
                static_cast<const std::uint16_t*>(t.k) + key_strip_at(*t.layout, t.j0, d), b_strip,
                s, lds, t.n, alpha, 0.0f);
      return;
    }
    const std::size_t ld = round_up(d, 2);
    auto* strips = reinterpret_cast<std::uint16_t*>(qbuf + a_floats(rows, d));
    std::uint16_t* key_rows = strips + round_up(packed_b_rows(g16_, d) * chunk_keys(), 32);
    const auto* v = static_cast<const std::uint16_t*>(t.v);
    for (std::size_t j = 0; j < t.n; j += chunk_keys()) {
      const std::size_t n = std::min(chunk_keys(), t.n - j);
      if (g16_.k_group == 2) {
        // The next chunk's keys, the next tile's where this is the last.
        const std::size_t ahead = std::min(chunk_keys(), t.layout->capacity - (t.j0 + j + n));
        strips_from_values(*t.layout, v, t.j0 + j, n, ahead, d, strips, b_strip);
      } else {
        value_rows(*t.layout, v, t.j0 + j, n, d, key_rows, ld);
        g16_.pack_b(true, d, n, key_rows, ld, strips, b_strip);
      }
      bf16_rows(g16_, rows, kp, q, kp, strips, b_strip, s + j, lds, n, alpha, 0.0f);
    }
  }
  void prepare_thread() const override { mha::detail::prepare_thread(g16_); }
  // Every set whose A elements are bf16 rounds them to nearest even, and
  // the exp pass makes no denormal that a flushing set's round_rows would
  // read as zero: its P rows are the bytes round_rows writes.
  bool rounds_p() const override { return true; }
  bool bf16_p() const override { return g16_.a_bytes == 2; }
  void values(std::size_t rows, std::size_t d, const float* p, std::size_t ldp, const KvTile& t,
              float beta, float* o, std::size_t ldo, float* pbuf) const override {
    const std::size_t ldp16 = round_up(t.n, 2);
    if (p != nullptr) g16_.round_rows(rows, t.n, p, ldp, pbuf, ldp16);
    if (in_blocks(t)) {
      values_in_blocks(rows, d, reinterpret_cast<const std::uint32_t*>(pbuf), ldp16 / 2, t, beta, o,
                       ldo);
      return;
    }
    bf16_rows(g16_, rows, ceil_div(t.n, 2), reinterpret_cast<const std::uint32_t*>(pbuf), ldp16 / 2,
              static_cast<const std::uint16_t*>(t.v) + value_group_at(t.j0), t.layout->v_strip, o,
              ldo, d, 1.0f, beta);
  }

 private:
  bool shared() const { return rk_ != nullptr; }
  std::size_t a_floats(std::size_t rows, std::size_t d) const {
    return round_up(rows * round_up(d, 2) / 2 * g16_.pair_words(), 16);
  }
  // Runs of one P·V product: a key tile's blocks.
  static constexpr std::size_t kMaxRuns = kKeyTile / 2 + 1;
  // Whether a tile's products read its blocks in place (a paged cache's
  // tile, and a kernel set that reads B in runs).
  bool in_blocks(const KvTile& t) const {
    return t.blocks != nullptr && !shared() && g16_.ukernel_runs != nullptr;
  }
  // A paged tile's scores (spans_blocks): each block's keys from its K
  // strips in place, at most nr lanes of one strip per product (a strip
  // narrowed to the block has k groups of its lanes). Two blocks of 16 as
  // one product of 32 lanes (twice the independent chains at a GQA group's
  // 4 rows) measured within the noise: b16 kv4096, Zen 4, 12.2-13.5 ms
  // against 12.1-13.3.
  void scores_in_blocks(std::size_t rows, std::size_t d, const std::uint32_t* q, const KvTile& t,
                        float alpha, float* s, std::size_t lds) const {
    const std::size_t nr = g16_.nr, kg = g16_.k_group, lanes = t.layout->key_lanes(nr);
    const std::size_t kp = ceil_div(d, 2), strip = packed_b_rows(g16_, d) * lanes;
    t.for_each_strip_run(nr, lanes, false, [&](std::size_t i, std::size_t at, std::size_t n) {
      const auto* k = reinterpret_cast<const std::uint16_t*>(t.k_block(i));
      const Bf16Run run{k + at / lanes * strip + at % lanes * kg, kp};
      bf16_rows_runs(g16_, rows, q, kp, Bf16Runs{&run, 1, kg * lanes}, s + i, lds, n, alpha, 0.0f);
    });
  }
  // A paged tile's P·V (spans_blocks): one product per column strip of V
  // over the tile's keys, its k groups read block by block in place.
  void values_in_blocks(std::size_t rows, std::size_t d, const std::uint32_t* p, std::size_t ldp,
                        const KvTile& t, float beta, float* o, std::size_t ldo) const {
    const std::size_t nr = g16_.nr, kg = g16_.k_group;
    Bf16Run runs[kMaxRuns];
    std::size_t count = 0;
    t.for_each_block_run([&](std::size_t i, std::size_t at, std::size_t n) {
      runs[count++] = {reinterpret_cast<const std::uint16_t*>(t.v_block(i)) + value_group_at(at),
                       ceil_div(n, 2)};
    });
    for (std::size_t c0 = 0; c0 < d; c0 += nr) {
      bf16_rows_runs(g16_, rows, p, ldp, Bf16Runs{runs, count, kg * nr}, o + c0, ldo,
                     std::min(nr, d - c0), 1.0f, beta);
      for (std::size_t r = 0; r < count; ++r) runs[r].b += t.layout->v_strip;
    }
  }
  // Keys per K chunk of a shared entry's scores: whole strips and k groups,
  // 74 KiB of strips at MLA's 576 channels; a whole key tile on panels
  // (AMX), whose per-call set-up the two-copy entry pays once a tile.
  std::size_t chunk_keys() const {
    return g16_.panel_rows != nullptr ? key_tile() : round_up(64, g16_.nr);
  }
  // Keys [j0, j0 + n) of V (j0 on a k group) as rows of bf16 ld elements
  // apart, an odd d's rows ending in a zero: the rows put_rows packs as K
  // (BFMMLA's k_group 4). Rows up to n's next k group are written (the
  // scratch holds them).
  void value_rows(const KvLayout& l, const std::uint16_t* v, std::size_t j0, std::size_t n,
                  std::size_t d, std::uint16_t* rows, std::size_t ld) const {
    const std::size_t nr = g16_.nr, kg = g16_.k_group;
    for (std::size_t c0 = 0; c0 < d; c0 += nr) {
      const std::uint16_t* strip = v + c0 / nr * l.v_strip + value_group_at(j0);
      const std::size_t cols = std::min(nr, d - c0);
      for (std::size_t i = 0; i < n; i += kg) {
        const std::uint16_t* group = strip + i * nr;
        std::uint16_t* row = rows + i * ld + c0;
        for (std::size_t k = 0; k < kg; ++k)
          for (std::size_t c = 0; c < cols; ++c) row[k * ld + c] = group[c * kg + k];
      }
    }
    if (d % 2 != 0)
      for (std::size_t i = 0; i < n; ++i) rows[i * ld + d] = 0;
  }
  // k_group 2: the K strips of keys [j0, j0 + n) (j0 on a strip) straight
  // from V's group rows. A group row's two keys by two channels, 4 elements
  // in 64 bits, are the two keys' K pairs once their middle elements swap
  // (transpose_pairs); lanes past the keys are zeroed, as pack_b leaves
  // them. V's column strips are capacity keys apart, a page each per chunk,
  // which the hardware prefetchers do not follow: the `ahead` keys after
  // the chunk are asked for as it is read (V2-Lite b8 decode, 1 thread, Zen
  // 4: 12.9-13.2 ms without, 10.2-10.5 with, 9.65-9.68 for the two-copy
  // entry).
  void strips_from_values(const KvLayout& l, const std::uint16_t* v, std::size_t j0, std::size_t n,
                          std::size_t ahead, std::size_t d, std::uint16_t* strips,
                          std::size_t b_strip) const {
    const std::size_t nr = g16_.nr, half = nr / 2, kp = ceil_div(d, 2), pairs = ceil_div(n, 2);
    for (std::size_t i0 = 0; i0 < pairs; i0 += half) {
      const std::size_t rows = std::min(half, pairs - i0);
      std::uint16_t* out = strips + i0 / half * b_strip;
      for (std::size_t c0 = 0; c0 < d; c0 += nr) {
        const std::uint16_t* in = v + c0 / nr * l.v_strip + value_group_at(j0) + i0 * 2 * nr;
        if (2 * i0 < ahead) {
          prefetch_bytes(in + n / 2 * 2 * nr,
                         std::min(rows, (ahead + 1) / 2 - i0) * 2 * nr * sizeof *in);
        }
        rk_->transpose_pairs(in, 2 * nr, out + c0 * nr, 2 * nr, rows, std::min(half, kp - c0 / 2));
      }
    }
    if (n % nr != 0) {
      std::uint16_t* last = strips + n / nr * b_strip;
      for (std::size_t p = 0; p < kp; ++p)
        std::fill(last + (p * nr + n % nr) * 2, last + (p + 1) * nr * 2, std::uint16_t{0});
    }
  }
  void clear_strip(const KvLayout& l, void* k, std::size_t j, std::size_t d) const {
    std::fill_n(key_strip(l, k, j, d), packed_b_rows(g16_, d) * l.key_lanes(g16_.nr),
                std::uint16_t{0});
  }
  // Key j's K pairs (none where shared) and V elements; with `zero_group`,
  // the rest of its V group rows zeroed first (columns past d too, as
  // pack_b leaves them).
  void put_key(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t d, const float* key,
               const float* value, bool zero_group) const {
    const std::size_t nr = g16_.nr, kg = g16_.k_group, slot = j % kg;
    const std::size_t lanes = l.key_lanes(nr), lane = j % lanes;
    std::uint16_t* kb = shared() ? nullptr : key_strip(l, k, j, d);
    std::uint16_t* vb = value_group(v, j);
    // Chunks of whole V strips (nr <= 32 in every set, all even).
    constexpr std::size_t kChunk = 256;
    alignas(64) std::uint16_t row[kChunk + 2];
    const std::size_t chunk = kChunk / nr * nr;
    for (std::size_t c0 = 0; c0 < d; c0 += chunk) {
      const std::size_t n = std::min(chunk, d - c0), p0 = c0 / 2;
      if (kb != nullptr) put_pairs(kb, lanes, lane, p0, n, key + c0, row);
      round(1, n, value + c0, n, row, n + 1);
      for (std::size_t s0 = 0; s0 < n; s0 += nr) {
        std::uint16_t* slots = vb + (c0 + s0) / nr * l.v_strip + slot;
        const std::size_t cols = std::min(nr, n - s0);
        if (zero_group) std::fill_n(slots, nr * kg, std::uint16_t{0});
        for (std::size_t c = 0; c < cols; ++c) slots[c * kg] = row[s0 + c];
      }
    }
  }
  // Elements [2 p0, 2 p0 + n) of a key, rounded into `row` (n + 1
  // elements), as pairs p0.. of lane `lane` of its K strip.
  void put_pairs(std::uint16_t* kb, std::size_t lanes, std::size_t lane, std::size_t p0,
                 std::size_t n, const float* key, std::uint16_t* row) const {
    round(1, n, key, n, row, n + 1);
    if (g16_.k_group == 2) {
      std::uint16_t* dst = kb + (p0 * lanes + lane) * 2;
      for (std::size_t p = 0; p < ceil_div(n, 2); ++p) {
        std::memcpy(dst + p * lanes * 2, row + 2 * p, 2 * sizeof row[0]);
      }
      return;
    }
    for (std::size_t p = 0; p < ceil_div(n, 2); ++p) {
      std::memcpy(kb + packed_b_pair_at(g16_.k_group, lanes, p0 + p, lane), row + 2 * p,
                  2 * sizeof row[0]);
    }
  }
  // Rows of x to bf16 as K and V are stored: by the kernel set's round_rows
  // where it yields bf16 (vectorized on the set's ISA; fp32_to_bf16 is built
  // for the baseline ISA), which flushes denormals only where the set's
  // products read them as zero anyway; else by fp32_to_bf16. An odd n's
  // row ends in a zero.
  void round(std::size_t rows, std::size_t n, const float* x, std::size_t ldx, std::uint16_t* y,
             std::size_t ldy) const {
    if (g16_.a_bytes == 2) {
      g16_.round_rows(rows, n, x, ldx, y, ldy);
      return;
    }
    for (std::size_t i = 0; i < rows; ++i) {
      fp32_to_bf16(n, x + i * ldx, y + i * ldy);
      if (n % 2 != 0) y[i * ldy + n] = 0;
    }
  }

  // The K strip holding key j, and V's group row holding key j in its first
  // column strip, in elements from the head-block's start (key tiles start
  // on whole groups).
  std::size_t key_strip_at(const KvLayout& l, std::size_t j, std::size_t d) const {
    const std::size_t lanes = l.key_lanes(g16_.nr);
    return j / lanes * packed_b_rows(g16_, d) * lanes;
  }
  std::size_t value_group_at(std::size_t j) const {
    return j / g16_.k_group * g16_.k_group * g16_.nr;
  }
  // Column c's k_group slots in a group row of V (adjacent in both layouts).
  std::size_t value_slots_at(const KvLayout& l, std::size_t c) const {
    return c / g16_.nr * l.v_strip + packed_b_pair_at(g16_.k_group, g16_.nr, 0, c % g16_.nr);
  }
  std::uint16_t* key_strip(const KvLayout& l, void* k, std::size_t j, std::size_t d) const {
    return static_cast<std::uint16_t*>(k) + key_strip_at(l, j, d);
  }
  std::uint16_t* value_group(void* v, std::size_t j) const {
    return static_cast<std::uint16_t*>(v) + value_group_at(j);
  }
  const GemmKernels& g_;
  const GemmBf16Kernels& g16_;
  // The shared entry's transposes; null for the two-copy entry.
  const ReshapeKernels* rk_;
};

}  // namespace

std::unique_ptr<KvType> make_kv_bf16(const GemmKernels& g, const GemmBf16Kernels& g16) {
  return std::make_unique<KvBf16>(g, g16, nullptr);
}

std::unique_ptr<KvType> make_kv_bf16_shared(const GemmKernels& g, const GemmBf16Kernels& g16,
                                            Isa isa) {
  return std::make_unique<KvBf16>(g, g16, &reshape_kernels(isa));
}

}  // namespace mha::detail
