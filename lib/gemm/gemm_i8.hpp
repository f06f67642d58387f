// The int8 GEMM (W8A8, W4A8): C [m x n] = A·B + bias for an fp32 A whose
// rows are quantized to int8 at run time, one scale per row (per token),
// and int8 or int4 weights B with a scale per column (per output channel)
// or per column and group, multiplied in integers and then scaled:
//   a row: s_a = max|a| / 127 (an fp32 division), q = a / s_a rounded to
//   nearest even and clamped to [-127, 127]; s_a = 0 (an all-zero row, or
//   a scale that underflows) gives zero codes; a NaN or infinite a makes
//   s_a NaN, with zero codes;
//   acc = the exact integer sum of q[p] * code[p][j] (int32: exact while
//   k <= kI8MaxK);
//   C[i][j] = float(acc) * (s_a[i] * s_b[j]) + bias[j], each operation
//   rounded to nearest even in the order written (no FMA), so a row with a
//   NaN scale is NaN.
// Weights in groups of k (32, 64 or 128 rows of op(B), a scale each), or
// int4 codes (-8..7, per column or in groups), or uint4 codes (0..15) with
// a zero point z per column and group (an integer in 0..16, as GPTQ's and
// AWQ's checkpoints hold): acc_g, the exact sum over group g of
// q[p] * code[p][j] (uint4: q[p] * (code[p][j] - z)), then
//   t = 0; t = fma(float(acc_g), s_b[g][j], t) for each g in order;
//   C[i][j] = t * s_a[i] + bias[j] (rounded, then the sum rounded).
// Every kernel set computes the same integers, so every set, at any thread
// count and blocking, gives the bits of the scalar set, which is its
// emulation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mha/isa.hpp>
#include <string_view>
#include <vector>

#include "gemm/kernels.hpp"

