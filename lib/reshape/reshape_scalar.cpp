// The scalar reshape kernel table (compiled with this ISA's flags only).
#include "reshape/reshape_kernels.hpp"

namespace mha::detail {

constinit const ReshapeKernels reshape_kernels_scalar =
    ReshapeImpl<simd::Lanes<simd::scalar_arch>>::table();

}  // namespace mha::detail
