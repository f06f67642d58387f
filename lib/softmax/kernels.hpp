// Per-ISA softmax / exp kernel table: the row primitives that the public
// softmax and the fused (online-softmax) attention are built from.
// Implemented once in softmax_kernels.hpp; tables softmax_kernels_<isa> are
// defined in softmax_<isa>.cpp. None of them threads or allocates.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mha/isa.hpp>

namespace mha::detail {

struct SoftmaxKernels {
  // y[i] = exp(x[i]); in place allowed. <= 2 ulp; -inf -> 0, underflow -> 0
  // (never denormal), overflow -> +inf, NaN -> NaN.
  void (*exp)(const float* x, float* y, std::size_t n);
  // max of x[0..n), n >= 1 (-inf if every element is -inf). With a NaN in x
  // the result is unspecified (NaN or the max of the others); exp_sum then
  // still returns NaN, since the NaN element's exp is NaN.
  float (*reduce_max)(const float* x, std::size_t n);
  // x[i] = exp(x[i] - shift) in place; returns the sum of the new x.
  // shift is finite, and no result overflows (x[i] - shift <= 88.72 where
  // x[i] is a number; callers shift by the max): these exp passes leave out
  // exp's overflow check. Summation order is fixed by n alone.
  float (*exp_sum)(float* x, std::size_t n, float shift);
  // x[i] *= s.
  void (*scale)(float* x, std::size_t n, float s);
  // y[i] = x[i] * s + add[i] (add may be null: y[i] = x[i] * s). In place allowed.
  // With add, computed as one fused multiply-add (rounded once).
  void (*scale_add)(const float* x, const float* add, float* y, std::size_t n, float s);
  // y[i] = exp(fl(x[i] * s) - shift); returns the sum of y (order fixed by n).
  // No result overflows, as for exp_sum. In place allowed. Bit-identical to
  // scale_add(x, null, y, n, s) followed by exp_sum(y, n, shift), without the
  // intermediate pass; with shift = fl(s * max(x)) (s > 0) the max element
  // gives exactly 1. exp_sum is this with s = 1.
  float (*scale_exp_sum)(const float* x, float* y, std::size_t n, float s, float shift);
  // scale_add that also returns max(y[0..n)) (n >= 1; -inf if all are -inf;
  // NaN as for reduce_max): scaling, masking and the row max in one pass.
  float (*scale_add_max)(const float* x, const float* add, float* y, std::size_t n, float s);
  // x[i] = cap * tanh(x[i] / cap) in place (cap > 0, finite): attention
  // soft-capping. tanh(u) = 1 - 2/(exp(2u) + 1): absolute error <= 5e-7 · cap
  // (a few ulp of cap; what the softmax sees), +-inf -> +-cap, NaN -> NaN.
  void (*soft_cap)(float* x, std::size_t n, float cap);
  // y[i] = 2^fl(fma(x[i], fl(s·log2 e), fl(-shift·log2 e))) ~ exp(x[i]·s -
  // shift), to 2.9e-6 relative plus (|x[i]·s| + |shift|)·1.3e-7 from the
  // argument's roundings: the exp pass of P for products that round P to
  // bf16 (relative 2^-9) anyway, in about 70 % of scale_exp_sum's
  // instructions.
  // Returns the sum of y (order fixed by n). No result overflows (callers
  // shift by the max); below 2^-126 a result is 0. In place allowed. The
  // same bits on every ISA.
  float (*scale_exp2_sum)(const float* x, float* y, std::size_t n, float s, float shift);
  // scale_exp2_sum with y rounded to bf16 (nearest even; a NaN's bits
  // unspecified) into y[0..n), and y[n] = 0 for an odd n, completing the
  // pair: the attention core's bf16 P rows written by the exp pass itself
  // (online_begin_bf16). Returns scale_exp2_sum's sum, of the unrounded
  // values. Not in place. Null where the ISA has no conversion instruction
  // (a bit-exact emulation in integer lanes cost the BERT s512 bf16 core
  // more than the separate rounding pass it saved, AMX Xeon).
  float (*scale_exp2_sum_bf16)(const float* x, std::uint16_t* y, std::size_t n, float s,
                               float shift) = nullptr;
};

extern const SoftmaxKernels softmax_kernels_scalar;
extern const SoftmaxKernels softmax_kernels_avx2;
extern const SoftmaxKernels softmax_kernels_avx512;
// softmax_kernels_avx512 with scale_exp2_sum_bf16, for CPUs with AVX512_BF16.
extern const SoftmaxKernels softmax_kernels_avx512_bf16;
extern const SoftmaxKernels softmax_kernels_neon;

// The table for an ISA that can run here (isa_runnable).
const SoftmaxKernels& softmax_kernels(Isa isa) noexcept;

}  // namespace mha::detail
