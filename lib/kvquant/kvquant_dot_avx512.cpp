// The quantized-KV products on vdpbf16ps (KvQuantDotKernels,
// avx512_vbmi_bf16), bit for bit format.hpp's scores_dot_emulated and
// values_dot_emulated. 64 codes become bf16 in registers by two vpermi2b
// lookups of their magnitudes (the low and the high byte of 128-entry
// tables), the sign merged back (vpternlogd), and two vpermt2b that
// interleave the words into the pairs vdpbf16ps multiplies: 6 instructions
// (7 with int8's vpabsb) feed 2 vdpbf16ps per query row, where the fp32
// path spends 8 widening and 4 scaling instructions on 4 FMAs per row.
//
// Scores: keys in lanes, a quad of channels per 64 code bytes of a strip,
// each group's chain scaled into the total by the group's 16 key scales.
// P·V: channels in lanes, a pair of keys per 64 code bytes (a group of
// each row), against p' = bf16(p · the key's group scale), rounded per
// tile into pbuf first.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/prefetch.hpp"
#include "kvquant/format.hpp"
#include "kvquant/kernels.hpp"
#include "kvquant/kvquant_kernels.hpp"

namespace mha::detail {
namespace {

using kvq::Code;
constexpr std::size_t kStrip = kvq::kStrip, kGroup = kvq::kGroup;

struct alignas(64) Bytes {
  std::uint8_t b[64];
};

// The low (lo) and high (hi) bytes of each magnitude's bf16, 128 entries.
struct Tables {
  Bytes lo[2], hi[2];
};
constexpr Tables make_tables(Code c) {
  Tables t{};
  for (unsigned m = 0; m < 128; ++m) {
    const std::uint16_t b = kvq::dot_magnitude_bf16(c, m);
    t.lo[m / 64].b[m % 64] = static_cast<std::uint8_t>(b & 0xFF);
    t.hi[m / 64].b[m % 64] = static_cast<std::uint8_t>(b >> 8);
  }
  return t;
}
constexpr Tables kTables[2] = {make_tables(Code::int8), make_tables(Code::e4m3)};

// vpermt2b indices: output word pairs (2i, 2i+1), i < 16, from entries
// first + i and second + i of 64 converted codes (low byte from the low
// bytes' vector, 0-63, high byte from the high bytes', 64-127).
constexpr Bytes interleave(unsigned first, unsigned second) {
  Bytes x{};
  for (unsigned i = 0; i < 16; ++i) {
    x.b[4 * i] = static_cast<std::uint8_t>(first + i);
    x.b[4 * i + 1] = static_cast<std::uint8_t>(64 + first + i);
    x.b[4 * i + 2] = static_cast<std::uint8_t>(second + i);
    x.b[4 * i + 3] = static_cast<std::uint8_t>(64 + second + i);
  }
  return x;
}
// A quad of K strip channels (16 lanes each): channels 0 and 1, 2 and 3.
constexpr Bytes kChannelPairs[2] = {interleave(0, 16), interleave(32, 48)};
// A group of two V rows (32 channels each): the rows' channels 0-15, 16-31.
constexpr Bytes kKeyPairs[2] = {interleave(0, 32), interleave(16, 48)};

__m512i load(const Bytes& b) {
  return _mm512_load_si512(b.b);
}

template <Code C>
struct Convert {
  __m512i lo0 = load(kTables[static_cast<int>(C)].lo[0]);
  __m512i lo1 = load(kTables[static_cast<int>(C)].lo[1]);
  __m512i hi0 = load(kTables[static_cast<int>(C)].hi[0]);
  __m512i hi1 = load(kTables[static_cast<int>(C)].hi[1]);
  __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));

  // The 64 codes of x as bf16 words, interleaved by i0 and i1 into w0, w1.
  void operator()(__m512i x, __m512i i0, __m512i i1, __m512bh& w0, __m512bh& w1) const {
    // vpermi2b reads 7 index bits: an E4M3 code's magnitude as it is.
    const __m512i m = C == Code::int8 ? _mm512_abs_epi8(x) : x;
    const __m512i lo = _mm512_permutex2var_epi8(lo0, m, lo1);
    const __m512i hi = _mm512_ternarylogic_epi32(_mm512_permutex2var_epi8(hi0, m, hi1), x, sign,
                                                 0xF8);  // hi | (x & sign)
    w0 = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi8(lo, i0, hi));
    w1 = reinterpret_cast<__m512bh>(_mm512_permutex2var_epi8(lo, i1, hi));
  }
};

__m512bh broadcast_pair(const void* p) {
  std::uint32_t b;
  std::memcpy(&b, p, sizeof b);
  return reinterpret_cast<__m512bh>(_mm512_set1_epi32(static_cast<int>(b)));
}
__m512 widen_scales(const std::uint8_t* p) {
  const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  // The maskz forms: GCC 12 warns on the plain ones' undefined pass-through.
  return _mm512_castsi512_ps(
      _mm512_maskz_slli_epi32(0xFFFF, _mm512_maskz_cvtepu16_epi32(0xFFFF, b), 16));
}
__mmask16 lanes_mask(std::size_t lanes) {
  return static_cast<__mmask16>((1u << std::min<std::size_t>(lanes, 16)) - 1u);
}

