// Per-ISA softmax / exp kernel table: the row primitives that the public
// softmax and the fused (online-softmax) attention are built from.
#pragma once

#include <cstddef>

namespace mha::detail {

struct SoftmaxKernels {
  // y[i] = exp(x[i]); in place allowed. <= 2 ulp; -inf -> 0, underflow -> 0
  // (never denormal), overflow -> +inf, NaN -> NaN.
  void (*exp)(const float* x, float* y, std::size_t n);
  // max of x[0..n), n >= 1 (-inf if every element is -inf).
  float (*reduce_max)(const float* x, std::size_t n);
  // x[i] = exp(x[i] - shift) in place; returns the sum of the new x.
  // shift is finite. Summation order is fixed by n alone.
  float (*exp_sum)(float* x, std::size_t n, float shift);
  // x[i] *= s.
  void (*scale)(float* x, std::size_t n, float s);
  // y[i] = x[i] * s + add[i] (add may be null: y[i] = x[i] * s). In place allowed.
  void (*scale_add)(const float* x, const float* add, float* y, std::size_t n, float s);
};

extern const SoftmaxKernels softmax_kernels_scalar;
extern const SoftmaxKernels softmax_kernels_avx2;
extern const SoftmaxKernels softmax_kernels_avx512;
extern const SoftmaxKernels softmax_kernels_neon;

}  // namespace mha::detail
