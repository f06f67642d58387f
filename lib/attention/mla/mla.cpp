#include "attention/mla/mla.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <utility>

#include "attention/projection/projection.hpp"
#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"
#include "gemm/gemm.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace {

// op(B) [k x n] of a weight whose row row(j) (k floats) makes output j:
// the model's [out, in] matrices, their outputs reordered.
template <class Row>
std::vector<float> gather(std::size_t k, std::size_t n, Row row) {
  std::vector<float> b(k * n);
  for (std::size_t j = 0; j < n; ++j) {
    const float* w = row(j);
    for (std::size_t i = 0; i < k; ++i) b[i * n + j] = w[i];
  }
  return b;
}

// x rows (n features at stride ld) = gamma · x / sqrt(mean(x²) + eps), the
// sum of squares in double.
void rms_norm(std::size_t rows, std::size_t n, const float* gamma, double eps, float* x,
              std::size_t ld) {
  const double bytes = 8.0 * static_cast<double>(rows) * static_cast<double>(n);
  parallel_for(rows, threads_for({0, bytes}), [&](std::size_t i) {
    float* xi = x + i * ld;
    double ss = 0;
    for (std::size_t j = 0; j < n; ++j) ss += static_cast<double>(xi[j]) * xi[j];
    const double inv = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (std::size_t j = 0; j < n; ++j) xi[j] = gamma[j] * static_cast<float>(xi[j] * inv);
  });
}

// Row copies: dst row i, columns [0, n) = src row i, with strides; the rest
// of each dst head is zeroed by the caller's layout.
void copy_cols(std::size_t rows, std::size_t n, const float* src, std::size_t lds, float* dst,
               std::size_t ldd) {
  for (std::size_t i = 0; i < rows; ++i) std::copy_n(src + i * lds, n, dst + i * ldd);
}

}  // namespace

// The weights both forms share, packed once.
class MlaWeights {
 public:
  MlaWeights(std::unique_ptr<Precision> precision, const MlaShape& s, const mha_mla_weights& w)
      : s_(s), precision_(std::move(precision)) {
    const std::size_t E = s.E, H = s.H, dq = s.dn + s.dr, L = s.latent(), kvb = s.dn + s.dv;
    const auto make = [&](std::size_t k, std::size_t n, const std::vector<float>& b) {
      return precision_->pack(k, n, b.data());
    };
    // Each query head's outputs reordered to [q_pe | q_nope].
    const std::size_t q_in = s.q_lora != 0 ? s.q_lora : E;
    const float* wq = s.q_lora != 0 ? w.q_b_proj : w.q_proj;
    const auto q_row = [&](std::size_t j) {
      const std::size_t h = j / dq, t = j % dq;
      return wq + (h * dq + (t < s.dr ? s.dn + t : t - s.dr)) * q_in;
    };
    if (s.q_lora != 0) {
      qa_ =
          make(E, s.q_lora, gather(E, s.q_lora, [&](std::size_t j) { return w.q_a_proj + j * E; }));
      qa_norm_.assign(w.q_a_layernorm, w.q_a_layernorm + s.q_lora);
    }
    q_ = make(q_in, H * dq, gather(q_in, H * dq, q_row));
    // The latent row reordered to [k_pe | c].
    kva_ = make(E, L, gather(E, L, [&](std::size_t j) {
                  return w.kv_a_proj_with_mqa + (j < s.dr ? s.r + j : j - s.dr) * E;
                }));
    kva_norm_.assign(w.kv_a_layernorm, w.kv_a_layernorm + s.r);
    kvb_ = make(s.r, H * kvb,
                gather(s.r, H * kvb, [&](std::size_t j) { return w.kv_b_proj + j * s.r; }));
    for (std::size_t h = 0; h < H; ++h) {
      const float* wk = w.kv_b_proj + h * kvb * s.r;
      // W_UK[h] [dn x r] is op(B) as stored; W_UV[h]ᵀ [r x dv] gathered.
      uk_.push_back(precision_->pack(s.dn, s.r, wk));
      uv_.push_back(
          make(s.r, s.dv, gather(s.r, s.dv, [&](std::size_t j) { return wk + (s.dn + j) * s.r; })));
    }
    o_ = make(H * s.dv, E,
              gather(H * s.dv, E, [&](std::size_t j) { return w.o_proj + j * H * s.dv; }));
  }

