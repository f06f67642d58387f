// A random MLA layer (mha_mla_config + weights) and a double-precision
// reference of its forward, HF's DeepseekV3Attention math written out
// directly (non-absorbed, every sum in double), for the MLA tests.
#pragma once

#include <mha/mha.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "support/reference.hpp"

namespace mha::test {

struct MlaLayer {
  mha_mla_config cfg{};
  std::vector<float> q_proj, q_a, q_a_norm, q_b, kv_a, kv_a_norm, kv_b, o;

  MlaLayer(const mha_mla_config& c, std::uint64_t seed) : cfg(c) {
    cfg.struct_size = sizeof(mha_mla_config);
    const std::size_t E = c.hidden_size, H = c.num_heads, ql = c.q_lora_rank, r = c.kv_lora_rank,
                      dq = c.qk_nope_head_dim + c.qk_rope_head_dim, dr = c.qk_rope_head_dim,
                      dv = c.v_head_dim;
    const auto bound = [](std::size_t fan_in) { return 1.5f / std::sqrt(float(fan_in)); };
    if (ql == 0) {
      q_proj = random_vector(H * dq * E, seed, -bound(E), bound(E));
    } else {
      q_a = random_vector(ql * E, seed + 1, -bound(E), bound(E));
      q_a_norm = random_vector(ql, seed + 2, 0.5f, 1.5f);
      q_b = random_vector(H * dq * ql, seed + 3, -bound(ql), bound(ql));
    }
    kv_a = random_vector((r + dr) * E, seed + 4, -bound(E), bound(E));
    kv_a_norm = random_vector(r, seed + 5, 0.5f, 1.5f);
    kv_b = random_vector(H * (c.qk_nope_head_dim + dv) * r, seed + 6, -bound(r), bound(r));
    o = random_vector(E * H * dv, seed + 7, -bound(H * dv), bound(H * dv));
  }
  mha_mla_weights view() const {
    const auto p = [](const std::vector<float>& v) { return v.empty() ? nullptr : v.data(); };
    return {sizeof(mha_mla_weights),
            p(q_proj),
            p(q_a),
            p(q_a_norm),
            p(q_b),
            p(kv_a),
            p(kv_a_norm),
            p(kv_b),
            p(o)};
  }
};

namespace mla_detail {

inline double mscale(double f, double m) {
  return f <= 1 ? 1.0 : 0.1 * m * std::log(f) + 1.0;
}

// y [n x out] = x [n x in] · Wᵀ, W [out, in].
inline std::vector<double> linear(const std::vector<double>& x, std::size_t n, std::size_t in,
                                  const float* w, std::size_t out) {
  std::vector<double> y(n * out);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < out; ++j) {
      double s = 0;
      for (std::size_t k = 0; k < in; ++k) s += x[i * in + k] * double(w[j * in + k]);
      y[i * out + j] = s;
    }
  return y;
}

inline void rms(std::vector<double>& x, std::size_t n, std::size_t dim, std::size_t ld,
                std::size_t off, const float* g, double eps) {
  for (std::size_t i = 0; i < n; ++i) {
    double ss = 0;
    for (std::size_t j = 0; j < dim; ++j) ss += x[i * ld + off + j] * x[i * ld + off + j];
    const double inv = 1.0 / std::sqrt(ss / double(dim) + eps);
    for (std::size_t j = 0; j < dim; ++j) x[i * ld + off + j] *= inv * double(g[j]);
  }
}

}  // namespace mla_detail

