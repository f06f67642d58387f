#include "support/attention_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "support/reference.hpp"

namespace mha::test {
namespace {

// y[r, o] = sum_c x[r, c] w[o, c] + bias[o], in double.
std::vector<double> linear(const float* x, std::size_t n, std::size_t in, const float* w,
                           const float* bias, std::size_t out) {
  std::vector<double> y(n * out);
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t o = 0; o < out; ++o) {
      double s = bias != nullptr ? bias[o] : 0.0;
      for (std::size_t c = 0; c < in; ++c)
        s += static_cast<double>(x[r * in + c]) * static_cast<double>(w[o * in + c]);
      y[r * out + o] = s;
    }
  return y;
}

// Rotates the first rope_dim features of each of `heads` heads of row x (at
// `pos`), as mha_mods defines RoPE.
void rotate(double* x, std::size_t heads, std::size_t d, const mha_mods& m, double pos) {
  const std::size_t rd = m.rope_dim, half = rd / 2;
  const double theta = m.rope_theta != 0.f ? m.rope_theta : 10000.0;
  for (std::size_t h = 0; h < heads; ++h)
    for (std::size_t t = 0; t < half; ++t) {
      const double angle =
          pos * std::pow(theta, -2.0 * static_cast<double>(t) / static_cast<double>(rd));
      const std::size_t i0 = m.rope_interleaved ? 2 * t : t;
      const std::size_t i1 = m.rope_interleaved ? 2 * t + 1 : t + half;
      double* v = x + h * d;
      const double a = v[i0], b = v[i1];
      v[i0] = a * std::cos(angle) - b * std::sin(angle);
      v[i1] = b * std::cos(angle) + a * std::sin(angle);
    }
}

}  // namespace

ReferenceResult reference_attention(const mha_config& config, const mha_weights& w,
                                    std::size_t batch, std::size_t L, std::size_t S,
                                    const float* query, const float* key, const float* value,
                                    const mha_mask* mask, bool want_weights, bool average,
                                    const mha_mods* mods) {
  const std::size_t E = config.embed_dim, H = config.num_heads, d = E / H;
  const std::size_t kdim = config.kdim ? config.kdim : E, vdim = config.vdim ? config.vdim : E;
  const std::size_t kvh = config.num_kv_heads ? config.num_kv_heads : H, group = H / kvh;
  const double neg_inf = -std::numeric_limits<double>::infinity();

  std::vector<double> q = linear(query, batch * L, E, w.q_weight, w.q_bias, E);
  std::vector<double> k = linear(key, batch * S, kdim, w.k_weight, w.k_bias, kvh * d);
  const mha_mods none{};
  const mha_mods& m = mods != nullptr ? *mods : none;
  // Query i's position i' (aligned to the end of the keys); key j's is j.
  const auto qpos = [&](std::size_t i) {
    return static_cast<long long>(i) + static_cast<long long>(S) - static_cast<long long>(L);
  };
  if (m.rope_dim != 0) {
    for (std::size_t b = 0; b < batch; ++b) {
      for (std::size_t i = 0; i < L; ++i)
        rotate(&q[(b * L + i) * E], H, d, m, static_cast<double>(qpos(i)));
      for (std::size_t j = 0; j < S; ++j)
        rotate(&k[(b * S + j) * kvh * d], kvh, d, m, static_cast<double>(j));
    }
  }
  const std::vector<double> v = linear(value, batch * S, vdim, w.v_weight, w.v_bias, kvh * d);

  ReferenceResult r;
  std::vector<double> ctx(batch * L * E, 0.0);
  if (want_weights) r.weights.assign(average ? batch * L * S : batch * H * L * S, 0.0);
  r.lse.assign(batch * L * H, neg_inf);
  std::vector<double> s(S);
  for (std::size_t b = 0; b < batch; ++b)
    for (std::size_t h = 0; h < H; ++h) {
      const std::size_t g = h / group;
      for (std::size_t i = 0; i < L; ++i) {
        double mx = neg_inf;
        for (std::size_t j = 0; j < S; ++j) {
          double dotp = 0;
          for (std::size_t t = 0; t < d; ++t)
            dotp += q[(b * L + i) * E + h * d + t] * k[(b * S + j) * kvh * d + g * d + t];
          double x = dotp / std::sqrt(static_cast<double>(d));
          if (m.softcap != 0.f) x = m.softcap * std::tanh(x / m.softcap);
          if (m.alibi_slopes != nullptr)
            x -= m.alibi_slopes[h] * static_cast<double>(qpos(i) - static_cast<long long>(j));
          if (mask != nullptr) {
            if (mask->additive != nullptr)
              x += mask->additive[(mask->additive_per_head ? (b * H + h) * L * S : 0) + i * S + j];
            if (mask->key_padding != nullptr && mask->key_padding[b * S + j]) x = neg_inf;
            // causal: key j visible iff j <= i + (S - L), in signed arithmetic
            if (mask->causal && static_cast<long long>(j) > static_cast<long long>(i) +
                                                                static_cast<long long>(S) -
                                                                static_cast<long long>(L))
              x = neg_inf;
          }
          if (m.causal && static_cast<long long>(j) > qpos(i)) x = neg_inf;
          // j <= i' - window, with window of any size_t value.
          if (m.window != 0 && qpos(i) >= 0 &&
              static_cast<unsigned long long>(qpos(i)) >= m.window &&
              j <= static_cast<unsigned long long>(qpos(i)) - m.window)
            x = neg_inf;
          s[j] = x;
          mx = std::max(mx, x);
        }
        const double sink = m.sinks != nullptr ? m.sinks[h] : neg_inf;
        if (mx == neg_inf) {  // fully masked: zero weights, zero ctx
          r.lse[(b * L + i) * H + h] = sink;
          continue;
        }
        mx = std::max(mx, sink);
        double sum = std::exp(sink - mx);
        for (double& x : s) sum += (x = std::exp(x - mx));
        r.lse[(b * L + i) * H + h] = mx + std::log(sum);
        for (std::size_t j = 0; j < S; ++j) {
          const double p = s[j] / sum;
          for (std::size_t t = 0; t < d; ++t)
            ctx[(b * L + i) * E + h * d + t] += p * v[(b * S + j) * kvh * d + g * d + t];
          if (want_weights) {
            if (average)
              r.weights[(b * L + i) * S + j] += p / static_cast<double>(H);
            else
              r.weights[((b * H + h) * L + i) * S + j] = p;
          }
        }
      }
    }
  r.out.assign(batch * L * E, 0.0);
  for (std::size_t row = 0; row < batch * L; ++row)
    for (std::size_t o = 0; o < E; ++o) {
      double acc = w.out_bias != nullptr ? w.out_bias[o] : 0.0;
      for (std::size_t c = 0; c < E; ++c) acc += ctx[row * E + c] * w.out_weight[o * E + c];
      r.out[row * E + o] = acc;
    }
  return r;
}

