// Peak memory of the decoder serving loop (serving.hpp; the bench_serving
// workload): KV in one paged cache, taking blocks of 256 tokens as requests
// grow, vs one mha_kv_cache per request reserved at max_len. Each mode runs
// in its own process, since peak RSS only grows.
// Usage: mha_serving_memory paged|reserved [small|full] [default|int8|fp8]
//   small: E = 256, 8 heads, 4 kv heads instead of E = 4096, 32/8 heads;
//   the cache's mha_kv_dtype (default: the object's own, fp32).
#include <sys/resource.h>

#include <cstdio>
#include <cstring>
#include <vector>

#include "serving.hpp"

namespace {
double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB
}
}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::strcmp(argv[1], "paged") != 0 && std::strcmp(argv[1], "reserved") != 0)) {
    std::fprintf(stderr, "usage: %s paged|reserved [small]\n", argv[0]);
    return 2;
  }
  const bool paged = std::strcmp(argv[1], "paged") == 0;
  const bool small = argc > 2 && std::strcmp(argv[2], "small") == 0;
  const char* type = argc > 3 ? argv[3] : "default";
  const mha_kv_dtype dtype = std::strcmp(type, "int8") == 0  ? MHA_KV_INT8
                             : std::strcmp(type, "fp8") == 0 ? MHA_KV_FP8_E4M3
                                                             : MHA_KV_DEFAULT;
  const std::size_t E = small ? 256 : 4096, H = small ? 8 : 32, kvh = small ? 4 : 8;
  const std::size_t kv = kvh * (E / H), slots = 16, chunk = 256, block_tokens = 256;
  const std::size_t prompt_max = 512, gen_max = 64, max_len = prompt_max + gen_max;
  const auto reqs = mha::bench::decoder_requests(32, 16, prompt_max, 16, gen_max, 7);
  std::vector<float> w(E * E, 0.01f), wkv(kv * E, 0.01f);
  const mha_config cfg{E, H, 0, 0, kvh};
  const mha_weights weights{w.data(), wkv.data(), wkv.data(), w.data(),
                            nullptr,  nullptr,    nullptr,    nullptr};
  const mha::MultiheadAttention attn(cfg, weights);
  std::vector<float> x(chunk * E, 0.5f), out(chunk * E);
  const double before = peak_rss_mib();
  // The pool has room for every slot at max_len, as the reserved caches do;
  // only blocks in use are ever touched.
  const std::size_t blocks = slots * ((max_len + block_tokens - 1) / block_tokens);
  const mha::bench::LoopStats st =
      paged ? mha::bench::paged_loop(attn, reqs, slots, chunk, block_tokens, blocks, x.data(),
                                     out.data(), dtype)
            : mha::bench::per_request_loop(attn, reqs, slots, chunk, max_len, x.data(), out.data(),
                                           dtype);
  const double after = peak_rss_mib();
  std::printf(
      "%s, %s cache: E=%zu H=%zu kv_heads=%zu, %zu requests, %zu in flight, max_len %zu: %zu "
      "tokens; peak RSS %.1f MiB before the loop, %.1f MiB after (+%.1f MiB); fp32 KV at max_len "
      "for every slot would be %.1f MiB; the pool reserves %.1f MiB\n",
      paged ? "paged" : "reserved", type, E, H, kvh, reqs.size(), slots, max_len, st.tokens, before,
      after, after - before, 2.0 * 4.0 * static_cast<double>(slots * max_len * kv) / (1 << 20),
      static_cast<double>(st.cache_bytes) / (1 << 20));
  return 0;
}
