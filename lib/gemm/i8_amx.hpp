// The AMX-INT8 kernel set of the int8 GEMM (gemm_i8.hpp), written once over
// a tile backend as the bf16 set is (bf16_amx.hpp: the hardware's tiles,
// gemm_i8_amx_int8.cpp, or software ones, gemm_i8_amx_emulated.cpp), so
// that its tiling, edges, padding and groups run, and are tested, on any
// CPU.
//
// The operands are the avx512_vnni set's bytes: strips of 64 columns
// [ceil(k / 4)][64][4] and activation codes stored as q + 128, which
// tdpbusd multiplies as unsigned bytes by the signed codes, each column's
// sums starting at -128 times its code sum (start). So one packing serves
// both sets, and the hardware set hands blocks of few rows to vpdpbusd.
//
// A block of C is 32 x 64: two halves of 32 columns, each four 16 x 16
// int32 tiles from two A tiles (16 rows x 64 codes) and two B tiles (16
// steps of four k x 16 columns), oneDNN brgemm's 2 x 2 blocking; per 64 k,
// four tdpbusd against four tile loads. A tile of A reads 64 codes of each
// of 16 rows wherever its steps start: the driver's rows are whole blocks
// of 32 with 64 bytes to spare after the last (gemm_i8.cpp), and the B rows
// of steps past the sum's last are zero, so the codes read there add
// nothing. Weights in groups take a tile pass per group, their sums stored
// and scaled on the vector unit (a group of 32 k fills half of each tile
// product); int4 codes are unpacked into a B tile first.
//
// The integers are exact, as every set's (int32 sums that wrap and wrap
// back), and the float steps are the scalar set's, so the results are its
// bits.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "gemm/amx_tiles.hpp"
#include "gemm/gemm_i8.hpp"

namespace mha::detail::i8_amx {

constexpr std::size_t kMR = 32, kNR = 64, kHalf = 32, kSteps = 16, kAOffset = 128;

// Backend T: amx_emulated.hpp's or amx_native.hpp's tile operations (the
// configuration amx::kConfig, loaded by each entry, as the bf16 set's), and
// T::template dp<c, a, b>(): tdpbusd, C(i, j) += the sum over A's 64 bytes
// of row i (unsigned) times B's column j (signed, four bytes per row), in
// int32 that wraps.

// The tiles' int32 sums of A rows [0, 16 * MT) (lda bytes apart) by
// columns [32h, 32h + 32) of a strip, over steps [p0, p1) of four k, into
// acc (rows kNR int32 apart) at column 32h. int8 codes [steps][64][4]; int4
// ones (I8Strip) unpacked into a tile of steps first.
template <class T, std::size_t MT, bool kInt4>
void sums(std::size_t p0, std::size_t p1, const std::uint8_t* a, std::size_t lda,
          const std::int8_t* codes, std::size_t h, std::int32_t* acc) {
  alignas(64) std::int8_t bpad[kSteps * kHalf * 4];
  T::template zero<0>();
  T::template zero<1>();
  if constexpr (MT == 2) {
    T::template zero<2>();
    T::template zero<3>();
  }
  for (std::size_t p = p0; p < p1; p += kSteps) {
    const std::size_t steps = std::min(kSteps, p1 - p);
    const std::int8_t* bp = codes + (p * kNR + h * kHalf) * 4;
    std::size_t b_stride = kNR * 4;
    if (kInt4 || steps < kSteps) {
      for (std::size_t s = 0; s < kSteps; ++s) {
        std::int8_t* row = bpad + s * kHalf * 4;
        if (s >= steps) {
          std::fill_n(row, kHalf * 4, std::int8_t{0});
        } else if constexpr (kInt4) {
          const auto* src =
              reinterpret_cast<const std::uint8_t*>(codes + ((p + s) / 2 * kNR + h * kHalf) * 4);
          const unsigned shift = (p + s) % 2 != 0 ? 4 : 0;
          for (std::size_t x = 0; x < kHalf * 4; ++x) {
            row[x] = static_cast<std::int8_t>(static_cast<int>((src[x] >> shift) & 15u) - 8);
          }
        } else {
          std::copy_n(bp + s * kNR * 4, kHalf * 4, row);
        }
      }
      bp = bpad;
      b_stride = kHalf * 4;
    }
    T::template load<4>(a + 4 * p, lda);
    T::template load<6>(bp, b_stride);
    T::template dp<0, 4, 6>();
    T::template load<7>(bp + 64, b_stride);
    T::template dp<1, 4, 7>();
    if constexpr (MT == 2) {
      T::template load<5>(a + amx::kTileRows * lda + 4 * p, lda);
      T::template dp<2, 5, 6>();
      T::template dp<3, 5, 7>();
    }
  }
  std::int32_t* out = acc + h * kHalf;
  T::template store<0>(out, kNR * 4);
  T::template store<1>(out + 16, kNR * 4);
  if constexpr (MT == 2) {
    T::template store<2>(out + amx::kTileRows * kNR, kNR * 4);
    T::template store<3>(out + amx::kTileRows * kNR + 16, kNR * 4);
  }
}

// The sums of every half of the strip that holds one of its n columns.
template <class T, bool kInt4>
void block_sums(std::size_t p0, std::size_t p1, const std::uint8_t* a, std::size_t lda,
                const std::int8_t* codes, std::size_t m, std::size_t n, std::int32_t* acc) {
  for (std::size_t h = 0; h * kHalf < n; ++h) {
    if (m > amx::kTileRows) {
      sums<T, 2, kInt4>(p0, p1, a, lda, codes, h, acc);
    } else {
      sums<T, 1, kInt4>(p0, p1, a, lda, codes, h, acc);
    }
  }
}

namespace {  // NOLINT(build/namespaces): each kernel set's object its own copy
// The wrapping int32 sum, as the tiles and vpdpbusd add.
inline std::int32_t wrap_add(std::int32_t x, std::int32_t y) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(x) + static_cast<std::uint32_t>(y));
}
}  // namespace

