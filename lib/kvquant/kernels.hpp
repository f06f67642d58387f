// The quantized-KV products per ISA (kvquant_<isa>.cpp), on the layout of
// format.hpp, each bit-identical to format.hpp's scalar emulation (which is
// also the scalar ISA's table).
#pragma once

#include <algorithm>
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
  // kvq::quantize_group's bits (quantize_lanes.hpp on the vector ISAs).
  kvq::Quantize quantize;
  // kvq::strips_from_rows's bytes (a shared entry's K strips, rebuilt for
  // every score chunk).
  void (*strips_from_rows)(std::size_t d, const kvq::KeyRuns& keys, std::size_t n,
                           std::uint8_t* strips);
};

// The table of an ISA (the scalar one where this build lacks it).
const KvQuantKernels& kv_quant_kernels(Isa isa) noexcept;

extern const KvQuantKernels kv_quant_kernels_scalar;
extern const KvQuantKernels kv_quant_kernels_avx2;
extern const KvQuantKernels kv_quant_kernels_avx512;
extern const KvQuantKernels kv_quant_kernels_neon;

// The products on bf16 dot products (format.hpp's scores_dot_emulated and
// values_dot_emulated, bit for bit): q as bf16 pairs, dot_pairs(d) per row
// from q + r * ldq. A call of more than convert_rows rows converts its
// codes to bf16 pairs once, into `work` (scores, dot_score_work_words) or
// pbuf (values, dot_pbuf_words, beside V's widened scales and p'), rather
// than once per register tile of rows; a call of fewer converts them per
// tile and uses neither. The same pairs in the same order, so the same
// bits.
struct KvQuantDotKernels {
  const char* name;  // the instructions, for kernel names and tests
  std::size_t convert_rows;
  using Scores = void (*)(std::size_t rows, std::size_t d, const std::uint32_t* q, std::size_t ldq,
                          const kvq::KeyRuns& keys, std::size_t n, float alpha, float* s,
                          std::size_t lds, std::uint32_t* work);
  using Values = void (*)(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                          const kvq::KeyRuns& keys, std::size_t n, float beta, float* o,
                          std::size_t ldo, std::uint16_t* pbuf);
  Scores scores[2];  // by kvq::Code
  Values values[2];
};
// The converted keys a call holds at a time: kDotConvertStrips K strips (a
// group's 16 fp32 scales and 16 channel pairs of 16 keys each), and the
// key pairs of kDotConvertGroups groups of V (32 channel pairs each), plus
// a cache line to align them.
inline constexpr std::size_t kDotConvertStrips = 4, kDotConvertGroups = 4;
inline constexpr std::size_t kDotStripGroupWords = kvq::kStrip * (1 + kvq::kGroup / 2);
inline std::size_t dot_score_work_words(const KvQuantDotKernels& k, std::size_t rows,
                                        std::size_t d) {
  return rows <= k.convert_rows ? 0 : kDotConvertStrips * kvq::groups(d) * kDotStripGroupWords + 16;
}
// Never less for more rows: a task's pbuf, sized for its most rows, also
// serves its calls of fewer (none up to convert_rows rows).
inline std::size_t dot_pbuf_words(const KvQuantDotKernels& k, std::size_t rows, std::size_t n,
                                  std::size_t d) {
  if (rows <= k.convert_rows) return 0;
  const std::size_t np = kvq::dot_p_stride(n), G = kvq::groups(d);
  const std::size_t scales = 2 * G * np + 32;  // fp32, from a cache line
  const std::size_t ng = std::min(G, kDotConvertGroups);
  return scales + k.convert_rows * G * np + np * ng * kvq::kGroup + 32;
}
// The dot table for a bf16 object on `g16`, or null (its products then stay
// fp32): vdpbf16ps's (avx512_vbmi_bf16) where g16 is avx512_bf16 and the
// CPU has AVX512_VBMI for the code tables.
const KvQuantDotKernels* kv_quant_dot_kernels(const GemmBf16Kernels& g16) noexcept;
extern const KvQuantDotKernels kv_quant_dot_kernels_avx512_vbmi_bf16;

}  // namespace mha::detail
