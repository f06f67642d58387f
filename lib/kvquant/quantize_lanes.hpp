// quantize_group (format.hpp) with int8's scale search in vector lanes:
// each candidate scale in a lane of 8 doubles (GCC vector extensions,
// compiled with the including table's ISA flags), its codes and squared
// error computed by the scalar search's operations in its channel order, so
// the same errors, the same choice and the same codes. E4M3 tries one
// scale and stays scalar. A group of 32 took 0.43 us scalar on Zen 4, 6 %
// of a 512-token chunk onto an int8 cache.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "kvquant/format.hpp"

namespace mha::detail::kvq {
namespace {  // one copy per table's ISA

using Doubles = double __attribute__((vector_size(8 * sizeof(double))));

// y = nearbyint(clamp(y, -127, 127)) for y not NaN, as int8_code rounds
// (to nearest even: below 2^52 in magnitude, adding and taking away
// 1.5 * 2^52 rounds to an integer, ties to even; a -0 there reads as +0,
// the same code). By reference: a vector argument's ABI differs by ISA.
void to_int8_values(Doubles& y) {
  const Doubles zero{}, hi = zero + 127.0, lo = zero - 127.0, round = zero + 0x1.8p52;
  y = y > hi ? hi : y;
  y = y < lo ? lo : y;
  y = (y + round) - round;
}

std::uint16_t quantize_group_lanes(Code c, const float* x, std::size_t n, std::uint8_t* codes) {
  if (c != Code::int8) return quantize_group(c, x, n, codes);
  double amax = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      std::fill_n(codes, n, std::uint8_t{0});
      return kNanScale;
    }
    amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  }
  std::uint16_t bits[kMaxScales] = {};
  const std::size_t count = int8_scales(amax, bits);
  std::uint16_t best = bits[0];
  if (count > 1) {
    Doubles scale = Doubles{} + 1.0, sse{};
    for (std::size_t k = 0; k < count; ++k) scale[k] = bf16_value(bits[k]);
    for (std::size_t i = 0; i < n; ++i) {
      const Doubles xi = Doubles{} + static_cast<double>(x[i]);
      Doubles y = xi / scale;
      to_int8_values(y);
      const Doubles e = y * scale - xi;
      sse += e * e;
    }
    double errors[kMaxScales];
    for (std::size_t k = 0; k < count; ++k) errors[k] = sse[k];
    best = bits[least_error(errors, bits, count)];
  }
  // The kept scale's codes, 8 channels a lane each (a zero scale: zeros).
  const double s = bf16_value(best);
  for (std::size_t i = 0; i < n; i += 8) {
    Doubles xi{};
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) xi[k] = x[i + k];
    Doubles q{};
    if (s != 0.0) {
      q = xi / s;
      to_int8_values(q);
    }
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) {
      codes[i + k] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q[k]));
    }
  }
  return best;
}

}  // namespace
}  // namespace mha::detail::kvq
