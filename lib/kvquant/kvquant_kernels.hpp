// The quantized-KV products, written once against Lanes<Arch> and
// instantiated per ISA (kvquant_<isa>.cpp). K and V are dequantized in
// registers (code · scale, exact in fp32) and never written back; every
// output element is one FMA chain in format.hpp's order, so the bits are
// the scalar emulation's at any vector width and tile.
//
// Tiles: scores take kMr query rows by NS strips of 16 keys (keys in
// lanes), values kMrV rows by NG groups of 32 channels; fewer rows take more
// strips or groups (a decode row then keeps 3-4 independent chains). Each
// tile is the largest that fits the register file with its scales and one
// widened strip beside the accumulators.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/prefetch.hpp"
#include "kvquant/format.hpp"
#include "kvquant/kernels.hpp"
#include "kvquant/quantize_lanes.hpp"
#include "simd/lanes.hpp"

namespace mha::detail {

namespace kvq_rows {
template <std::size_t MR, class F>
void block(std::size_t mr, std::size_t r0, const F& f) noexcept {
  if constexpr (MR > 1) {
    if (mr < MR) return block<MR - 1>(mr, r0, f);
  }
  f(r0, std::integral_constant<std::size_t, MR>{});
}
}  // namespace kvq_rows

// Units [u, total) in tiles of N, the last of fewer: f(first unit,
// std::integral_constant<size_t, units of the tile>) per tile (strips of
// keys for the scores, groups of channels for P·V).
template <std::size_t N, class F>
void kvq_tiles(std::size_t u, std::size_t total, const F& f) noexcept {
  for (; u + N <= total; u += N) f(u, std::integral_constant<std::size_t, N>{});
  if constexpr (N > 1) {
    if (u < total) kvq_tiles<N - 1>(u, total, f);
  }
}

// The K strips t .. t + NS - 1 of keys [0, n) into `strip`, and the NS
// strips `ahead` on from t prefetched, up to the keys' end (n + keys.ahead:
// K streams from memory once per step, into the next call's keys).
template <std::size_t NS>
void kvq_strip_tile(const kvq::KeyRuns& keys, std::size_t d, std::size_t t, std::size_t n,
                    std::size_t ahead, const std::uint8_t* (&strip)[NS]) noexcept {
  const std::size_t j = t * kvq::kStrip;
  for (std::size_t u = 0; u < NS; ++u) strip[u] = keys.strip(j + u * kvq::kStrip, d);
  for (std::size_t u = ahead; u < ahead + NS && j + u * kvq::kStrip < n + keys.ahead; ++u) {
    prefetch_bytes(keys.strip(j + u * kvq::kStrip, d), kvq::key_strip_bytes(d));
  }
}

// Rows [0, rows) in blocks of kTop rows, the last of fewer: f(r0,
// std::integral_constant<size_t, rows of the block>), each block a register
// tile of the products.
template <std::size_t kTop, class F>
void kvq_row_blocks(std::size_t rows, const F& f) noexcept {
  for (std::size_t r0 = 0; r0 < rows; r0 += kTop) {
    kvq_rows::block<kTop>(std::min(kTop, rows - r0), r0, f);
  }
}

template <class Arch, std::size_t kRegs, std::size_t kMr, std::size_t kMrV>
struct KvQuantImpl {
  using L = simd::Lanes<Arch>;
  using V = typename L::V;
  using Code = kvq::Code;
  static constexpr std::size_t W = L::width;
  static constexpr std::size_t VPS = kvq::kStrip / W;  // vectors per strip of keys
  static constexpr std::size_t GV = kvq::kGroup / W;   // vectors per group of channels

  static constexpr std::size_t strips_for(std::size_t mr) {
    for (std::size_t ns = 4; ns > 1; --ns) {
      if ((mr + 1) * ns * VPS + VPS + 1 <= kRegs) return ns;
    }
    return 1;
  }
  static constexpr std::size_t groups_for(std::size_t mr) {
    for (std::size_t ng = 4; ng > 1; --ng) {
      if (mr * ng * GV + VPS + 2 <= kRegs) return ng;
    }
    return 1;
  }

