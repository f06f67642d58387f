// AVX2 int8 kernels without VNNI: codes widened to int16 and multiplied by
// vpmaddwd, whose pair sums (at most 2 * 127 * 128) cannot saturate, where
// vpmaddubsw's 16-bit sums can (the bug oneDNN's and ONNX Runtime's users
// met). The activation codes are stored as int16 (a_bytes 2), so a row's
// four codes are one 64-bit broadcast; each accumulator holds two partial
// sums per column, added once at the end.
// Tile 6 x 8: 12 ymm accumulators + 2 B vectors + 1 broadcast of the 16;
// weights in groups, or int4, take 3 x 8 (one fp32 sum per row besides).
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "gemm/gemm_i8.hpp"
#include "gemm/gemm_i8_tiles.hpp"
#include "gemm/i8_quantize_avx2.hpp"

namespace mha::detail {
namespace {

constexpr std::size_t kMR = 6, kNR = 8;

// acc[i] += one k step's products: raw holds the step's four codes of 8
// columns (32 bytes), row i its four int16 codes at a + i*lda + 8p;
// acc[i][0] gets columns 0-3 and acc[i][1] 4-7, two partial sums each.
template <std::size_t ROWS>
[[gnu::always_inline]] inline void step(__m256i raw, const std::uint8_t* a, std::size_t lda,
                                        std::size_t p, __m256i (&acc)[ROWS][2]) {
  const __m256i lo = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(raw));
  const __m256i hi = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(raw, 1));
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
    long long quad;
    std::memcpy(&quad, a + i * lda + 8 * p, 8);
    const __m256i ai = _mm256_set1_epi64x(quad);
    acc[i][0] = _mm256_add_epi32(acc[i][0], _mm256_madd_epi16(ai, lo));
    acc[i][1] = _mm256_add_epi32(acc[i][1], _mm256_madd_epi16(ai, hi));
  }
}

// The 8 columns' sums of acc[i]: hadd gives columns 0 1 4 5 | 2 3 6 7, the
// permute puts them in order.
__m256i column_sums(__m256i lo, __m256i hi) {
  return _mm256_permute4x64_epi64(_mm256_hadd_epi32(lo, hi), 0xD8);
}

__m256i lane_mask(std::size_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <std::size_t ROWS>
MHA_NO_TREE_PRE void tile(std::size_t kq, const std::uint8_t* a, std::size_t lda,
                          const std::int8_t* b, const std::int32_t* start, const float* sa,
                          const float* sb, const float* bias, float* c, std::size_t ldc,
                          std::size_t n) {
  __m256i acc[ROWS][2];
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
  for (std::size_t p = 0; p < kq; ++p, b += kNR * 4) {
    step<ROWS>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), a, lda, p, acc);
  }
  const __m256 s_b = _mm256_loadu_ps(sb);
  const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(start));
  const __m256i mask = lane_mask(n);
  const __m256 b_v = bias != nullptr ? _mm256_maskload_ps(bias, mask) : _mm256_setzero_ps();
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
    const __m256i sum = _mm256_add_epi32(s0, column_sums(acc[i][0], acc[i][1]));
    const __m256 s = _mm256_mul_ps(_mm256_set1_ps(sa[i]), s_b);
    __m256 y = _mm256_mul_ps(_mm256_cvtepi32_ps(sum), s);
    if (bias != nullptr) y = _mm256_add_ps(y, b_v);
    _mm256_maskstore_ps(c + i * ldc, mask, y);
  }
}

// ukernel_groups for up to 3 rows (6 accumulators and 3 fp32 sums of the 16
// registers): each group's integer sums as tile's, then FMA'd into the fp32
// sums by the group's scales. int4 codes: each 32-byte load holds two k
// steps, split by a mask and a shift, less the stored offset of 8.
template <std::size_t ROWS, bool kInt4>
MHA_NO_TREE_PRE void tile_groups(const I8Strip& b, const std::uint8_t* a, std::size_t lda,
                                 const float* sa, const float* bias, float* c, std::size_t ldc,
                                 std::size_t n) {
  __m256 t[ROWS];
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) t[i] = _mm256_setzero_ps();
  const __m256i low = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  for (std::size_t g = 0, p0 = 0; p0 < b.kq; ++g, p0 += b.group_kq) {
    const std::size_t p1 = std::min(b.kq, p0 + b.group_kq);
    __m256i acc[ROWS][2];
#pragma GCC unroll 8
    for (std::size_t i = 0; i < ROWS; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_si256();
    if constexpr (kInt4) {
      // Pairs of steps; a group's odd last step pairs with a zero code.
      for (std::size_t p = p0; p < p1; p += 2) {
        const __m256i raw =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.codes + p / 2 * kNR * 4));
        step<ROWS>(_mm256_sub_epi8(_mm256_and_si256(raw, low), eight), a, lda, p, acc);
        step<ROWS>(_mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), eight), a, lda,
                   p + 1, acc);
      }
    } else {
      for (std::size_t p = p0; p < p1; ++p) {
        step<ROWS>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.codes + p * kNR * 4)), a,
                   lda, p, acc);
      }
    }
    const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.start + g * b.stride));
    const __m256 sc = _mm256_loadu_ps(b.scales + g * b.stride);
#pragma GCC unroll 8
    for (std::size_t i = 0; i < ROWS; ++i) {
      __m256i sum = _mm256_add_epi32(s0, column_sums(acc[i][0], acc[i][1]));
      if (b.zeros != nullptr) {
        const __m256i z =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.zeros + g * b.stride));
        sum = _mm256_sub_epi32(
            sum, _mm256_mullo_epi32(z, _mm256_set1_epi32(group_sum(a + i * lda, b, g))));
      }
      t[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), sc, t[i]);
    }
  }
  const __m256i mask = lane_mask(n);
  const __m256 b_v = bias != nullptr ? _mm256_maskload_ps(bias, mask) : _mm256_setzero_ps();
#pragma GCC unroll 8
  for (std::size_t i = 0; i < ROWS; ++i) {
    __m256 y = _mm256_mul_ps(t[i], _mm256_set1_ps(sa[i]));
    if (bias != nullptr) y = _mm256_add_ps(y, b_v);
    _mm256_maskstore_ps(c + i * ldc, mask, y);
  }
}

constexpr std::size_t kGroupRows = 3;
using GroupFn = void (*)(const I8Strip&, const std::uint8_t*, std::size_t, const float*,
                         const float*, float*, std::size_t, std::size_t);
constexpr GroupFn kGroupTiles[2][kGroupRows] = {
    {&tile_groups<1, false>, &tile_groups<2, false>, &tile_groups<3, false>},
    {&tile_groups<1, true>, &tile_groups<2, true>, &tile_groups<3, true>}};

void ukernel_groups(const I8Strip& b, const std::uint8_t* a, std::size_t lda, const float* sa,
                    const float* bias, float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  for (std::size_t i = 0; i < m; i += kGroupRows) {
    kGroupTiles[b.int4][std::min(kGroupRows, m - i) - 1](b, a + i * lda, lda, sa + i, bias,
                                                         c + i * ldc, ldc, n);
  }
}

struct Tiles {
  template <std::size_t ROWS>
  static constexpr i8_tiles::TileFn fn = &tile<ROWS>;
};
using Entries = i8_tiles::Dispatch<Tiles, kMR>;

}  // namespace

const GemmI8Kernels gemm_i8_kernels_avx2 = {
    "avx2", kMR, kNR, 4, 2, 0, Entries::ukernel, quantize_avx2<2>, ukernel_groups};

}  // namespace mha::detail
