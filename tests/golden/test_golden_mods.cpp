// The attention modifiers (mha_mods) and the double oracle against PyTorch
// 1.13, from the golden files of make_golden_mods.py: RoPE (rotated by the
// script), ALiBi, causal and window (per-head additive masks), sinks
// (add_zero_attn with shifted scores) and lse (torch.logsumexp).
//
// Metric: as test_golden.cpp, max |ours - torch| / max(1, max |torch|) per
// tensor (out, weights), limit 1e-5; lse: max |ours - torch| / max(1,
// |torch|), limit 1e-5. The goldens are float64 results on float32 data.
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
  std::size_t E, H, kv_heads, kdim, vdim, batch, q_len, kv_len, window, rope_dim;
  int self, causal, alibi, sinks, rope_interleaved;
  float rope_theta;
  std::vector<float> data;
};

std::vector<Golden> load_index() {
  const std::string dir = std::string(MHA_GOLDEN_DIR) + "/mods";
  std::ifstream index(dir + "/index.txt");
  REQUIRE(index.good());
  std::vector<Golden> cases;
  std::string line;
  while (std::getline(index, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    Golden g;
    s >> g.name >> g.E >> g.H >> g.kv_heads >> g.kdim >> g.vdim >> g.batch >> g.q_len >> g.kv_len >>
        g.self >> g.causal >> g.window >> g.alibi >> g.sinks >> g.rope_dim >> g.rope_theta >>
        g.rope_interleaved;
    REQUIRE(!s.fail());
    std::ifstream bin(dir + "/" + g.name + ".bin", std::ios::binary);
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

double scaled_error(const float* ours, const float* torch, std::size_t n) {
  double scale = 1, err = 0;
  for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(double{torch[i]}));
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(ours[i])) return INFINITY;
    err = std::max(err, std::abs(double{ours[i]} - torch[i]));
  }
  return err / scale;
}

double lse_error(const float* ours, const float* torch, std::size_t n) {
  double err = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(ours[i])) return INFINITY;
    err = std::max(
        err, std::abs(double{ours[i]} - torch[i]) / std::max(1.0, std::abs(double{torch[i]})));
  }
  return err;
}

}  // namespace

TEST_CASE("modifiers match PyTorch's golden files", "[golden][mods]") {
  const std::vector<Golden> cases = load_index();
  REQUIRE(cases.size() >= 8);
  double worst = 0, worst_oracle = 0;
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
    w.q_bias = take(g.E);
    w.k_bias = take(kv);
    w.v_bias = take(kv);
    w.out_bias = take(g.E);
    mha_mods mods{};
    mods.struct_size = sizeof(mha_mods);
    mods.causal = g.causal;
    mods.window = g.window;
    mods.alibi_slopes = g.alibi ? take(g.H) : nullptr;
    mods.sinks = g.sinks ? take(g.H) : nullptr;
    mods.rope_dim = g.rope_dim;
    mods.rope_theta = g.rope_theta;
    mods.rope_interleaved = g.rope_interleaved;
    const float* query = take(g.batch * g.q_len * g.E);
    const float* key = g.self ? query : take(g.batch * g.kv_len * g.kdim);
    const float* value = g.self ? query : take(g.batch * g.kv_len * g.vdim);
    const std::size_t n_out = g.batch * g.q_len * g.E, n_w = g.batch * g.H * g.q_len * g.kv_len;
    const std::size_t n_lse = g.batch * g.q_len * g.H;
    const float* torch_out = take(n_out);
    const float* torch_w = take(n_w);
    const float* torch_lse = take(n_lse);
    REQUIRE(p == g.data.data() + g.data.size());

    const mha_config config{g.E, g.H, g.kdim, g.vdim, g.kv_heads};
    const mha::MultiheadAttention attn(config, w);
    std::vector<float> out(n_out), weights(n_w), lse(n_lse);
    mods.lse = lse.data();
    attn.forward_mods(g.batch, g.q_len, g.kv_len, query, key, value, nullptr, &mods, out.data(),
                      weights.data());
    const double err = std::max({scaled_error(out.data(), torch_out, n_out),
                                 scaled_error(weights.data(), torch_w, n_w),
                                 lse_error(lse.data(), torch_lse, n_lse)});
    CHECK(err <= kTolerance);

    // The oracle the other suites trust, against PyTorch too.
    const auto ref = mha::test::reference_attention(config, w, g.batch, g.q_len, g.kv_len, query,
                                                    key, value, nullptr, true, false, &mods);
    const std::vector<float> ref_out(ref.out.begin(), ref.out.end()),
        ref_w(ref.weights.begin(), ref.weights.end()), ref_lse(ref.lse.begin(), ref.lse.end());
    const double oracle_err = std::max({scaled_error(ref_out.data(), torch_out, n_out),
                                        scaled_error(ref_w.data(), torch_w, n_w),
                                        lse_error(ref_lse.data(), torch_lse, n_lse)});
    CHECK(oracle_err <= 1e-6);
    std::printf("golden mods %-18s error %.3g (oracle %.3g)\n", g.name.c_str(), err, oracle_err);
    worst = std::max(worst, err);
    worst_oracle = std::max(worst_oracle, oracle_err);
  }
  std::printf("largest golden mods error: %.3g, limit %.0e; oracle vs torch %.3g\n", worst,
              kTolerance, worst_oracle);
}
