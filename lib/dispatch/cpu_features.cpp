#include "dispatch/cpu_features.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/auxv.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#endif
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

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
constexpr std::uint32_t kLeaf7EcxAvx512Vbmi = 1u << 1;
constexpr std::uint32_t kLeaf7EcxAvx512Vnni = 1u << 11;
constexpr std::uint32_t kLeaf7Sub1EaxAvxVnni = 1u << 4;
constexpr std::uint32_t kLeaf7Sub1EaxAvx512Bf16 = 1u << 5;
constexpr std::uint32_t kLeaf7EdxAmxBf16 = 1u << 22;
constexpr std::uint32_t kLeaf7EdxAmxTile = 1u << 24;
constexpr std::uint32_t kLeaf7EdxAmxInt8 = 1u << 25;
// XCR0 state components the OS must save for the registers we use.
constexpr std::uint64_t kXcr0Sse = 1u << 1;
constexpr std::uint64_t kXcr0Avx = 1u << 2;
constexpr std::uint64_t kXcr0Opmask = 1u << 5;
constexpr std::uint64_t kXcr0ZmmHi256 = 1u << 6;
constexpr std::uint64_t kXcr0Hi16Zmm = 1u << 7;
constexpr std::uint64_t kXcr0TileCfg = 1u << 17;
constexpr std::uint64_t kXcr0TileData = 1u << 18;

// Linux (>= 5.16) hands a process the 8 KiB AMX tile state only on request
// (arch/x86/include/uapi/asm/prctl.h; XFEATURE_XTILEDATA is in no Debian
// header). A tile instruction before a granted request kills the process,
// and some VMs advertise AMX in CPUID and XCR0 yet refuse it, so the
// request's success is the last test.
bool os_grants_amx() {
#if defined(__x86_64__) && defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

std::uint64_t xgetbv0() {
  std::uint32_t lo, hi;
  // Encoded by hand: _xgetbv needs -mxsave, and this file must stay baseline.
  __asm__ volatile(".byte 0x0f, 0x01, 0xd0" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<std::uint64_t>(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return f;
  // "GenuineIntel" in EBX, EDX, ECX.
  f.intel = ebx == 0x756e6547u && edx == 0x49656e69u && ecx == 0x6c65746eu;
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
  f.avx512_vbmi = f.avx512 && (ecx & kLeaf7EcxAvx512Vbmi) != 0;
  f.avx512_vnni = f.avx512 && (ecx & kLeaf7EcxAvx512Vnni) != 0;
  // Leaf 7 subleaf 1 exists only where subleaf 0 reports it (EAX = the
  // highest subleaf); the BF16 and VNNI instructions need no OS state beyond
  // their registers'.
  const unsigned max_subleaf = eax;
  const bool amx_bits =
      (edx & (kLeaf7EdxAmxBf16 | kLeaf7EdxAmxTile)) == (kLeaf7EdxAmxBf16 | kLeaf7EdxAmxTile);
  const bool amx_int8_bit = (edx & kLeaf7EdxAmxInt8) != 0;
  if (max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) {
    f.avx512_bf16 = f.avx512 && (eax & kLeaf7Sub1EaxAvx512Bf16) != 0;
    f.avx_vnni = f.avx2_fma && (eax & kLeaf7Sub1EaxAvxVnni) != 0;
  }
  const std::uint64_t tile_state = kXcr0TileCfg | kXcr0TileData;
  f.amx_bf16 = f.avx512_bf16 && amx_bits && (xcr0 & tile_state) == tile_state && os_grants_amx();
  f.amx_int8 = f.amx_bf16 && f.avx512_vnni && amx_int8_bit;
  return f;
}
#else
#if defined(__aarch64__) && defined(__linux__) && !defined(HWCAP2_BF16)
// Linux's arch/arm64/include/uapi/asm/hwcap.h, for older headers.
#define HWCAP2_BF16 (1 << 14)
#endif
#if defined(__aarch64__) && defined(__linux__) && !defined(HWCAP_ASIMDDP)
#define HWCAP_ASIMDDP (1 << 20)
#endif
#if defined(__aarch64__) && defined(__linux__) && !defined(HWCAP2_I8MM)
#define HWCAP2_I8MM (1 << 13)
#endif

CpuFeatures detect() {
  CpuFeatures f;
#if defined(__aarch64__)
  f.neon = true;  // Advanced SIMD is mandatory in AArch64
#if defined(__linux__)
  f.neon_bf16 = (getauxval(AT_HWCAP2) & HWCAP2_BF16) != 0;
  f.neon_dot = (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
  f.neon_i8mm = (getauxval(AT_HWCAP2) & HWCAP2_I8MM) != 0;
#endif
#endif
  return f;
}
#endif

// The size of cpu0's cache of this level holding data ("Data" or
// "Unified"), from sysfs; 0 if there is none.
std::size_t sysfs_cache(int level) {
  // Not std::to_string: it would export libstdc++'s digit table from
  // libmha.so (tests/tools/check_symbols.sh).
  for (char index = '0'; index <= '9'; ++index) {
    const std::string dir = std::string("/sys/devices/system/cpu/cpu0/cache/index") + index;
    std::ifstream level_file(dir + "/level"), type_file(dir + "/type"), size_file(dir + "/size");
    int l = 0;
    std::string type, size;
    if (!(level_file >> l)) return 0;  // no more indices
    if (l != level || !(type_file >> type) || type == "Instruction") continue;
    return size_file >> size ? parse_cache_size(size.c_str()) : 0;
  }
  return 0;
}

std::size_t cache_size(int sysconf_name, int level) {
  const long v = sysconf(sysconf_name);
  return v > 0 ? static_cast<std::size_t>(v) : sysfs_cache(level);
}

CacheSizes detect_caches() {
  CacheSizes c;
  c.l1d = cache_size(_SC_LEVEL1_DCACHE_SIZE, 1);
  c.l2 = cache_size(_SC_LEVEL2_CACHE_SIZE, 2);
  const char* env = std::getenv("MHA_L2_CACHE_BYTES");
  if (env != nullptr && *env != '\0') {
    if (const std::size_t l2 = parse_cache_size(env)) {
      c.l2 = l2;
    } else {
      c.error = std::string("MHA_L2_CACHE_BYTES=") + env +
                " is not a cache size (expected bytes, optionally with K or M, e.g. 2M)";
    }
  }
  return c;
}

}  // namespace

const CpuFeatures& cpu_features() noexcept {
  static const CpuFeatures features = detect();
  return features;
}

const CacheSizes& cpu_caches() noexcept {
  // Unknown sizes (the ISA tables' own blocks) if reading them fails.
  static const CacheSizes caches = []() noexcept {
    try {
      return detect_caches();
    } catch (...) {
      return CacheSizes{};
    }
  }();
  return caches;
}

std::size_t parse_cache_size(const char* text) noexcept {
  if (text == nullptr || *text < '0' || *text > '9') return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text, &end, 10);
  std::size_t scale = 1;
  if (*end == 'K' || *end == 'k') {
    scale = std::size_t{1} << 10;
    ++end;
  } else if (*end == 'M' || *end == 'm') {
    scale = std::size_t{1} << 20;
    ++end;
  }
  // Past 1 TiB it is no cache size (and the product could overflow).
  if (*end != '\0' || v == 0 || v > (1ull << 40) / scale) return 0;
  return static_cast<std::size_t>(v) * scale;
}

}  // namespace mha::detail