  template <Code C>
  static void widen(const std::uint8_t* p, V* out) noexcept {
    if constexpr (C == Code::int8) {
      L::widen_i8x16(p, out);
    } else {
      L::widen_e4m3x16(p, out);
    }
  }
  static const std::uint16_t* scales_at(const std::uint8_t* p) noexcept {
    return reinterpret_cast<const std::uint16_t*>(p);
  }

  // Scores of MR rows against NS strips (n keys of them valid).
  template <Code C, std::size_t MR, std::size_t NS>
  static void score_tile(std::size_t d, const float* q, std::size_t ldq,
                         const std::uint8_t* const* strip, std::size_t n, float alpha, float* s,
                         std::size_t lds) noexcept {
    const std::size_t G = kvq::groups(d);
    V acc[MR][NS * VPS];
    for (auto& row : acc) {
      for (V& a : row) a = L::splat(0.0f);
    }
    const std::size_t codes = 2 * kvq::kStrip * G;
    for (std::size_t g = 0; g < G; ++g) {
      V sc[NS * VPS];
      for (std::size_t t = 0; t < NS; ++t) {
        L::widen_bf16x16(scales_at(strip[t]) + g * kvq::kStrip, sc + t * VPS);
      }
      const std::size_t c1 = std::min(d, (g + 1) * kvq::kGroup);
      for (std::size_t c = g * kvq::kGroup; c < c1; ++c) {
        for (std::size_t t = 0; t < NS; ++t) {
          V k[VPS];
          widen<C>(strip[t] + codes + c * kvq::kStrip, k);
          for (std::size_t v = 0; v < VPS; ++v) {
            k[v] = k[v] * sc[t * VPS + v];
            for (std::size_t r = 0; r < MR; ++r) {
              acc[r][t * VPS + v] = L::fma(L::splat(q[r * ldq + c]), k[v], acc[r][t * VPS + v]);
            }
          }
        }
      }
    }
    const V a = L::splat(alpha);
    for (std::size_t t = 0; t < NS; ++t) {
      for (std::size_t v = 0; v < VPS; ++v) {
        const std::size_t col = t * kvq::kStrip + v * W;
        if (col >= n) break;
        for (std::size_t r = 0; r < MR; ++r) {
          L::store_n(s + r * lds + col, acc[r][t * VPS + v] * a, std::min(W, n - col));
        }
      }
    }
  }

  // The strips of keys [0, n) in tiles of strips_for(MR), the last of
  // fewer. K and V stream from memory once per step, and the hardware
  // prefetchers alone left the widening loads waiting on them: the scores
  // ask for the next tile of strips, P·V (value_tile) for the rows two
  // strips ahead (b16 kv4096 decode, 1 thread, AMX Xeon: 19.0-20.0 ms
  // before, 9.89-10.1 after), into the next call's keys (Zen 4: 14.8-15.0
  // ms before, 14.2-14.7 after).
  template <Code C, std::size_t MR>
  static void score_rows(std::size_t d, const float* q, std::size_t ldq, const kvq::KeyRuns& keys,
                         std::size_t n, float alpha, float* s, std::size_t lds) noexcept {
    kvq_tiles<strips_for(MR)>(0, (n + kvq::kStrip - 1) / kvq::kStrip, [&](std::size_t t, auto ns) {
      constexpr std::size_t NS = decltype(ns)::value;
      const std::uint8_t* strip[NS];
      kvq_strip_tile(keys, d, t, n, NS, strip);
      const std::size_t j = t * kvq::kStrip;
      score_tile<C, MR, NS>(d, q, ldq, strip, n - j, alpha, s + j, lds);
    });
  }

