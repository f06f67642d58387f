// Scaffolding: empty tables so the tree links until the kernels land.
#include "gemm/kernels.hpp"
namespace mha::detail {
const GemmKernels gemm_kernels_scalar{}, gemm_kernels_avx2{}, gemm_kernels_avx512{},
    gemm_kernels_neon{};
}