RandomWeights::RandomWeights(const mha_config& c, bool biases, std::uint64_t seed) {
  const std::size_t E = c.embed_dim, d = E / c.num_heads;
  const std::size_t kdim = c.kdim ? c.kdim : E, vdim = c.vdim ? c.vdim : E;
  const std::size_t kv = (c.num_kv_heads ? c.num_kv_heads : c.num_heads) * d;
  auto init = [&](std::size_t n, std::size_t fan_in, std::uint64_t salt) {
    const float a = 1.f / std::sqrt(static_cast<float>(fan_in));
    return random_vector(n, seed * 16 + salt, -a, a);
  };
  q = init(E * E, E, 1);
  k = init(kv * kdim, kdim, 2);
  v = init(kv * vdim, vdim, 3);
  o = init(E * E, E, 4);
  if (biases) {
    qb = init(E, E, 5);
    kb = init(kv, kdim, 6);
    vb = init(kv, vdim, 7);
    ob = init(E, E, 8);
  }
}

mha_weights RandomWeights::view() const {
  auto ptr = [](const std::vector<float>& x) { return x.empty() ? nullptr : x.data(); };
  return mha_weights{ptr(q), ptr(k), ptr(v), ptr(o), ptr(qb), ptr(kb), ptr(vb), ptr(ob)};
}

void RandomWeights::round_to_bf16() {
  for (std::vector<float>* x : {&q, &k, &v, &o}) {
    std::vector<std::uint16_t> b(x->size());
    mha_fp32_to_bf16(x->size(), x->data(), b.data());
    mha_bf16_to_fp32(b.size(), b.data(), x->data());
  }
}

double lse_error(const std::vector<float>& ours, const std::vector<double>& ref) {
  double err = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (static_cast<double>(ours[i]) != ref[i]) return INFINITY;
      continue;
    }
    if (!std::isfinite(ours[i])) return INFINITY;
    err = std::max(err, std::abs(ours[i] - ref[i]) / std::max(1.0, std::abs(ref[i])));
  }
  return err;
}

}  // namespace mha::test
