#include "kvquant/format.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

namespace mha::detail::kvq {
namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}
float float_of(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

// int8 scales tried per group beside the rounded-up one (6 bf16 steps span
// 2.3-4.7 %).
constexpr std::uint16_t kScaleCandidates = 6;
static_assert(kScaleCandidates + 1 <= kMaxScales);

// The smallest bf16 >= s (s >= 0, finite), or the largest below it where
// code_max times that would overflow fp32.
std::uint16_t scale_bits(double s, float qmax) {
  float f = static_cast<float>(s);
  if (static_cast<double>(f) < s) f = std::nextafter(f, FLT_MAX);
  std::uint32_t b = bits_of(f);
  const std::uint32_t down = b & 0xFFFF0000u;
  std::uint32_t up = (b & 0xFFFFu) != 0 ? down + 0x10000u : down;
  if (static_cast<double>(float_of(up)) * qmax > FLT_MAX) up = down;
  return static_cast<std::uint16_t>(up >> 16);
}

std::uint8_t int8_code(double y) {
  const double r = std::nearbyint(std::clamp(y, -127.0, 127.0));
  return static_cast<std::uint8_t>(static_cast<std::int8_t>(r));
}

std::uint8_t* key_strip(std::uint8_t* k_block, std::size_t d, std::size_t j) {
  return k_block + j / kStrip * key_strip_bytes(d);
}

// 16 bytes in a vector (SSE2 or NEON), so the transpose below is 64
// byte interleaves rather than 256 scalar moves.
using Bytes16 = std::uint8_t __attribute__((vector_size(16)));
static_assert(kStrip == 16);

// x[r][c] becomes x[c][r]: interleaving row i with row i + 8 rotates the
// bits of (row, column) left by one, four times a transpose.
void transpose(Bytes16 (&x)[kStrip]) {
  for (int round = 0; round < 4; ++round) {
    Bytes16 y[kStrip];
    for (std::size_t i = 0; i < kStrip / 2; ++i) {
      y[2 * i] = __builtin_shufflevector(x[i], x[i + 8], 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21,
                                         6, 22, 7, 23);
      y[2 * i + 1] = __builtin_shufflevector(x[i], x[i + 8], 8, 24, 9, 25, 10, 26, 11, 27, 12, 28,
                                             13, 29, 14, 30, 15, 31);
    }
    std::copy_n(y, kStrip, x);
  }
}

}  // namespace

float key_element(Code c, std::size_t d, const std::uint8_t* strip, std::size_t lane,
                  std::size_t i) {
  return code_value(c, strip[2 * kStrip * groups(d) + i * kStrip + lane]) *
         bf16_value(scale_at(strip + (i / kGroup * kStrip + lane) * 2));
}
float value_element(Code c, std::size_t d, const std::uint8_t* row, std::size_t i) {
  return code_value(c, row[2 * groups(d) + i]) * bf16_value(scale_at(row + 2 * (i / kGroup)));
}

float code_value(Code c, std::uint8_t code) {
  if (c == Code::int8) return static_cast<float>(static_cast<std::int8_t>(code));
  const std::uint32_t sext =
      static_cast<std::uint32_t>(static_cast<std::int32_t>(static_cast<std::int8_t>(code)));
  return float_of((sext << 20) & 0x87F00000u) * 0x1p120f;
}

std::uint8_t e4m3_code(double y) {
  const std::uint8_t sign = std::signbit(y) ? 0x80 : 0;
  const double a = std::fabs(y);
  if (!(a < 448.0)) return sign | 0x7E;  // saturates (NaN never reaches here)
  if (a < 0x1p-6) return sign | static_cast<std::uint8_t>(std::nearbyint(a * 512.0));
  int e;
  std::frexp(a, &e);
  --e;  // a in [2^e, 2^(e+1))
  int mant = static_cast<int>(std::nearbyint((std::ldexp(a, -e) - 1.0) * 8.0));
  if (mant == 8) {
    mant = 0;
    ++e;
  }
  const int code = std::min((e + 7) << 3 | mant, 0x7E);
  return sign | static_cast<std::uint8_t>(code);
}

std::size_t group_scales(Code c, const float* x, std::size_t n, std::uint16_t (&bits)[kMaxScales]) {
  double amax = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) return 0;
    amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  }
  const float qmax = code_max(c);
  bits[0] = scale_bits(amax / qmax, qmax);
  std::size_t count = 1;
  if (c == Code::e4m3 || amax == 0.0) return count;
  // Of the bf16 scales from just below max|x| / 128 up, the first with the
  // least squared error of the group (bf16's coarse scales otherwise cost
  // 2 % of RMS error against q8_0's fp16 ones; this search gains 6 %).
  const std::uint16_t first = scale_bits(amax / 128.0, qmax);
  for (std::uint16_t b = first > 0 ? first - 1 : 0, k = 0; k < kScaleCandidates; ++b, ++k) {
    if (b == bits[0] || bf16_value(b) == 0.0f ||
        static_cast<double>(bf16_value(b)) * qmax > FLT_MAX) {
      continue;
    }
    bits[count++] = b;
  }
  return count;
}

