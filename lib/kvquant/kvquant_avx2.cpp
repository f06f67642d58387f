// The avx2 quantized-KV kernel table (compiled with this ISA's flags only):
// 16 ymm registers, 4 query rows per score tile, 3 per P·V tile.
#include "kvquant/kvquant_kernels.hpp"

namespace mha::detail {

constinit const KvQuantKernels kv_quant_kernels_avx2 = KvQuantImpl<simd::Avx2, 16, 4, 3>::table();

}  // namespace mha::detail
