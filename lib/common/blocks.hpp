// Addressing keys that run on across a paged pool's blocks, shared by the
// tiles of the attention core (KvTile) and the quantized kernels' key runs
// (kvq::KeyRuns).
#pragma once

#include <cstddef>

namespace mha::detail {

// Bytes from the head-block of a run's first key to that of key j (from
// the run's first block), blocks[b] the pool block of the run's block b,
// each of block_keys keys, head-blocks `stride` bytes apart per pool block.
inline std::ptrdiff_t block_offset(const std::size_t* blocks, std::size_t j, std::size_t block_keys,
                                   std::size_t stride) {
  return (static_cast<std::ptrdiff_t>(blocks[j / block_keys]) -
          static_cast<std::ptrdiff_t>(blocks[0])) *
         static_cast<std::ptrdiff_t>(stride);
}

}  // namespace mha::detail
