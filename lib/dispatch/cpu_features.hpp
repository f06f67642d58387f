// CPU feature detection, done by hand: xsimd 8.1's available_architectures()
// reads CPUID without XGETBV, so it would offer AVX-512 on an OS that does not
// save the ZMM state (fixed upstream only in xsimd 13.1).
#pragma once

namespace mha::detail {

struct CpuFeatures {
  bool avx2_fma = false;  // AVX2 and FMA3, with the OS saving YMM state
  bool avx512 = false;    // AVX-512 F/DQ/BW/VL, with the OS saving ZMM/opmask state
  bool neon = false;      // Advanced SIMD (always true on aarch64)
};

// Detected once; cheap afterwards.
const CpuFeatures& cpu_features() noexcept;

}  // namespace mha::detail
