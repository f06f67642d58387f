// Worked examples from the literature, through the public API.
#include <catch2/catch.hpp>
#include <cmath>
#include <mha/attention.hpp>
#include <vector>

namespace {

std::vector<float> identity(std::size_t n) {
  std::vector<float> m(n * n, 0.f);
  for (std::size_t i = 0; i < n; ++i) m[i * n + i] = 1.f;
  return m;
}

}  // namespace

// Two tokens, two heads, d_model = 4, identity projections (the common
// textbook example): X = [[1,0,1,0],[0,1,0,1]]. Each head sees [[1,0],[0,1]],
// so its scores are I / sqrt(2) and A = softmax rows of [[0.707,0],[0,0.707]]
// = [[0.67,0.33],[0.33,0.67]]; with V = I, Z = A.
TEST_CASE("2-token 2-head d_model=4 example with identity projections", "[attention][example]") {
  const std::vector<float> I = identity(4);
  mha::MultiheadAttention attn(
      mha_config{4, 2, 0, 0, 0},
      mha_weights{I.data(), I.data(), I.data(), I.data(), nullptr, nullptr, nullptr, nullptr});
  const std::vector<float> x = {1, 0, 1, 0, 0, 1, 0, 1};
  std::vector<float> out(8), w(2 * 2 * 2);
  attn.forward(1, 2, 2, x.data(), x.data(), x.data(), nullptr, out.data(), w.data());

  const double e = std::exp(1.0 / std::sqrt(2.0));
  const double hi = e / (e + 1), lo = 1 / (e + 1);  // 0.6698, 0.3302
  const double A[2][2] = {{hi, lo}, {lo, hi}};
  for (int h = 0; h < 2; ++h)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 2; ++j) {
        INFO("head " << h << " A[" << i << "][" << j << "]");
        CHECK(w[(h * 2 + i) * 2 + j] == Approx(A[i][j]).epsilon(1e-6));
        // The rounded figures of the literature.
        CHECK(w[(h * 2 + i) * 2 + j] == Approx(i == j ? 0.67 : 0.33).margin(0.005));
        // Z_h = A V = A: out = concat(Z_1, Z_2) through the identity out-projection.
        CHECK(out[i * 4 + h * 2 + j] == Approx(A[i][j]).epsilon(1e-6));
      }
}

// "it" attending to "cat": q_it = [0.9, 0.1, 0], k_cat = [0.8, 0.2, 0.1],
// q.k = 0.9*0.8 + 0.1*0.2 + 0*0.1 = 0.74. One head, identity projections;
// a second, zero key scores exactly 0, so the weights give the score back:
// ln(w_cat / w_zero) = 0.74 / sqrt(3).
TEST_CASE("'it' -> 'cat' score 0.74 is one head's pre-softmax score", "[attention][example]") {
  const std::vector<float> I = identity(3);
  mha::MultiheadAttention attn(
      mha_config{3, 1, 0, 0, 0},
      mha_weights{I.data(), I.data(), I.data(), I.data(), nullptr, nullptr, nullptr, nullptr});
  const std::vector<float> it = {0.9f, 0.1f, 0.f};
  const std::vector<float> keys = {0.8f, 0.2f, 0.1f, 0.f, 0.f, 0.f};
  std::vector<float> out(3), w(2);
  attn.forward(1, 1, 2, it.data(), keys.data(), keys.data(), nullptr, out.data(), w.data());
  const double score = std::log(static_cast<double>(w[0]) / w[1]) * std::sqrt(3.0);
  CHECK(score == Approx(0.74).epsilon(1e-5));
  // And the output is the weighted value: w_cat * v_cat + w_zero * 0.
  for (int t = 0; t < 3; ++t) CHECK(out[t] == Approx(w[0] * keys[t]).epsilon(1e-6));
}
