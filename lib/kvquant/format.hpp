// The quantized KV formats (mha_kv_dtype MHA_KV_INT8, MHA_KV_FP8_E4M3): codes,
// scales, the head-block layout both products read, and the scalar codecs
// every kernel agrees with bit for bit.
//
// Granularity: one scale per (token, kv head, group of 32 channels), stored
// in bf16: for E4M3 max|x| / 448 rounded up (nothing saturates); for int8
// the bf16 value near max|x| / 127 with the least squared error of the
// group (quantize_group). Groups of 32 are llama.cpp q8_0's blocks; bf16
// keeps fp32's range (fp16 would overflow above 65504·127) and costs 2 bytes
// per 32 channels.
//
// Layout of one head-block (capacity keys of one kv head):
//   K: strips of kStrip keys, the keys in lanes, so Q·Kᵀ is one FMA chain
//      per score over the channels in order, at any vector width:
//        [group g][lane] bf16 scales, then [channel c][lane] codes.
//   V: one row per key, channels in lanes for P·V:
//        [group g] bf16 scales, then groups·32 codes (channels past
//        head_dim hold code 0).
// A non-finite value in a group makes the group's scale NaN (codes 0): the
// dequantized group is NaN, which the non-finite rule then follows.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/blocks.hpp"

namespace mha::detail::kvq {

enum class Code : unsigned char { int8, e4m3 };

inline constexpr std::size_t kStrip = 16;  // keys per K strip
inline constexpr std::size_t kGroup = 32;  // channels per scale

inline std::size_t groups(std::size_t d) {
  return (d + kGroup - 1) / kGroup;
}
// Bytes of one K strip and of one V row.
inline std::size_t key_strip_bytes(std::size_t d) {
  return kStrip * (2 * groups(d) + d);
}
inline std::size_t value_row_bytes(std::size_t d) {
  return groups(d) * (2 + kGroup);
}

// The largest code's value.
inline constexpr float code_max(Code c) {
  return c == Code::int8 ? 127.0f : 448.0f;
}

// The fp32 value of a bf16 bit pattern (exact); inline, as the kernels
// read a V row's scale with it.
inline float bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// The bf16 bits of a scale stored at p (any alignment).
inline std::uint16_t scale_at(const std::uint8_t* p) {
  std::uint16_t bits;
  std::memcpy(&bits, p, sizeof bits);
  return bits;
}
// A code's value, before its scale (exact). E4M3 codes decode as
// sign · bits(code << 20) · 2^120, the kernels' conversion, so 0x7F and 0xFF
// (never written) read as ±480.
float code_value(Code c, std::uint8_t code);

// Quantizes x[0, n) (n <= kGroup) into codes[0, n) (x / scale rounded to
// nearest even, saturating); returns the group's bf16 scale bits: E4M3,
// max|x| / 448 rounded up; int8, of max|x| / 127 rounded up and the 6 bf16
// values from just below max|x| / 128 up, the one whose codes have the least
// squared error (the smallest on a tie).
std::uint16_t quantize_group(Code c, const float* x, std::size_t n, std::uint8_t* codes);
using Quantize = std::uint16_t (*)(Code, const float*, std::size_t, std::uint8_t*);
// The scale of a group with a non-finite value.
inline constexpr std::uint16_t kNanScale = 0x7FC0;
// quantize_group's scale choice, for the kernels that vectorize it
// (quantize_lanes.hpp): group_scales gives the scales it tries for the
// group x[0, n), in its order, the rounded-up one first (one alone for
// E4M3 or an all-zero group; none for a group with a non-finite value,
// whose scale is kNanScale and codes 0); least_error picks the one it
// keeps, given each one's squared error, summed in channel order.
inline constexpr std::size_t kMaxScales = 8;
std::size_t group_scales(Code c, const float* x, std::size_t n, std::uint16_t (&bits)[kMaxScales]);
std::size_t least_error(const double* sse, const std::uint16_t* bits, std::size_t count);
// E4M3 of y (|y| <= 448 after scaling; larger saturates), nearest even.
std::uint8_t e4m3_code(double y);

// One key of a head-block: its head_dim values quantized (by `quantize`,
// quantize_group or a kernel table's, with its bits) into K lane j of its
// strip and V row j (the first key of a strip zeroes the strip), and read
// back dequantized; clear_key makes key j read as zero.
void put_key(Code c, std::size_t d, std::uint8_t* k_block, std::uint8_t* v_block, std::size_t j,
             const float* key, const float* value, Quantize quantize = &quantize_group);
void get_key(Code c, std::size_t d, const std::uint8_t* k_block, const std::uint8_t* v_block,
             std::size_t j, float* key, float* value);
void clear_key(std::size_t d, std::uint8_t* k_block, std::uint8_t* v_block, std::size_t j);
// A key's V row alone, as put_key writes it, and clear_key's: a store whose
// K is its V (MLA's latent rows) keeps the rows once and builds K strips
// from them for the scores (strips_from_rows).
void put_value(Code c, std::size_t d, std::uint8_t* v_block, std::size_t j, const float* value,
               Quantize quantize = &quantize_group);
void clear_value(std::size_t d, std::uint8_t* v_block, std::size_t j);
// Keys [j, j + n) of one head-block become keys [to, to + n) of another,
// byte for byte; both runs inside one K strip (lanes past them untouched).
void copy_keys(std::size_t d, const std::uint8_t* k_block, const std::uint8_t* v_block,
               std::size_t j, std::size_t n, std::uint8_t* k_to, std::uint8_t* v_to,
               std::size_t to);
// The V rows of keys [j, j + n) alone, likewise.
void copy_values(std::size_t d, const std::uint8_t* v_block, std::size_t j, std::size_t n,
                 std::uint8_t* v_to, std::size_t to);
// Channel i of the key in lane `lane` of a K strip, and of a V row,
// dequantized (code · scale, exact).
float key_element(Code c, std::size_t d, const std::uint8_t* strip, std::size_t lane,
                  std::size_t i);
float value_element(Code c, std::size_t d, const std::uint8_t* row, std::size_t i);

// Where the keys of a product lie: key i (from the product's first) is key
// j0 + i of a sequence of head-blocks, `k` and `v` holding its first; a
// paged cache's keys run on in other blocks of `block_keys` keys (a
// multiple of kStrip), block b of them `(blocks[b] - blocks[0])` head-blocks
// of k_stride (v_stride) bytes from the first. blocks null: one head-block.
// The kernels read K a strip and V a strip's rows at a time, so a product
// over keys that span blocks reads them in place.
struct KeyRuns {
  const std::uint8_t* k = nullptr;
  const std::uint8_t* v = nullptr;
  std::size_t j0 = 0;
  const std::size_t* blocks = nullptr;
  std::size_t block_keys = 0, k_stride = 0, v_stride = 0;
  // Keys after the product's that the same addressing reaches (the
  // sequence's next tile), which the kernels may prefetch.
  std::size_t ahead = 0;

