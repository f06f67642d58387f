// CPU feature detection, done by hand: xsimd 8.1's available_architectures()
// reads CPUID without XGETBV, so it would offer AVX-512 on an OS that does not
// save the ZMM state (fixed upstream only in xsimd 13.1).
#pragma once

#include <cstddef>
#include <string>

namespace mha::detail {

struct CpuFeatures {
  bool avx2_fma = false;     // AVX2 and FMA3, with the OS saving YMM state
  bool avx512 = false;       // AVX-512 F/DQ/BW/VL, with the OS saving ZMM/opmask state
  bool avx512_bf16 = false;  // avx512 plus AVX512_BF16 (vdpbf16ps, vcvtne2ps2bf16)
  bool avx512_vbmi = false;  // avx512 plus AVX512_VBMI (vpermb, vpermi2b)
  bool avx512_vnni = false;  // avx512 plus AVX512_VNNI (vpdpbusd)
  bool avx_vnni = false;     // avx2_fma plus AVX-VNNI (vpdpbusd in VEX, on ymm)
  // avx512_bf16 plus AMX-TILE and AMX-BF16, with the OS saving the tile
  // state (XCR0) and granting this process its use (arch_prctl).
  bool amx_bf16 = false;
  // amx_bf16 plus AMX-INT8 (tdpbusd) and AVX512_VNNI (every AMX CPU has
  // both; the int8 set hands vpdpbusd its blocks of few rows).
  bool amx_int8 = false;
  bool intel = false;      // CPUID vendor "GenuineIntel"
  bool neon = false;       // Advanced SIMD (always true on aarch64)
  bool neon_bf16 = false;  // neon plus FEAT_BF16 (BFDOT, BFCVTN)
  bool neon_dot = false;   // neon plus FEAT_DotProd (SDOT, UDOT)
  bool neon_i8mm = false;  // neon plus FEAT_I8MM (SMMLA, UMMLA, USMMLA)
};

// Detected once; cheap afterwards.
const CpuFeatures& cpu_features() noexcept;

// One core's data caches, in bytes; 0 where unknown. From sysconf (glibc
// reads CPUID leaf 4 or 0x8000001D on x86), else from
// /sys/devices/system/cpu/cpu0/cache (aarch64; some VMs expose neither).
// MHA_L2_CACHE_BYTES (a size: "2097152", "2048K", "2M") replaces the L2
// size, for VMs that misreport it; a value that is not a size leaves the
// caches as detected and sets `error`, which dispatch reports as it does a
// bad MHA_ISA.
struct CacheSizes {
  std::size_t l1d = 0;
  std::size_t l2 = 0;
  std::string error;
};

// Detected once; cheap afterwards.
const CacheSizes& cpu_caches() noexcept;

// "48K", "2M", "1048576" -> bytes; 0 for anything else (or an empty string).
std::size_t parse_cache_size(const char* text) noexcept;

}  // namespace mha::detail