  const Precision& precision() const { return *precision_; }
  // q [rows, H·(dr + dn)], heads [q_pe | q_nope]; qa [rows, q_lora].
  void query(std::size_t rows, const float* x, float* qa, float* q) const {
    const std::size_t ldq = s_.H * (s_.dn + s_.dr);
    if (qa_ == nullptr) {
      q_->apply(rows, x, s_.E, q, ldq);
      return;
    }
    qa_->apply(rows, x, s_.E, qa, s_.q_lora);
    rms_norm(rows, s_.q_lora, qa_norm_.data(), s_.eps, qa, s_.q_lora);
    q_->apply(rows, qa, s_.q_lora, q, ldq);
  }
  // kv [rows, ld >= dr + r] = [k_pe | RMSNorm(c)].
  void latent(std::size_t rows, const float* x, float* kv, std::size_t ld) const {
    kva_->apply(rows, x, s_.E, kv, ld);
    rms_norm(rows, s_.r, kva_norm_.data(), s_.eps, kv + s_.dr, ld);
  }
  const PackedWeight& kv_b() const { return *kvb_; }
  const PackedWeight& uk(std::size_t h) const { return *uk_[h]; }
  const PackedWeight& uv(std::size_t h) const { return *uv_[h]; }
  const PackedWeight& o() const { return *o_; }

 private:
  MlaShape s_;
  std::unique_ptr<Precision> precision_;
  std::unique_ptr<PackedWeight> qa_, q_, kva_, kvb_, o_;
  std::vector<std::unique_ptr<PackedWeight>> uk_, uv_;
  std::vector<float> qa_norm_, kva_norm_;
};

namespace {

// What both forms' projections share: the weights, the final product.
class MlaProjections : public Projections {
 public:
  MlaProjections(const GemmKernels& g, const AttentionShape& as, const MlaShape& s,
                 const MlaWeights& w)
      : Projections(g, as), m_(s), w_(&w) {}

  void finish_rotated(const Projected& p, std::size_t q_rows, std::size_t kv_rows) const override {
    w_->precision().round(q_rows, s_.embed_dim, p.q, p.ldq);
    w_->precision().round(kv_rows, s_.kv_dim(), p.k, p.ldkv);
  }
  void reserve_out(std::size_t rows) const override {
    out_scratch(rows);
    w_->o().reserve(rows);
    reserve_heads(rows);
  }

 protected:
  // The merged heads' values, [rows, H·dv], before o_proj.
  float* out_scratch(std::size_t rows) const {
    return thread_scratch(ScratchSlot::kProjection, checked_mul(rows, m_.H * m_.dv, "MLA scratch"));
  }
  void finish_out(std::size_t rows, const float* values, float* out) const {
    w_->o().apply(rows, values, m_.H * m_.dv, out, m_.E);
  }
  virtual void reserve_heads(std::size_t) const {}
  // Scratch regions of rows x widths[i] floats back to back, each rounded
  // to 16 floats: their offsets, then the total; scratch_floats() and
  // project() both carve with it.
  template <std::size_t N>
  static std::array<std::size_t, N + 1> regions(std::size_t rows,
                                                const std::array<std::size_t, N>& widths) {
    std::array<std::size_t, N + 1> at{};
    for (std::size_t i = 0; i < N; ++i) {
      const std::size_t floats =
          checked_round_up(checked_mul(rows, widths[i], "MLA scratch"), 16, "MLA scratch");
      at[i + 1] = checked_add(at[i], floats, "MLA scratch");
    }
    return at;
  }
  MlaShape m_;
  const MlaWeights* w_;  // the model's, which outlives its engines
};

// The model's own form: heads of width m.head(), Q and K [rope | nope |
// zeros], V [v | zeros], one kv head per query head.
class MlaPrefill final : public MlaProjections {
 public:
  using MlaProjections::MlaProjections;

  std::size_t scratch_floats(bool, std::size_t q_rows, std::size_t) const override {
    return layout(q_rows).back();
  }

