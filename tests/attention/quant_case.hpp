// What the quantized-weight suites share (test_attention_quant, _w8a8 and
// _blocks): their cases, an object handle and a forward's output.
#pragma once

#include <mha/mha.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "attention/attention_case.hpp"

namespace mha::test {

// Causal self-attention when kdim is 0 and the lengths are equal, else
// cross-attention with key and value widths kdim.
inline AttentionCase quant_case(std::size_t E, std::size_t H, std::size_t kv_heads,
                                std::size_t kdim, std::size_t batch, std::size_t q_len,
                                std::size_t kv_len, std::uint64_t seed, bool biases = true) {
  AttentionCase c;
  c.config = {E, H, kdim, kdim, kv_heads};
  c.biases = biases;
  c.batch = batch;
  c.q_len = q_len;
  c.kv_len = kv_len;
  c.self = kdim == 0 && q_len == kv_len;
  c.causal = c.self;
  c.seed = seed;
  return c;
}

// An object mha_attention_create_ex must make.
struct Handle {
  mha_attention* a = nullptr;
  Handle(const mha_config& cfg, const mha_weights& w, const mha_attention_options* o) {
    REQUIRE(mha_attention_create_ex(&cfg, &w, o, &a) == MHA_OK);
  }
  ~Handle() { mha_attention_destroy(a); }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
};

// The output of c's forward through a (weights: NULL, or per head).
inline std::vector<float> forward(const mha_attention* a, const AttentionCase& c, const CaseData& d,
                                  std::vector<float>* weights = nullptr) {
  std::vector<float> out(c.batch * c.q_len * c.config.embed_dim, NAN);
  REQUIRE(mha_attention_forward(a, c.batch, c.q_len, c.kv_len, d.query.data(), d.key.data(),
                                d.value.data(), d.mask_ptr(), out.data(),
                                weights ? weights->data() : nullptr, 0) == MHA_OK);
  return out;
}

}  // namespace mha::test