// GemmI8Kernels::ukernel on the tiles.
template <class T>
void ukernel(std::size_t kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
             const std::int32_t* start, const float* sa, const float* sb, const float* bias,
             float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  alignas(64) std::int32_t acc[kMR * kNR];
  T::configure(amx::kConfig);
  block_sums<T, false>(0, kq, a, lda, b, m, n, acc);
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    for (std::size_t j = 0; j < n; ++j) {
      const float y = static_cast<float>(wrap_add(acc[i * kNR + j], start[j])) * (sa[i] * sb[j]);
      ci[j] = bias != nullptr ? y + bias[j] : y;
    }
  }
}

// GemmI8Kernels::ukernel_groups on the tiles: each group's sums, with its
// start and (uint4) less z - 8 times the row's group sum, FMA'd by its
// scale into fp32 t, then t times the row's scale plus the bias.
template <class T>
void ukernel_groups(const I8Strip& b, const std::uint8_t* a, std::size_t lda, const float* sa,
                    const float* bias, float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  alignas(64) std::int32_t acc[kMR * kNR];
  alignas(64) float t[kMR * kNR];
  T::configure(amx::kConfig);
  for (std::size_t i = 0; i < m; ++i) std::fill_n(t + i * kNR, n, 0.0f);
  for (std::size_t g = 0, p0 = 0; p0 < b.kq; ++g, p0 += b.group_kq) {
    const std::size_t p1 = std::min(b.kq, p0 + b.group_kq);
    if (b.int4) {
      block_sums<T, true>(p0, p1, a, lda, b.codes, m, n, acc);
    } else {
      block_sums<T, false>(p0, p1, a, lda, b.codes, m, n, acc);
    }
    const std::int32_t* start = b.start + g * b.stride;
    const float* scale = b.scales + g * b.stride;
    for (std::size_t i = 0; i < m; ++i) {
      std::int32_t* ai = acc + i * kNR;
      if (b.zeros != nullptr) {
        const std::int32_t* z = b.zeros + g * b.stride;
        const std::int32_t sum = group_sum(a + i * lda, b, g);
        for (std::size_t j = 0; j < n; ++j) ai[j] = wrap_add(ai[j], -z[j] * sum);
      }
      float* ti = t + i * kNR;
      for (std::size_t j = 0; j < n; ++j) {
        ti[j] = std::fma(static_cast<float>(wrap_add(ai[j], start[j])), scale[j], ti[j]);
      }
    }
  }
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    for (std::size_t j = 0; j < n; ++j) {
      const float y = t[i * kNR + j] * sa[i];
      ci[j] = bias != nullptr ? y + bias[j] : y;
    }
  }
}

}  // namespace mha::detail::i8_amx
