// Public attention API: every argument check happens here, so the engine
// behind it (engine.hpp) only ever sees valid, overflow-free shapes. The C
// entry points are thin guarded() wrappers over the C++ class.
#include <mha/mha.h>

#include <memory>
#include <mha/attention.hpp>
#include <utility>

#include "attention/engine.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"
#include "dispatch/dispatch.hpp"

namespace mha {
namespace {

using detail::check_arg;

detail::AttentionShape resolve_shape(const mha_config& c) {
  check_arg(c.embed_dim != 0, "config.embed_dim: expected > 0, got 0");
  check_arg(c.num_heads != 0, "config.num_heads: expected > 0, got 0");
  check_arg(c.embed_dim % c.num_heads == 0, "config.embed_dim: expected a multiple of num_heads (",
            c.num_heads, "), got ", c.embed_dim);
  detail::AttentionShape s;
  s.embed_dim = c.embed_dim;
  s.num_heads = c.num_heads;
  s.kdim = c.kdim != 0 ? c.kdim : c.embed_dim;
  s.vdim = c.vdim != 0 ? c.vdim : c.embed_dim;
  s.num_kv_heads = c.num_kv_heads != 0 ? c.num_kv_heads : c.num_heads;
  s.head_dim = c.embed_dim / c.num_heads;
  check_arg(c.num_heads % s.num_kv_heads == 0,
            "config.num_kv_heads: expected a divisor of num_heads (", c.num_heads, "), got ",
            s.num_kv_heads);
  // Every weight matrix's element and byte count must fit one object.
  detail::tensor_extent(nullptr, {s.embed_dim, s.embed_dim}, "q_weight/out_weight [E, E]");
  detail::tensor_extent(nullptr, {s.kv_dim(), s.kdim}, "k_weight [kv_heads*head_dim, kdim]");
  detail::tensor_extent(nullptr, {s.kv_dim(), s.vdim}, "v_weight [kv_heads*head_dim, vdim]");
  return s;
}

void check_weights(const mha_weights& w) {
  check_arg(w.q_weight != nullptr, "weights.q_weight: expected a [E, E] array, got NULL");
  check_arg(w.k_weight != nullptr,
            "weights.k_weight: expected a [kv_heads*head_dim, kdim] array, got NULL");
  check_arg(w.v_weight != nullptr,
            "weights.v_weight: expected a [kv_heads*head_dim, vdim] array, got NULL");
  check_arg(w.out_weight != nullptr, "weights.out_weight: expected a [E, E] array, got NULL");
}

detail::ForwardArgs make_args(const detail::AttentionShape& s, std::size_t batch, std::size_t q_len,
                              std::size_t kv_len, const float* query, const float* key,
                              const float* value, const mha_mask* mask, float* out,
                              float* attn_weights, bool average_weights) {
  check_arg(batch != 0, "batch: expected > 0, got 0");
  check_arg(q_len != 0, "q_len: expected > 0, got 0");
  check_arg(kv_len != 0, "kv_len: expected > 0, got 0");
  check_arg(query != nullptr, "query: expected a [batch, q_len, embed_dim] array, got NULL");
  check_arg(key != nullptr, "key: expected a [batch, kv_len, kdim] array, got NULL");
  check_arg(value != nullptr, "value: expected a [batch, kv_len, vdim] array, got NULL");
  check_arg(out != nullptr, "out: expected a [batch, q_len, embed_dim] array, got NULL");
  using detail::check_no_overlap;
  using detail::tensor_extent;
  const auto eq = tensor_extent(query, {batch, q_len, s.embed_dim}, "query [batch, q_len, E]");
  const auto ek = tensor_extent(key, {batch, kv_len, s.kdim}, "key [batch, kv_len, kdim]");
  const auto ev = tensor_extent(value, {batch, kv_len, s.vdim}, "value [batch, kv_len, vdim]");
  const auto eo = tensor_extent(out, {batch, q_len, s.embed_dim}, "out [batch, q_len, E]");
  // The per-head score and weight tensors bound every index the engine forms.
  tensor_extent(nullptr, {batch, s.num_heads, q_len, kv_len},
                "scores [batch, num_heads, q_len, kv_len]");
  const auto ew = tensor_extent(
      attn_weights, {batch, average_weights ? 1 : s.num_heads, q_len, kv_len}, "attn_weights");
  const unsigned char* padding = mask != nullptr ? mask->key_padding : nullptr;
  const float* additive = mask != nullptr ? mask->additive : nullptr;
  const auto ep = tensor_extent(padding, {batch, kv_len}, "mask->key_padding [batch, kv_len]", 1);
  const auto ea =
      mask != nullptr && mask->additive_per_head
          ? tensor_extent(additive, {batch, s.num_heads, q_len, kv_len}, "mask->additive")
          : tensor_extent(additive, {q_len, kv_len}, "mask->additive");
  // out is written only after every input has been read, so in place is
  // safe; the weights are written while the mask is still being read.
  check_no_overlap(eo, eq, true, "out", "query");
  check_no_overlap(eo, ek, true, "out", "key");
  check_no_overlap(eo, ev, true, "out", "value");
  check_no_overlap(eo, ep, false, "out", "mask->key_padding");
  check_no_overlap(eo, ea, false, "out", "mask->additive");
  check_no_overlap(ew, eo, false, "attn_weights", "out");
  check_no_overlap(ew, eq, false, "attn_weights", "query");
  check_no_overlap(ew, ek, false, "attn_weights", "key");
  check_no_overlap(ew, ev, false, "attn_weights", "value");
  check_no_overlap(ew, ep, false, "attn_weights", "mask->key_padding");
  check_no_overlap(ew, ea, false, "attn_weights", "mask->additive");
  detail::ForwardArgs a;
  a.batch = batch;
  a.q_len = q_len;
  a.kv_len = kv_len;
  a.query = query;
  a.key = key;
  a.value = value;
  a.mask = mask;
  a.out = out;
  a.attn_weights = attn_weights;
  a.average_weights = average_weights;
  return a;
}

// Everything mha_attention_create and the constructor share: checks first,
// then the ISA (MHA_UNSUPPORTED if the forced one cannot run), then the copy.
std::unique_ptr<mha_attention> make_handle(const mha_config& config, const mha_weights& weights) {
  const detail::AttentionShape shape = resolve_shape(config);
  check_weights(weights);
  const Isa isa = detail::active_isa();
  auto handle = std::make_unique<mha_attention>();
  handle->engine = std::make_unique<detail::AttentionEngine>(isa, shape, weights);
  return handle;
}

const detail::AttentionEngine& engine_of(const mha_attention* handle) {
  check_arg(handle != nullptr && handle->engine != nullptr,
            "attn: expected a handle from mha_attention_create, got NULL");
  return *handle->engine;
}

}  // namespace

MultiheadAttention::MultiheadAttention(const mha_config& config, const mha_weights& weights)
    : handle_(make_handle(config, weights).release()) {}

MultiheadAttention::~MultiheadAttention() {
  delete handle_;
}

MultiheadAttention::MultiheadAttention(MultiheadAttention&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)) {}

