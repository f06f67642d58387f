// Peak memory of one forward at S = 8192, E = 768, H = 12 without weights:
// prints the workspace the engine reserves, the peak RSS before and after the
// call, and what materializing S x S x H scores would have cost.
// Usage: mha_attention_memory [seq_len]
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <mha/attention.hpp>
#include <vector>

#include "attention/engine/engine.hpp"

namespace {
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
}
}  // namespace

int main(int argc, char** argv) {
  const std::size_t E = 768, H = 12;
  const std::size_t S = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 8192;
  std::vector<float> w(E * E, 0.01f), x(S * E, 0.5f), out(S * E);
  const mha_config cfg{E, H, 0, 0, 0};
  const mha_weights weights{w.data(), w.data(), w.data(), w.data(),
                            nullptr,  nullptr,  nullptr,  nullptr};
  const mha::MultiheadAttention attn(cfg, weights);
  mha::detail::ForwardArgs a;
  a.batch = 1;
  a.q_len = a.kv_len = S;
  a.query = a.key = a.value = x.data();
  const double ws = static_cast<double>(attn.handle()->engine->forward_workspace_floats(a)) * 4;
  const double before = peak_rss_mib();
  attn.forward_self(1, S, x.data(), nullptr, out.data());
  const double after = peak_rss_mib();
  const double io = 2.0 * S * E * 4 / (1 << 20);
  std::printf(
      "S=%zu E=%zu H=%zu: workspace %.1f MiB, inputs+outputs %.1f MiB, peak RSS %.1f MiB before "
      "the forward, %.1f MiB after (+%.1f MiB); S*S*H scores would be %.1f MiB\n",
      S, E, H, ws / (1 << 20), io, before, after, after - before,
      static_cast<double>(S) * S * H * 4 / (1 << 20));
  return 0;
}