  // The K strip and the V row of key i (of the product's keys).
  const std::uint8_t* strip(std::size_t i, std::size_t d) const {
    const std::size_t j = j0 + i;
    if (blocks == nullptr) return k + j / kStrip * key_strip_bytes(d);
    return k + block_offset(blocks, j, block_keys, k_stride) +
           j % block_keys / kStrip * key_strip_bytes(d);
  }
  const std::uint8_t* row(std::size_t i, std::size_t d) const {
    const std::size_t j = j0 + i;
    if (blocks == nullptr) return v + j * value_row_bytes(d);
    return v + block_offset(blocks, j, block_keys, v_stride) + j % block_keys * value_row_bytes(d);
  }
};

// The K strips of keys [0, n) of `keys` (j0 on a strip) whose K is their V
// row: ceil(n / kStrip) strips of key_strip_bytes(d) from `strips`, byte
// for byte what put_key writes for key == value (the same groups give the
// same codes and scales, transposed), lanes past n zero.
void strips_from_rows(std::size_t d, const KeyRuns& keys, std::size_t n, std::uint8_t* strips);

// The products on the layout above, as every kernel computes them (the
// scalar emulation the kernels are tested against):
//   s[r][j] = alpha · acc, acc = fma(q[r][c], k[j][c], acc) for c = 0 .. d-1
//             from acc = 0, k the dequantized key (code · scale, exact);
//   o[r][c] = beta == 0 ? acc : fma(beta, o[r][c], acc),
//             acc = fma(p[r][j], v[j][c], acc) for j = 0 .. n-1 from 0.
// over the n keys of `keys` (j0 on a strip). They allocate nothing: they
// are the scalar ISA's kernels.
void scores_emulated(Code c, std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                     const KeyRuns& keys, std::size_t n, float alpha, float* s, std::size_t lds);
void values_emulated(Code c, std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                     const KeyRuns& keys, std::size_t n, float beta, float* o, std::size_t ldo);

// The products on bf16 dot products (kernels.hpp, KvQuantDotKernels), for
// objects whose Q and P are bf16 anyway: the codes meet bf16 operands in
// vdpbf16ps, at twice the fp32 FMA's multiply-adds, and the scales stay out
// of the bf16 operands (code · scale would round). Each code reads as its
// value in bf16, exact (an int8 code or an E4M3 value has at most 7
// significant bits), from its sign bit and a table of the 128 magnitudes
// (|code| for int8), so int8's 0x80 (never written) reads as -0 there.
constexpr std::uint16_t dot_magnitude_bf16(Code c, unsigned m) {
  // m · 2^shift for m < 256, in bf16 bits (exact: m has at most 8 bits).
  const auto bf16_of = [](unsigned v, int shift) -> std::uint16_t {
    if (v == 0) return 0;
    int e = 7;
    while ((v >> e) == 0) --e;
    return static_cast<std::uint16_t>(((127 + e + shift) << 7) | ((v << (7 - e)) & 0x7F));
  };
  if (c == Code::int8) return bf16_of(m, 0);
  const unsigned e = m >> 3, mant = m & 7;
  return e == 0 ? bf16_of(mant, -9) : bf16_of(8 + mant, static_cast<int>(e) - 10);
}
constexpr std::uint16_t dot_code_bf16(Code c, std::uint8_t code) {
  const unsigned m = c == Code::int8 && (code & 0x80) != 0 ? (256u - code) & 0x7F : code & 0x7Fu;
  return static_cast<std::uint16_t>(((code & 0x80u) << 8) | dot_magnitude_bf16(c, m));
}
// Q's bf16 pairs per row for those products: whole groups, zero past d.
inline std::size_t dot_pairs(std::size_t d) {
  return groups(d) * kGroup / 2;
}
// p' words per row and group that the dot tables keep (whole strips).
inline std::size_t dot_p_stride(std::size_t n) {
  return (n + kStrip - 1) / kStrip * kStrip;
}
// Their emulation (the reference of every KvQuantDotKernels table), on
// vdpbf16ps's steps (emulated_vdpbf16ps_pair):
//   s[r][j] = alpha · t, t = fma(a_g, scale(j, g), t) for each group g in
//             order from t = 0, a_g the dot chain from 0 over the group's
//             channel pairs (q[r] pair, the pair of key j's codes), in
//             whole quads of channels (codes and q zero past d);
//   o[r][c] = beta == 0 ? a : fma(beta, o[r][c], a), a the dot chain from
//             0 over key pairs (j, j+1): (p'(r, j), p'(r, j+1)) against
//             (code(j, c), code(j+1, c)), p'(r, j) = bf16(p[r][j] ·
//             scale(j, group of c)) rounded as vcvtneps2bf16, key n of an
//             odd n a zero pair half.
// q: row r's dot_pairs(d) pairs from q + r * ldq (pairs), bf16 rounded.
void scores_dot_emulated(Code c, std::size_t rows, std::size_t d, const std::uint32_t* q,
                         std::size_t ldq, const KeyRuns& keys, std::size_t n, float alpha, float* s,
                         std::size_t lds);
void values_dot_emulated(Code c, std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                         const KeyRuns& keys, std::size_t n, float beta, float* o, std::size_t ldo);

}  // namespace mha::detail::kvq