  Projected project(bool, bool, std::size_t rows, std::size_t, const float* x, const float*,
                    const float*, float* dst) const override {
    const std::size_t H = m_.H, hd = m_.head(), w = H * hd, dq = m_.dn + m_.dr;
    const std::size_t L = m_.latent(), kvb = m_.dn + m_.dv;
    const auto at = layout(rows);
    float* q = dst + at[0];
    float* k = dst + at[1];
    float* v = dst + at[2];
    float* tq = dst + at[3];
    float* kv = dst + at[4];
    float* tkv = dst + at[5];
    float* qa = dst + at[6];
    w_->query(rows, x, qa, tq);
    w_->latent(rows, x, kv, L);
    w_->kv_b().apply(rows, kv + m_.dr, L, tkv, H * kvb);
    const double bytes = 12.0 * static_cast<double>(rows * w);
    parallel_for(rows, threads_for({0, bytes}), [&](std::size_t i) {
      for (std::size_t h = 0; h < H; ++h) {
        float* qi = q + i * w + h * hd;
        float* ki = k + i * w + h * hd;
        float* vi = v + i * w + h * hd;
        const float* src = tkv + i * H * kvb + h * kvb;
        std::fill_n(std::copy_n(tq + i * H * dq + h * dq, dq, qi), hd - dq, 0.0f);
        std::copy_n(kv + i * L, m_.dr, ki);
        std::fill_n(std::copy_n(src, m_.dn, ki + m_.dr), hd - dq, 0.0f);
        std::fill_n(std::copy_n(src + m_.dn, m_.dv, vi), hd - m_.dv, 0.0f);
      }
    });
    w_->precision().round(rows, w, v, w);
    return {q, k, v, w, w};
  }

  void project_out(std::size_t rows, const float* merged, float* out) const override {
    float* values = out_scratch(rows);
    const std::size_t H = m_.H, hd = m_.head(), dv = m_.dv;
    for (std::size_t h = 0; h < H; ++h) {
      copy_cols(rows, dv, merged + h * hd, H * hd, values + h * dv, H * dv);
    }
    finish_out(rows, values, out);
  }

 private:
  // Q, K, V [rows, H·head]; q as projected; the latent rows; kv_b's
  // [k_nope | v] per head; q_a's output.
  std::array<std::size_t, 8> layout(std::size_t rows) const {
    const std::size_t H = m_.H, w = H * m_.head();
    return regions<7>(rows,
                      {w, w, w, H * (m_.dn + m_.dr), m_.latent(), H * (m_.dn + m_.dv), m_.q_lora});
  }
};

// The absorbed form: query heads [q_pe | q_lat] of width dr + r over one
// latent kv head, whose V is its K (the same row); o_lat multiplied by
// W_UV per head.
class MlaAbsorbed final : public MlaProjections {
 public:
  using MlaProjections::MlaProjections;

  std::size_t scratch_floats(bool, std::size_t q_rows, std::size_t) const override {
    return layout(q_rows).back();
  }

  Projected project(bool, bool, std::size_t rows, std::size_t, const float* x, const float*,
                    const float*, float* dst) const override {
    const std::size_t H = m_.H, L = m_.latent(), dq = m_.dn + m_.dr;
    const auto at = layout(rows);
    float* q = dst + at[0];
    float* kv = dst + at[1];
    float* tq = dst + at[2];
    float* qa = dst + at[3];
    w_->query(rows, x, qa, tq);
    for (std::size_t h = 0; h < H; ++h) {
      copy_cols(rows, m_.dr, tq + h * dq, H * dq, q + h * L, H * L);
      w_->uk(h).apply(rows, tq + h * dq + m_.dr, H * dq, q + h * L + m_.dr, H * L);
    }
    w_->latent(rows, x, kv, L);
    return {q, kv, kv, H * L, L};
  }

  void project_out(std::size_t rows, const float* merged, float* out) const override {
    float* values = out_scratch(rows);
    const std::size_t H = m_.H, L = m_.latent(), dv = m_.dv;
    for (std::size_t h = 0; h < H; ++h) {
      w_->uv(h).apply(rows, merged + h * L + m_.dr, H * L, values + h * dv, H * dv);
    }
    finish_out(rows, values, out);
  }

