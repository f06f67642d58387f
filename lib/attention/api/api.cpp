// Public attention API: every argument check happens here, so the engine
// behind it (engine/engine.hpp) only ever sees valid, overflow-free shapes. The C
// entry points are thin guarded() wrappers over the C++ class.
#include <mha/mha.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <memory>
#include <mha/attention.hpp>
#include <utility>
#include <vector>

#include "attention/api/checks.hpp"
#include "attention/api/coded_weights.hpp"
#include "attention/engine/engine.hpp"
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

// The arrays of a forward: query, key, value, out, attn_weights, key padding,
// additive mask.
using ForwardArrays = std::array<detail::Extent, 7>;

detail::ForwardArgs make_args(const detail::AttentionShape& s, std::size_t batch, std::size_t q_len,
                              std::size_t kv_len, const float* query, const float* key,
                              const float* value, const mha_mask* mask, float* out,
                              float* attn_weights, bool average_weights,
                              ForwardArrays* arrays = nullptr) {
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
  if (arrays != nullptr) *arrays = {eq, ek, ev, eo, ew, ep, ea};
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
std::unique_ptr<mha_attention> make_handle(const mha_config& config, const mha_weights& weights,
                                           const mha_attention_options* options = nullptr) {
  const detail::AttentionShape shape = resolve_shape(config);
  check_weights(weights);
  const detail::ObjectOptions o = detail::object_options(options, "");
  const Isa isa = detail::active_isa();
  auto handle = std::make_unique<mha_attention>();
  handle->engine = std::make_unique<detail::AttentionEngine>(isa, shape, weights, o);
  return handle;
}

// An object on codes given (src) in `type` and groups of `group`, the
// biases from w (mha_int8_weights, mha_block_weights), as o asks.
template <class W>
std::unique_ptr<mha_attention> coded_handle(const detail::AttentionShape& shape,
                                            const detail::ObjectOptions& o, detail::QuantCodes type,
                                            std::size_t group, const detail::QuantSource (&src)[4],
                                            const W& w) {
  mha_weights biases{};
  biases.q_bias = w.q_bias;
  biases.k_bias = w.k_bias;
  biases.v_bias = w.v_bias;
  biases.out_bias = w.out_bias;
  const Isa isa = detail::active_isa();
  auto handle = std::make_unique<mha_attention>();
  handle->engine = std::make_unique<detail::AttentionEngine>(
      isa, shape, detail::make_projections_coded(isa, shape, o, type, group, src, biases), o.bf16,
      false);
  return handle;
}

// The options of an object on codes given: object_options' checks, then
// NULL (fp32 compute, weight-only) or weight_format `want` (spelled
// `format`) with weight_group `group`, the codes' (`what`).
detail::ObjectOptions coded_options(const mha_attention_options* options, detail::WeightFormat want,
                                    const char* format, std::size_t group, const char* what) {
  const detail::ObjectOptions o = detail::object_options(options, "");
  check_arg(options == nullptr || (o.weights == want && o.group == group),
            "options: expected weight_format ", format, " and weight_group ", group, " for ", what,
            ", got weight_format ",
            options != nullptr ? static_cast<long>(options->weight_format) : 0L, ", weight_group ",
            options != nullptr ? options->weight_group : 0);
  return o;
}

// mha_attention_create_int8: the checks, then the codes packed.
std::unique_ptr<mha_attention> make_int8_handle(const mha_config& config, const mha_int8_weights& w,
                                                const mha_attention_options* options) {
  const detail::AttentionShape shape = resolve_shape(config);
  check_arg(w.struct_size == sizeof(mha_int8_weights),
            "weights->struct_size: expected sizeof(mha_int8_weights) (", sizeof(mha_int8_weights),
            "), got ", w.struct_size);
  const detail::QuantSource src[] = {{nullptr, w.q_codes, w.q_scales, "weights->q"},
                                     {nullptr, w.k_codes, w.k_scales, "weights->k"},
                                     {nullptr, w.v_codes, w.v_scales, "weights->v"},
                                     {nullptr, w.out_codes, w.out_scales, "weights->out"}};
  for (const detail::QuantSource& x : src) {
    check_arg(x.codes != nullptr, x.name, "_codes: expected an array, got NULL");
    check_arg(x.scales != nullptr, x.name, "_scales: expected an array, got NULL");
  }
  const detail::ObjectOptions o =
      coded_options(options, detail::WeightFormat::int8, "MHA_WEIGHTS_INT8", 0,
                    "int8 codes with a scale per row");
  return coded_handle(shape, o, detail::QuantCodes::int8, 0, src, w);
}

// mha_attention_create_blocks: the checks, the blocks decoded, then packed
// as given codes of their format in groups of 32.
std::unique_ptr<mha_attention> make_blocks_handle(const mha_config& config,
                                                  const mha_block_weights& w,
                                                  const mha_attention_options* options) {
  const detail::AttentionShape shape = resolve_shape(config);
  check_arg(w.struct_size == sizeof(mha_block_weights),
            "weights->struct_size: expected sizeof(mha_block_weights) (", sizeof(mha_block_weights),
            "), got ", w.struct_size);
  check_arg(w.format == MHA_BLOCKS_Q4_0 || w.format == MHA_BLOCKS_Q8_0,
            "weights->format: expected MHA_BLOCKS_Q4_0 or MHA_BLOCKS_Q8_0, got ",
            static_cast<long>(w.format));
  const bool q8 = w.format == MHA_BLOCKS_Q8_0;
  const detail::ObjectOptions o = coded_options(
      options, q8 ? detail::WeightFormat::int8 : detail::WeightFormat::int4,
      q8 ? "MHA_WEIGHTS_INT8" : "MHA_WEIGHTS_INT4", 32, q8 ? "Q8_0 blocks" : "Q4_0 blocks");
  const std::size_t E = shape.embed_dim, kv = shape.kv_dim();
  using detail::decode_blocks;
  const auto q = decode_blocks(w.format, w.q_blocks, E, E, "weights->q_blocks");
  const auto k = decode_blocks(w.format, w.k_blocks, kv, shape.kdim, "weights->k_blocks");
  const auto v = decode_blocks(w.format, w.v_blocks, kv, shape.vdim, "weights->v_blocks");
  const auto x = decode_blocks(w.format, w.out_blocks, E, E, "weights->out_blocks");
  const detail::QuantSource src[] = {
      {nullptr, q.codes.data(), q.scales.data(), "weights->q_blocks"},
      {nullptr, k.codes.data(), k.scales.data(), "weights->k_blocks"},
      {nullptr, v.codes.data(), v.scales.data(), "weights->v_blocks"},
      {nullptr, x.codes.data(), x.scales.data(), "weights->out_blocks"}};
  return coded_handle(shape, o, q8 ? detail::QuantCodes::int8 : detail::QuantCodes::int4, 32, src,
                      w);
}

// mha_attention_create_checkpoint: the checks, the layers decoded, then
// packed as given uint4 codes with zero points.
std::unique_ptr<mha_attention> make_checkpoint_handle(const mha_config& config,
                                                      const mha_checkpoint_weights& w,
                                                      const mha_attention_options* options) {
  const detail::AttentionShape shape = resolve_shape(config);
  check_arg(w.struct_size == sizeof(mha_checkpoint_weights),
            "weights->struct_size: expected sizeof(mha_checkpoint_weights) (",
            sizeof(mha_checkpoint_weights), "), got ", w.struct_size);
  check_arg(w.layout == MHA_CHECKPOINT_GPTQ || w.layout == MHA_CHECKPOINT_GPTQ_V2 ||
                w.layout == MHA_CHECKPOINT_AWQ,
            "weights->layout: expected MHA_CHECKPOINT_GPTQ, MHA_CHECKPOINT_GPTQ_V2 or "
            "MHA_CHECKPOINT_AWQ, got ",
            static_cast<long>(w.layout));
  check_arg(w.group == 0 || w.group == 32 || w.group == 64 || w.group == 128,
            "weights->group: expected 0, 32, 64 or 128, got ", w.group);
  const detail::ObjectOptions o =
      coded_options(options, detail::WeightFormat::uint4, "MHA_WEIGHTS_UINT4", w.group,
                    "the checkpoint's group (weights->group)");
  const std::size_t E = shape.embed_dim, kv = shape.kv_dim();
  using detail::decode_checkpoint;
  const auto q = decode_checkpoint(w.layout, w.q, E, E, w.group, "weights->q");
  const auto k = decode_checkpoint(w.layout, w.k, kv, shape.kdim, w.group, "weights->k");
  const auto v = decode_checkpoint(w.layout, w.v, kv, shape.vdim, w.group, "weights->v");
  const auto x = decode_checkpoint(w.layout, w.out, E, E, w.group, "weights->out");
  const auto perm = [](const detail::DecodedWeight& d) {
    return d.perm.empty() ? nullptr : d.perm.data();
  };
  const detail::QuantSource src[] = {
      {nullptr, q.codes.data(), q.scales.data(), "weights->q", q.zeros.data(), perm(q)},
      {nullptr, k.codes.data(), k.scales.data(), "weights->k", k.zeros.data(), perm(k)},
      {nullptr, v.codes.data(), v.scales.data(), "weights->v", v.zeros.data(), perm(v)},
      {nullptr, x.codes.data(), x.scales.data(), "weights->out", x.zeros.data(), perm(x)}};
  struct {
    const float *q_bias, *k_bias, *v_bias, *out_bias;
  } biases{w.q.bias, w.k.bias, w.v.bias, w.out.bias};
  return coded_handle(shape, o, detail::QuantCodes::uint4, w.group, src, biases);
}

const detail::AttentionEngine& engine_of(const mha_attention* handle) {
  check_arg(handle != nullptr && handle->engine != nullptr,
            "attn: expected a handle from mha_attention_create, got NULL");
  return *handle->engine;
}

void forward_mods(const detail::AttentionEngine& e, std::size_t batch, std::size_t q_len,
                  std::size_t kv_len, const float* query, const float* key, const float* value,
                  const mha_mask* mask, const mha_mods* mods, float* out, float* attn_weights,
                  bool average_weights) {
  ForwardArrays x;
  detail::ForwardArgs a = make_args(e.shape(), batch, q_len, kv_len, query, key, value, mask, out,
                                    attn_weights, average_weights, &x);
  a.mods = detail::resolve_mods(mods, e.shape(), batch * q_len,
                                {x[0], x[1], x[2], x[3], x[4], x[5], x[6]},
                                "mha_attention_forward_mods");
  e.forward(a);
}

}  // namespace

