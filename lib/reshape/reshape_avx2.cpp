// The avx2 reshape kernel table (compiled with this ISA's flags only).
#include "reshape/reshape_kernels.hpp"

namespace mha::detail {

constinit const ReshapeKernels reshape_kernels_avx2 =
    ReshapeImpl<simd::Lanes<xsimd::fma3<xsimd::avx2>>>::table();

}  // namespace mha::detail
