// The fp32 K/V entry: K packed as the GEMM's op(B) = Kᵀ ([head_dim x keys],
// strips of nr keys), so Q·Kᵀ runs the packed micro-kernel on it in place,
// and V row-major at ldv = head_dim rounded up to whole cache lines (the
// columns past head_dim are never read), so P·V reads V and the S tile in
// place (gemm_serial_unpacked) and P is never packed.
#include <algorithm>

#include "attention/kv/kv_type.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"

namespace mha::detail {
namespace {

class KvFp32 final : public KvType {
 public:
  explicit KvFp32(const GemmKernels& g) : g_(g) {}
  const char* name() const override { return "fp32"; }
  std::size_t strip() const override { return g_.nr; }
  std::size_t key_tile() const override { return key_tile_for(g_.nr); }

  KvLayout layout(std::size_t d, std::size_t capacity) const override {
    const char* what = "KV cache layout (batch x kv_heads x padded max_len x padded head_dim)";
    KvLayout l;
    l.capacity = capacity;
    l.k_bytes = float_bytes(
        checked_round_up(checked_mul(checked_round_up(capacity, g_.nr, what), d, what), 16, what),
        what);
    l.ldv = round_up(d, 16);
    l.v_bytes = float_bytes(checked_round_up(checked_mul(capacity, l.ldv, what), 16, what), what);
    return l;
  }
  // Blocks of whole vectors (16 floats, which every ISA's width divides):
  // K block by block in its strips (narrowed or not), V's rows block by
  // block within one product (gemm_serial_unpacked_runs).
  bool spans_blocks(std::size_t block_tokens) const override {
    return block_tokens % 16 == 0 && ceil_div(key_tile(), block_tokens) < kMaxRuns;
  }
  KvLayout block_layout(std::size_t d, std::size_t block_tokens) const override {
    KvLayout l = layout(d, block_tokens);
    if (block_tokens % g_.nr == 0) return l;
    l.k_lanes = block_tokens;
    l.k_bytes = float_bytes(round_up(block_tokens * d, 16), "KV cache layout");
    return l;
  }

  void put(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t d, const float* key,
           const float* value) const override {
    const PackedBColumns kb = keys(l, k, d);
    if (j % kb.nr == 0) kb.clear_strip(j);
    kb.write(j, key);
    std::copy_n(value, d, static_cast<float*>(v) + j * l.ldv);
  }
  // K by put() up to a strip's start, then packed whole strips at a time
  // (pack_b zeroes the last strip's lanes past the keys, as put() would);
  // narrowed strips (block_layout), which pack_b does not write, by put().
  void put_rows(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t n, std::size_t d,
                const float* key, const float* value, std::size_t ld) const override {
    const PackedBColumns kb = keys(l, k, d);
    std::size_t i = 0;
    for (; i < n && (l.k_lanes != 0 || (j + i) % kb.nr != 0); ++i) {
      if ((j + i) % kb.nr == 0) kb.clear_strip(j + i);
      kb.write(j + i, key + i * ld);
    }
    if (i < n) pack_b(g_, Trans::T, d, n - i, key + i * ld, ld, kb.column(j + i));
    for (i = 0; i < n; ++i) {
      std::copy_n(value + i * ld, d, static_cast<float*>(v) + (j + i) * l.ldv);
    }
  }
  // V rows past the length are never read (P·V stops at the length).
  void clear(const KvLayout& l, void* k, void*, std::size_t j, std::size_t d) const override {
    keys(l, k, d).clear(j);
  }

  // K by runs of lanes, a row of d floats at a time (lanes past the tile's
  // keys are never stored by the scores); V by rows.
  void copy_keys(const KvLayout& from, const void* k, const void* v, std::size_t j, std::size_t n,
                 const KvLayout& l, void* k_to, void* v_to, std::size_t to,
                 std::size_t d) const override {
    const std::size_t fl = from.key_lanes(g_.nr), tl = l.key_lanes(g_.nr);
    const auto* ks = static_cast<const float*>(k);
    auto* kd = static_cast<float*>(k_to);
    if (kd != nullptr)
      for_each_lane_run(j, to, n, fl, tl, [&](std::size_t a, std::size_t b, std::size_t r) {
        const float* src = ks + a / fl * fl * d + a % fl;
        float* dst = kd + b / tl * tl * d + b % tl;
        if (r == fl && fl == tl) {
          std::copy_n(src, r * d, dst);
          return;
        }
        for (std::size_t p = 0; p < d; ++p) std::copy_n(src + p * fl, r, dst + p * tl);
      });
    copy_value_rows(from, v, j, n, l, v_to, to, d);
  }

