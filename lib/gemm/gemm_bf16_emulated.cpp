// The portable reference of the bf16 dot-product kernels: vdpbf16ps
// emulated bit for bit, element by element. Checked against the hardware
// over random pairs mixing normal, tiny and denormal values (no mismatch in
// 3.2M lanes on Zen 4): per pair, the odd element's product is added first;
// bf16 denormal inputs (and a denormal accumulator) are read as zero; each
// product is exact and each sum rounded once to nearest even (one fma),
// even where the product alone would be denormal; a denormal sum is flushed
// to zero with its sign. Adding the even product first, flushing only at
// the end, or flushing denormal products all mismatched.
#include <cmath>
#include <cstring>

#include "gemm/bf16_pack.hpp"
#include "gemm/gemm_bf16.hpp"

namespace mha::detail {
namespace {

struct emulated_tag {};

float from_bf16(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

float flush_denormal(float x) {
  return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(0.f, x) : x;
}

// One element's step of vdpbf16ps: acc + x*y, rounded once, denormals flushed.
float dot_step(float acc, std::uint16_t x, std::uint16_t y) {
  return flush_denormal(
      std::fma(flush_denormal(from_bf16(x)), flush_denormal(from_bf16(y)), flush_denormal(acc)));
}

// 4 x 8: a tile unlike the hardware kernel's, so that the tests comparing
// the two also show that an element's bits do not depend on the tile.
constexpr std::size_t kMR = 4, kNR = 8;

// The pair (i, p) of A at a[i * rs + p * ps]: a packed strip or rows.
void tile(std::size_t kp, const std::uint32_t* a, std::size_t rs, std::size_t ps,
          const std::uint16_t* b, float* c, std::size_t ldc, std::size_t m, std::size_t n,
          float alpha, float beta) {
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      float acc = 0.f;
      for (std::size_t p = 0; p < kp; ++p) {
        const std::uint32_t pair = a[i * rs + p * ps];
        const std::uint16_t* bp = b + (p * kNR + j) * 2;
        acc = dot_step(acc, static_cast<std::uint16_t>(pair >> 16), bp[1]);
        acc = dot_step(acc, static_cast<std::uint16_t>(pair & 0xffffu), bp[0]);
      }
      float& cij = c[i * ldc + j];
      const float r = alpha * acc;
      cij = beta == 0.f ? r : r + beta * cij;
    }
  }
}

void ukernel(std::size_t kp, const std::uint32_t* a, const std::uint16_t* b, float* c,
             std::size_t ldc, std::size_t m, std::size_t n, float alpha, float beta) {
  tile(kp, a, 1, kMR, b, c, ldc, m, n, alpha, beta);
}

void ukernel_rows(std::size_t kp, const std::uint32_t* a, std::size_t lda, const std::uint16_t* b,
                  float* c, std::size_t ldc, std::size_t m, std::size_t n, float alpha,
                  float beta) {
  tile(kp, a, lda, 1, b, c, ldc, m, n, alpha, beta);
}

// As vcvtneps2bf16: a denormal input becomes a zero of its sign.
void round_rows(std::size_t rows, std::size_t n, const float* x, std::size_t ldx, void* out,
                std::size_t ldy) {
  auto* const y = static_cast<std::uint16_t*>(out);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < n; ++j) {
      const float v = flush_denormal(x[i * ldx + j]);
      fp32_to_bf16(1, &v, y + i * ldy + j);
    }
    if (n % 2 != 0) y[i * ldy + n] = 0;
  }
}

}  // namespace

const GemmBf16Kernels gemm_bf16_kernels_emulated{"emulated",
                                                 kMR,
                                                 kNR,
                                                 kBf16MC,
                                                 kBf16KC,
                                                 kBf16NC,
                                                 &ukernel,
                                                 &ukernel_rows,
                                                 &round_rows,
                                                 &bf16_pack::pack_a<emulated_tag, kMR>,
                                                 &bf16_pack::pack_b<emulated_tag, kNR>};

}  // namespace mha::detail
