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
// each row), against p' = bf16(p · the key's group scale). A decode's few
// rows convert the codes per register tile and round p' a strip at a time
// there; a call of more rows converts them once into scratch, where its row
// tiles load them (a 512-token chunk onto an int8 cache: 227 -> 190 ms, Zen
// 4), p' rounded per row tile.
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
// (2 * MR * NG) of the 32 zmm, beside the pairs, a broadcast and, where
// the codes are converted per tile, 7 tables and indices and 4 more
// temporaries; fewer rows take more strips (groups), so that a decode row
// keeps several chains in flight.
constexpr std::size_t tiles_for(std::size_t mr, std::size_t acc_regs) {
  return std::max<std::size_t>(1, std::min<std::size_t>(4, acc_regs / (2 * mr)));
}
constexpr std::size_t kCodeRegs = 18, kPairRegs = 28;
// Rows per register tile: 8 on codes; 7 on converted pairs (2 strips or
// groups, 28 accumulators, as the bf16 GEMM's 14 x 2 tile), which divides
// the core's 56-row query blocks.
constexpr std::size_t kMr = 8, kMrPairs = 7;
// Strips prefetched ahead: decode's pace needs more than 2 to cover
// memory's latency (8 is 8.7 KB of d-64 int8 K). Llama-1B decode, b16
// kv4096, int8, 1 thread, Zen 4, before StripP: 11.1 ms at 2, 9.83 at 6,
// 9.65-10.0 at 12, 10.1 at 20.
constexpr std::size_t kAhead = 8;
// dot_pbuf_words: p' of a converted call's row tile, and its groups.
static_assert(kMrPairs <= kMr && tiles_for(kMrPairs, kPairRegs) <= kDotConvertGroups);

// Where a tile's bf16 pairs come from: a strip's codes converted in
// registers per tile (CodeStrips), or pairs a call converted once for all
// its row tiles (PairStrips), kDotStripGroupWords per strip and group: the
// group's 16 scales, then channel pair i's 16 keys at word 16 (i + 1).
// Both give the same pairs, so the same bits.
template <Code C, std::size_t NS>
struct CodeStrips {
  static constexpr std::size_t kRegs = kCodeRegs;
  const Convert<C>& cv;
  std::size_t d;
  const std::uint8_t* strip[NS];
  __m512i i0 = load(kChannelPairs[0]), i1 = load(kChannelPairs[1]);

  void pairs(std::size_t t, std::size_t c, __m512bh& w0, __m512bh& w1) const {
    const __mmask64 m = c + 4 <= d ? ~__mmask64{0} : (__mmask64{1} << ((d - c) * kStrip)) - 1;
    const std::size_t codes = 2 * kStrip * kvq::groups(d);
    cv(_mm512_maskz_loadu_epi8(m, strip[t] + codes + c * kStrip), i0, i1, w0, w1);
  }
  __m512 scales(std::size_t t, std::size_t g) const {
    return widen_scales(strip[t] + 2 * g * kStrip);
  }
};
template <std::size_t NS>
struct PairStrips {
  static constexpr std::size_t kRegs = kPairRegs;
  std::size_t d;
  const std::uint32_t* strip[NS];

  void pairs(std::size_t t, std::size_t c, __m512bh& w0, __m512bh& w1) const {
    const std::uint32_t* at =
        strip[t] + c / kGroup * kDotStripGroupWords + (c % kGroup / 2 + 1) * kStrip;
    w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(at));
    w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(at + kStrip));
  }
  __m512 scales(std::size_t t, std::size_t g) const {
    return _mm512_load_ps(strip[t] + g * kDotStripGroupWords);
  }
};

