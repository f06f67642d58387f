// Software prefetch of a byte range, for the streams the hardware
// prefetchers do not follow (K and V read once per step, blocks scattered
// in a paged pool). Internal linkage, as per-ISA objects include it too
// (tests/tools/check_symbols.sh).
#pragma once

#include <cstddef>

namespace mha::detail {
namespace {

// Every 64-byte cache line of [p, p + bytes) asked into the caches; a
// prefetch never faults, so the range may run past what is read.
inline void prefetch_bytes(const void* p, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; i += 64) __builtin_prefetch(static_cast<const char*>(p) + i);
}

}  // namespace
}  // namespace mha::detail
