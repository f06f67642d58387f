// Double-precision reference for mha::softmax and the checks built on it.
#pragma once

#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <limits>
#include <mha/softmax.hpp>
#include <vector>

namespace mha::test {

// Whether row i keeps column j (a column predicate, written independently of
// the library's prefix-length computation).
inline bool kept(const SoftmaxOptions& o, std::size_t i, std::size_t j) {
  if (o.valid_len != nullptr && j >= o.valid_len[i]) return false;
  if (o.causal && static_cast<long long>(j) > static_cast<long long>(i) + o.causal_offset)
    return false;
  return true;
}

// Checks y (row stride ldy) against the double softmax of x under `o`:
// masked columns exactly 0, fully masked rows 0, NaN/+inf rows NaN, and
// otherwise |y - ref| <= ref * tol + 2 FLT_MIN, with tol covering exp's 2 ulp,
// the normalisation, the float sum ((cols/2 + 16) u) and the rounding of z
// and of z - max (2u (|z| + |max| + |z - max|)), u = 2^-24.
inline void check_softmax(std::size_t rows, std::size_t cols, const float* x, std::size_t ldx,
                          const float* y, std::size_t ldy, const SoftmaxOptions& o) {
  const double u = std::ldexp(1.0, -24);
  const double s = o.scale == 0.f ? 1.0 : o.scale;
  std::vector<double> z(cols);
  for (std::size_t i = 0; i < rows; ++i) {
    double m = -INFINITY;
    bool bad = false;
    for (std::size_t j = 0; j < cols; ++j) {
      if (!kept(o, i, j)) continue;
      double a = o.additive != nullptr ? o.additive[i * o.additive_ld + j] : 0.0;
      // z as the library forms it in float (one rounding), so that overflow
      // to +inf follows the float rule.
      const float zf = o.additive != nullptr
                           ? std::fma(x[i * ldx + j], static_cast<float>(s), static_cast<float>(a))
                           : x[i * ldx + j] * static_cast<float>(s);
      z[j] = std::isfinite(zf) ? double(x[i * ldx + j]) * s + a : double(zf);
      if (std::isnan(z[j]) || z[j] == INFINITY) bad = true;
      if (z[j] > m) m = z[j];
    }
    double sum = 0, spread = 0;
    for (std::size_t j = 0; j < cols; ++j) {
      if (!kept(o, i, j) || bad || m == -INFINITY) continue;
      sum += std::exp(z[j] - m);
      if (z[j] != -INFINITY)
        spread = std::max(spread, std::fabs(z[j]) + std::fabs(m) + std::fabs(z[j] - m));
    }
    const double tol = (cols / 2.0 + 16) * u + 2 * u * spread;
    for (std::size_t j = 0; j < cols; ++j) {
      const float got = y[i * ldy + j];
      INFO("row " << i << " col " << j << " of " << rows << " x " << cols << ", z=" << z[j]
                  << " max=" << m);
      if (!kept(o, i, j) || (!bad && m == -INFINITY)) {
        if (got != 0.f) FAIL_CHECK("expected 0, got " << got);
      } else if (bad) {
        if (!std::isnan(got)) FAIL_CHECK("expected NaN, got " << got);
      } else {
        const double ref = std::exp(z[j] - m) / sum;
        if (!(std::fabs(got - ref) <= ref * tol + 2.0 * FLT_MIN))
          FAIL_CHECK("got " << got << ", reference " << ref << ", tolerance " << ref * tol);
      }
    }
  }
}

}  // namespace mha::test
