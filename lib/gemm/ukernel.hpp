// SGEMM micro-kernels, packing and GEMV, written once and instantiated per ISA
// (gemm_<isa>.cpp). Everything here is a template on the xsimd Arch (or
// scalar_arch), so each ISA's copy is a distinct symbol: the linker can never
// merge code compiled with different -m flags.
//
// The contract (GemmKernels in kernels.hpp points at these):
//
// Packed A strip: op(A) rows [r, r+MR) x k columns, stored [k][MR], i.e. the
//   MR values of column p are contiguous at a + p*MR. Rows past m are zero.
//   Strip s of a packed block lives at dst + s*k*MR.
// Packed B strip: op(B) k rows x columns [c, c+NR), stored [k][NR], the NR
//   values of row p contiguous at b + p*NR. Columns past n are zero. Strip s
//   lives at dst + s*strip_stride (strip_stride >= k*NR, so one packed k x n
//   buffer can be viewed as any k-range or NR-aligned column range).
// Alignment: none required. Packed buffers from thread_scratch are 64-byte
//   aligned, but the kernels use unaligned loads (same speed on aligned data
//   on every target CPU) so views at any row offset work.
// Micro-kernel: C[m x n] = alpha * A·B + beta * C for 1 <= m <= MR,
//   1 <= n <= NR, k >= 1; it always computes the full MR x NR tile in
//   registers (the padding is zero) and handles the edge in its store, through
//   a small stack tile, so edge tiles cost one tile copy, not a scalar loop
//   over k. beta == 0: C is never read (NaN/Inf in C do not propagate).
//   Every element is alpha*acc + beta*c with acc an fma chain over p in
//   order, whatever the tile position, so results do not depend on how the
//   driver partitions M and N (threads).
// Micro-kernels never allocate and never thread.
#pragma once

#include <cstddef>
#include <xsimd/xsimd.hpp>

#include "gemm/kernels.hpp"
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace mha::detail::gemm_ukernel {

// Tag for the portable kernel: "vectors" of one float.
struct scalar_arch {};

// The few vector operations the kernels need, per Arch.
template <class Arch>
struct Simd {
  using V = xsimd::batch<float, Arch>;
  static constexpr std::size_t width = V::size;
  static V load(const float* p) noexcept { return V::load_unaligned(p); }
  static void store(float* p, const V& v) noexcept { v.store_unaligned(p); }
  static V splat(float x) noexcept { return V(x); }
  static V fma(const V& x, const V& y, const V& z) noexcept { return xsimd::fma(x, y, z); }
  static float sum(const V& v) noexcept { return xsimd::hadd(v); }
};

template <>
struct Simd<scalar_arch> {
  using V = float;
  static constexpr std::size_t width = 1;
  static V load(const float* p) noexcept { return *p; }
  static void store(float* p, V v) noexcept { *p = v; }
  static V splat(float x) noexcept { return x; }
  // Unfused on purpose: the baseline x86-64 target has no FMA instruction
  // and std::fma would be a libm call per element.
  static V fma(V x, V y, V z) noexcept { return x * y + z; }
  static float sum(V v) noexcept { return v; }
};

#if defined(__AVX512F__)
// xsimd 8.1 implements fma on avx512f as x*y+z, which -ffp-contract=off keeps
// as a separate multiply and add (half the peak): use the intrinsic.
template <>
struct Simd<xsimd::avx512f> {
  using V = xsimd::batch<float, xsimd::avx512f>;
  static constexpr std::size_t width = V::size;
  static V load(const float* p) noexcept { return V::load_unaligned(p); }
  static void store(float* p, const V& v) noexcept { v.store_unaligned(p); }
  static V splat(float x) noexcept { return V(x); }
  static V fma(const V& x, const V& y, const V& z) noexcept { return _mm512_fmadd_ps(x, y, z); }
  static float sum(const V& v) noexcept { return xsimd::hadd(v); }
};
#endif

template <class Arch, std::size_t MR, std::size_t NV>
void ukernel(std::size_t k, const float* a, const float* b, float* c, std::size_t ldc,
             std::size_t m, std::size_t n, float alpha, float beta) {
  using S = Simd<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  constexpr std::size_t NR = NV * W;
  V acc[MR][NV];
#pragma GCC unroll 32
  for (std::size_t i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NV; ++j) acc[i][j] = S::splat(0.f);
  }
  for (std::size_t p = 0; p < k; ++p) {
    V bv[NV];
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NV; ++j) bv[j] = S::load(b + j * W);
#pragma GCC unroll 32
    for (std::size_t i = 0; i < MR; ++i) {
      const V av = S::splat(a[i]);
#pragma GCC unroll 8
      for (std::size_t j = 0; j < NV; ++j) acc[i][j] = S::fma(av, bv[j], acc[i][j]);
    }
    a += MR;
    b += NR;
  }

  const V va = S::splat(alpha);
  if (m == MR && n == NR) {
    if (beta == 0.f) {
#pragma GCC unroll 32
      for (std::size_t i = 0; i < MR; ++i) {
#pragma GCC unroll 8
        for (std::size_t j = 0; j < NV; ++j) S::store(c + i * ldc + j * W, acc[i][j] * va);
      }
    } else {
      const V vb = S::splat(beta);
#pragma GCC unroll 32
      for (std::size_t i = 0; i < MR; ++i) {
#pragma GCC unroll 8
        for (std::size_t j = 0; j < NV; ++j) {
          float* ci = c + i * ldc + j * W;
          S::store(ci, acc[i][j] * va + vb * S::load(ci));
        }
      }
    }
    return;
  }
  // Edge tile: the same arithmetic (alpha*acc, then + beta*c), element-wise.
  alignas(64) float tile[MR * NR];