template <std::size_t MR, std::size_t NS, class S>
void score_tile(const S& src, std::size_t d, const std::uint32_t* q, std::size_t ldq, std::size_t n,
                float alpha, float* s, std::size_t lds) {
  const std::size_t G = kvq::groups(d);
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
      for (std::size_t t = 0; t < NS; ++t) {
        __m512bh w0, w1;
        src.pairs(t, c, w0, w1);
        for (std::size_t r = 0; r < MR; ++r) {
          acc[r][t] = _mm512_dpbf16_ps(acc[r][t], broadcast_pair(q + r * ldq + c / 2), w0);
          acc[r][t] = _mm512_dpbf16_ps(acc[r][t], broadcast_pair(q + r * ldq + c / 2 + 1), w1);
        }
      }
    }
    for (std::size_t t = 0; t < NS; ++t) {
      const __m512 sc = src.scales(t, g);
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

// K strips [t0, t0 + ns) of `keys` as PairStrips' pairs into `out`, the
// strips kAhead on prefetched.
template <Code C>
void convert_strips(const Convert<C>& cv, std::size_t d, const kvq::KeyRuns& keys, std::size_t t0,
                    std::size_t ns, std::size_t n, std::uint32_t* out) {
  const std::size_t G = kvq::groups(d);
  for (std::size_t t = 0; t < ns; ++t) {
    const std::uint8_t* strip[1];
    kvq_strip_tile<1>(keys, d, t0 + t, n, kAhead, strip);
    const CodeStrips<C, 1> src{cv, d, {strip[0]}};
    for (std::size_t g = 0; g < G; ++g) {
      std::uint32_t* at = out + (t * G + g) * kDotStripGroupWords;
      _mm512_store_ps(at, src.scales(0, g));
      for (std::size_t c = g * kGroup; c < std::min(d, (g + 1) * kGroup); c += 4) {
        __m512bh w0, w1;
        src.pairs(0, c, w0, w1);
        std::uint32_t* pair = at + (c % kGroup / 2 + 1) * kStrip;
        _mm512_store_si512(pair, reinterpret_cast<__m512i>(w0));
        _mm512_store_si512(pair + kStrip, reinterpret_cast<__m512i>(w1));
      }
    }
  }
}

template <class T>
T* cache_line(T* p) {
  return reinterpret_cast<T*>((reinterpret_cast<std::uintptr_t>(p) + 63) & ~std::uintptr_t{63});
}

template <Code C>
void scores(std::size_t rows, std::size_t d, const std::uint32_t* q, std::size_t ldq,
            const kvq::KeyRuns& keys, std::size_t n, float alpha, float* s, std::size_t lds,
            std::uint32_t* work) {
  const Convert<C> cv;
  const std::size_t strips = (n + kStrip - 1) / kStrip;
  if (rows <= kMr) {
    kvq_row_blocks<kMr>(rows, [&](std::size_t r0, auto mr) {
      constexpr std::size_t MR = decltype(mr)::value;
      kvq_tiles<tiles_for(MR, kCodeRegs)>(0, strips, [&](std::size_t t, auto ns) {
        constexpr std::size_t NS = decltype(ns)::value;
        CodeStrips<C, NS> src{cv, d, {}};
        kvq_strip_tile(keys, d, t, n, kAhead, src.strip);
        score_tile<MR, NS>(src, d, q + r0 * ldq, ldq, n - t * kStrip, alpha,
                           s + r0 * lds + t * kStrip, lds);
      });
    });
    return;
  }
  std::uint32_t* pairs = cache_line(work);
  const std::size_t G = kvq::groups(d);
  for (std::size_t t0 = 0; t0 < strips; t0 += kDotConvertStrips) {
    const std::size_t ns = std::min(kDotConvertStrips, strips - t0);
    convert_strips(cv, d, keys, t0, ns, n, pairs);
    kvq_row_blocks<kMrPairs>(rows, [&](std::size_t r0, auto mr) {
      constexpr std::size_t MR = decltype(mr)::value;
      kvq_tiles<tiles_for(MR, kPairRegs)>(0, ns, [&](std::size_t t, auto nt) {
        constexpr std::size_t NS = decltype(nt)::value;
        PairStrips<NS> src{d, {}};
        for (std::size_t u = 0; u < NS; ++u)
          src.strip[u] = pairs + (t + u) * G * kDotStripGroupWords;
        const std::size_t j = (t0 + t) * kStrip;
        score_tile<MR, NS>(src, d, q + r0 * ldq, ldq, n - j, alpha, s + r0 * lds + j, lds);
      });
    });
  }
}

// The V rows of the strip kAhead on from key j, up to the keys' end.
void prefetch_rows(const kvq::KeyRuns& keys, std::size_t j, std::size_t n, std::size_t d) {
  if (j + kAhead * kStrip < n + keys.ahead)
    prefetch_bytes(keys.row(j + kAhead * kStrip, d), kStrip * kvq::value_row_bytes(d));
}
// p' of 16 keys: their p times their scales, rounded to bf16 (round_p's
// and StripP's one rounding).
__m256i p_prime(__m512 p, __m512 scale) {
  return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(_mm512_mul_ps(p, scale)));
}
// The byte offsets of a strip's 16 V rows, and the fp32 scales at p of
// those of them in `valid` (the rest zero).
__m512i row_offsets(std::size_t rb) {
  return _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                            _mm512_set1_epi32(static_cast<int>(rb)));
}
__m512 row_scales(const std::uint8_t* p, __m512i at, __mmask16 valid) {
  const __m512i raw = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, at, p, 1);
  return _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, raw, 16));
}