namespace detail {

ObjectOptions object_options(const mha_attention_options* options, const char* prefix) {
  if (options == nullptr) return {};
  // The earlier versions' structs: { struct_size, compute } and then up to
  // weight_group, padded.
  constexpr std::size_t kAlign = alignof(mha_attention_options);
  constexpr auto padded = [](std::size_t end) { return (end + kAlign - 1) / kAlign * kAlign; };
  constexpr std::size_t kFirstSize = padded(offsetof(mha_attention_options, weight_format));
  constexpr std::size_t kSecondSize = padded(offsetof(mha_attention_options, activations));
  const std::size_t size = options->struct_size;
  check_arg(size == kFirstSize || size == kSecondSize || size == sizeof(mha_attention_options),
            prefix, "options->struct_size: expected sizeof(mha_attention_options) (",
            sizeof(mha_attention_options), ") or an earlier version's ", kFirstSize, " or ",
            kSecondSize, ", got ", size);
  check_arg(options->compute == MHA_FP32 || options->compute == MHA_BF16, prefix,
            "options->compute: expected MHA_FP32 or MHA_BF16, got ",
            static_cast<long>(options->compute));
  ObjectOptions o;
  o.bf16 = options->compute == MHA_BF16;
  if (size == kFirstSize) return o;
  const mha_weight_format f = options->weight_format;
  check_arg(f == MHA_WEIGHTS_COMPUTE || f == MHA_WEIGHTS_INT8 || f == MHA_WEIGHTS_INT4 ||
                f == MHA_WEIGHTS_UINT4,
            prefix,
            "options->weight_format: expected MHA_WEIGHTS_COMPUTE, MHA_WEIGHTS_INT8, "
            "MHA_WEIGHTS_INT4 or MHA_WEIGHTS_UINT4, got ",
            static_cast<long>(f));
  const std::size_t group = options->weight_group;
  const mha_activations act = size == kSecondSize ? MHA_ACTIVATIONS_FLOAT : options->activations;
  check_arg(act == MHA_ACTIVATIONS_FLOAT || act == MHA_ACTIVATIONS_INT8, prefix,
            "options->activations: expected MHA_ACTIVATIONS_FLOAT or MHA_ACTIVATIONS_INT8, got ",
            static_cast<long>(act));
  if (f == MHA_WEIGHTS_COMPUTE) {
    check_arg(group == 0, prefix,
              "options->weight_group: expected 0 with MHA_WEIGHTS_COMPUTE, got ", group);
    check_arg(act == MHA_ACTIVATIONS_FLOAT, prefix,
              "options->activations: MHA_ACTIVATIONS_INT8 needs quantized weights "
              "(weight_format MHA_WEIGHTS_INT8), got MHA_WEIGHTS_COMPUTE");
    return o;
  }
  check_arg(group == 0 || group == 32 || group == 64 || group == 128, prefix,
            "options->weight_group: expected 0, 32, 64 or 128, got ", group);
  o.weights = f == MHA_WEIGHTS_INT8   ? WeightFormat::int8
              : f == MHA_WEIGHTS_INT4 ? WeightFormat::int4
                                      : WeightFormat::uint4;
  o.group = group;
  o.int8_activations = act == MHA_ACTIVATIONS_INT8;
  return o;
}

AttentionMods resolve_mods(const mha_mods* m, const AttentionShape& s, std::size_t rows,
                           std::initializer_list<Extent> arrays, const char* fn) {
  AttentionMods r;
  if (m == nullptr) return r;
  check_arg(m->struct_size == sizeof(mha_mods), fn,
            ": mods->struct_size: expected sizeof(mha_mods) (", sizeof(mha_mods), "), got ",
            m->struct_size);
  const auto all_finite = [&](const float* x) {
    for (std::size_t h = 0; h < s.num_heads; ++h)
      if (!std::isfinite(x[h])) return h;
    return s.num_heads;
  };
  if (m->alibi_slopes != nullptr) {
    const std::size_t h = all_finite(m->alibi_slopes);
    check_arg(h == s.num_heads, fn, ": mods->alibi_slopes[", h, "]: expected finite, got ",
              h < s.num_heads ? m->alibi_slopes[h] : 0.f);
  }
  if (m->sinks != nullptr) {
    const std::size_t h = all_finite(m->sinks);
    check_arg(h == s.num_heads, fn, ": mods->sinks[", h, "]: expected finite, got ",
              h < s.num_heads ? m->sinks[h] : 0.f);
  }
  check_arg(m->softcap == 0.f || (std::isfinite(m->softcap) && m->softcap > 0.f), fn,
            ": mods->softcap: expected 0 (off) or finite > 0, got ", m->softcap);
  check_arg(m->rope_dim % 2 == 0 && m->rope_dim <= s.head_dim, fn,
            ": mods->rope_dim: expected even and <= head_dim (", s.head_dim, "), got ",
            m->rope_dim);
  check_arg(m->rope_theta == 0.f || (std::isfinite(m->rope_theta) && m->rope_theta > 0.f), fn,
            ": mods->rope_theta: expected 0 (10000) or finite > 0, got ", m->rope_theta);
  check_arg(m->rope_interleaved == 0 || m->rope_interleaved == 1, fn,
            ": mods->rope_interleaved: expected 0 or 1, got ", m->rope_interleaved);
  // lse [rows, H] is written while every other array may still be read.
  const Extent el = tensor_extent(m->lse, {rows, s.num_heads}, "mods->lse [rows, num_heads]");
  const Extent eh[] = {tensor_extent(m->alibi_slopes, {s.num_heads}, "mods->alibi_slopes [H]"),
                       tensor_extent(m->sinks, {s.num_heads}, "mods->sinks [H]")};
  for (const Extent& x : arrays) check_no_overlap(el, x, false, "mods->lse", "another array");
  for (const Extent& x : eh) check_no_overlap(el, x, false, "mods->lse", "a per-head array");
  r.causal = m->causal != 0;
  r.window = m->window;
  r.alibi = m->alibi_slopes;
  r.softcap = m->softcap;
  r.sinks = m->sinks;
  r.rope_dim = m->rope_dim;
  r.rope_theta = m->rope_theta != 0.f ? m->rope_theta : 10000.f;
  r.rope_interleaved = m->rope_interleaved != 0;
  r.lse = m->lse;
  return r;
}

}  // namespace detail

