// The avx2 softmax kernel table (compiled with this ISA's flags only).
#include "softmax/softmax_kernels.hpp"

namespace mha::detail {

constinit const SoftmaxKernels softmax_kernels_avx2 =
    SoftmaxImpl<simd::Lanes<xsimd::fma3<xsimd::avx2>>>::table();

}  // namespace mha::detail
