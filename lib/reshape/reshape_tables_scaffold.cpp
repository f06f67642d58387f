// Scaffolding: empty tables so the tree links until the kernels land.
#include "reshape/kernels.hpp"
namespace mha::detail {
const ReshapeKernels reshape_kernels_scalar{}, reshape_kernels_avx2{}, reshape_kernels_avx512{},
    reshape_kernels_neon{};
}
