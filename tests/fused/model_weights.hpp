// Random weights and biases of one attention configuration, shared by the
// fused tests (uniform in +-0.3, biases in the default range, from `seed`).
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "support/reference.hpp"

namespace mha::test {

struct ModelWeights {
  mha_config cfg{};
  std::vector<float> wq, wk, wv, wo, bq, bk, bv, bo;

  // kdim: the key and value feature size, 0 for E.
  ModelWeights(std::size_t E, std::size_t H, std::size_t kv_heads, std::size_t kdim,
               std::uint64_t seed) {
    cfg.embed_dim = E;
    cfg.num_heads = H;
    cfg.num_kv_heads = kv_heads;
    cfg.kdim = kdim;
    cfg.vdim = kdim;
    const std::size_t kvd = kv_heads * (E / H), in = kdim != 0 ? kdim : E;
    wq = random_vector(E * E, seed, -0.3f, 0.3f);
    wk = random_vector(kvd * in, seed + 1, -0.3f, 0.3f);
    wv = random_vector(kvd * in, seed + 2, -0.3f, 0.3f);
    wo = random_vector(E * E, seed + 3, -0.3f, 0.3f);
    bq = random_vector(E, seed + 4);
    bk = random_vector(kvd, seed + 5);
    bv = random_vector(kvd, seed + 6);
    bo = random_vector(E, seed + 7);
  }
  mha_weights view() const {
    return {wq.data(), wk.data(), wv.data(), wo.data(), bq.data(), bk.data(), bv.data(), bo.data()};
  }
  std::size_t E() const { return cfg.embed_dim; }
  std::size_t kdim() const { return cfg.kdim != 0 ? cfg.kdim : cfg.embed_dim; }
};

}  // namespace mha::test
