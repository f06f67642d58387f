// The library's one aligned allocator: owned, 64-byte-aligned float arrays,
// for long-lived buffers (packed weights, KV caches, the public packed B) and
// for the storage behind thread_scratch, which is what short-lived per-call
// memory uses. Also the size arithmetic of blocked layouts.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace mha::detail {

struct AlignedFree {
  void operator()(float* p) const noexcept { std::free(p); }
};
using AlignedFloats = std::unique_ptr<float[], AlignedFree>;

// n floats (contents unspecified), 64-byte aligned; throws std::bad_alloc.
inline AlignedFloats alloc_floats(std::size_t n) {
  const std::size_t bytes = ((n == 0 ? 1 : n) * sizeof(float) + 63) & ~std::size_t{63};
  void* p = std::aligned_alloc(64, bytes);
  if (p == nullptr) throw std::bad_alloc();
  return AlignedFloats(static_cast<float*>(p));
}

inline std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}
inline std::size_t round_up(std::size_t x, std::size_t m) {
  return (x + m - 1) / m * m;
}

}  // namespace mha::detail
