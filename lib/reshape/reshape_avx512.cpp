// The avx512 reshape kernel table (compiled with this ISA's flags only).
#include "reshape/reshape_kernels.hpp"

namespace mha::detail {

constinit const ReshapeKernels reshape_kernels_avx512 =
    ReshapeImpl<simd::Lanes<xsimd::avx512f>>::table();

}  // namespace mha::detail