  std::size_t query_floats(std::size_t rows, std::size_t d) const override {
    return packed_a_floats(g_, rows, d);
  }
  std::size_t p_floats(std::size_t, std::size_t, std::size_t) const override { return 0; }
  void prepare_queries(std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                       float* qbuf) const override {
    pack_a(g_, Trans::N, rows, d, q, ldq, qbuf);
  }
  void scores(std::size_t rows, std::size_t d, float* qbuf, const KvTile& t, float alpha, float* s,
              std::size_t lds) const override {
    if (in_blocks(t)) {
      scores_in_blocks(rows, d, qbuf, t, alpha, s, lds);
      return;
    }
    const PackedBView keys =
        PackedBView::whole(static_cast<const float*>(t.k), d, t.layout->capacity, g_.nr);
    gemm_serial_prepacked_ab(g_, rows, qbuf, keys.cols(t.j0, t.j0 + t.n), alpha, 0.0f, s, lds);
  }
  void values(std::size_t rows, std::size_t d, const float* p, std::size_t ldp, const KvTile& t,
              float beta, float* o, std::size_t ldo, float*) const override {
    const std::size_t ldv = t.layout->ldv;
    if (!in_blocks(t)) {
      gemm_serial_unpacked(g_, Trans::N, rows, d, t.n, 1.0f, p, ldp,
                           static_cast<const float*>(t.v) + t.j0 * ldv, ldv, beta, o, ldo);
      return;
    }
    FloatRun runs[kMaxRuns];
    std::size_t count = 0;
    t.for_each_block_run([&](std::size_t i, std::size_t at, std::size_t n) {
      runs[count++] = {reinterpret_cast<const float*>(t.v_block(i)) + at * ldv, n};
    });
    gemm_serial_unpacked_runs(g_, rows, d, t.n, 1.0f, p, ldp, FloatRuns{runs, 0, ldv, 0}, beta, o,
                              ldo);
  }

 private:
  // Runs of one P·V product: a key tile's blocks (spans_blocks).
  static constexpr std::size_t kMaxRuns = kKeyTile / 16 + 2;
  // Whether a paged tile is read block by block: one that spans blocks, or
  // has K in strips narrowed to its block; a tile inside one block of whole
  // strips is read as a contiguous cache's.
  static bool in_blocks(const KvTile& t) {
    return t.blocks != nullptr && (t.layout->k_lanes != 0 || t.j0 + t.n > t.block_keys);
  }
  // A paged tile's scores: each block's keys from its K strips in place, at
  // most nr lanes of one strip per product.
  void scores_in_blocks(std::size_t rows, std::size_t d, const float* q, const KvTile& t,
                        float alpha, float* s, std::size_t lds) const {
    const std::size_t nr = g_.nr, lanes = t.layout->key_lanes(nr);
    t.for_each_strip_run(nr, lanes, true, [&](std::size_t i, std::size_t at, std::size_t n) {
      const float* k =
          reinterpret_cast<const float*>(t.k_block(i)) + at / lanes * lanes * d + at % lanes;
      gemm_serial_prepacked_a_strip(g_, rows, q, d, k, lanes, n, alpha, s + i, lds);
    });
  }
  PackedBColumns keys(const KvLayout& l, void* k, std::size_t d) const {
    return {static_cast<float*>(k), d, l.capacity, l.key_lanes(g_.nr)};
  }
  const GemmKernels& g_;
};

}  // namespace

std::unique_ptr<KvType> make_kv_fp32(const GemmKernels& g) {
  return std::make_unique<KvFp32>(g);
}

}  // namespace mha::detail