std::size_t least_error(const double* sse, const std::uint16_t* bits, std::size_t count) {
  std::size_t best = 0;
  for (std::size_t k = 1; k < count; ++k) {
    if (sse[k] < sse[best] || (sse[k] == sse[best] && bits[k] < bits[best])) best = k;
  }
  return best;
}

std::uint16_t quantize_group(Code c, const float* x, std::size_t n, std::uint8_t* codes) {
  const auto encode = [&](std::uint16_t bits, std::uint8_t* out) {
    const double scale = bf16_value(bits);
    double sse = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const double y = scale == 0.0 ? 0.0 : static_cast<double>(x[i]) / scale;
      out[i] = c == Code::int8 ? int8_code(y) : e4m3_code(y);
      const double e = code_value(c, out[i]) * scale - static_cast<double>(x[i]);
      sse += e * e;
    }
    return sse;
  };
  std::uint16_t bits[kMaxScales] = {};
  const std::size_t count = group_scales(c, x, n, bits);
  if (count == 0) {
    std::fill_n(codes, n, std::uint8_t{0});
    return kNanScale;
  }
  double sse[kMaxScales];
  std::uint8_t trial[kMaxScales][kGroup];
  for (std::size_t k = 0; k < count; ++k) sse[k] = encode(bits[k], trial[k]);
  const std::size_t best = least_error(sse, bits, count);
  std::copy_n(trial[best], n, codes);
  return bits[best];
}

void put_key(Code c, std::size_t d, std::uint8_t* k_block, std::uint8_t* v_block, std::size_t j,
             const float* key, const float* value, Quantize quantize) {
  const std::size_t G = groups(d), lane = j % kStrip;
  std::uint8_t* strip = key_strip(k_block, d, j);
  if (lane == 0) std::memset(strip, 0, key_strip_bytes(d));
  std::uint8_t codes[kGroup];
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t c0 = g * kGroup, n = std::min(kGroup, d - c0);
    const std::uint16_t ks = quantize(c, key + c0, n, codes);
    std::memcpy(strip + (g * kStrip + lane) * 2, &ks, 2);
    for (std::size_t i = 0; i < n; ++i) strip[2 * kStrip * G + (c0 + i) * kStrip + lane] = codes[i];
  }
  put_value(c, d, v_block, j, value, quantize);
}

void put_value(Code c, std::size_t d, std::uint8_t* v_block, std::size_t j, const float* value,
               Quantize quantize) {
  const std::size_t G = groups(d);
  std::uint8_t* row = v_block + j * value_row_bytes(d);
  for (std::size_t g = 0; g < G; ++g) {
    const std::size_t c0 = g * kGroup, n = std::min(kGroup, d - c0);
    std::uint8_t codes[kGroup] = {};
    const std::uint16_t vs = quantize(c, value + c0, n, codes);
    std::memcpy(row + 2 * g, &vs, 2);
    std::memcpy(row + 2 * G + c0, codes, kGroup);
  }
}

void get_key(Code c, std::size_t d, const std::uint8_t* k_block, const std::uint8_t* v_block,
             std::size_t j, float* key, float* value) {
  const std::uint8_t* strip = k_block + j / kStrip * key_strip_bytes(d);
  const std::uint8_t* row = v_block + j * value_row_bytes(d);
  for (std::size_t i = 0; i < d; ++i) {
    key[i] = key_element(c, d, strip, j % kStrip, i);
    value[i] = value_element(c, d, row, i);
  }
}

void clear_key(std::size_t d, std::uint8_t* k_block, std::uint8_t* v_block, std::size_t j) {
  const std::size_t G = groups(d), lane = j % kStrip;
  std::uint8_t* strip = key_strip(k_block, d, j);
  for (std::size_t g = 0; g < G; ++g) std::memset(strip + (g * kStrip + lane) * 2, 0, 2);
  for (std::size_t i = 0; i < d; ++i) strip[2 * kStrip * G + i * kStrip + lane] = 0;
  clear_value(d, v_block, j);
}

void clear_value(std::size_t d, std::uint8_t* v_block, std::size_t j) {
  std::memset(v_block + j * value_row_bytes(d), 0, value_row_bytes(d));
}

void copy_keys(std::size_t d, const std::uint8_t* k_block, const std::uint8_t* v_block,
               std::size_t j, std::size_t n, std::uint8_t* k_to, std::uint8_t* v_to,
               std::size_t to) {
  const std::size_t G = groups(d), from = j % kStrip, lane = to % kStrip;
  const std::uint8_t* src = k_block + j / kStrip * key_strip_bytes(d);
  std::uint8_t* dst = key_strip(k_to, d, to);
  if (n == kStrip) {
    std::memcpy(dst, src, key_strip_bytes(d));
  } else {
    for (std::size_t g = 0; g < G; ++g) {
      std::memcpy(dst + (g * kStrip + lane) * 2, src + (g * kStrip + from) * 2, 2 * n);
    }
    for (std::size_t i = 0; i < d; ++i) {
      std::memcpy(dst + 2 * kStrip * G + i * kStrip + lane,
                  src + 2 * kStrip * G + i * kStrip + from, n);
    }
  }
  copy_values(d, v_block, j, n, v_to, to);
}

