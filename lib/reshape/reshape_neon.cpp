// The neon reshape kernel table (compiled with this ISA's flags only).
#include "reshape/reshape_kernels.hpp"

namespace mha::detail {

constinit const ReshapeKernels reshape_kernels_neon =
    ReshapeImpl<simd::Lanes<xsimd::neon64>>::table();

}  // namespace mha::detail
