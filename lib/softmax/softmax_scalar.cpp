// The scalar softmax kernel table (compiled with this ISA's flags only).
#include "softmax/softmax_kernels.hpp"

namespace mha::detail {

constinit const SoftmaxKernels softmax_kernels_scalar = SoftmaxImpl<ScalarLanes>::table();

}  // namespace mha::detail