// sc[g * np + j] = key j's scale of group g as fp32 (np = n rounded up to
// whole strips, keys from n on zero), gathered from each strip's rows, the
// rows kAhead strips on prefetched.
void value_scales(std::size_t d, const kvq::KeyRuns& keys, std::size_t n, float* sc) {
  const std::size_t G = kvq::groups(d), np = kvq::dot_p_stride(n);
  const __m512i at = row_offsets(kvq::value_row_bytes(d));
  for (std::size_t j = 0; j < n; j += kStrip) {
    const __mmask16 valid = lanes_mask(n - j);
    const std::uint8_t* rows_at = keys.row(j, d);
    prefetch_rows(keys, j, n, d);
    for (std::size_t g = 0; g < G; ++g)
      _mm512_store_ps(sc + g * np + j, row_scales(rows_at + 2 * g, at, valid));
  }
}

// pb word ((r * ng + g) * np + j) = p'(r, j) of group g, the groups' scales
// from sc (np apart): whole strips, keys from n on zero.
void round_p(std::size_t rows, std::size_t ng, const float* p, std::size_t ldp, const float* sc,
             std::size_t n, std::uint16_t* pb) {
  const std::size_t np = kvq::dot_p_stride(n);
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < n; j += kStrip) {
      const __m512 x = _mm512_maskz_loadu_ps(lanes_mask(n - j), p + r * ldp + j);
      for (std::size_t g = 0; g < ng; ++g) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(pb + (r * ng + g) * np + j),
                            p_prime(x, _mm512_load_ps(sc + g * np + j)));
      }
    }
  }
}

// The pairs of V rows (j, j + 1), j even, in groups g0 .. g0 + NG - 1: the
// codes converted in registers per tile (CodeRows), or pairs a call
// converted once for all its row tiles (PairRows: key pair j / 2's NG
// groups of 32 words, channels 0-15 then 16-31). Both give the same pairs.
template <Code C>
struct CodeRows {
  static constexpr std::size_t kRegs = kCodeRegs;
  const Convert<C>& cv;
  const kvq::KeyRuns& keys;
  std::size_t d, g0, n;
  __m512i i0 = load(kKeyPairs[0]), i1 = load(kKeyPairs[1]);
  const std::uint8_t* run = nullptr;
  const std::uint8_t* row = nullptr;
  bool two = false;

