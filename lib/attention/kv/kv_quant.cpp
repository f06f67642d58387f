// The quantized K/V entries, int8 and fp8 E4M3 (kvquant/format.hpp): a key
// is quantized once, when it enters the store, and both products read the
// codes in registers. On a bf16 object with a dot table
// (kv_quant_dot_kernels), the codes meet Q and p' = P times V's scales,
// rounded to bf16, in bf16 dot products (twice the multiply-adds of fp32
// FMAs; the scales stay fp32); elsewhere K and V are dequantized to fp32
// and Q and P stay fp32, as on fp32 objects.
// A shared entry (MLA's latent rows, K = V) stores the V rows alone and
// builds each score chunk's K strips from them in task scratch: the bits
// of the two-copy entry at half its bytes.
#include <algorithm>
#include <cstring>

#include "attention/kv/kv_type.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "gemm/gemm_bf16.hpp"
#include "kvquant/kernels.hpp"

namespace mha::detail {
namespace {

class KvQuant final : public KvType {
 public:
  KvQuant(kvq::Code code, const KvQuantKernels& k, const GemmBf16Kernels* g16, bool shared)
      : code_(code),
        k_(k),
        dot_(g16 != nullptr ? kv_quant_dot_kernels(*g16) : nullptr),
        round_rows_(g16 != nullptr ? g16->round_rows : nullptr),
        shared_(shared) {}
  const char* name() const override {
    if (code_ == kvq::Code::int8) return shared_ ? "int8 shared K/V" : "int8";
    return shared_ ? "fp8_e4m3 shared K/V" : "fp8_e4m3";
  }
  std::size_t strip() const override { return kvq::kStrip; }
  std::size_t key_tile() const override { return key_tile_for(kvq::kStrip); }
  // The kernels address K by strips and V by a strip's rows (kvq::KeyRuns),
  // so blocks of whole strips (key tiles start on strips).
  bool spans_blocks(std::size_t block_tokens) const override {
    return block_tokens % kvq::kStrip == 0;
  }

  // Each head-block's K and V rounded up to whole cache lines.
  KvLayout layout(std::size_t d, std::size_t capacity) const override {
    const char* what = "KV cache layout (batch x kv_heads x padded max_len x padded head_dim)";
    KvLayout l;
    l.capacity = capacity;
    if (!shared_) {
      l.k_bytes = float_bytes(checked_round_up(checked_mul(ceil_div(capacity, kvq::kStrip),
                                                           kvq::key_strip_bytes(d), what),
                                               64, what) /
                                  sizeof(float),
                              what);
    }
    l.v_bytes = float_bytes(
        checked_round_up(checked_mul(capacity, kvq::value_row_bytes(d), what), 64, what) /
            sizeof(float),
        what);
    return l;
  }

  void put(const KvLayout&, void* k, void* v, std::size_t j, std::size_t d, const float* key,
           const float* value) const override {
    if (shared_) {
      kvq::put_value(code_, d, bytes(v), j, value, k_.quantize);
      return;
    }
    kvq::put_key(code_, d, bytes(k), bytes(v), j, key, value, k_.quantize);
  }
  void put_rows(const KvLayout& l, void* k, void* v, std::size_t j, std::size_t n, std::size_t d,
                const float* key, const float* value, std::size_t ld) const override {
    for (std::size_t i = 0; i < n; ++i) put(l, k, v, j + i, d, key + i * ld, value + i * ld);
  }
  // V too: its rows are read, times a zero P, so they must not keep a stale
  // NaN scale.
  void clear(const KvLayout&, void* k, void* v, std::size_t j, std::size_t d) const override {
    if (shared_) {
      kvq::clear_value(d, bytes(v), j);
      return;
    }
    kvq::clear_key(d, bytes(k), bytes(v), j);
  }

  // K by runs of lanes, V by rows (kvq::copy_keys).
  void copy_keys(const KvLayout&, const void* k, const void* v, std::size_t j, std::size_t n,
                 const KvLayout&, void* k_to, void* v_to, std::size_t to,
                 std::size_t d) const override {
    const auto* ks = static_cast<const std::uint8_t*>(k);
    const auto* vs = static_cast<const std::uint8_t*>(v);
    if (k_to == nullptr || shared_) {
      kvq::copy_values(d, vs, j, n, bytes(v_to), to);
      return;
    }
    for_each_lane_run(j, to, n, kvq::kStrip, kvq::kStrip,
                      [&](std::size_t a, std::size_t b, std::size_t r) {
                        kvq::copy_keys(d, ks, vs, a, r, bytes(k_to), bytes(v_to), b);
                      });
  }

