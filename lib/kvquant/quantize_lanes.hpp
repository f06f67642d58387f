// quantize_group (format.hpp) in vector lanes of 8 doubles (GCC vector
// extensions, compiled with the including table's ISA flags): int8's scale
// search with each candidate scale in a lane, its codes and squared error
// computed by the scalar search's operations in its channel order (the same
// errors, the same choice); then the kept scale's codes 8 channels at a
// time, E4M3's by rounding the bits of a double. The same codes as the
// scalar ones. A group of 32 took 0.43 us in the scalar int8 search on Zen
// 4, 6 % of a 512-token chunk onto an int8 cache.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kvquant/format.hpp"

namespace mha::detail::kvq {
namespace {  // one copy per table's ISA

using Doubles = double __attribute__((vector_size(8 * sizeof(double))));
using Int64s = std::int64_t __attribute__((vector_size(8 * sizeof(std::int64_t))));

// The helpers take vectors by reference: a vector argument's ABI differs
// by ISA.
//
// y rounded to an integer, nearest even, as nearbyint for |y| < 2^51:
// adding and taking away 1.5 * 2^52 (a -0 there reads as +0, the same code).
void round_to_even(Doubles& y) {
  const Doubles round = Doubles{} + 0x1.8p52;
  y = (y + round) - round;
}
// y = nearbyint(clamp(y, -127, 127)) for y not NaN, as int8_code rounds.
void to_int8_values(Doubles& y) {
  const Doubles zero{}, hi = zero + 127.0, lo = zero - 127.0;
  y = y > hi ? hi : y;
  y = y < lo ? lo : y;
  round_to_even(y);
}
// e4m3_code(y) for y not NaN: saturated from 448 on, subnormal below 2^-6
// (a * 512 rounded to nearest even), else the double's bits rounded to a
// 3-bit mantissa (nearest even, the carry into the exponent as e4m3_code's
// mant == 8) and rebiased from 1023 to 7.
void to_e4m3_codes(const Doubles& y, Int64s& code) {
  const auto bits = __builtin_bit_cast(Int64s, y);
  const Int64s sign = (bits >> 56) & 0x80, mag = bits & 0x7FFFFFFFFFFFFFFF;
  const Doubles a = __builtin_bit_cast(Doubles, mag);
  Int64s normal = ((mag + 0xFFFFFFFFFFFF + ((mag >> 49) & 1)) >> 49) - (1016 << 3);
  normal = normal > 0x7E ? 0x7E : normal;
  Doubles sub = a * 512.0;
  round_to_even(sub);
  code = a < 0x1p-6 ? __builtin_convertvector(sub, Int64s) : normal;
  code = (a < 448.0 ? code : 0x7E) | sign;
}

// maybe_unused: the dot table's object includes it and quantizes nothing
// (clang 14 warned that it would not be emitted there).
[[maybe_unused]] std::uint16_t quantize_group_lanes(Code c, const float* x, std::size_t n,
                                                    std::uint8_t* codes) {
  std::uint16_t bits[kMaxScales] = {};
  const std::size_t count = group_scales(c, x, n, bits);
  if (count == 0) {
    std::fill_n(codes, n, std::uint8_t{0});
    return kNanScale;
  }
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
  // The kept scale's codes, 8 channels at a time (a zero scale: zeros).
  const double s = bf16_value(best);
  for (std::size_t i = 0; i < n; i += 8) {
    Doubles y{};
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) y[k] = x[i + k];
    y = s == 0.0 ? Doubles{} : y / s;
    Int64s q;
    if (c == Code::int8) {
      to_int8_values(y);
      q = __builtin_convertvector(y, Int64s);
    } else {
      to_e4m3_codes(y, q);
    }
    for (std::size_t k = 0; k < 8 && i + k < n; ++k) codes[i + k] = static_cast<std::uint8_t>(q[k]);
  }
  return best;
}

}  // namespace
}  // namespace mha::detail::kvq
