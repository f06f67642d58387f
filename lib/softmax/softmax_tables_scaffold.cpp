// Scaffolding: empty tables so the tree links until the kernels land.
#include "softmax/kernels.hpp"
namespace mha::detail {
const SoftmaxKernels softmax_kernels_scalar{}, softmax_kernels_avx2{}, softmax_kernels_avx512{},
    softmax_kernels_neon{};
}
