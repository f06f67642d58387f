// The emulation of the quantized products on bf16 dot products
// (format.hpp, scores_dot_emulated and values_dot_emulated): scalar, lane
// by lane, on emulated_vdpbf16ps_pair's steps.
#include <algorithm>
#include <cmath>

#include "gemm/gemm_bf16.hpp"
#include "kvquant/format.hpp"

namespace mha::detail::kvq {
namespace {

std::uint32_t pair_of(std::uint16_t even, std::uint16_t odd) {
  return static_cast<std::uint32_t>(even) | static_cast<std::uint32_t>(odd) << 16;
}

}  // namespace

void scores_dot_emulated(Code c, std::size_t rows, std::size_t d, const std::uint32_t* q,
                         std::size_t ldq, const KeyRuns& keys, std::size_t n, float alpha, float* s,
                         std::size_t lds) {
  const std::size_t codes = 2 * kStrip * groups(d);
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint8_t* strip = keys.strip(j, d);
    const std::size_t lane = (keys.j0 + j) % kStrip;
    const auto code = [&](std::size_t ch) -> std::uint16_t {
      return ch < d ? dot_code_bf16(c, strip[codes + ch * kStrip + lane]) : 0;
    };
    for (std::size_t r = 0; r < rows; ++r) {
      float t = 0.0f;
      for (std::size_t g = 0; g < groups(d); ++g) {
        const std::size_t c0 = g * kGroup, c1 = c0 + (std::min(d, c0 + kGroup) - c0 + 3) / 4 * 4;
        float a = 0.0f;
        for (std::size_t ch = c0; ch < c1; ch += 2) {
          a = emulated_vdpbf16ps_pair(a, q[r * ldq + ch / 2], pair_of(code(ch), code(ch + 1)));
        }
        t = std::fma(a, bf16_value(scale_at(strip + 2 * (g * kStrip + lane))), t);
      }
      s[r * lds + j] = alpha * t;
    }
  }
}

void values_dot_emulated(Code c, std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                         const KeyRuns& keys, std::size_t n, float beta, float* o,
                         std::size_t ldo) {
  const std::size_t G = groups(d);
  // p'(r, j) of channel ch's group, bf16 as vcvtneps2bf16 rounds it; key
  // n (an odd n's pair half) zero.
  const auto scaled_p = [&](std::size_t r, std::size_t j, std::size_t ch) -> std::uint16_t {
    if (j >= n) return 0;
    const float x = p[r * ldp + j] * bf16_value(scale_at(keys.row(j, d) + 2 * (ch / kGroup)));
    float pair[2] = {x, 0.0f};
    std::uint16_t out[2];
    emulated_round_rows(1, 2, pair, 2, out, 2);
    return out[0];
  };
  const auto code = [&](std::size_t j, std::size_t ch) -> std::uint16_t {
    return j < n ? dot_code_bf16(c, keys.row(j, d)[2 * G + ch]) : 0;
  };
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t ch = 0; ch < d; ++ch) {
      float a = 0.0f;
      for (std::size_t j = 0; j < n; j += 2) {
        a = emulated_vdpbf16ps_pair(a, pair_of(scaled_p(r, j, ch), scaled_p(r, j + 1, ch)),
                                    pair_of(code(j, ch), code(j + 1, ch)));
      }
      float& out = o[r * ldo + ch];
      out = beta == 0.0f ? a : std::fma(beta, out, a);
    }
  }
}

}  // namespace mha::detail::kvq
