// Split-KV (few queries, many keys: the decode shape) in a full forward,
// against the double oracle, with every mask kind and GQA. The oracle suite's
// random problems stay below the split threshold (1024 keys), so this is where
// the partial (max, sum, accumulator) merge meets masks: chunks that a row
// sees nothing of, padding that empties whole key tiles, causal offsets that
// end inside a chunk.
#include <catch2/catch.hpp>
#include <mha/attention.hpp>

#include "attention/attention_case.hpp"
#include "support/reference.hpp"

using namespace mha::test;

TEST_CASE("split-KV forward matches the double oracle under every mask", "[fused][oracle]") {
  struct Shape {
    std::size_t E, H, kv_heads, batch, q_len, kv_len;
  };
  const Shape shapes[] = {
      {32, 2, 0, 1, 1, 2100}, {48, 4, 2, 2, 3, 1500}, {64, 4, 1, 1, 7, scaled(4100, 1030)}};
  std::uint64_t seed = 500;
  for (const Shape& s : shapes) {
    for (int variant = 0; variant < 4; ++variant) {
      AttentionCase c;
      c.config = mha_config{s.E, s.H, 0, 0, s.kv_heads};
      c.batch = s.batch;
      c.q_len = s.q_len;
      c.kv_len = s.kv_len;
      c.causal = variant == 1 || variant == 3;
      c.padding = variant >= 2;
      c.additive = variant == 3 ? 2 : variant == 2 ? 1 : 0;
      c.seed = ++seed;
      INFO("E=" << s.E << " H=" << s.H << " kv_heads=" << s.kv_heads << " batch=" << s.batch
                << " q_len=" << s.q_len << " kv_len=" << s.kv_len << " variant " << variant);
      const CaseData d(c);
      const mha::MultiheadAttention attn(c.config, d.w.view());
      const CaseResult ours = run_library(attn, c, d);
      // Tolerance as in the oracle suite (test_attention_oracle.cpp): 1e-5 of
      // the output's scale.
      CHECK(scaled_error(ours.out, run_reference(c, d).out) <= 1e-5);
    }
  }
}