 private:
  void reserve_heads(std::size_t rows) const override { w_->uv(0).reserve(rows); }
  // Query heads [q_pe | q_lat]; the latent rows (K and V); q as projected;
  // q_a's output.
  std::array<std::size_t, 5> layout(std::size_t rows) const {
    const std::size_t H = m_.H;
    return regions<4>(rows, {H * m_.latent(), m_.latent(), H * (m_.dn + m_.dr), m_.q_lora});
  }
};

double yarn_mscale(double factor, double m) {
  return factor <= 1.0 ? 1.0 : 0.1 * m * std::log(factor) + 1.0;
}

// HF's YaRN frequencies (_compute_yarn_parameters), in double: a ramp
// between interpolated (/factor) and original frequencies over the
// dimensions whose wavelengths the original context did not hold.
std::vector<double> rope_frequencies(const MlaShape& s) {
  const std::size_t half = s.dr / 2;
  const double dim = static_cast<double>(s.dr);
  std::vector<double> f(half);
  const auto correction = [&](double rotations) {
    return dim * std::log(s.yarn_original / (rotations * 2.0 * M_PI)) / (2.0 * std::log(s.theta));
  };
  double low = std::max(std::floor(correction(s.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction(s.beta_slow)), dim - 1.0);
  if (low == high) high += 0.001;
  for (std::size_t t = 0; t < half; ++t) {
    const double extrapolated = std::pow(s.theta, -2.0 * static_cast<double>(t) / dim);
    if (s.yarn_factor == 0.0) {
      f[t] = extrapolated;
      continue;
    }
    const double ramp = std::clamp((static_cast<double>(t) - low) / (high - low), 0.0, 1.0);
    f[t] = extrapolated / s.yarn_factor * ramp + extrapolated * (1.0 - ramp);
  }
  return f;
}

}  // namespace

MlaModel::MlaModel(Isa isa, const MlaShape& s, const mha_mla_weights& w, const ObjectOptions& o)
    : s_(s), inv_freq_(rope_frequencies(s)) {
  const bool bf16 = o.bf16;
  double scale = 1.0 / std::sqrt(static_cast<double>(s.dn + s.dr));
  if (s.yarn_factor != 0.0) {
    amplitude_ =
        s.mscale != 0.0 && s.mscale_all_dim != 0.0
            ? yarn_mscale(s.yarn_factor, s.mscale) / yarn_mscale(s.yarn_factor, s.mscale_all_dim)
            : yarn_mscale(s.yarn_factor, 1.0);
    if (s.mscale_all_dim != 0.0) {
      const double m = yarn_mscale(s.yarn_factor, s.mscale_all_dim);
      scale *= m * m;
    }
  }
  scale_ = static_cast<float>(scale);
  const GemmKernels& g = gemm_kernels(isa);
  weights_ = std::make_unique<MlaWeights>(make_precision(isa, o), s, w);

  AttentionShape p;
  p.num_heads = p.num_kv_heads = s.H;
  p.head_dim = s.head();
  p.embed_dim = checked_mul(s.H, p.head_dim, "num_heads * head width");
  p.kdim = p.vdim = s.E;
  p.scale = scale_;
  prefill_ = std::make_unique<AttentionEngine>(
      isa, p, std::make_unique<MlaPrefill>(g, p, s, *weights_), bf16, false);

  AttentionShape d;
  d.num_heads = s.H;
  d.num_kv_heads = 1;
  d.head_dim = s.latent();
  d.embed_dim = checked_mul(s.H, d.head_dim, "num_heads * (kv_lora_rank + qk_rope_head_dim)");
  d.kdim = d.vdim = s.E;
  d.scale = scale_;
  decode_ = std::make_unique<AttentionEngine>(
      isa, d, std::make_unique<MlaAbsorbed>(g, d, s, *weights_), bf16, true);
}

MlaModel::~MlaModel() = default;

AttentionMods MlaModel::mods(std::ptrdiff_t position) const {
  AttentionMods m;
  m.causal = true;
  m.rope_dim = s_.dr;
  m.rope_theta = static_cast<float>(s_.theta);
  m.rope_interleaved = !s_.halves;
  m.rope_inv_freq = inv_freq_.data();
  m.rope_amplitude = amplitude_;
  m.rope_offset = position;
  return m;
}

}  // namespace mha::detail