#pragma GCC unroll 32
  for (std::size_t i = 0; i < MR; ++i) {
#pragma GCC unroll 8
    for (std::size_t j = 0; j < NV; ++j) S::store(tile + i * NR + j * W, acc[i][j] * va);
  }
  for (std::size_t i = 0; i < m; ++i) {
    float* ci = c + i * ldc;
    const float* ti = tile + i * NR;
    if (beta == 0.f) {
      for (std::size_t j = 0; j < n; ++j) ci[j] = ti[j];
    } else {
      for (std::size_t j = 0; j < n; ++j) ci[j] = ti[j] + beta * ci[j];
    }
  }
}

// Packs op(A) [m x k] into ceil(m/MR) strips of [k][MR]. op(A)(r, p) is
// a[r*lda + p] (trans == false) or a[p*lda + r] (trans == true).
template <class Arch, std::size_t MR>
void pack_a(bool trans, std::size_t m, std::size_t k, const float* a, std::size_t lda, float* dst) {
  for (std::size_t r0 = 0; r0 < m; r0 += MR) {
    const std::size_t mr = m - r0 < MR ? m - r0 : MR;
    if (trans) {
      // Column p of the strip is contiguous in memory: a plain copy.
      for (std::size_t p = 0; p < k; ++p) {
        const float* src = a + p * lda + r0;
        float* d = dst + p * MR;
        std::size_t i = 0;
        for (; i < mr; ++i) d[i] = src[i];
        for (; i < MR; ++i) d[i] = 0.f;
      }
    } else {
      // MR row streams, each read sequentially: a transpose through the cache.
      const float* rows[MR];
      for (std::size_t i = 0; i < MR; ++i) rows[i] = a + (r0 + (i < mr ? i : 0)) * lda;
      for (std::size_t p = 0; p < k; ++p) {
        float* d = dst + p * MR;
#pragma GCC unroll 32
        for (std::size_t i = 0; i < MR; ++i) d[i] = i < mr ? rows[i][p] : 0.f;
      }
    }
    dst += k * MR;
  }
}

// Packs op(B) [k x n] into ceil(n/NR) strips of [k][NR], strip s at
// dst + s*strip_stride. op(B)(p, j) is b[p*ldb + j] (trans == false) or
// b[j*ldb + p] (trans == true).
template <class Arch, std::size_t NR>
void pack_b(bool trans, std::size_t k, std::size_t n, const float* b, std::size_t ldb, float* dst,
            std::size_t strip_stride) {
  using S = Simd<Arch>;
  constexpr std::size_t W = S::width;
  for (std::size_t c0 = 0; c0 < n; c0 += NR) {
    const std::size_t nr = n - c0 < NR ? n - c0 : NR;
    if (!trans) {
      for (std::size_t p = 0; p < k; ++p) {
        const float* src = b + p * ldb + c0;
        float* d = dst + p * NR;
        if (nr == NR) {
#pragma GCC unroll 8
          for (std::size_t j = 0; j < NR; j += W) S::store(d + j, S::load(src + j));
        } else {
          std::size_t j = 0;
          for (; j < nr; ++j) d[j] = src[j];
          for (; j < NR; ++j) d[j] = 0.f;
        }
      }
    } else {
      // NR column streams (rows of the stored B), each read sequentially.
      const float* cols[NR];
      for (std::size_t j = 0; j < NR; ++j) cols[j] = b + (c0 + (j < nr ? j : 0)) * ldb;
      for (std::size_t p = 0; p < k; ++p) {
        float* d = dst + p * NR;
#pragma GCC unroll 8
        for (std::size_t j = 0; j < NR; ++j) d[j] = j < nr ? cols[j][p] : 0.f;
      }
    }
    dst += strip_stride;
  }
}

