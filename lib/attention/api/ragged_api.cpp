// Ragged attention API (mha.h, "Ragged batches"): the offset checks, then the
// engine's ragged pass. The C++ method (mha/attention.hpp) and the C entry
// point share forward_ragged below.
#include <mha/mha.h>

#include <mha/attention.hpp>

#include "attention/api/checks.hpp"
#include "attention/core/core.hpp"
#include "attention/engine/engine.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"

namespace mha {
namespace {

using detail::check_arg;

// Offsets `name` ([num + 1]) start at 0 and never decrease.
void check_offsets(const std::size_t* start, std::size_t num, const char* name) {
  check_arg(start != nullptr, "seqs->", name, ": expected [num_seqs + 1] offsets, got NULL");
  check_arg(start[0] == 0, "seqs->", name, "[0]: expected 0, got ", start[0]);
  for (std::size_t s = 0; s < num; ++s) {
    check_arg(start[s + 1] >= start[s], "seqs->", name, "[", s + 1, "]: expected >= ", name, "[", s,
              "] (", start[s], "), got ", start[s + 1]);
  }
}

// Checks everything, then runs the pass unless there are no query rows.
void forward_ragged(const mha_attention* attn, const mha_ragged* seqs, const float* query,
                    const float* key, const float* value, const mha_mods* mods, float* out) {
  check_arg(attn != nullptr && attn->engine != nullptr,
            "attn: expected a handle from mha_attention_create, got NULL");
  check_arg(seqs != nullptr, "seqs: expected an mha_ragged, got NULL");
  check_arg(seqs->struct_size >= sizeof(mha_ragged),
            "seqs->struct_size: expected sizeof(mha_ragged) (", sizeof(mha_ragged), "), got ",
            seqs->struct_size);
  const detail::AttentionEngine& e = *attn->engine;
  const detail::AttentionShape& s = e.shape();
  const std::size_t n = seqs->num_seqs;
  check_offsets(seqs->q_start, n, "q_start");
  const std::size_t* kv_start = seqs->kv_start != nullptr ? seqs->kv_start : seqs->q_start;
  if (seqs->kv_start != nullptr) check_offsets(kv_start, n, "kv_start");
  const std::size_t q_rows = seqs->q_start[n], kv_rows = kv_start[n];
  using detail::check_no_overlap;
  using detail::tensor_extent;
  const auto eq = tensor_extent(query, {q_rows, s.embed_dim}, "query [q_start[num_seqs], E]");
  const auto ek = tensor_extent(key, {kv_rows, s.kdim}, "key [kv_start[num_seqs], kdim]");
  const auto ev = tensor_extent(value, {kv_rows, s.vdim}, "value [kv_start[num_seqs], vdim]");
  const auto eo = tensor_extent(out, {q_rows, s.embed_dim}, "out [q_start[num_seqs], E]");
  const detail::AttentionMods m =
      detail::resolve_mods(mods, s, q_rows, {eq, ek, ev, eo}, "mha_attention_forward_ragged");
  // Arrays with rows must be given even when no sequence has queries.
  check_arg(kv_rows == 0 || key != nullptr,
            "key: expected a [kv_start[num_seqs], kdim] array, got NULL");
  check_arg(kv_rows == 0 || value != nullptr,
            "value: expected a [kv_start[num_seqs], vdim] array, got NULL");
  if (q_rows == 0) return;
  check_arg(query != nullptr, "query: expected a [q_start[num_seqs], embed_dim] array, got NULL");
  check_arg(out != nullptr, "out: expected a [q_start[num_seqs], embed_dim] array, got NULL");
  // out is written only after every input has been read: in place is safe.
  check_no_overlap(eo, eq, true, "out", "query");
  check_no_overlap(eo, ek, true, "out", "key");
  check_no_overlap(eo, ev, true, "out", "value");
  e.forward_ragged({n, seqs->q_start, kv_start}, query, key, value, m, out);
}

}  // namespace

void MultiheadAttention::forward_ragged(const mha_ragged& seqs, const float* query,
                                        const float* key, const float* value, float* out,
                                        bool causal) const {
  mha_mods mods{};
  mods.struct_size = sizeof(mha_mods);
  mods.causal = causal ? 1 : 0;
  mha::forward_ragged(handle_, &seqs, query, key, value, &mods, out);
}

void MultiheadAttention::forward_ragged_mods(const mha_ragged& seqs, const float* query,
                                             const float* key, const float* value,
                                             const mha_mods* mods, float* out) const {
  mha::forward_ragged(handle_, &seqs, query, key, value, mods, out);
}

}  // namespace mha

extern "C" {

MHA_API mha_status mha_attention_forward_ragged(const mha_attention* attn, const mha_ragged* seqs,
                                                const float* query, const float* key,
                                                const float* value, const mha_mods* mods,
                                                float* out) {
  return mha::detail::guarded(
      [&] { mha::forward_ragged(attn, seqs, query, key, value, mods, out); });
}

}  // extern "C"
