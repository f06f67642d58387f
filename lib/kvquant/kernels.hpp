// The quantized-KV products per ISA (kvquant_<isa>.cpp), on the layout of
// format.hpp, each bit-identical to format.hpp's scalar emulation (which is
// also the scalar ISA's table).
#pragma once

#include <cstddef>
#include <cstdint>
#include <mha/isa.hpp>

#include "kvquant/format.hpp"

namespace mha::detail {

struct GemmBf16Kernels;

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

// The products on bf16 dot products (format.hpp's scores_dot_emulated and
// values_dot_emulated, bit for bit): q as bf16 pairs, dot_pairs(d) per row
// from q + r * ldq; values() rounds p' into pbuf, dot_pbuf_words of it.
struct KvQuantDotKernels {
  const char* name;  // the instructions, for kernel names and tests
  using Scores = void (*)(std::size_t rows, std::size_t d, const std::uint32_t* q, std::size_t ldq,
                          const kvq::KeyRuns& keys, std::size_t n, float alpha, float* s,
                          std::size_t lds);
  using Values = void (*)(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                          const kvq::KeyRuns& keys, std::size_t n, float beta, float* o,
                          std::size_t ldo, std::uint16_t* pbuf);
  Scores scores[2];  // by kvq::Code
  Values values[2];
};
inline std::size_t dot_pbuf_words(std::size_t rows, std::size_t n, std::size_t d) {
  return rows * kvq::groups(d) * kvq::dot_p_stride(n);
}

// The dot table for a bf16 object on `g16`, or null (its products then stay
// fp32): vdpbf16ps's (avx512_vbmi_bf16) where g16 is avx512_bf16 and the
// CPU has AVX512_VBMI for the code tables.
const KvQuantDotKernels* kv_quant_dot_kernels(const GemmBf16Kernels& g16) noexcept;
extern const KvQuantDotKernels kv_quant_dot_kernels_avx512_vbmi_bf16;

}  // namespace mha::detail