// GEMV, B not transposed: c[j] = alpha * sum_p a[p]*b[p*ldb + j] + beta*c[j]
// for j < n (a is contiguous). Streams B once, row by row, 4 vectors of
// columns at a time; each c[j] is an fma chain over p in order.
template <class Arch>
void gemv_n(std::size_t k, std::size_t n, float alpha, const float* a, const float* b,
            std::size_t ldb, float beta, float* c) {
  using S = Simd<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  constexpr std::size_t NB = 4 * W;
  const V va = S::splat(alpha);
  const V vb = S::splat(beta);
  std::size_t j0 = 0;
  for (; j0 + NB <= n; j0 += NB) {
    V acc[4] = {S::splat(0.f), S::splat(0.f), S::splat(0.f), S::splat(0.f)};
    const float* bp = b + j0;
    for (std::size_t p = 0; p < k; ++p, bp += ldb) {
      const V ap = S::splat(a[p]);
#pragma GCC unroll 4
      for (std::size_t v = 0; v < 4; ++v) acc[v] = S::fma(ap, S::load(bp + v * W), acc[v]);
    }
#pragma GCC unroll 4
    for (std::size_t v = 0; v < 4; ++v) {
      float* cv = c + j0 + v * W;
      S::store(cv, beta == 0.f ? acc[v] * va : acc[v] * va + vb * S::load(cv));
    }
  }
  for (; j0 + W <= n; j0 += W) {
    V acc = S::splat(0.f);
    const float* bp = b + j0;
    for (std::size_t p = 0; p < k; ++p, bp += ldb) acc = S::fma(S::splat(a[p]), S::load(bp), acc);
    float* cv = c + j0;
    S::store(cv, beta == 0.f ? acc * va : acc * va + vb * S::load(cv));
  }
  for (; j0 < n; ++j0) {
    float acc = 0.f;
    for (std::size_t p = 0; p < k; ++p) acc += a[p] * b[p * ldb + j0];
    const float r = acc * alpha;
    c[j0] = beta == 0.f ? r : r + beta * c[j0];
  }
}

// GEMV, B transposed: c[j] = alpha * dot(a, b + j*ldb) + beta*c[j] for j < n.
// Four rows of B at a time share each load of a; each dot product is split
// over the vector lanes and reduced once, in a fixed order.
template <class Arch>
void gemv_t(std::size_t k, std::size_t n, float alpha, const float* a, const float* b,
            std::size_t ldb, float beta, float* c) {
  using S = Simd<Arch>;
  using V = typename S::V;
  constexpr std::size_t W = S::width;
  const std::size_t kv = k / W * W;
  auto finish = [&](std::size_t j, const V& acc, const float* row) {
    float s = S::sum(acc);
    for (std::size_t p = kv; p < k; ++p) s += a[p] * row[p];
    const float r = s * alpha;
    c[j] = beta == 0.f ? r : r + beta * c[j];
  };
  std::size_t j = 0;
  for (; j + 4 <= n; j += 4) {
    const float* r0 = b + j * ldb;
    const float* r1 = r0 + ldb;
    const float* r2 = r1 + ldb;
    const float* r3 = r2 + ldb;
    V a0 = S::splat(0.f), a1 = a0, a2 = a0, a3 = a0;
    for (std::size_t p = 0; p < kv; p += W) {
      const V x = S::load(a + p);
      a0 = S::fma(x, S::load(r0 + p), a0);
      a1 = S::fma(x, S::load(r1 + p), a1);
      a2 = S::fma(x, S::load(r2 + p), a2);
      a3 = S::fma(x, S::load(r3 + p), a3);
    }
    finish(j, a0, r0);
    finish(j + 1, a1, r1);
    finish(j + 2, a2, r2);
    finish(j + 3, a3, r3);
  }
  for (; j < n; ++j) {
    const float* r0 = b + j * ldb;
    V a0 = S::splat(0.f);
    for (std::size_t p = 0; p < kv; p += W) a0 = S::fma(S::load(a + p), S::load(r0 + p), a0);
    finish(j, a0, r0);
  }
}

// One ISA's table: an MR x (NV vectors) micro-kernel and its cache blocks.
template <class Arch, std::size_t MR, std::size_t NV>
constexpr GemmKernels make_kernels(std::size_t mc, std::size_t kc, std::size_t nc) {
  return GemmKernels{MR,
                     NV * Simd<Arch>::width,
                     mc,
                     kc,
                     nc,
                     &ukernel<Arch, MR, NV>,
                     &pack_a<Arch, MR>,
                     &pack_b<Arch, NV * Simd<Arch>::width>,
                     &gemv_n<Arch>,
                     &gemv_t<Arch>};
}

}  // namespace mha::detail::gemm_ukernel
