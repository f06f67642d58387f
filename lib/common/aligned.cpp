#include "common/aligned.hpp"

#include <unistd.h>

#include "common/checked.hpp"

namespace mha::detail {

bool exceeds_physical_memory(std::size_t bytes) noexcept {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return false;  // unknown: let the allocator decide
  std::size_t physical;
  if (!mul_ok(static_cast<std::size_t>(pages), static_cast<std::size_t>(page), physical)) {
    return false;
  }
  return bytes > physical;
}

AlignedFloats alloc_floats(std::size_t n) {
  std::size_t bytes;
  if (!mul_ok(n == 0 ? 1 : n, sizeof(float), bytes) || !round_up_ok(bytes, 64, bytes) ||
      bytes > kMaxObjectBytes || exceeds_physical_memory(bytes)) {
    throw std::bad_alloc();
  }
  return AlignedFloats(static_cast<float*>(::operator new (bytes, std::align_val_t{64})));
}

}  // namespace mha::detail
