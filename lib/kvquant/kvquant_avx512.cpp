// The avx512 quantized-KV kernel table (compiled with this ISA's flags only):
// 32 zmm registers, 8 query rows per score tile, 6 per P·V tile.
#include "kvquant/kvquant_kernels.hpp"

namespace mha::detail {

constinit const KvQuantKernels kv_quant_kernels_avx512 =
    KvQuantImpl<xsimd::avx512f, 32, 8, 6>::table();

}  // namespace mha::detail