namespace mha::detail {

// The largest k whose sums are exact in int32: 127 * 128 * k < 2^31 (codes
// -128 included; vpdpbusd's offset sums wrap, and wrap back).
constexpr std::size_t kI8MaxK = 131072;

struct GemmI8Kernels {
  const char* name;    // for mha_kernel_name(MHA_INT8), e.g. "avx512_vnni"
  std::size_t mr, nr;  // register tile (C block mr x nr); B strips of nr columns
  // int8 codes of a column side by side in a strip: kg = 4 (vpdpbusd,
  // SDOT) or 8 (SMMLA), [ceil(k / kg)][nr][kg] bytes (PackedI8B).
  std::size_t k_group;
  // Activation codes as the kernels read them: a_bytes each (1: a byte,
  // 2: an int16), stored as q + a_offset (128: vpdpbusd's unsigned operand),
  // in rows of round_up(k, 4) codes, the padding the code of 0.
  std::size_t a_bytes;
  int a_offset;
  // C[m x n] for 1 <= m <= mr, 1 <= n <= nr, from kq = ceil(k / 4) groups of
  // four codes: a rows lda bytes apart; b a packed strip (k_group);
  // start[j] the integer each sum starts from (-a_offset times the
  // column's code sum); sa[i], sb[j] the scales; bias: n floats, or null.
  void (*ukernel)(std::size_t kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
                  const std::int32_t* start, const float* sa, const float* sb, const float* bias,
                  float* c, std::size_t ldc, std::size_t m, std::size_t n);
  // One row a [k] quantized as the header says: its codes (round_up(k, 8),
  // as above) and its scale.
  void (*quantize)(std::size_t k, const float* a, void* codes, float* scale);
  // C[m x n] as ukernel, for weights in groups or int4 (I8Strip).
  void (*ukernel_groups)(const struct I8Strip& b, const std::uint8_t* a, std::size_t lda,
                         const float* sa, const float* bias, float* c, std::size_t ldc,
                         std::size_t m, std::size_t n);
};

// A packed strip of weights in groups (PackedI8B): int8 codes as
// GemmI8Kernels::k_group says, or for int4 [ceil(kq / 2)][nr][4] bytes whose
// low nibbles are step 2t's and high nibbles step 2t + 1's, each stored as
// code + 8 (uint4: the code, read as code - 8 against a zero point z - 8);
// group g (group_kq steps of four k, the last one shorter) starts its sums
// at start[g * stride + j] and scales them by scales[g * stride + j]. With
// zeros (uint4), row i's sums also lose zeros[g * stride + j] times the
// int32 at byte sums_at + 4g of the row's codes: the sum of its codes q
// over group g.
struct I8Strip {
  const std::int8_t* codes;
  const std::int32_t* start;
  const float* scales;
  std::size_t kq, group_kq, stride;
  bool int4;
  const std::int32_t* zeros;
  std::size_t sums_at;
};

namespace {  // NOLINT(build/namespaces): each kernel set's object its own copy
// A row of codes' sum of its codes over group g (I8Strip::sums_at).
inline std::int32_t group_sum(const std::uint8_t* row, const I8Strip& b, std::size_t g) {
  std::int32_t s;
  std::memcpy(&s, row + b.sums_at + 4 * g, 4);
  return s;
}
}  // namespace

// The kernel sets; the scalar one is every set's emulation.
extern const GemmI8Kernels gemm_i8_kernels_scalar;
// The scalar set's quantize, which the Arm sets share: compiled for the
// baseline, so that no set's extension flags reach the copy another calls.
void quantize_i8_scalar(std::size_t k, const float* a, void* codes, float* scale);
// The same, codes stored as q + a_offset (the amx_emulated set's 128).
void quantize_i8_scalar_offset(std::size_t k, const float* a, int a_offset, void* codes,
                               float* scale);
extern const GemmI8Kernels gemm_i8_kernels_avx2;
extern const GemmI8Kernels gemm_i8_kernels_avx512_vnni;
// AVX-VNNI's vpdpbusd on ymm, and the same kernels in AVX512_VNNI's EVEX
// encoding (i8_vnni_ymm.hpp; listed by gemm_i8_kernel_sets, never
// dispatched to).
extern const GemmI8Kernels gemm_i8_kernels_avx_vnni;
extern const GemmI8Kernels gemm_i8_kernels_avx_vnni_evex;
// AMX-INT8's tdpbusd on the avx512_vnni set's operands (i8_amx.hpp), and
// its software tiles on any CPU (listed by gemm_i8_kernel_sets, never
// dispatched to).
extern const GemmI8Kernels gemm_i8_kernels_amx_int8;
extern const GemmI8Kernels gemm_i8_kernels_amx_emulated;
extern const GemmI8Kernels gemm_i8_kernels_neon_dot;
extern const GemmI8Kernels gemm_i8_kernels_neon_i8mm;

// The set MHA_I8_KERNEL names where it is set (read on each call; a name
// that gemm_i8_kernels_named does not know throws MHA_UNSUPPORTED), else
// the fastest set this CPU runs under `isa` (the scalar set where the ISA
// has none).
const GemmI8Kernels& gemm_i8_kernels(Isa isa);
// Every set of this build that this CPU runs, the scalar one included
// (listed once per process).
const std::vector<const GemmI8Kernels*>& gemm_i8_kernel_sets();
// The set of gemm_i8_kernel_sets with this name, or null.
const GemmI8Kernels* gemm_i8_kernels_named(std::string_view name);

// The group sums I8Strip's zeros take: sums[g] = the sum of the row's codes
// q at k in [g * group_k, (g + 1) * group_k), of codes stored as the set's
// quantize stores them.
void i8_group_sums(const GemmI8Kernels& g, std::size_t k, std::size_t group_k,
                   const std::uint8_t* codes, std::int32_t* sums);

// The header's rules, for the sets' quantize: a row's scale from its
// largest magnitude (finite: no NaN or infinity in it), and codes p0 .. k of
// a row scaled by s (s > 0; else zero codes), then the padding up to
// round_up(k, 8), a_bytes each plus a_offset.
float i8_row_scale(float amax, bool finite);
void quantize_i8_from(std::size_t a_bytes, int a_offset, std::size_t p0, std::size_t k,
                      const float* a, float s, void* codes);

// op(B) [k x n] = wᵀ packed for one kernel set: strips of nr columns, strip s
// at codes + s*strip_stride bytes, laid out [ceil(k / kg)][nr][kg] (kg =
// k_group: kg k of a column side by side; an even number of four-k steps,
// zero past k and n), or as I8Strip says for int4 and uint4;
// start, scales and (uint4) zeros per group and column, [groups][stride],
// zero past n.
struct PackedI8B {
  const GemmI8Kernels* g = nullptr;
  const std::int8_t* codes = nullptr;
  const std::int32_t* start = nullptr;
  const float* scales = nullptr;
  const std::int32_t* zeros = nullptr;  // uint4's z - 8; null: none
  const std::uint32_t* perm = nullptr;  // as PackedQuantB::perm
  std::size_t k = 0, n = 0, strip_stride = 0;
  std::size_t group_kq = 0, stride = 0;  // steps of four k per group; floats between groups
  bool int4 = false, grouped = false;    // grouped: ukernel_groups' arithmetic

  // Columns [n0, n1); n0 a multiple of nr.
  PackedI8B cols(std::size_t n0, std::size_t n1) const;
};

// Bytes pack_i8_b writes for k x n, checked (messages name `what`); k <=
// kI8MaxK; group 0 (one per column), 32, 64 or 128.
std::size_t packed_i8_b_bytes(const GemmI8Kernels& g, std::size_t k, std::size_t n,
                              std::size_t group, QuantCodes type, const char* what);
// Packs codes w [n x k] of `type` (row j, ldw apart, is column j of op(B);
// int4 codes in -8..7, uint4 in 0..15) with scales and, for uint4, zero
// points (integers in 0..16), each [n x groups], into dst
// (packed_i8_b_bytes, 64-byte aligned).
PackedI8B pack_i8_b(const GemmI8Kernels& g, std::size_t k, std::size_t n, std::size_t group,
                    QuantCodes type, const std::int8_t* w, std::size_t ldw, const float* scales,
                    const float* zeros, void* dst);

// C [m x n] = A·B + bias (bias: n floats, or null) for A [m x k] fp32
// row-major, quantized into this thread's ScratchSlot::kGemmI8A; threaded.
void gemm_i8(std::size_t m, const float* a, std::size_t lda, const PackedI8B& b, float* c,
             std::size_t ldc, const float* bias = nullptr);
// Grows the calling thread's scratch to what gemm_i8 over m rows takes;
// throws std::bad_alloc.
void reserve_gemm_i8(std::size_t m, const PackedI8B& b);

}  // namespace mha::detail
