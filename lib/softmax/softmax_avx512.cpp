// The avx512 softmax kernel table (compiled with this ISA's flags only).
#include "softmax/softmax_kernels.hpp"

namespace mha::detail {

constinit const SoftmaxKernels softmax_kernels_avx512 =
    SoftmaxImpl<simd::Lanes<xsimd::avx512f>>::table();

}  // namespace mha::detail