  void at(std::size_t j) {
    // A strip's rows at a time: they are consecutive in one block.
    if (j % kStrip == 0) run = keys.row(j, d);
    row = run + j % kStrip * kvq::value_row_bytes(d) + 2 * kvq::groups(d) + g0 * kGroup;
    two = j + 1 < n;
  }
  // Row j's group in bytes 0-31, row j + 1's (zero past n) in 32-63, by two
  // loads: one merge-masked 64-byte load ran P·V at 27 us per 4096 keys
  // against 15 (Zen 4, 4 rows, d 64).
  void pairs(std::size_t g, __m512bh& w0, __m512bh& w1) const {
    const std::uint8_t* codes = row + g * kGroup;
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
    const __m256i hi =
        two ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + kvq::value_row_bytes(d)))
            : _mm256_setzero_si256();
    cv(_mm512_mask_broadcast_i64x4(_mm512_castsi256_si512(lo), 0xF0, hi), i0, i1, w0, w1);
  }
};
template <std::size_t NG>
struct PairRows {
  static constexpr std::size_t kRegs = kPairRegs;
  const std::uint16_t* base;
  const std::uint16_t* pair = nullptr;

  void at(std::size_t j) { pair = base + j / 2 * NG * 2 * kGroup; }
  void pairs(std::size_t g, __m512bh& w0, __m512bh& w1) const {
    w0 = reinterpret_cast<__m512bh>(_mm512_load_si512(pair + g * 2 * kGroup));
    w1 = reinterpret_cast<__m512bh>(_mm512_load_si512(pair + g * 2 * kGroup + kGroup));
  }
};

// Where P·V's p' comes from: rounded by round_p beforehand, p'(r, j) of
// group g at pb word ((r * pg + g) * np + j) (RoundedP); or a strip at a
// time as the tile reaches it, from p and the strip's V rows' scales
// (StripP), so that the rows' first touch overlaps the products rather
// than a pass of its own (Llama-1B decode, b16 kv4096, int8, Zen 4, 1
// thread: 9.9 -> 9.1 ms). Both round p · scale once, so the same p'.
struct RoundedP {
  const std::uint16_t* pb;
  std::size_t pg, np;

  void at(std::size_t) const {}
  __m512bh pair(std::size_t r, std::size_t g, std::size_t j) const {
    return broadcast_pair(pb + (r * pg + g) * np + j);
  }
};
template <std::size_t MR, std::size_t NG>
struct StripP {
  const float* p;
  std::size_t ldp;
  const kvq::KeyRuns& keys;
  std::size_t d, g0, n;
  bool prefetch;  // the V rows kAhead strips on (by one group tile of a call)
  __m512i offsets = row_offsets(kvq::value_row_bytes(d));
  alignas(64) std::uint16_t pb[MR][NG][kStrip] = {};

  // The products reach keys [j, j + kStrip).
  void at(std::size_t j) {
    if (prefetch) prefetch_rows(keys, j, n, d);
    const __mmask16 valid = lanes_mask(n - j);
    const std::uint8_t* rows_at = keys.row(j, d) + 2 * g0;
    for (std::size_t g = 0; g < NG; ++g) {
      const __m512 sc = row_scales(rows_at + 2 * g, offsets, valid);
      for (std::size_t r = 0; r < MR; ++r) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(pb[r][g]),
                           p_prime(_mm512_maskz_loadu_ps(valid, p + r * ldp + j), sc));
      }
    }
  }
  __m512bh pair(std::size_t r, std::size_t g, std::size_t j) const {
    return broadcast_pair(&pb[r][g][j % kStrip]);
  }
};

