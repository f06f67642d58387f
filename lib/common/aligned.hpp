// The library's one aligned allocator: owned, 64-byte-aligned float arrays,
// for long-lived buffers (packed weights, KV caches, the public packed B) and
// for the storage behind thread_scratch, which is what short-lived per-call
// memory uses. Also the size arithmetic of blocked layouts.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace mha::detail {

struct AlignedFree {
  void operator()(float* p) const noexcept { ::operator delete (p, std::align_val_t{64}); }
};
using AlignedFloats = std::unique_ptr<float[], AlignedFree>;

// Whether `bytes` exceeds the physical memory of this machine: such a buffer
// could only be backed by overcommit and would fail when touched, so it is
// refused up front.
bool exceeds_physical_memory(std::size_t bytes) noexcept;

// n floats (contents unspecified, pages untouched), 64-byte aligned; throws
// std::bad_alloc, also when n floats cannot be addressed or backed.
AlignedFloats alloc_floats(std::size_t n);

inline std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}
inline std::size_t round_up(std::size_t x, std::size_t m) {
  return (x + m - 1) / m * m;
}

}  // namespace mha::detail
