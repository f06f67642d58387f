// mha::Mla and its caches: the C++ face of mha_mla_* (include/mha/mha.h,
// "Multi-head Latent Attention"). Failures throw mha::Error with the status
// and message the C API would return.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <mha/error.hpp>

namespace mha {

class MHA_API Mla {
 public:
  // options: nullptr for fp32 (see mha_mla_create).
  Mla(const mha_mla_config& config, const mha_mla_weights& weights,
      const mha_attention_options* options = nullptr);
  ~Mla();
  Mla(Mla&& other) noexcept;
  Mla& operator=(Mla&& other) noexcept;
  Mla(const Mla&) = delete;
  Mla& operator=(const Mla&) = delete;

  // See mha_mla_forward.
  void forward(std::size_t batch, std::size_t seq, std::size_t position_offset, const float* x,
               float* out) const;
  const mha_mla* handle() const noexcept { return handle_; }

 private:
  mha_mla* handle_ = nullptr;
};

// A latent cache bound to an Mla (which must outlive it).
class MHA_API MlaKvCache {
 public:
  MlaKvCache(const Mla& mla, std::size_t batch, std::size_t max_len,
             mha_kv_dtype dtype = MHA_KV_DEFAULT);
  ~MlaKvCache();
  MlaKvCache(MlaKvCache&& other) noexcept;
  MlaKvCache& operator=(MlaKvCache&& other) noexcept;
  MlaKvCache(const MlaKvCache&) = delete;
  MlaKvCache& operator=(const MlaKvCache&) = delete;

  std::size_t length() const noexcept;
  std::size_t bytes() const noexcept;
  void truncate(std::size_t len);
  // See mha_mla_step.
  void step(std::size_t n_new, const float* x, float* out);
  mha_kv_cache* handle() const noexcept { return handle_; }

 private:
  const mha_mla* mla_;
  mha_kv_cache* handle_ = nullptr;
};

// A paged latent cache bound to an Mla (which must outlive it).
class MHA_API MlaPagedKvCache {
 public:
  MlaPagedKvCache(const Mla& mla, std::size_t num_slots, std::size_t block_tokens,
                  std::size_t num_blocks, mha_kv_dtype dtype = MHA_KV_DEFAULT);
  ~MlaPagedKvCache();
  MlaPagedKvCache(MlaPagedKvCache&& other) noexcept;
  MlaPagedKvCache& operator=(MlaPagedKvCache&& other) noexcept;
  MlaPagedKvCache(const MlaPagedKvCache&) = delete;
  MlaPagedKvCache& operator=(const MlaPagedKvCache&) = delete;

  std::size_t slot_length(std::size_t slot) const noexcept;
  std::size_t free_blocks() const noexcept;
  std::size_t bytes() const noexcept;
  void reset_slot(std::size_t slot);
  void truncate_slot(std::size_t slot, std::size_t len);
  // See mha_kv_cache_fork_slot and mha_kv_cache_shared_chunks.
  void fork_slot(std::size_t src, std::size_t dst, std::size_t len);
  std::size_t shared_chunks() const noexcept;
  // See mha_mla_step_ragged.
  void step(std::size_t num, const std::size_t* slots, const std::size_t* q_start, const float* x,
            float* out);
  // See mha_mla_step_tree and mha_kv_cache_accept_path.
  void step_tree(std::size_t num, const std::size_t* slots, const std::size_t* q_start,
                 const std::int32_t* parent, const float* x, float* out);
  void accept_path(std::size_t slot, std::size_t n, const std::size_t* path);
  mha_paged_kv_cache* handle() const noexcept { return handle_; }

 private:
  const mha_mla* mla_;
  mha_paged_kv_cache* handle_ = nullptr;
};

}  // namespace mha