// Register tiles: accumulators (and the score totals) take 2 * MR * NS
// (2 * MR * NG) of the 32 zmm, beside the 7 tables and indices and 6
// temporaries; fewer rows take more strips (groups), so that a decode row
// keeps several chains in flight.
constexpr std::size_t tiles_for(std::size_t mr) {
  return std::max<std::size_t>(1, std::min<std::size_t>(4, 18 / (2 * mr)));
}
constexpr std::size_t kMr = 8;
constexpr std::size_t kAhead = 2;

template <Code C, std::size_t MR, std::size_t NS>
void score_tile(const Convert<C>& cv, std::size_t d, const std::uint32_t* q, std::size_t ldq,
                const std::uint8_t* const* strip, std::size_t n, float alpha, float* s,
                std::size_t lds) {
  const std::size_t G = kvq::groups(d), codes = 2 * kStrip * G;
  const __m512i i0 = load(kChannelPairs[0]), i1 = load(kChannelPairs[1]);
  __m512 tot[MR][NS];
  for (auto& row : tot) {
    for (__m512& t : row) t = _mm512_setzero_ps();
  }
  for (std::size_t g = 0; g < G; ++g) {
    __m512 acc[MR][NS];
    for (auto& row : acc) {
      for (__m512& a : row) a = _mm512_setzero_ps();
    }
    const std::size_t c1 = std::min(d, (g + 1) * kGroup);
    for (std::size_t c = g * kGroup; c < c1; c += 4) {
      const __mmask64 m = c + 4 <= d ? ~__mmask64{0} : (__mmask64{1} << ((d - c) * kStrip)) - 1;
      for (std::size_t t = 0; t < NS; ++t) {
        __m512bh w0, w1;
        cv(_mm512_maskz_loadu_epi8(m, strip[t] + codes + c * kStrip), i0, i1, w0, w1);
        for (std::size_t r = 0; r < MR; ++r) {
          acc[r][t] = _mm512_dpbf16_ps(acc[r][t], broadcast_pair(q + r * ldq + c / 2), w0);
          acc[r][t] = _mm512_dpbf16_ps(acc[r][t], broadcast_pair(q + r * ldq + c / 2 + 1), w1);
        }
      }
    }
    for (std::size_t t = 0; t < NS; ++t) {
      const __m512 sc = widen_scales(strip[t] + 2 * g * kStrip);
      for (std::size_t r = 0; r < MR; ++r) tot[r][t] = _mm512_fmadd_ps(acc[r][t], sc, tot[r][t]);
    }
  }
  const __m512 a = _mm512_set1_ps(alpha);
  for (std::size_t t = 0; t < NS && t * kStrip < n; ++t) {
    const __mmask16 m = lanes_mask(n - t * kStrip);
    for (std::size_t r = 0; r < MR; ++r) {
      _mm512_mask_storeu_ps(s + r * lds + t * kStrip, m, _mm512_mul_ps(tot[r][t], a));
    }
  }
}

// The strips of keys [0, n) in tiles of tiles_for(MR), the last of fewer.
template <Code C, std::size_t MR>
void score_rows(const Convert<C>& cv, std::size_t d, const std::uint32_t* q, std::size_t ldq,
                const kvq::KeyRuns& keys, std::size_t n, float alpha, float* s, std::size_t lds) {
  kvq_tiles<tiles_for(MR)>(0, (n + kStrip - 1) / kStrip, [&](std::size_t t, auto ns) {
    constexpr std::size_t NS = decltype(ns)::value;
    const std::uint8_t* strip[NS];
    kvq_strip_tile(keys, d, t, n, kAhead, strip);
    score_tile<C, MR, NS>(cv, d, q, ldq, strip, n - t * kStrip, alpha, s + t * kStrip, lds);
  });
}

template <Code C>
void scores(std::size_t rows, std::size_t d, const std::uint32_t* q, std::size_t ldq,
            const kvq::KeyRuns& keys, std::size_t n, float alpha, float* s, std::size_t lds) {
  const Convert<C> cv;
  kvq_row_blocks<kMr>(rows, [&](std::size_t r0, auto mr) {
    score_rows<C, decltype(mr)::value>(cv, d, q + r0 * ldq, ldq, keys, n, alpha, s + r0 * lds, lds);
  });
}