// out [batch, seq, E] of the layer over x [batch, seq, E], token i at
// position offset + i, causal within the call.
inline std::vector<double> mla_reference(const MlaLayer& L, std::size_t batch, std::size_t seq,
                                         std::size_t offset, const float* x) {
  using namespace mla_detail;
  const mha_mla_config& c = L.cfg;
  const std::size_t E = c.hidden_size, H = c.num_heads, r = c.kv_lora_rank, dn = c.qk_nope_head_dim,
                    dr = c.qk_rope_head_dim, dv = c.v_head_dim, dq = dn + dr, half = dr / 2;
  const double eps = c.rms_norm_eps != 0 ? c.rms_norm_eps : 1e-6;
  const double theta = c.rope_theta != 0 ? c.rope_theta : 10000.0;
  // RoPE frequencies, amplitude and scale (HF's YaRN).
  std::vector<double> inv(half);
  double amp = 1, scale = 1 / std::sqrt(double(dq));
  const double f = c.yarn_factor;
  double low = 0, high = 0;
  if (f != 0) {
    const double orig = double(c.yarn_original_max_position);
    const double bf = c.yarn_beta_fast != 0 ? c.yarn_beta_fast : 32.0;
    const double bs = c.yarn_beta_slow != 0 ? c.yarn_beta_slow : 1.0;
    const auto corr = [&](double rot) {
      return double(dr) * std::log(orig / (rot * 2 * M_PI)) / (2 * std::log(theta));
    };
    low = std::max(std::floor(corr(bf)), 0.0);
    high = std::min(std::ceil(corr(bs)), double(dr) - 1);
    if (low == high) high += 0.001;
    amp = c.yarn_mscale != 0 && c.yarn_mscale_all_dim != 0
              ? mscale(f, c.yarn_mscale) / mscale(f, c.yarn_mscale_all_dim)
              : mscale(f, 1);
    if (c.yarn_mscale_all_dim != 0) scale *= std::pow(mscale(f, c.yarn_mscale_all_dim), 2);
  }
  for (std::size_t t = 0; t < half; ++t) {
    const double e = std::pow(theta, -2.0 * double(t) / double(dr));
    if (f == 0) {
      inv[t] = e;
    } else {
      const double ramp = std::clamp((double(t) - low) / (high - low), 0.0, 1.0);
      inv[t] = e / f * ramp + e * (1 - ramp);
    }
  }
  const auto rope = [&](double* v, double pos) {
    for (std::size_t t = 0; t < half; ++t) {
      const std::size_t i = c.rope_halves ? t : 2 * t, j = c.rope_halves ? t + half : 2 * t + 1;
      const double a = v[i], b = v[j], cs = std::cos(pos * inv[t]), sn = std::sin(pos * inv[t]);
      v[i] = amp * (a * cs - b * sn);
      v[j] = amp * (b * cs + a * sn);
    }
  };
  std::vector<double> out(batch * seq * E);
  for (std::size_t b = 0; b < batch; ++b) {
    std::vector<double> xb(x + b * seq * E, x + (b + 1) * seq * E);
    std::vector<double> q;
    if (c.q_lora_rank == 0) {
      q = linear(xb, seq, E, L.q_proj.data(), H * dq);
    } else {
      auto qa = linear(xb, seq, E, L.q_a.data(), c.q_lora_rank);
      rms(qa, seq, c.q_lora_rank, c.q_lora_rank, 0, L.q_a_norm.data(), eps);
      q = linear(qa, seq, c.q_lora_rank, L.q_b.data(), H * dq);
    }
    auto kv = linear(xb, seq, E, L.kv_a.data(), r + dr);
    rms(kv, seq, r, r + dr, 0, L.kv_a_norm.data(), eps);
    std::vector<double> cl(seq * r);
    for (std::size_t i = 0; i < seq; ++i) std::copy_n(&kv[i * (r + dr)], r, &cl[i * r]);
    const auto kvb = linear(cl, seq, r, L.kv_b.data(), H * (dn + dv));
    for (std::size_t i = 0; i < seq; ++i) {
      const double pos = double(offset + i);
      rope(&kv[i * (r + dr) + r], pos);
      for (std::size_t h = 0; h < H; ++h) rope(&q[i * H * dq + h * dq + dn], pos);
    }
    std::vector<double> merged(seq * H * dv, 0.0);
    for (std::size_t h = 0; h < H; ++h)
      for (std::size_t i = 0; i < seq; ++i) {
        std::vector<double> s(i + 1);
        double mx = -1e300;
        for (std::size_t j = 0; j <= i; ++j) {
          double dot = 0;
          const double* qi = &q[i * H * dq + h * dq];
          const double* kn = &kvb[j * H * (dn + dv) + h * (dn + dv)];
          for (std::size_t t = 0; t < dn; ++t) dot += qi[t] * kn[t];
          for (std::size_t t = 0; t < dr; ++t) dot += qi[dn + t] * kv[j * (r + dr) + r + t];
          s[j] = scale * dot;
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& v : s) sum += (v = std::exp(v - mx));
        for (std::size_t j = 0; j <= i; ++j)
          for (std::size_t t = 0; t < dv; ++t)
            merged[i * H * dv + h * dv + t] +=
                s[j] / sum * kvb[j * H * (dn + dv) + h * (dn + dv) + dn + t];
      }
    const auto ob = linear(merged, seq, H * dv, L.o.data(), E);
    std::copy(ob.begin(), ob.end(), out.begin() + b * seq * E);
  }
  return out;
}

}  // namespace mha::test