// P·V of MR rows over NG groups of channels from group g0, p' from `ps`.
template <std::size_t MR, std::size_t NG, class S, class P>
void value_tile(S src, P ps, std::size_t d, std::size_t g0, std::size_t n, float beta, float* o,
                std::size_t ldo) {
  __m512 acc[MR][NG][2];
  for (auto& row : acc) {
    for (auto& grp : row) grp[0] = grp[1] = _mm512_setzero_ps();
  }
  for (std::size_t j0 = 0; j0 < n; j0 += kStrip) {
    ps.at(j0);
    for (std::size_t j = j0; j < std::min(n, j0 + kStrip); j += 2) {
      src.at(j);
      for (std::size_t g = 0; g < NG; ++g) {
        __m512bh w0, w1;
        src.pairs(g, w0, w1);
        for (std::size_t r = 0; r < MR; ++r) {
          const __m512bh pp = ps.pair(r, g, j);
          acc[r][g][0] = _mm512_dpbf16_ps(acc[r][g][0], pp, w0);
          acc[r][g][1] = _mm512_dpbf16_ps(acc[r][g][1], pp, w1);
        }
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

// V's groups [g0, g0 + ng) of keys [0, n) as PairRows' pairs into `out`
// (an odd n's last pair with a zero row).
template <Code C>
void convert_rows(const Convert<C>& cv, std::size_t d, const kvq::KeyRuns& keys, std::size_t n,
                  std::size_t g0, std::size_t ng, std::uint16_t* out) {
  CodeRows<C> src{cv, keys, d, g0, n};
  for (std::size_t j = 0; j < n; j += 2) {
    src.at(j);
    for (std::size_t g = 0; g < ng; ++g) {
      __m512bh w0, w1;
      src.pairs(g, w0, w1);
      std::uint16_t* pair = out + (j / 2 * ng + g) * 2 * kGroup;
      _mm512_store_si512(pair, reinterpret_cast<__m512i>(w0));
      _mm512_store_si512(pair + kGroup, reinterpret_cast<__m512i>(w1));
    }
  }
}

// A decode's few rows round p' a strip at a time in the tile (StripP); more
// rows keep in pbuf the fp32 scales (value_scales), a row tile's p'
// (round_p, just before its products) and the converted V pairs.
template <Code C>
void values(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
            const kvq::KeyRuns& keys, std::size_t n, float beta, float* o, std::size_t ldo,
            std::uint16_t* pbuf) {
  const std::size_t G = kvq::groups(d), np = kvq::dot_p_stride(n);
  const Convert<C> cv;
  if (rows <= kMr) {
    kvq_row_blocks<kMr>(rows, [&](std::size_t r0, auto mr) {
      constexpr std::size_t MR = decltype(mr)::value;
      kvq_tiles<tiles_for(MR, kCodeRegs)>(0, G, [&](std::size_t g, auto ng) {
        constexpr std::size_t NG = decltype(ng)::value;
        value_tile<MR, NG>(CodeRows<C>{cv, keys, d, g, n},
                           StripP<MR, NG>{p + r0 * ldp, ldp, keys, d, g, n, g == 0}, d, g, n, beta,
                           o + r0 * ldo, ldo);
      });
    });
    return;
  }
  float* sc = cache_line(reinterpret_cast<float*>(pbuf));
  std::uint16_t* pb = reinterpret_cast<std::uint16_t*>(sc + G * np);
  value_scales(d, keys, n, sc);
  std::uint16_t* pairs = cache_line(pb + kMrPairs * std::min(G, kDotConvertGroups) * np);
  kvq_tiles<tiles_for(kMrPairs, kPairRegs)>(0, G, [&](std::size_t g, auto ng) {
    constexpr std::size_t NG = decltype(ng)::value;
    convert_rows(cv, d, keys, n, g, NG, pairs);
    kvq_row_blocks<kMrPairs>(rows, [&](std::size_t r0, auto mr) {
      constexpr std::size_t MR = decltype(mr)::value;
      round_p(MR, NG, p + r0 * ldp, ldp, sc + g * np, n, pb);
      value_tile<MR, NG>(PairRows<NG>{pairs}, RoundedP{pb, NG, np}, d, g, n, beta, o + r0 * ldo,
                         ldo);
    });
  });
}

}  // namespace

constinit const KvQuantDotKernels kv_quant_dot_kernels_avx512_vbmi_bf16 = {
    "avx512_vbmi_bf16",
    kMr,
    {&scores<Code::int8>, &scores<Code::e4m3>},
    {&values<Code::int8>, &values<Code::e4m3>}};

}  // namespace mha::detail
