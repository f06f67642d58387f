// The library (and the double oracle) against PyTorch 1.13's
// nn.MultiheadAttention, from the golden files of make_golden.py.
//
// Metric: max over elements of |ours - torch| / max(1, max |torch|), per
// tensor (out, weights), limit 1e-5. The goldens are PyTorch computed in
// float64 on the float32 data, so this is the error of our float32 pipeline
// against PyTorch's exact semantics. Elements PyTorch leaves NaN (query rows
// with every key masked) are instead checked against the library's rule:
// zero weights, and out = out_bias for rows where every head is masked (the
// only kind of fully masked row in the goldens).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <mha/attention.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "support/attention_reference.hpp"

namespace {

constexpr double kTolerance = 1e-5;

struct Golden {
  std::string name;
  std::size_t E, H, kv_heads, kdim, vdim, batch, q_len, kv_len;
  bool self, bias, causal, padding;
  int additive, weights;
  std::vector<float> data;
};

std::vector<Golden> load_index() {
  std::ifstream index(std::string(MHA_GOLDEN_DIR) + "/index.txt");
  REQUIRE(index.good());
  std::vector<Golden> cases;
  std::string line;
  while (std::getline(index, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    Golden g;
    int self, bias, causal, padding;
    s >> g.name >> g.E >> g.H >> g.kv_heads >> g.kdim >> g.vdim >> g.batch >> g.q_len >> g.kv_len >>
        self >> bias >> causal >> padding >> g.additive >> g.weights;
    REQUIRE(!s.fail());
    g.self = self, g.bias = bias, g.causal = causal, g.padding = padding;
    std::ifstream bin(std::string(MHA_GOLDEN_DIR) + "/" + g.name + ".bin", std::ios::binary);
    REQUIRE(bin.good());
    bin.seekg(0, std::ios::end);
    const auto bytes = static_cast<std::size_t>(bin.tellg());
    bin.seekg(0);
    g.data.resize(bytes / sizeof(float));
    bin.read(reinterpret_cast<char*>(g.data.data()), static_cast<std::streamsize>(bytes));
    REQUIRE(bin.good());
    cases.push_back(std::move(g));
  }
  return cases;
}

// Error of `ours` against finite golden elements; NaN golden elements must
// equal `masked_value(i)` in ours.
template <class Masked>
double golden_error(const float* ours, const float* torch, std::size_t n, Masked masked_value) {
  double scale = 1, err = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (!std::isnan(torch[i])) scale = std::max(scale, std::abs(static_cast<double>(torch[i])));
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(ours[i])) return INFINITY;
    if (std::isnan(torch[i])) {
      if (ours[i] != masked_value(i)) return INFINITY;
      continue;
    }
    err = std::max(err, std::abs(static_cast<double>(ours[i]) - torch[i]));
  }
  return err / scale;
}

}  // namespace

TEST_CASE("outputs and weights match PyTorch's golden files", "[golden]") {
  const std::vector<Golden> cases = load_index();
  REQUIRE(cases.size() >= 12);
  double worst = 0, worst_oracle = 0;
  std::string worst_name;
  for (const Golden& g : cases) {
    INFO("case " << g.name);
    const std::size_t d = g.E / g.H, kv = g.kv_heads * d;
    const float* p = g.data.data();
    auto take = [&](std::size_t n) {
      const float* r = p;
      p += n;
      return r;
    };
    mha_weights w{};
    w.q_weight = take(g.E * g.E);
    w.k_weight = take(kv * g.kdim);
    w.v_weight = take(kv * g.vdim);
    w.out_weight = take(g.E * g.E);
    if (g.bias) {
      w.q_bias = take(g.E);
      w.k_bias = take(kv);
      w.v_bias = take(kv);
      w.out_bias = take(g.E);
    }
    const float* query = take(g.batch * g.q_len * g.E);
    const float* key = g.self ? query : take(g.batch * g.kv_len * g.kdim);
    const float* value = g.self ? query : take(g.batch * g.kv_len * g.vdim);
    mha_mask mask{};
    mask.causal = g.causal;
    if (g.additive != 0) {
      mask.additive = take((g.additive == 2 ? g.batch * g.H : 1) * g.q_len * g.kv_len);
      mask.additive_per_head = g.additive == 2;
    }
    std::vector<unsigned char> padding;
    if (g.padding) {
      const float* pad = take(g.batch * g.kv_len);
      padding.assign(pad, pad + g.batch * g.kv_len);
      mask.key_padding = padding.data();
    }
    const std::size_t n_out = g.batch * g.q_len * g.E;
    const std::size_t n_w =
        g.weights == 0 ? 0 : g.batch * (g.weights == 1 ? g.H : 1) * g.q_len * g.kv_len;
    const float* torch_out = take(n_out);
    const float* torch_w = take(n_w);
    REQUIRE(p == g.data.data() + g.data.size());

    const mha_config config{g.E, g.H, g.kdim, g.vdim, g.kv_heads};
    const mha::MultiheadAttention attn(config, w);
    std::vector<float> out(n_out), weights(n_w);
    attn.forward(g.batch, g.q_len, g.kv_len, query, key, value, &mask, out.data(),
                 n_w ? weights.data() : nullptr, g.weights == 2);
    auto out_bias = [&](std::size_t i) { return g.bias ? w.out_bias[i % g.E] : 0.f; };
    auto zero = [](std::size_t) { return 0.f; };
    const double err = std::max(golden_error(out.data(), torch_out, n_out, out_bias),
                                golden_error(weights.data(), torch_w, n_w, zero));
    CHECK(err <= kTolerance);

    // The oracle the other suites trust, against PyTorch too.
    const auto ref = mha::test::reference_attention(config, w, g.batch, g.q_len, g.kv_len, query,
                                                    key, value, &mask, n_w != 0, g.weights == 2);
    const std::vector<float> ref_out(ref.out.begin(), ref.out.end()),
        ref_w(ref.weights.begin(), ref.weights.end());
    const double oracle_err = std::max(golden_error(ref_out.data(), torch_out, n_out, out_bias),
                                       golden_error(ref_w.data(), torch_w, n_w, zero));
    CHECK(oracle_err <= 1e-6);
    std::printf("golden %-20s error %.3g (oracle %.3g)\n", g.name.c_str(), err, oracle_err);
    if (err >= worst) worst = err, worst_name = g.name;
    worst_oracle = std::max(worst_oracle, oracle_err);
  }
  std::printf("largest golden error: %.3g (%s), limit %.0e; oracle vs torch %.3g\n", worst,
              worst_name.c_str(), kTolerance, worst_oracle);
}
