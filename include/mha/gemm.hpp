// C++ SGEMM API: the C functions of mha.h ("SGEMM" section) with exceptions
// (mha::Error) and an RAII packed B. Same semantics, same validation.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <cstdint>
#include <mha/error.hpp>

namespace mha {

// C[m x n] = alpha * op(A) * op(B) + beta * C, row-major; see mha_sgemm.
MHA_API void sgemm(char transa, char transb, std::size_t m, std::size_t n, std::size_t k,
                   float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                   float beta, float* c, std::size_t ldc);

// op(B) [k x n] packed once (see mha_sgemm_pack_b). Move-only.
class MHA_API PackedB {
 public:
  PackedB(char transb, std::size_t k, std::size_t n, const float* b, std::size_t ldb);
  PackedB(PackedB&& other) noexcept;
  PackedB& operator=(PackedB&& other) noexcept;
  PackedB(const PackedB&) = delete;
  PackedB& operator=(const PackedB&) = delete;
  ~PackedB();

  std::size_t k() const noexcept;
  std::size_t n() const noexcept;
  const mha_sgemm_packed_b* get() const noexcept { return packed_; }

 private:
  mha_sgemm_packed_b* packed_;
};

// C[m x n] = alpha * op(A) * B + beta * C (+ bias[j]); see mha_sgemm_packed.
MHA_API void sgemm(char transa, std::size_t m, float alpha, const float* a, std::size_t lda,
                   const PackedB& b, float beta, float* c, std::size_t ldc,
                   const float* bias = nullptr);

// The kernels that serve `dtype` on this CPU now; see mha_kernel_name.
MHA_API const char* kernel_name(mha_dtype dtype);

// C[m x n] = alpha * op(A) * op(B) + beta * C with bf16 A and B (bit
// patterns); see mha_gemm_bf16 for the numerics.
MHA_API void gemm_bf16(char transa, char transb, std::size_t m, std::size_t n, std::size_t k,
                       float alpha, const std::uint16_t* a, std::size_t lda, const std::uint16_t* b,
                       std::size_t ldb, float beta, float* c, std::size_t ldc);

// bf16 op(B) [k x n] packed once (see mha_gemm_bf16_pack_b). Move-only.
class MHA_API PackedBf16B {
 public:
  PackedBf16B(char transb, std::size_t k, std::size_t n, const std::uint16_t* b, std::size_t ldb);
  PackedBf16B(PackedBf16B&& other) noexcept;
  PackedBf16B& operator=(PackedBf16B&& other) noexcept;
  PackedBf16B(const PackedBf16B&) = delete;
  PackedBf16B& operator=(const PackedBf16B&) = delete;
  ~PackedBf16B();

  std::size_t k() const noexcept;
  std::size_t n() const noexcept;
  const mha_gemm_bf16_packed_b* get() const noexcept { return packed_; }

 private:
  mha_gemm_bf16_packed_b* packed_;
};

// C[m x n] = alpha * op(A) * B + beta * C, A in bf16 or in fp32 (rounded to
// bf16 first); see mha_gemm_bf16_packed.
MHA_API void gemm_bf16(char transa, std::size_t m, float alpha, const std::uint16_t* a,
                       std::size_t lda, const PackedBf16B& b, float beta, float* c,
                       std::size_t ldc);
MHA_API void gemm_bf16(char transa, std::size_t m, float alpha, const float* a, std::size_t lda,
                       const PackedBf16B& b, float beta, float* c, std::size_t ldc);

// fp32 <-> bf16 arrays of n elements; see mha_fp32_to_bf16, mha_bf16_to_fp32.
MHA_API void fp32_to_bf16(std::size_t n, const float* x, std::uint16_t* y);
MHA_API void bf16_to_fp32(std::size_t n, const std::uint16_t* x, float* y);

}  // namespace mha
