// Software prefetch of a byte range, for the streams the hardware
// prefetchers do not follow (K and V read once per step, blocks scattered
// in a paged pool). Internal linkage, as per-ISA objects include it too
// (tests/tools/check_symbols.sh).
#pragma once

#include <cstddef>

namespace mha::detail {
namespace {

// Every 64-byte cache line of [p, p + bytes) asked into L2 (prefetcht1 on
// x86, PLDL2KEEP on AArch64), not L1: on Zen 4 that cut b16 kv4096
// decode (1 thread) from 42.0-47.6 to 31.4-32.3 ms in fp32 blocks of 16,
// 19.2-20.6 to 15.3-16.8 in bf16 ones, and a contiguous int8 cache from
// 14.3-14.6 to 12.6-13.0.
// A prefetch never faults, so the range may run past what is read.
// The empty volatile asm is an effect GCC must keep: to GCC 12 a prefetch
// is none, and it deleted whole calls of a function made of them
// (a shared helper of the paged tiles lost every one of its prefetches).
inline void prefetch_bytes(const void* p, std::size_t bytes) noexcept {
  for (std::size_t i = 0; i < bytes; i += 64)
    __builtin_prefetch(static_cast<const char*>(p) + i, 0, 2);
  asm volatile("");
}

}  // namespace
}  // namespace mha::detail
