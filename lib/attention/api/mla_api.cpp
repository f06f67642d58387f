// MLA API (mha.h, "Multi-head Latent Attention"): every check happens here,
// so the model behind it (mla/mla.hpp) sees only valid, overflow-free shapes.
// The C entry points wrap the helpers in guarded(); the C++ classes
// (mha/mla.hpp) call them directly or through the C functions.
#include <mha/mha.h>

#include <cmath>
#include <limits>
#include <memory>
#include <mha/mla.hpp>
#include <utility>

#include "attention/api/checks.hpp"
#include "attention/cache/kv_cache.hpp"
#include "attention/cache/paged_cache.hpp"
#include "attention/engine/engine.hpp"
#include "attention/mla/mla.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"
#include "dispatch/dispatch.hpp"

namespace mha {
namespace {

using detail::check_arg;
using detail::checked_add;
using detail::checked_mul;
using detail::tensor_extent;

// A float of the config: finite and >= 0 (0 is each field's default).
double nonnegative(float x, const char* name) {
  check_arg(std::isfinite(x) && x >= 0.f, "mha_mla_create: config->", name,
            ": expected finite and >= 0, got ", x);
  return x;
}

detail::MlaShape resolve(const mha_mla_config* c) {
  check_arg(c != nullptr, "mha_mla_create: config must not be NULL");
  check_arg(c->struct_size == sizeof(mha_mla_config),
            "mha_mla_create: config->struct_size: expected sizeof(mha_mla_config) (",
            sizeof(mha_mla_config), "), got ", c->struct_size);
  const std::pair<std::size_t, const char*> sizes[] = {
      {c->hidden_size, "hidden_size"},           {c->num_heads, "num_heads"},
      {c->kv_lora_rank, "kv_lora_rank"},         {c->qk_nope_head_dim, "qk_nope_head_dim"},
      {c->qk_rope_head_dim, "qk_rope_head_dim"}, {c->v_head_dim, "v_head_dim"}};
  for (const auto& [n, name] : sizes) {
    check_arg(n != 0, "mha_mla_create: config->", name, ": expected > 0, got 0");
  }
  check_arg(c->qk_rope_head_dim % 2 == 0,
            "mha_mla_create: config->qk_rope_head_dim: expected even, got ", c->qk_rope_head_dim);
  check_arg(c->rope_halves == 0 || c->rope_halves == 1,
            "mha_mla_create: config->rope_halves: expected 0 or 1, got ", c->rope_halves);
  detail::MlaShape s;
  s.E = c->hidden_size;
  s.H = c->num_heads;
  s.q_lora = c->q_lora_rank;
  s.r = c->kv_lora_rank;
  s.dn = c->qk_nope_head_dim;
  s.dr = c->qk_rope_head_dim;
  s.dv = c->v_head_dim;
  const double eps = nonnegative(c->rms_norm_eps, "rms_norm_eps");
  const double theta = nonnegative(c->rope_theta, "rope_theta");
  s.eps = eps != 0 ? eps : 1e-6;
  s.theta = theta != 0 ? theta : 10000.0;
  check_arg(s.theta != 1.0, "mha_mla_create: config->rope_theta: expected != 1");
  s.halves = c->rope_halves == 1;
  s.yarn_factor = nonnegative(c->yarn_factor, "yarn_factor");
  const double fast = nonnegative(c->yarn_beta_fast, "yarn_beta_fast");
  const double slow = nonnegative(c->yarn_beta_slow, "yarn_beta_slow");
  s.beta_fast = fast != 0 ? fast : 32.0;
  s.beta_slow = slow != 0 ? slow : 1.0;
  s.mscale = nonnegative(c->yarn_mscale, "yarn_mscale");
  s.mscale_all_dim = nonnegative(c->yarn_mscale_all_dim, "yarn_mscale_all_dim");
  if (s.yarn_factor != 0) {
    check_arg(c->yarn_original_max_position != 0,
              "mha_mla_create: config->yarn_original_max_position: expected > 0 with "
              "yarn_factor > 0, got 0");
    s.yarn_original = static_cast<double>(c->yarn_original_max_position);
  }
  // Every weight, every width the engines form, and their products with
  // the heads fit one object.
  const std::size_t dq = checked_add(s.dn, s.dr, "qk head dim");
  const std::size_t kvb = checked_add(s.dn, s.dv, "kv_b head dim");
  const std::size_t latent = checked_add(s.r, s.dr, "latent row");
  tensor_extent(nullptr, {s.H, dq, s.q_lora != 0 ? s.q_lora : s.E}, "q_proj/q_b_proj");
  tensor_extent(nullptr, {s.q_lora, s.E}, "q_a_proj");
  tensor_extent(nullptr, {latent, s.E}, "kv_a_proj_with_mqa");
  tensor_extent(nullptr, {s.H, kvb, s.r}, "kv_b_proj");
  tensor_extent(nullptr, {s.E, s.H, s.dv}, "o_proj");
  tensor_extent(nullptr, {s.H, latent}, "absorbed query heads");
  tensor_extent(nullptr, {s.H, s.head()}, "prefill heads");
  return s;
}

void check_weights(const mha_mla_weights* w, const detail::MlaShape& s) {
  check_arg(w != nullptr, "mha_mla_create: weights must not be NULL");
  check_arg(w->struct_size == sizeof(mha_mla_weights),
            "mha_mla_create: weights->struct_size: expected sizeof(mha_mla_weights) (",
            sizeof(mha_mla_weights), "), got ", w->struct_size);
  if (s.q_lora == 0) {
    check_arg(w->q_proj != nullptr,
              "mha_mla_create: weights->q_proj: expected [H*(dn+dr), E] with q_lora_rank 0, got "
              "NULL");
  } else {
    check_arg(w->q_proj == nullptr,
              "mha_mla_create: weights->q_proj: expected NULL with q_lora_rank ", s.q_lora,
              " (q_a_proj and q_b_proj are used)");
    check_arg(w->q_a_proj != nullptr, "mha_mla_create: weights->q_a_proj must not be NULL");
    check_arg(w->q_a_layernorm != nullptr,
              "mha_mla_create: weights->q_a_layernorm must not be NULL");
    check_arg(w->q_b_proj != nullptr, "mha_mla_create: weights->q_b_proj must not be NULL");
  }
  check_arg(w->kv_a_proj_with_mqa != nullptr,
            "mha_mla_create: weights->kv_a_proj_with_mqa must not be NULL");
  check_arg(w->kv_a_layernorm != nullptr,
            "mha_mla_create: weights->kv_a_layernorm must not be NULL");
  check_arg(w->kv_b_proj != nullptr, "mha_mla_create: weights->kv_b_proj must not be NULL");
  check_arg(w->o_proj != nullptr, "mha_mla_create: weights->o_proj must not be NULL");
}

mha_mla* make_mla(const mha_mla_config* config, const mha_mla_weights* weights,
                  const mha_attention_options* options) {
  const detail::MlaShape s = resolve(config);
  check_weights(weights, s);
  const detail::ObjectOptions o = detail::object_options(options, "mha_mla_create: ");
  const Isa isa = detail::active_isa();
  auto handle = std::make_unique<mha_mla>();
  handle->model = std::make_unique<detail::MlaModel>(isa, s, *weights, o);
  return handle.release();
}

const detail::MlaModel& model_of(const mha_mla* mla, const char* fn) {
  check_arg(mla != nullptr, fn, ": mla must not be NULL");
  return *mla->model;
}

void forward(const mha_mla* mla, std::size_t batch, std::size_t seq, std::size_t position_offset,
             const float* x, float* out) {
  const detail::MlaModel& m = model_of(mla, "mha_mla_forward");
  check_arg(batch != 0, "mha_mla_forward: batch: expected > 0, got 0");
  check_arg(seq != 0, "mha_mla_forward: seq: expected > 0, got 0");
  check_arg(x != nullptr, "mha_mla_forward: x must not be NULL");
  check_arg(out != nullptr, "mha_mla_forward: out must not be NULL");
  constexpr auto kMaxPosition =
      static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  check_arg(position_offset <= kMaxPosition - seq,
            "mha_mla_forward: position_offset + seq: expected <= PTRDIFF_MAX, got ",
            position_offset, " + ", seq);
  const std::size_t E = m.shape().E;
  const auto ex = tensor_extent(x, {batch, seq, E}, "mha_mla_forward: x [batch, seq, hidden]");
  const auto eo = tensor_extent(out, {batch, seq, E}, "mha_mla_forward: out [batch, seq, hidden]");
  // out is written only after x has been read: in place is safe.
  detail::check_no_overlap(eo, ex, true, "mha_mla_forward: out", "x");
  tensor_extent(nullptr, {batch, m.shape().H, seq, seq}, "scores [batch, heads, seq, seq]");
  detail::ForwardArgs a;
  a.batch = batch;
  a.q_len = a.kv_len = seq;
  a.query = a.key = a.value = x;
  a.out = out;
  a.mods = m.mods(static_cast<std::ptrdiff_t>(position_offset));
  m.prefill().forward(a);
}

void step(const mha_mla* mla, mha_kv_cache* cache, std::size_t n_new, const float* x, float* out) {
  const detail::MlaModel& m = model_of(mla, "mha_mla_step");
  check_arg(cache != nullptr, "mha_mla_step: cache must not be NULL");
  detail::KvCache& c = *cache->cache;
  check_arg(c.owner() == &m.decode(),
            "mha_mla_step: cache was not created by mha_mla_kv_cache_create for this mha_mla");
  check_arg(n_new > 0, "mha_mla_step: n_new must be > 0, got 0");
  check_arg(n_new <= c.max_len() - c.length(), "mha_mla_step: length (", c.length(), ") + n_new (",
            n_new, ") exceeds max_len (", c.max_len(), ")");
  check_arg(x != nullptr, "mha_mla_step: x must not be NULL");
  check_arg(out != nullptr, "mha_mla_step: out must not be NULL");
  const std::size_t B = c.batch(), E = m.shape().E;
  const auto ex = tensor_extent(x, {B, n_new, E}, "mha_mla_step: x [batch, n_new, hidden]");
  const auto eo = tensor_extent(out, {B, n_new, E}, "mha_mla_step: out [batch, n_new, hidden]");
  detail::check_no_overlap(eo, ex, true, "mha_mla_step: out", "x");
  m.decode().step(c, n_new, x, x, x, out, m.mods(0));
}

// mha_mla_step_ragged, or mha_mla_step_tree where parent is given.
void step_ragged(const mha_mla* mla, mha_paged_kv_cache* cache, std::size_t num,
                 const std::size_t* slots, const std::size_t* q_start, const float* x, float* out,
                 const std::int32_t* parent = nullptr, bool tree = false) {
  const char* fn = tree ? "mha_mla_step_tree" : "mha_mla_step_ragged";
  const detail::MlaModel& m = model_of(mla, fn);
  check_arg(cache != nullptr, fn, ": cache must not be NULL");
  detail::PagedKvCache& c = *cache->cache;
  check_arg(c.owner() == &m.decode(), fn,
            ": cache was not created by mha_mla_kv_cache_create_paged for this mha_mla");
  detail::check_ragged_slots(c, num, slots, q_start, fn);
  if (tree) detail::check_tree_parents(num, q_start, parent, fn);
  const std::size_t rows = q_start[num], E = m.shape().E;
  const auto ex = tensor_extent(x, {rows, E}, "mha_mla_step_ragged: x [q_start[num], hidden]");
  const auto eo = tensor_extent(out, {rows, E}, "mha_mla_step_ragged: out [q_start[num], hidden]");
  detail::check_ragged_room(c, num, slots, q_start, 0, fn);
  if (rows == 0) return;
  check_arg(x != nullptr, fn, ": x must not be NULL");
  check_arg(out != nullptr, fn, ": out must not be NULL");
  detail::check_no_overlap(eo, ex, true, "mha_mla_step_ragged: out", "x");
  if (tree) {
    m.decode().step_tree(c, num, slots, q_start, parent, x, x, x, m.mods(0), out);
  } else {
    m.decode().step_ragged(c, num, slots, q_start, x, x, x, m.mods(0), out);
  }
}

void ok(mha_status s) {
  if (s != MHA_OK) throw Error(s, mha_last_error());
}

}  // namespace

Mla::Mla(const mha_mla_config& config, const mha_mla_weights& weights,
         const mha_attention_options* options)
    : handle_(make_mla(&config, &weights, options)) {}
Mla::~Mla() {
  mha_mla_destroy(handle_);
}
Mla::Mla(Mla&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
Mla& Mla::operator=(Mla&& other) noexcept {
  std::swap(handle_, other.handle_);
  return *this;
}
void Mla::forward(std::size_t batch, std::size_t seq, std::size_t position_offset, const float* x,
                  float* out) const {
  mha::forward(handle_, batch, seq, position_offset, x, out);
}

MlaKvCache::MlaKvCache(const Mla& mla, std::size_t batch, std::size_t max_len, mha_kv_dtype dtype)
    : mla_(mla.handle()) {
  const mha_kv_cache_options options{sizeof(mha_kv_cache_options), dtype};
  ok(mha_mla_kv_cache_create(mla_, batch, max_len, &options, &handle_));
}
MlaKvCache::~MlaKvCache() {
  mha_kv_cache_destroy(handle_);
}
MlaKvCache::MlaKvCache(MlaKvCache&& other) noexcept
    : mla_(other.mla_), handle_(std::exchange(other.handle_, nullptr)) {}
MlaKvCache& MlaKvCache::operator=(MlaKvCache&& other) noexcept {
  std::swap(mla_, other.mla_);
  std::swap(handle_, other.handle_);
  return *this;
}
std::size_t MlaKvCache::length() const noexcept {
  return mha_kv_cache_length(handle_);
}
std::size_t MlaKvCache::bytes() const noexcept {
  return mha_kv_cache_bytes(handle_);
}
void MlaKvCache::truncate(std::size_t len) {
  ok(mha_kv_cache_truncate(handle_, len));
}
void MlaKvCache::step(std::size_t n_new, const float* x, float* out) {
  mha::step(mla_, handle_, n_new, x, out);
}

MlaPagedKvCache::MlaPagedKvCache(const Mla& mla, std::size_t num_slots, std::size_t block_tokens,
                                 std::size_t num_blocks, mha_kv_dtype dtype)
    : mla_(mla.handle()) {
  const mha_kv_cache_options options{sizeof(mha_kv_cache_options), dtype};
  ok(mha_mla_kv_cache_create_paged(mla_, num_slots, block_tokens, num_blocks, &options, &handle_));
}
MlaPagedKvCache::~MlaPagedKvCache() {
  mha_paged_kv_cache_destroy(handle_);
}
MlaPagedKvCache::MlaPagedKvCache(MlaPagedKvCache&& other) noexcept
    : mla_(other.mla_), handle_(std::exchange(other.handle_, nullptr)) {}
MlaPagedKvCache& MlaPagedKvCache::operator=(MlaPagedKvCache&& other) noexcept {
  std::swap(mla_, other.mla_);
  std::swap(handle_, other.handle_);
  return *this;
}
std::size_t MlaPagedKvCache::slot_length(std::size_t slot) const noexcept {
  return mha_kv_cache_slot_length(handle_, slot);
}
std::size_t MlaPagedKvCache::free_blocks() const noexcept {
  return mha_kv_cache_free_blocks(handle_);
}
std::size_t MlaPagedKvCache::bytes() const noexcept {
  return mha_paged_kv_cache_bytes(handle_);
}
void MlaPagedKvCache::reset_slot(std::size_t slot) {
  ok(mha_kv_cache_reset_slot(handle_, slot));
}
void MlaPagedKvCache::truncate_slot(std::size_t slot, std::size_t len) {
  ok(mha_kv_cache_truncate_slot(handle_, slot, len));
}
void MlaPagedKvCache::step_tree(std::size_t num, const std::size_t* slots,
                                const std::size_t* q_start, const std::int32_t* parent,
                                const float* x, float* out) {
  mha::step_ragged(mla_, handle_, num, slots, q_start, x, out, parent, true);
}
void MlaPagedKvCache::accept_path(std::size_t slot, std::size_t n, const std::size_t* path) {
  ok(mha_kv_cache_accept_path(handle_, slot, n, path));
}
void MlaPagedKvCache::fork_slot(std::size_t src, std::size_t dst, std::size_t len) {
  ok(mha_kv_cache_fork_slot(handle_, src, dst, len));
}
std::size_t MlaPagedKvCache::shared_chunks() const noexcept {
  return mha_kv_cache_shared_chunks(handle_);
}
void MlaPagedKvCache::step(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
                           const float* x, float* out) {
  mha::step_ragged(mla_, handle_, num, slots, q_start, x, out);
}

}  // namespace mha

extern "C" {

MHA_API mha_status mha_mla_create(const mha_mla_config* config, const mha_mla_weights* weights,
                                  const mha_attention_options* options, mha_mla** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(out != nullptr, "mha_mla_create: out must not be NULL");
    *out = mha::make_mla(config, weights, options);
  });
}

