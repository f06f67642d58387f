// Random weights and biases of one attention configuration, and a set of
// modifier cases, shared by the fused tests (weights uniform in +-0.3, biases
// in the default range, from `seed`).
#pragma once

#include <mha/mha.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
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

// Each modifier alone, then all together, over per-head ALiBi slopes and
// sinks this object owns (so it is neither copied nor moved). A case that
// asks for lse points it at a marker: callers put their own array there.
struct ModsCases {
  std::vector<float> slopes, sinks;
  float lse_marker = 0.f;
  std::vector<std::pair<std::string, mha_mods>> cases;

  // window: the lone window case's; all_window: the combined case's.
  ModsCases(std::size_t heads, std::size_t head_dim, int causal, std::size_t window,
            std::size_t all_window)
      : slopes(random_vector(heads, 91, 0.f, 0.5f)), sinks(random_vector(heads, 92, -1.f, 3.f)) {
    mha_mods base{};
    base.struct_size = sizeof(mha_mods);
    base.causal = causal;
    const auto add = [&](const char* name, auto set) {
      mha_mods m = base;
      set(m);
      cases.emplace_back(name, m);
    };
    add("rope", [&](mha_mods& m) { m.rope_dim = head_dim / 2 * 2; });
    add("rope half interleaved", [&](mha_mods& m) {
      m.rope_dim = head_dim / 4 * 2;
      m.rope_theta = 500.f;
      m.rope_interleaved = 1;
    });
    add("alibi", [&](mha_mods& m) { m.alibi_slopes = slopes.data(); });
    add("softcap", [&](mha_mods& m) { m.softcap = 3.f; });
    add("sinks", [&](mha_mods& m) { m.sinks = sinks.data(); });
    add("window", [&](mha_mods& m) { m.window = window; });
    add("lse", [&](mha_mods& m) { m.lse = &lse_marker; });
    add("all", [&](mha_mods& m) {
      m.rope_dim = head_dim / 2 * 2;
      m.alibi_slopes = slopes.data();
      m.softcap = 5.f;
      m.sinks = sinks.data();
      m.window = all_window;
      m.lse = &lse_marker;
    });
  }
  ModsCases(const ModsCases&) = delete;
  ModsCases& operator=(const ModsCases&) = delete;
};

// The paged cascade and tree tests' modifier cases: none, RoPE with
// soft-cap and sinks, ALiBi, a window. The first two leave a decode row no
// term of its own over the keys before it, so forked rows share chunks
// (cascades()); ALiBi and the window do not.
enum class StepCase { plain, rope_cap_sinks, alibi, window };

struct StepMods {
  std::vector<float> slopes, sinks;
  mha_mods m{};
  StepMods(StepCase c, std::size_t heads, std::size_t rope_dim, std::size_t window)
      : slopes(random_vector(heads, 93, 0.f, 0.3f)), sinks(random_vector(heads, 94, -1.f, 1.f)) {
    m.struct_size = sizeof(mha_mods);
    if (c == StepCase::rope_cap_sinks) {
      m.rope_dim = rope_dim;
      m.softcap = 4.0f;
      m.sinks = sinks.data();
    }
    if (c == StepCase::alibi) m.alibi_slopes = slopes.data();
    if (c == StepCase::window) m.window = window;
  }
  bool cascades() const { return m.alibi_slopes == nullptr && m.window == 0; }
  StepMods(const StepMods&) = delete;
  StepMods& operator=(const StepMods&) = delete;
};

// The cascade and tree tests' configurations, f(compute, kv dtype, block
// tokens, case): fp32 and bf16 objects, every KV type, every StepCase on
// blocks of 16, and blocks of 7 (tiles gathered key by key) without mods;
// at reduced scale (sanitizers, qemu), blocks of 16, no fp8, and the cases
// in `reduced` alone; bf16 objects alone where a bf16 kernel set is forced.
template <class F>
void for_each_step_config(std::initializer_list<StepCase> reduced, const F& f) {
  const bool full = full_scale();
  for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
    if (compute == MHA_FP32 && bf16_kernels_forced()) continue;
    for (mha_kv_dtype dt : {MHA_KV_DEFAULT, MHA_KV_INT8, MHA_KV_FP8_E4M3}) {
      for (std::size_t bt : {std::size_t{16}, std::size_t{7}}) {
        for (StepCase c :
             {StepCase::plain, StepCase::rope_cap_sinks, StepCase::alibi, StepCase::window}) {
          const bool in_reduced = std::find(reduced.begin(), reduced.end(), c) != reduced.end();
          if (full ? bt == 16 || c == StepCase::plain
                   : dt != MHA_KV_FP8_E4M3 && bt == 16 && in_reduced) {
            f(compute, dt, bt, c);
          }
        }
      }
    }
  }
}

}  // namespace mha::test