  template <Code C>
  static void scores(std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                     const kvq::KeyRuns& keys, std::size_t n, float alpha, float* s,
                     std::size_t lds) noexcept {
    kvq_row_blocks<kMr>(rows, [&](std::size_t r0, auto mr) {
      score_rows<C, decltype(mr)::value>(d, q + r0 * ldq, ldq, keys, n, alpha, s + r0 * lds, lds);
    });
  }

  // P·V of MR rows over NG groups of channels from group g0.
  template <Code C, std::size_t MR, std::size_t NG>
  static void value_tile(std::size_t d, std::size_t g0, const float* p, std::size_t ldp,
                         const kvq::KeyRuns& keys, std::size_t n, float beta, float* o,
                         std::size_t ldo) noexcept {
    const std::size_t G = kvq::groups(d), rb = kvq::value_row_bytes(d);
    V acc[MR][NG * GV];
    for (auto& row : acc) {
      for (V& a : row) a = L::splat(0.0f);
    }
    // A strip's rows at a time: they are consecutive in one block.
    const std::uint8_t* run = nullptr;
    for (std::size_t j = 0; j < n; ++j) {
      if (j % kvq::kStrip == 0) {
        run = keys.row(j, d);
        if (g0 == 0 && j + 2 * kvq::kStrip < n + keys.ahead)
          prefetch_bytes(keys.row(j + 2 * kvq::kStrip, d), kvq::kStrip * rb);
      }
      const std::uint8_t* row = run + j % kvq::kStrip * rb;
      for (std::size_t g = 0; g < NG; ++g) {
        const V sc = L::splat(kvq::bf16_value(kvq::scale_at(row + 2 * (g0 + g))));
        const std::uint8_t* codes = row + 2 * G + (g0 + g) * kvq::kGroup;
        for (std::size_t h = 0; h < GV; h += VPS) {
          V v[VPS];
          widen<C>(codes + h * W, v);
          for (std::size_t u = 0; u < VPS; ++u) {
            v[u] = v[u] * sc;
            for (std::size_t r = 0; r < MR; ++r) {
              acc[r][g * GV + h + u] =
                  L::fma(L::splat(p[r * ldp + j]), v[u], acc[r][g * GV + h + u]);
            }
          }
        }
      }
    }
    const V b = L::splat(beta);
    for (std::size_t r = 0; r < MR; ++r) {
      for (std::size_t i = 0; i < NG * GV; ++i) {
        const std::size_t c = g0 * kvq::kGroup + i * W;
        if (c >= d) break;
        const std::size_t lanes = std::min(W, d - c);
        float* out = o + r * ldo + c;
        L::store_n(out, beta == 0.0f ? acc[r][i] : L::fma(b, L::load_n(out, lanes), acc[r][i]),
                   lanes);
      }
    }
  }

  // The groups in tiles of groups_for(MR), the last of fewer (every output
  // vector is a dependency chain over the keys: a decode row needs them all).
  template <Code C, std::size_t MR>
  static void value_rows(std::size_t d, const float* p, std::size_t ldp, const kvq::KeyRuns& keys,
                         std::size_t n, float beta, float* o, std::size_t ldo) noexcept {
    kvq_tiles<groups_for(MR)>(0, kvq::groups(d), [&](std::size_t g, auto ng) {
      value_tile<C, MR, decltype(ng)::value>(d, g, p, ldp, keys, n, beta, o, ldo);
    });
  }

  template <Code C>
  static void values(std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                     const kvq::KeyRuns& keys, std::size_t n, float beta, float* o,
                     std::size_t ldo) noexcept {
    kvq_row_blocks<kMrV>(rows, [&](std::size_t r0, auto mr) {
      value_rows<C, decltype(mr)::value>(d, p + r0 * ldp, ldp, keys, n, beta, o + r0 * ldo, ldo);
    });
  }

  static constexpr KvQuantKernels table() {
    return {{&scores<Code::int8>, &scores<Code::e4m3>},
            {&values<Code::int8>, &values<Code::e4m3>},
            &kvq::quantize_group_lanes,
            &kvq::strips_from_rows};
  }
};

}  // namespace mha::detail