  // Q's rows (fp32, or bf16 pairs for the dot table), then (shared) room
  // for one chunk's K strips, then the dot table's work.
  std::size_t query_floats(std::size_t rows, std::size_t d) const override {
    return work_at(rows, d) + (dot_ == nullptr ? 0 : dot_score_work_words(*dot_, rows, d));
  }
  std::size_t p_floats(std::size_t rows, std::size_t keys, std::size_t d) const override {
    return dot_ == nullptr ? 0 : ceil_div(dot_pbuf_words(*dot_, rows, keys, d), 2);
  }
  void prepare_queries(std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                       float* qbuf) const override {
    if (dot_ == nullptr) {
      for (std::size_t r = 0; r < rows; ++r) std::copy_n(q + r * ldq, d, qbuf + r * d);
      return;
    }
    // Pairs past d zero, to whole groups: the kernels read whole quads.
    const std::size_t pairs = kvq::dot_pairs(d);
    auto* out = reinterpret_cast<std::uint16_t*>(qbuf);
    round_rows_(rows, d, q, ldq, out, 2 * pairs);
    for (std::size_t r = 0; r < rows; ++r) {
      std::fill(out + r * 2 * pairs + round_up(d, 2), out + (r + 1) * 2 * pairs, std::uint16_t{0});
    }
  }
  void scores(std::size_t rows, std::size_t d, float* qbuf, const KvTile& t, float alpha, float* s,
              std::size_t lds) const override {
    if (!shared_) {
      products_scores(rows, d, qbuf, runs(t), t.n, alpha, s, lds);
      return;
    }
    auto* strips = reinterpret_cast<std::uint8_t*>(qbuf + round_up(rows * q_stride(d), 16));
    const std::size_t chunk = kChunkStrips * kvq::kStrip;
    kvq::KeyRuns from = runs(t);
    for (std::size_t j = 0; j < t.n; j += chunk) {
      const std::size_t n = std::min(chunk, t.n - j);
      k_.strips_from_rows(d, from, n, strips);
      products_scores(rows, d, qbuf, kvq::KeyRuns{strips, nullptr}, n, alpha, s + j, lds);
      from.j0 += n;
    }
  }
  // p' is rounded to bf16 (2^-9), so P may come from the exp2 pass (2^-18).
  bool rounds_p() const override { return dot_ != nullptr; }
  void values(std::size_t rows, std::size_t d, const float* p, std::size_t ldp, const KvTile& t,
              float beta, float* o, std::size_t ldo, float* pbuf) const override {
    if (dot_ != nullptr) {
      dot_->values[index()](rows, d, p, ldp, runs(t), t.n, beta, o, ldo,
                            reinterpret_cast<std::uint16_t*>(pbuf));
      return;
    }
    k_.values[index()](rows, d, p, ldp, runs(t), t.n, beta, o, ldo);
  }

 private:
  static std::uint8_t* bytes(void* p) { return static_cast<std::uint8_t*>(p); }
  static kvq::KeyRuns runs(const KvTile& t) {
    return {static_cast<const std::uint8_t*>(t.k),
            static_cast<const std::uint8_t*>(t.v),
            t.j0,
            t.blocks,
            t.block_keys,
            t.k_stride,
            t.v_stride,
            t.ahead};
  }
  std::size_t index() const { return static_cast<std::size_t>(code_); }
  // Floats per prepared Q row.
  std::size_t q_stride(std::size_t d) const { return dot_ == nullptr ? d : kvq::dot_pairs(d); }
  // Where the dot table's work starts in qbuf, after the rows and the
  // shared chunk's strips.
  std::size_t work_at(std::size_t rows, std::size_t d) const {
    const std::size_t q = round_up(rows * q_stride(d), 16);
    if (!shared_) return q;
    return q + round_up(ceil_div(kChunkStrips * kvq::key_strip_bytes(d), sizeof(float)), 16);
  }
  void products_scores(std::size_t rows, std::size_t d, float* qbuf, const kvq::KeyRuns& keys,
                       std::size_t n, float alpha, float* s, std::size_t lds) const {
    if (dot_ != nullptr) {
      dot_->scores[index()](rows, d, reinterpret_cast<const std::uint32_t*>(qbuf),
                            kvq::dot_pairs(d), keys, n, alpha, s, lds,
                            reinterpret_cast<std::uint32_t*>(qbuf + work_at(rows, d)));
      return;
    }
    k_.scores[index()](rows, d, qbuf, d, keys, n, alpha, s, lds);
  }
  // K strips built per chunk (shared): 4, a score tile's widest, 39 KiB at
  // MLA's 576 channels.
  static constexpr std::size_t kChunkStrips = 4;
  kvq::Code code_;
  const KvQuantKernels& k_;
  const KvQuantDotKernels* dot_;
  void (*round_rows_)(std::size_t, std::size_t, const float*, std::size_t, void*, std::size_t);
  bool shared_;
};

}  // namespace

std::unique_ptr<KvType> make_kv_quant(kvq::Code code, Isa isa, const GemmBf16Kernels* g16,
                                      bool shared) {
  return std::make_unique<KvQuant>(code, kv_quant_kernels(isa), g16, shared);
}

}  // namespace mha::detail