void copy_values(std::size_t d, const std::uint8_t* v_block, std::size_t j, std::size_t n,
                 std::uint8_t* v_to, std::size_t to) {
  std::memcpy(v_to + to * value_row_bytes(d), v_block + j * value_row_bytes(d),
              n * value_row_bytes(d));
}

void strips_from_rows(std::size_t d, const KeyRuns& keys, std::size_t n, std::uint8_t* strips) {
  const std::size_t G = groups(d), rb = value_row_bytes(d);
  for (std::size_t t = 0; t * kStrip < n; ++t) {
    std::uint8_t* strip = strips + t * key_strip_bytes(d);
    const std::uint8_t* rows = keys.row(t * kStrip, d);  // a strip's rows are consecutive
    const std::size_t m = std::min(kStrip, n - t * kStrip);
    for (std::size_t g = 0; g < G; ++g) {
      for (std::size_t lane = 0; lane < kStrip; ++lane) {
        const std::uint16_t s = lane < m ? scale_at(rows + lane * rb + 2 * g) : 0;
        std::memcpy(strip + (g * kStrip + lane) * 2, &s, 2);
      }
    }
    // Rows hold whole groups of codes, so 16 from any c0 < d are there.
    for (std::size_t c0 = 0; c0 < d; c0 += kStrip) {
      Bytes16 x[kStrip] = {};
      for (std::size_t lane = 0; lane < m; ++lane) {
        std::memcpy(&x[lane], rows + lane * rb + 2 * G + c0, sizeof x[lane]);
      }
      transpose(x);
      std::memcpy(strip + 2 * kStrip * G + c0 * kStrip, x, std::min(kStrip, d - c0) * kStrip);
    }
  }
}

// Each key (V row) is decoded a group at a time, once for all rows rather
// than once per product, and a score's running sum waits in s between
// groups (a float store is exact): the sums are the ones format.hpp gives.
void scores_emulated(Code c, std::size_t rows, std::size_t d, const float* q, std::size_t ldq,
                     const KeyRuns& keys, std::size_t n, float alpha, float* s, std::size_t lds) {
  const std::size_t G = groups(d);
  float key[kGroup];
  for (std::size_t j = 0; j < n; ++j) {
    const std::uint8_t* strip = keys.strip(j, d);
    const std::size_t lane = j % kStrip;
    for (std::size_t r = 0; r < rows; ++r) s[r * lds + j] = 0.0f;
    for (std::size_t g = 0; g < G; ++g) {
      const std::size_t c0 = g * kGroup, w = std::min(kGroup, d - c0);
      for (std::size_t i = 0; i < w; ++i) key[i] = key_element(c, d, strip, lane, c0 + i);
      for (std::size_t r = 0; r < rows; ++r) {
        float acc = s[r * lds + j];
        for (std::size_t i = 0; i < w; ++i) acc = std::fma(q[r * ldq + c0 + i], key[i], acc);
        s[r * lds + j] = acc;
      }
    }
    for (std::size_t r = 0; r < rows; ++r) s[r * lds + j] *= alpha;
  }
}

// A tile of rows and a group of channels at a time, so each V row's group
// is decoded once per tile; every output's sum still runs over the keys in
// order.
void values_emulated(Code c, std::size_t rows, std::size_t d, const float* p, std::size_t ldp,
                     const KeyRuns& keys, std::size_t n, float beta, float* o, std::size_t ldo) {
  constexpr std::size_t kRows = 8;
  const std::size_t G = groups(d);
  float value[kGroup], acc[kRows][kGroup];
  for (std::size_t r0 = 0; r0 < rows; r0 += kRows) {
    const std::size_t h = std::min(kRows, rows - r0);
    for (std::size_t g = 0; g < G; ++g) {
      const std::size_t c0 = g * kGroup, w = std::min(kGroup, d - c0);
      for (std::size_t r = 0; r < h; ++r) std::fill_n(acc[r], w, 0.0f);
      for (std::size_t j = 0; j < n; ++j) {
        const std::uint8_t* row = keys.row(j, d);
        for (std::size_t i = 0; i < w; ++i) value[i] = value_element(c, d, row, c0 + i);
        for (std::size_t r = 0; r < h; ++r) {
          const float pj = p[(r0 + r) * ldp + j];
          for (std::size_t i = 0; i < w; ++i) acc[r][i] = std::fma(pj, value[i], acc[r][i]);
        }
      }
      for (std::size_t r = 0; r < h; ++r) {
        float* out = o + (r0 + r) * ldo + c0;
        for (std::size_t i = 0; i < w; ++i) {
          out[i] = beta == 0.0f ? acc[r][i] : std::fma(beta, out[i], acc[r][i]);
        }
      }
    }
  }
}

}  // namespace mha::detail::kvq
