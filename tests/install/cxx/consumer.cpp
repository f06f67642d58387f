// Consumer of the installed package through find_package(mha CONFIG) and the
// mha::mha / mha::mha_static targets. Checks the ISA query, a C++ SGEMM with
// exact small-integer results, a MultiheadAttention forward against an
// independent double computation, and that bad input throws mha::Error.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mha/attention.hpp>
#include <mha/error.hpp>
#include <mha/gemm.hpp>
#include <mha/isa.hpp>
#include <string>
#include <vector>

namespace {

int failures = 0;

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "FAIL: %s\n", what);
    ++failures;
  }
}

}  // namespace

int main() {
  const std::string isa(mha::isa_name(mha::current_isa()));
  check(isa == mha_isa_name(), "mha::isa_name(current_isa()) == mha_isa_name()");
  check(!mha::supported_isas().empty(), "at least one supported ISA");

  // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]: exact in float.
  const float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8};
  float c[4] = {};
  mha::sgemm('N', 'N', 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2);
  check(c[0] == 19 && c[1] == 22 && c[2] == 43 && c[3] == 50, "mha::sgemm result");

  // Self-attention, E = 4, H = 2, identity projections, no biases: head h's
  // output is softmax(x_h x_h^T / sqrt(2)) x_h on its two features.
  constexpr int E = 4, L = 3;
  std::vector<float> eye(E * E, 0.f);
  for (int i = 0; i < E; ++i) eye[i * E + i] = 1.f;
  const float x[L * E] = {0.9f, 0.1f, 0.f, 0.3f, 0.8f, 0.2f, 0.1f, -0.5f, -0.4f, 0.6f, 0.7f, 0.2f};
  mha_config cfg{};
  cfg.embed_dim = E;
  cfg.num_heads = 2;
  mha_weights w{};
  w.q_weight = w.k_weight = w.v_weight = w.out_weight = eye.data();
  mha::MultiheadAttention attn(cfg, w);
  float out[L * E];
  attn.forward_self(1, L, x, nullptr, out);
  double max_err = 0;
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < L; ++i) {
      double s[L], mx = -1e300, sum = 0;
      for (int j = 0; j < L; ++j) {
        s[j] = 0;
        for (int d = 0; d < 2; ++d) s[j] += double(x[i * E + 2 * h + d]) * x[j * E + 2 * h + d];
        s[j] /= std::sqrt(2.0);
        mx = std::max(mx, s[j]);
      }
      for (int j = 0; j < L; ++j) sum += (s[j] = std::exp(s[j] - mx));
      for (int d = 0; d < 2; ++d) {
        double o = 0;
        for (int j = 0; j < L; ++j) o += s[j] / sum * x[j * E + 2 * h + d];
        max_err = std::max(max_err, std::fabs(o - out[i * E + 2 * h + d]));
      }
    }
  }
  check(max_err < 1e-5, "attention output matches the double computation");

  bool threw = false;
  try {
    cfg.num_heads = 3;
    mha::MultiheadAttention bad(cfg, w);
  } catch (const mha::Error& e) {
    threw = e.status() == MHA_INVALID_ARGUMENT && std::string(e.what()).size() > 0;
  }
  check(threw, "E % H != 0 throws mha::Error(MHA_INVALID_ARGUMENT)");

  std::printf("c++ consumer: isa=%s, attention max error %.2e, %s\n", isa.c_str(), max_err,
              failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
