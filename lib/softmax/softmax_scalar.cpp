// The scalar softmax kernel table (compiled with this ISA's flags only).
#include "softmax/softmax_kernels.hpp"

namespace mha::detail {

constinit const SoftmaxKernels softmax_kernels_scalar =
    SoftmaxImpl<simd::Lanes<simd::scalar_arch>>::table();

}  // namespace mha::detail
