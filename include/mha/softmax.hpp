// Row-wise softmax, C++ API. The C API (mha_softmax in mha.h) is the same
// function; see there for the full rules, repeated in brief here.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <mha/error.hpp>

namespace mha {

// Options of a softmax call; the defaults (all zero but scale) switch
// everything off. Same meaning as mha_softmax_options.
struct SoftmaxOptions {
  float scale = 1.f;                // z = x * scale (+ additive); 0 also means 1
  const float* additive = nullptr;  // nullptr, or [rows x cols] added after scaling
  std::size_t additive_ld = 0;      // additive row stride; 0 = one row for every row
  bool causal = false;              // row i keeps columns j <= i + causal_offset
  std::ptrdiff_t causal_offset = 0;
  const std::size_t* valid_len = nullptr;  // nullptr, or per row: keeps columns j < valid_len[i]
};

// y[i, :] = softmax(x[i, :] * scale + additive[i, :]) over the kept columns,
// 0 elsewhere, for row-major x [rows x cols] (row stride ldx) into y (row
// stride ldy). In place (x == y, ldx == ldy) is allowed; any other overlap is
// an error. A row with no kept column, or whose kept values are all -inf,
// becomes all zeros. A row whose kept values (after scaling and mask) contain
// NaN or +inf becomes NaN at every kept column (0 at masked ones).
// Error: throws mha::Error(MHA_INVALID_ARGUMENT) on bad arguments.
MHA_API void softmax(std::size_t rows, std::size_t cols, const float* x, std::size_t ldx, float* y,
                     std::size_t ldy, const SoftmaxOptions& options = {});

}  // namespace mha
