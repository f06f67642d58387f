// The fp32 entry for stores whose V is their K (MLA's latent rows, where
// every head reads [k_pe | c] for its scores and c for its values): one
// row-major copy, ldv = head_dim rounded to whole cache lines, read by both
// products in place. P·V is fp32's (gemm_serial_unpacked on the rows);
// Q·Kᵀ runs as Sᵀ = K·Qᵀ on the same kernel, with Qᵀ prepared once per
// task, then transposed into S, so no packed Kᵀ copy is ever stored.
#include <algorithm>

#include "attention/kv/kv_type.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"

namespace mha::detail {
namespace {

class KvLatentFp32 final : public KvType {
 public:
  explicit KvLatentFp32(const GemmKernels& g) : g_(g) {}
  const char* name() const override { return "fp32 shared K/V"; }
  std::size_t strip() const override { return g_.nr; }
  std::size_t key_tile() const override { return key_tile_for(g_.nr); }

  KvLayout layout(std::size_t d, std::size_t capacity) const override {
    const char* what = "KV cache layout (batch x padded max_len x padded head_dim)";
    KvLayout l;
    l.capacity = capacity;
    l.ldv = round_up(d, 16);
    l.v_bytes = float_bytes(checked_round_up(checked_mul(capacity, l.ldv, what), 16, what), what);
    return l;
  }

  // key is value (the store's contract): only the row is kept.
  void put(const KvLayout& l, void*, void* v, std::size_t j, std::size_t d, const float*,
           const float* value) const override {
    std::copy_n(value, d, static_cast<float*>(v) + j * l.ldv);
  }
  void put_rows(const KvLayout& l, void*, void* v, std::size_t j, std::size_t n, std::size_t d,
                const float*, const float* value, std::size_t ld) const override {
    for (std::size_t i = 0; i < n; ++i) {
      std::copy_n(value + i * ld, d, static_cast<float*>(v) + (j + i) * l.ldv);
    }
  }
  // Both products stop at the length, but the contract is zeros.
  void clear(const KvLayout& l, void*, void* v, std::size_t j, std::size_t d) const override {
    std::fill_n(static_cast<float*>(v) + j * l.ldv, d, 0.0f);
  }

  // The rows alone: they are K too.
  void copy_keys(const KvLayout& from, const void*, const void* v, std::size_t j, std::size_t n,
                 const KvLayout& l, void*, void* v_to, std::size_t to,
                 std::size_t d) const override {
    copy_value_rows(from, v, j, n, l, v_to, to, d);
  }

  // Qᵀ [d x rows], then room for Sᵀ [key_tile x rows].
  std::size_t query_floats(std::size_t rows, std::size_t d) const override {
    return round_up(d * rows, 16) + key_tile() * rows;
  }
  std::size_t p_floats(std::size_t, std::size_t, std::size_t) const override { return 0; }
  void prepare_queries(std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                       float* qbuf) const override {
    for (std::size_t r = 0; r < rows; ++r)
      for (std::size_t c = 0; c < d; ++c) qbuf[c * rows + r] = q[r * ldq + c];
  }
  // Sᵀ a key tile at a time (a materialized row of weights is longer).
  void scores(std::size_t rows, std::size_t d, float* qbuf, const KvTile& t, float alpha, float* s,
              std::size_t lds) const override {
    float* st = qbuf + round_up(d * rows, 16);
    const std::size_t ldv = t.layout->ldv;
    const auto* v = static_cast<const float*>(t.v) + t.j0 * ldv;
    for (std::size_t j0 = 0; j0 < t.n; j0 += key_tile()) {
      const std::size_t n = std::min(key_tile(), t.n - j0);
      gemm_serial_unpacked(g_, Trans::N, n, rows, d, alpha, v + j0 * ldv, ldv, qbuf, rows, 0.0f, st,
                           rows);
      for (std::size_t r = 0; r < rows; ++r)
        for (std::size_t j = 0; j < n; ++j) s[r * lds + j0 + j] = st[j * rows + r];
    }
  }
  void values(std::size_t rows, std::size_t d, const float* p, std::size_t ldp, const KvTile& t,
              float beta, float* o, std::size_t ldo, float*) const override {
    const std::size_t ldv = t.layout->ldv;
    gemm_serial_unpacked(g_, Trans::N, rows, d, t.n, 1.0f, p, ldp,
                         static_cast<const float*>(t.v) + t.j0 * ldv, ldv, beta, o, ldo);
  }

 private:
  const GemmKernels& g_;
};

}  // namespace

std::unique_ptr<KvType> make_kv_latent_fp32(const GemmKernels& g) {
  return std::make_unique<KvLatentFp32>(g);
}

}  // namespace mha::detail
