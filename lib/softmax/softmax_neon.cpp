// The neon softmax kernel table (compiled with this ISA's flags only).
#include "softmax/softmax_kernels.hpp"

namespace mha::detail {

constinit const SoftmaxKernels softmax_kernels_neon =
    SoftmaxImpl<simd::Lanes<xsimd::neon64>>::table();

}  // namespace mha::detail
