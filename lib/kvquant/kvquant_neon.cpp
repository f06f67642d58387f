// The neon quantized-KV kernel table: 32 q registers, 4 query rows per score
// tile, 3 per P·V tile.
#include "kvquant/kvquant_kernels.hpp"

namespace mha::detail {

constinit const KvQuantKernels kv_quant_kernels_neon =
    KvQuantImpl<xsimd::neon64, 32, 4, 3>::table();

}  // namespace mha::detail