MHA_API void mha_mla_destroy(mha_mla* mla) {
  delete mla;
}

MHA_API mha_status mha_mla_forward(const mha_mla* mla, size_t batch, size_t seq,
                                   size_t position_offset, const float* x, float* out) {
  return mha::detail::guarded([&] { mha::forward(mla, batch, seq, position_offset, x, out); });
}

MHA_API mha_status mha_mla_kv_cache_create(const mha_mla* mla, size_t batch, size_t max_len,
                                           const mha_kv_cache_options* options,
                                           mha_kv_cache** out) {
  return mha::detail::guarded([&] {
    constexpr const char* fn = "mha_mla_kv_cache_create";
    mha::detail::check_arg(out != nullptr, fn, ": out must not be NULL");
    *out = mha::detail::make_kv_cache(mha::model_of(mla, fn).decode(), batch, max_len, options, fn);
  });
}

MHA_API mha_status mha_mla_kv_cache_create_paged(const mha_mla* mla, size_t num_slots,
                                                 size_t block_tokens, size_t num_blocks,
                                                 const mha_kv_cache_options* options,
                                                 mha_paged_kv_cache** out) {
  return mha::detail::guarded([&] {
    constexpr const char* fn = "mha_mla_kv_cache_create_paged";
    mha::detail::check_arg(out != nullptr, fn, ": out must not be NULL");
    *out = mha::detail::make_paged_cache(mha::model_of(mla, fn).decode(), num_slots, block_tokens,
                                         num_blocks, options, fn);
  });
}

MHA_API mha_status mha_mla_step(const mha_mla* mla, mha_kv_cache* cache, size_t n_new,
                                const float* x, float* out) {
  return mha::detail::guarded([&] { mha::step(mla, cache, n_new, x, out); });
}

MHA_API mha_status mha_mla_step_tree(const mha_mla* mla, mha_paged_kv_cache* cache, size_t num,
                                     const size_t* slots, const size_t* q_start,
                                     const int32_t* parent, const float* x, float* out) {
  return mha::detail::guarded(
      [&] { mha::step_ragged(mla, cache, num, slots, q_start, x, out, parent, true); });
}

MHA_API mha_status mha_mla_step_ragged(const mha_mla* mla, mha_paged_kv_cache* cache, size_t num,
                                       const size_t* slots, const size_t* q_start, const float* x,
                                       float* out) {
  return mha::detail::guarded([&] { mha::step_ragged(mla, cache, num, slots, q_start, x, out); });
}

}  // extern "C"