MultiheadAttention& MultiheadAttention::operator=(MultiheadAttention&& other) noexcept {
  if (this != &other) {
    delete handle_;
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}

void MultiheadAttention::forward(std::size_t batch, std::size_t q_len, std::size_t kv_len,
                                 const float* query, const float* key, const float* value,
                                 const mha_mask* mask, float* out, float* attn_weights,
                                 bool average_weights) const {
  const detail::AttentionEngine& e = engine_of(handle_);
  e.forward(make_args(e.shape(), batch, q_len, kv_len, query, key, value, mask, out, attn_weights,
                      average_weights));
}

void MultiheadAttention::forward_self(std::size_t batch, std::size_t len, const float* x,
                                      const mha_mask* mask, float* out, float* attn_weights,
                                      bool average_weights) const {
  const detail::AttentionShape& s = engine_of(handle_).shape();
  check_arg(s.kdim == s.embed_dim && s.vdim == s.embed_dim,
            "forward_self: expected kdim == vdim == embed_dim (", s.embed_dim, "), got kdim ",
            s.kdim, ", vdim ", s.vdim);
  forward(batch, len, len, x, x, x, mask, out, attn_weights, average_weights);
}

std::size_t MultiheadAttention::embed_dim() const {
  return engine_of(handle_).shape().embed_dim;
}
std::size_t MultiheadAttention::num_heads() const {
  return engine_of(handle_).shape().num_heads;
}
std::size_t MultiheadAttention::num_kv_heads() const {
  return engine_of(handle_).shape().num_kv_heads;
}
std::size_t MultiheadAttention::head_dim() const {
  return engine_of(handle_).shape().head_dim;
}
std::size_t MultiheadAttention::kdim() const {
  return engine_of(handle_).shape().kdim;
}
std::size_t MultiheadAttention::vdim() const {
  return engine_of(handle_).shape().vdim;
}

}  // namespace mha

extern "C" {

MHA_API mha_status mha_attention_create(const mha_config* config, const mha_weights* weights,
                                        mha_attention** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(config != nullptr, "config: expected an mha_config, got NULL");
    mha::detail::check_arg(weights != nullptr, "weights: expected an mha_weights, got NULL");
    mha::detail::check_arg(out != nullptr, "out: expected a place for the handle, got NULL");
    *out = mha::make_handle(*config, *weights).release();
  });
}

MHA_API void mha_attention_destroy(mha_attention* attn) {
  delete attn;
}

MHA_API mha_status mha_attention_forward(const mha_attention* attn, size_t batch, size_t q_len,
                                         size_t kv_len, const float* query, const float* key,
                                         const float* value, const mha_mask* mask, float* out,
                                         float* attn_weights, int average_weights) {
  return mha::detail::guarded([&] {
    const mha::detail::AttentionEngine& e = mha::engine_of(attn);
    e.forward(mha::make_args(e.shape(), batch, q_len, kv_len, query, key, value, mask, out,
                             attn_weights, average_weights != 0));
  });
}

}  // extern "C"
