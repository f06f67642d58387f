// The quantized-KV products per ISA (kvquant_<isa>.cpp), on the layout of
// format.hpp, each bit-identical to format.hpp's scalar emulation (which is
// also the scalar ISA's table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mha/isa.hpp>

#include "kvquant/format.hpp"

namespace mha::detail {

struct KvQuantKernels {
  // Arguments as kvq::scores_emulated and kvq::values_emulated.
  using Scores = void (*)(std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                          const kvq::KeyRuns& keys, std::size_t n, float alpha, float* s,
                          std::size_t lds);
  using Values = void (*)(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                          const kvq::KeyRuns& keys, std::size_t n, float beta, float* o,
                          std::size_t ldo);
  Scores scores[2];  // by kvq::Code
  Values values[2];
};

// The table of an ISA (the scalar one where this build lacks it).
const KvQuantKernels& kv_quant_kernels(Isa isa) noexcept;

extern const KvQuantKernels kv_quant_kernels_scalar;
extern const KvQuantKernels kv_quant_kernels_avx2;
extern const KvQuantKernels kv_quant_kernels_avx512;
extern const KvQuantKernels kv_quant_kernels_neon;

}  // namespace mha::detail