MultiheadAttention::MultiheadAttention(const mha_config& config, const mha_weights& weights)
    : handle_(make_handle(config, weights).release()) {}

MultiheadAttention::MultiheadAttention(const mha_config& config, const mha_weights& weights,
                                       const mha_attention_options& options)
    : handle_(make_handle(config, weights, &options).release()) {}

MultiheadAttention::MultiheadAttention(const mha_config& config, const mha_int8_weights& weights,
                                       const mha_attention_options* options)
    : handle_(make_int8_handle(config, weights, options).release()) {}

MultiheadAttention::MultiheadAttention(const mha_config& config, const mha_block_weights& weights,
                                       const mha_attention_options* options)
    : handle_(make_blocks_handle(config, weights, options).release()) {}

MultiheadAttention::MultiheadAttention(const mha_config& config,
                                       const mha_checkpoint_weights& weights,
                                       const mha_attention_options* options)
    : handle_(make_checkpoint_handle(config, weights, options).release()) {}

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

void MultiheadAttention::forward_mods(std::size_t batch, std::size_t q_len, std::size_t kv_len,
                                      const float* query, const float* key, const float* value,
                                      const mha_mask* mask, const mha_mods* mods, float* out,
                                      float* attn_weights, bool average_weights) const {
  mha::forward_mods(engine_of(handle_), batch, q_len, kv_len, query, key, value, mask, mods, out,
                    attn_weights, average_weights);
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

MHA_API mha_status mha_attention_create_ex(const mha_config* config, const mha_weights* weights,
                                           const mha_attention_options* options,
                                           mha_attention** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(config != nullptr, "config: expected an mha_config, got NULL");
    mha::detail::check_arg(weights != nullptr, "weights: expected an mha_weights, got NULL");
    mha::detail::check_arg(out != nullptr, "out: expected a place for the handle, got NULL");
    *out = mha::make_handle(*config, *weights, options).release();
  });
}