// pbuf word ((r * G + g) * np + j) = p'(r, j) of group g (np = n rounded
// up to whole strips; keys from n on zero, so a strip is stored whole), 16
// keys of a strip at a time, their scales gathered from the strip's rows.
void scale_p(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
             const kvq::KeyRuns& keys, std::size_t n, std::uint16_t* pb) {
  const std::size_t G = kvq::groups(d), np = kvq::dot_p_stride(n);
  const std::size_t rb = kvq::value_row_bytes(d);
  const __m512i at =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(static_cast<int>(rb)));
  for (std::size_t j = 0; j < n; j += kStrip) {
    const __mmask16 valid = lanes_mask(n - j);
    const std::uint8_t* rows_at = keys.row(j, d);
    if (j + kAhead * kStrip < n + keys.ahead)
      prefetch_bytes(keys.row(j + kAhead * kStrip, d), kStrip * rb);
    for (std::size_t g = 0; g < G; ++g) {
      const __m512i raw =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, at, rows_at + 2 * g, 1);
      const __m512 sc = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, raw, 16));
      for (std::size_t r = 0; r < rows; ++r) {
        const __m512 x = _mm512_mul_ps(_mm512_maskz_loadu_ps(valid, p + r * ldp + j), sc);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + (r * G + g) * np + j),
                            reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
      }
    }
  }
}

// P·V of MR rows over NG groups of channels from group g0.
template <Code C, std::size_t MR, std::size_t NG>
void value_tile(const Convert<C>& cv, std::size_t d, std::size_t g0, const std::uint16_t* pb,
                const kvq::KeyRuns& keys, std::size_t n, float beta, float* o, std::size_t ldo) {
  const std::size_t G = kvq::groups(d), rb = kvq::value_row_bytes(d), np = kvq::dot_p_stride(n);
  const __m512i i0 = load(kKeyPairs[0]), i1 = load(kKeyPairs[1]);
  __m512 acc[MR][NG][2];
  for (auto& row : acc) {
    for (auto& grp : row) grp[0] = grp[1] = _mm512_setzero_ps();
  }
  const std::uint8_t* run = nullptr;
  for (std::size_t j = 0; j < n; j += 2) {
    // A strip's rows at a time: they are consecutive in one block.
    if (j % kStrip == 0) run = keys.row(j, d);
    const std::uint8_t* row = run + j % kStrip * rb + 2 * G + g0 * kGroup;
    // Row j's group in bytes 0-31, row j + 1's (zero past n) in 32-63, by
    // two loads: one merge-masked 64-byte load ran P·V at 27 us per 4096
    // keys against 15 (Zen 4, 4 rows, d 64).
    const bool two = j + 1 < n;
    for (std::size_t g = 0; g < NG; ++g) {
      const std::uint8_t* codes = row + g * kGroup;
      const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
      const __m256i hi = two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + rb))
                             : _mm256_setzero_si256();
      const __m512i x = _mm512_mask_broadcast_i64x4(_mm512_castsi256_si512(lo), 0xF0, hi);
      __m512bh w0, w1;
      cv(x, i0, i1, w0, w1);
      for (std::size_t r = 0; r < MR; ++r) {
        const __m512bh pp = broadcast_pair(pb + (r * G + g0 + g) * np + j);
        acc[r][g][0] = _mm512_dpbf16_ps(acc[r][g][0], pp, w0);
        acc[r][g][1] = _mm512_dpbf16_ps(acc[r][g][1], pp, w1);
      }
    }
  }
  const __m512 b = _mm512_set1_ps(beta);
  for (std::size_t r = 0; r < MR; ++r) {
    for (std::size_t i = 0; i < 2 * NG; ++i) {
      const std::size_t c = g0 * kGroup + i * 16;
      if (c >= d) break;
      const __mmask16 m = lanes_mask(d - c);
      float* out = o + r * ldo + c;
      const __m512 a = acc[r][i / 2][i % 2];
      _mm512_mask_storeu_ps(
          out, m, beta == 0.0f ? a : _mm512_fmadd_ps(b, _mm512_maskz_loadu_ps(m, out), a));
    }
  }
}

// The groups in tiles of tiles_for(MR), the last of fewer.
template <Code C, std::size_t MR>
void value_rows(const Convert<C>& cv, std::size_t d, const std::uint16_t* pb,
                const kvq::KeyRuns& keys, std::size_t n, float beta, float* o, std::size_t ldo) {
  kvq_tiles<tiles_for(MR)>(0, kvq::groups(d), [&](std::size_t g, auto ng) {
    value_tile<C, MR, decltype(ng)::value>(cv, d, g, pb, keys, n, beta, o, ldo);
  });
}

template <Code C>
void values(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
            const kvq::KeyRuns& keys, std::size_t n, float beta, float* o, std::size_t ldo,
            std::uint16_t* pbuf) {
  scale_p(rows, d, p, ldp, keys, n, pbuf);
  const Convert<C> cv;
  const std::size_t per_row = kvq::groups(d) * kvq::dot_p_stride(n);
  kvq_row_blocks<kMr>(rows, [&](std::size_t r0, auto mr) {
    value_rows<C, decltype(mr)::value>(cv, d, pbuf + r0 * per_row, keys, n, beta, o + r0 * ldo,
                                       ldo);
  });
}

}  // namespace

constinit const KvQuantDotKernels kv_quant_dot_kernels_avx512_vbmi_bf16 = {
    "avx512_vbmi_bf16",
    {&scores<Code::int8>, &scores<Code::e4m3>},
    {&values<Code::int8>, &values<Code::e4m3>}};

}  // namespace mha::detail
