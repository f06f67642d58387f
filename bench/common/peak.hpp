// Per-ISA FMA throughput loops, one translation unit each (peak_<isa>.cpp, built
// with that ISA's flags by mha_isa_sources). Each runs `iterations` steps of
// independent multiply-add chains on one thread and returns the fp32 flops it
// performed; `sink` receives a value depending on every chain, so the compiler
// cannot drop any of them.
#pragma once

#include <cstdint>

namespace mha::bench::detail {

namespace scalar {
double fma_loop(std::uint64_t iterations, float* sink);
}
namespace avx2 {
double fma_loop(std::uint64_t iterations, float* sink);
}
namespace avx512 {
double fma_loop(std::uint64_t iterations, float* sink);
}
// vdpbf16ps chains instead (flops: 2 per bf16 multiply-add); only in builds
// with AVX-512, to be run on a CPU with AVX512_BF16.
namespace avx512_bf16 {
double dpbf16_loop(std::uint64_t iterations, float* sink);
}
// tdpbf16ps on resident tiles (flops: 2 per bf16 multiply-add); only in
// builds with AVX-512, to be run where the library picked amx_bf16.
namespace amx_bf16 {
double tdpbf16_loop(std::uint64_t iterations, float* sink);
}
namespace neon {
double fma_loop(std::uint64_t iterations, float* sink);
}

}  // namespace mha::bench::detail