MHA_API mha_status mha_attention_create_int8(const mha_config* config,
                                             const mha_int8_weights* weights,
                                             const mha_attention_options* options,
                                             mha_attention** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(config != nullptr, "config: expected an mha_config, got NULL");
    mha::detail::check_arg(weights != nullptr, "weights: expected an mha_int8_weights, got NULL");
    mha::detail::check_arg(out != nullptr, "out: expected a place for the handle, got NULL");
    *out = mha::make_int8_handle(*config, *weights, options).release();
  });
}

MHA_API mha_status mha_attention_create_blocks(const mha_config* config,
                                               const mha_block_weights* weights,
                                               const mha_attention_options* options,
                                               mha_attention** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(config != nullptr, "config: expected an mha_config, got NULL");
    mha::detail::check_arg(weights != nullptr, "weights: expected an mha_block_weights, got NULL");
    mha::detail::check_arg(out != nullptr, "out: expected a place for the handle, got NULL");
    *out = mha::make_blocks_handle(*config, *weights, options).release();
  });
}

MHA_API mha_status mha_attention_create_checkpoint(const mha_config* config,
                                                   const mha_checkpoint_weights* weights,
                                                   const mha_attention_options* options,
                                                   mha_attention** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(config != nullptr, "config: expected an mha_config, got NULL");
    mha::detail::check_arg(weights != nullptr,
                           "weights: expected an mha_checkpoint_weights, got NULL");
    mha::detail::check_arg(out != nullptr, "out: expected a place for the handle, got NULL");
    *out = mha::make_checkpoint_handle(*config, *weights, options).release();
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

MHA_API mha_status mha_attention_forward_mods(const mha_attention* attn, size_t batch, size_t q_len,
                                              size_t kv_len, const float* query, const float* key,
                                              const float* value, const mha_mask* mask,
                                              const mha_mods* mods, float* out, float* attn_weights,
                                              int average_weights) {
  return mha::detail::guarded([&] {
    mha::forward_mods(mha::engine_of(attn), batch, q_len, kv_len, query, key, value, mask, mods,
                      out, attn_weights, average_weights != 0);
  });
}

}  // extern "C"
