// The fused path's memory: the per-call workspace is O(batch·len·E), never
// O(len²·H), unless the caller asks for the weights (which then go to the
// caller's own array). The peak RSS of a real S = 8192 forward is measured by
// bench/attention/attention_memory.cpp (too slow for every ISA here).
#include <catch2/catch.hpp>
#include <mha/attention.hpp>
#include <vector>

#include "attention/engine/engine.hpp"
#include "support/reference.hpp"

TEST_CASE("forward workspace is linear in the sequence length", "[fused][memory]") {
  const std::size_t E = 768, H = 12, S = 8192;
  const std::vector<float> w = mha::test::random_vector(E * E, 1);
  const mha_config cfg{E, H, 0, 0, 0};
  const mha_weights weights{w.data(), w.data(), w.data(), w.data(),
                            nullptr,  nullptr,  nullptr,  nullptr};
  mha::MultiheadAttention attn(cfg, weights);
  const mha::detail::AttentionEngine& engine = *attn.handle()->engine;
  const float x = 0;  // never read: only the plan is computed
  mha::detail::ForwardArgs a;
  a.batch = 1;
  a.q_len = a.kv_len = S;
  a.query = a.key = a.value = &x;
  const double floats = static_cast<double>(engine.forward_workspace_floats(a));
  // Stated bound: 7·B·S·E floats (Q|K|V projections 3, packed K and V 2,
  // merged heads 1, plus strip padding) — 176 MiB here, against 3 GiB for
  // the S x S x H score tensor.
  const double bound = 7.0 * S * E;
  INFO("workspace " << floats * 4 / (1 << 20) << " MiB");
  CHECK(floats <= bound);
  CHECK(floats * 16 < static_cast<double>(S) * S * H);

  // Cross-attention and averaged weights stay within the same bound; the
  // weights themselves are the caller's array.
  a.key = a.value = &x + 0;
  std::vector<float> dummy(1);
  a.attn_weights = dummy.data();
  a.average_weights = true;
  a.q_len = 512;
  CHECK(static_cast<double>(engine.forward_workspace_floats(a)) <= 7.0 * S * E);
}
