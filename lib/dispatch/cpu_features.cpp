#include "dispatch/cpu_features.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <cstdint>

namespace mha::detail {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// Named CPUID bits (Intel SDM vol. 2A, table 3-8 and 3-10).
constexpr std::uint32_t kLeaf1EcxFma = 1u << 12;
constexpr std::uint32_t kLeaf1EcxOsxsave = 1u << 27;
constexpr std::uint32_t kLeaf1EcxAvx = 1u << 28;
constexpr std::uint32_t kLeaf7EbxAvx2 = 1u << 5;
constexpr std::uint32_t kLeaf7EbxAvx512F = 1u << 16;
constexpr std::uint32_t kLeaf7EbxAvx512DQ = 1u << 17;
constexpr std::uint32_t kLeaf7EbxAvx512BW = 1u << 30;
constexpr std::uint32_t kLeaf7EbxAvx512VL = 1u << 31;
// XCR0 state components the OS must save for the registers we use.
constexpr std::uint64_t kXcr0Sse = 1u << 1;
constexpr std::uint64_t kXcr0Avx = 1u << 2;
constexpr std::uint64_t kXcr0Opmask = 1u << 5;
constexpr std::uint64_t kXcr0ZmmHi256 = 1u << 6;
constexpr std::uint64_t kXcr0Hi16Zmm = 1u << 7;

std::uint64_t xgetbv0() {
  std::uint32_t lo, hi;
  // Encoded by hand: _xgetbv needs -mxsave, and this file must stay baseline.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool fma = ecx & kLeaf1EcxFma;
  if (!(ecx & kLeaf1EcxOsxsave) || !(ecx & kLeaf1EcxAvx)) return f;
  const std::uint64_t xcr0 = xgetbv0();
  const bool os_ymm = (xcr0 & (kXcr0Sse | kXcr0Avx)) == (kXcr0Sse | kXcr0Avx);
  const std::uint64_t zmm_state = kXcr0Opmask | kXcr0ZmmHi256 | kXcr0Hi16Zmm;
  const bool os_zmm = os_ymm && (xcr0 & zmm_state) == zmm_state;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
  f.avx2_fma = os_ymm && fma && (ebx & kLeaf7EbxAvx2);
  const std::uint32_t avx512_bits =
      kLeaf7EbxAvx512F | kLeaf7EbxAvx512DQ | kLeaf7EbxAvx512BW | kLeaf7EbxAvx512VL;
  f.avx512 = f.avx2_fma && os_zmm && (ebx & avx512_bits) == avx512_bits;
  return f;
}
#else
CpuFeatures detect() {
  CpuFeatures f;
#if defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is mandatory in AArch64
#endif
  return f;
}
#endif

}  // namespace

const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = detect();
  return features;
}

}  // namespace mha::detail
