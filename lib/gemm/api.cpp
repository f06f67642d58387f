// Public SGEMM API (C and C++): argument validation, then the internal driver
// on the current ISA's kernels (or, for a packed B, on the ISA it was packed
// for).
#include <mha/mha.h>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mha/gemm.hpp>
#include <new>
#include <utility>

#include "common/aligned.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/gemm.hpp"
#include "gemm/gemm_bf16.hpp"
#include "gemm/gemm_i8.hpp"

struct mha_sgemm_packed_b {
  const mha::detail::GemmKernels* kernels;  // the ISA the data is laid out for
  mha::detail::PackedBView view;
  mha::detail::AlignedFloats data;  // packed_b_floats(kernels, k, n) floats
};

struct mha_gemm_bf16_packed_b {
  mha::detail::PackedBf16B packed;     // its data is `data`
  mha::detail::AlignedFloats storage;  // packed_bf16_b_bytes, in whole floats
};

namespace mha {
namespace {

using detail::check_arg;
using detail::Trans;

Trans parse_trans(char t, const char* name) {
  if (t == 'N' || t == 'n') return Trans::N;
  if (t == 'T' || t == 't') return Trans::T;
  detail::invalid_argument(name, ": expected 'N' or 'T', got character code ",
                           static_cast<int>(static_cast<unsigned char>(t)));
}

// A row-major matrix stored rows x cols with leading dimension ld: ld must
// cover a row, the pointer must be set unless the matrix is empty, and the
// bytes it spans must be addressable. Returns those bytes.
detail::Extent check_matrix(const char* name, const char* ld_name, const void* p, std::size_t rows,
                            std::size_t cols, std::size_t ld, std::size_t elem = sizeof(float)) {
  check_arg(ld >= cols && ld >= 1, ld_name, " = ", ld, ": expected >= max(1, ", cols,
            ") (the row length of the stored ", name, ")");
  check_arg(p != nullptr || rows == 0 || cols == 0, name, " is NULL but has ", rows, " x ", cols,
            " elements");
  return detail::matrix_extent(p, rows, cols, ld, name, elem);
}

void sgemm_checked(char transa, char transb, std::size_t m, std::size_t n, std::size_t k,
                   float alpha, const float* a, std::size_t lda, const float* b, std::size_t ldb,
                   float beta, float* c, std::size_t ldc) {
  const Trans ta = parse_trans(transa, "transa");
  const Trans tb = parse_trans(transb, "transb");
  const auto ea = check_matrix("a", "lda", a, ta == Trans::N ? m : k, ta == Trans::N ? k : m, lda);
  const auto eb = check_matrix("b", "ldb", b, tb == Trans::N ? k : n, tb == Trans::N ? n : k, ldb);
  const auto ec = check_matrix("c", "ldc", c, m, n, ldc);
  // C is written while A and B are still being read (blocked, threaded).
  detail::check_no_overlap(ec, ea, false, "c", "a");
  detail::check_no_overlap(ec, eb, false, "c", "b");
  detail::sgemm(detail::gemm_kernels(detail::active_isa()), ta, tb, m, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
}

mha_sgemm_packed_b* pack_checked(char transb, std::size_t k, std::size_t n, const float* b,
                                 std::size_t ldb) {
  const Trans tb = parse_trans(transb, "transb");
  check_arg(k >= 1 && n >= 1, "k = ", k, ", n = ", n, ": a packed B needs k >= 1 and n >= 1");
  check_matrix("b", "ldb", b, tb == Trans::N ? k : n, tb == Trans::N ? n : k, ldb);
  const detail::GemmKernels& g = detail::gemm_kernels(detail::active_isa());
  // The packed layout: n rounded up to whole strips of nr columns, k deep.
  const std::size_t padded_n = detail::checked_round_up(n, g.nr, "n (rounded up to whole strips)");
  const std::size_t floats = detail::checked_mul(k, padded_n, "packed b (k x padded n)");
  detail::float_bytes(floats, "packed b (k x padded n)");
  auto packed = std::make_unique<mha_sgemm_packed_b>();
  packed->kernels = &g;
  packed->data = detail::alloc_floats(floats);
  packed->view = detail::pack_b(g, tb, k, n, b, ldb, packed->data.get());
  return packed.release();
}

void packed_checked(char transa, std::size_t m, float alpha, const float* a, std::size_t lda,
                    const mha_sgemm_packed_b* b, float beta, float* c, std::size_t ldc,
                    const float* bias) {
  const Trans ta = parse_trans(transa, "transa");
  check_arg(b != nullptr, "b: expected a packed B from mha_sgemm_pack_b, got NULL");
  const std::size_t n = b->view.n, k = b->view.k;
  const auto ea = check_matrix("a", "lda", a, ta == Trans::N ? m : k, ta == Trans::N ? k : m, lda);
  const auto ec = check_matrix("c", "ldc", c, m, n, ldc);
  const detail::Extent ebias{bias, m == 0 ? 0 : n * sizeof(float)};
  detail::check_no_overlap(ec, ea, false, "c", "a");
  detail::check_no_overlap(ec, ebias, false, "c", "bias");
  detail::gemm_prepacked_b(*b->kernels, ta, m, a, lda, b->view, alpha, beta, c, ldc, bias);
}

void gemm_bf16_checked(char transa, char transb, std::size_t m, std::size_t n, std::size_t k,
                       float alpha, const std::uint16_t* a, std::size_t lda, const std::uint16_t* b,
                       std::size_t ldb, float beta, float* c, std::size_t ldc) {
  const Trans ta = parse_trans(transa, "transa");
  const Trans tb = parse_trans(transb, "transb");
  constexpr std::size_t kBf16 = sizeof(std::uint16_t);
  const auto ea =
      check_matrix("a", "lda", a, ta == Trans::N ? m : k, ta == Trans::N ? k : m, lda, kBf16);
  const auto eb =
      check_matrix("b", "ldb", b, tb == Trans::N ? k : n, tb == Trans::N ? n : k, ldb, kBf16);
  const auto ec = check_matrix("c", "ldc", c, m, n, ldc);
  // C is written while A and B are still being read (blocked, threaded).
  detail::check_no_overlap(ec, ea, false, "c", "a");
  detail::check_no_overlap(ec, eb, false, "c", "b");
  const Isa isa = detail::active_isa();
  detail::gemm_bf16(detail::gemm_bf16_kernels(isa), detail::gemm_kernels(isa), ta, tb, m, n, k,
                    alpha, a, lda, b, ldb, beta, c, ldc);
}

mha_gemm_bf16_packed_b* bf16_pack_checked(char transb, std::size_t k, std::size_t n,
                                          const std::uint16_t* b, std::size_t ldb) {
  const Trans tb = parse_trans(transb, "transb");
  check_arg(k >= 1 && n >= 1, "k = ", k, ", n = ", n, ": a packed B needs k >= 1 and n >= 1");
  check_matrix("b", "ldb", b, tb == Trans::N ? k : n, tb == Trans::N ? n : k, ldb,
               sizeof(std::uint16_t));
  const Isa isa = detail::active_isa();
  const detail::GemmBf16Kernels* g = detail::gemm_bf16_kernels(isa);
  const detail::GemmKernels& f = detail::gemm_kernels(isa);
  // Every packed size (fp32 strips of up to 64 columns, or bf16 pairs) is
  // below 4 * 2 max(n, 64) * 2k bytes: checked before the unchecked sums and
  // products of packed_bf16_b_bytes.
  detail::checked_mul(detail::checked_mul(detail::checked_mul(std::max<std::size_t>(n, 64), 2, "n"),
                                          detail::checked_mul(k, 2, "k"), "packed b"),
                      sizeof(float), "packed b");
  auto packed = std::make_unique<mha_gemm_bf16_packed_b>();
  packed->storage = detail::alloc_floats(
      detail::ceil_div(detail::packed_bf16_b_bytes(g, f, k, n), sizeof(float)));
  packed->packed = detail::pack_bf16_b(g, f, tb, k, n, b, ldb, packed->storage.get());
  return packed.release();
}

void bf16_packed_checked(char transa, std::size_t m, float alpha, mha_dtype a_type, const void* a,
                         std::size_t lda, const mha_gemm_bf16_packed_b* b, float beta, float* c,
                         std::size_t ldc) {
  const Trans ta = parse_trans(transa, "transa");
  check_arg(a_type == MHA_BF16 || a_type == MHA_FP32, "a_type = ", static_cast<int>(a_type),
            ": expected MHA_BF16 or MHA_FP32");
  check_arg(b != nullptr, "b: expected a packed B from mha_gemm_bf16_pack_b, got NULL");
  const std::size_t n = b->packed.n, k = b->packed.k;
  const bool bf16 = a_type == MHA_BF16;
  const auto ea = check_matrix("a", "lda", a, ta == Trans::N ? m : k, ta == Trans::N ? k : m, lda,
                               bf16 ? sizeof(std::uint16_t) : sizeof(float));
  const auto ec = check_matrix("c", "ldc", c, m, n, ldc);
  detail::check_no_overlap(ec, ea, false, "c", "a");
  detail::gemm_bf16_packed(ta, m, alpha, bf16 ? static_cast<const std::uint16_t*>(a) : nullptr,
                           bf16 ? nullptr : static_cast<const float*>(a), lda, b->packed, beta, c,
                           ldc);
}

// x of n x_elem-byte elements into y of n y_elem-byte ones, disjoint.
void check_convert(std::size_t n, const void* x, std::size_t x_elem, const void* y,
                   std::size_t y_elem) {
  check_arg(x != nullptr || n == 0, "x is NULL but has ", n, " elements");
  check_arg(y != nullptr || n == 0, "y is NULL but has ", n, " elements");
  const auto ex = detail::tensor_extent(x, {n}, "x", x_elem);
  const auto ey = detail::tensor_extent(y, {n}, "y", y_elem);
  detail::check_no_overlap(ey, ex, false, "y", "x");
}

const char* kernel_name_of(mha_dtype dtype) {
  if (dtype != MHA_FP32 && dtype != MHA_BF16 && dtype != MHA_INT8) return "invalid";
  try {
    const Isa isa = detail::active_isa();
    if (dtype == MHA_INT8) return detail::gemm_i8_kernels(isa).name;
    const detail::GemmBf16Kernels* g = detail::gemm_bf16_kernels(isa);
    return dtype == MHA_BF16 && g != nullptr ? g->name : isa_name(isa).data();
  } catch (const Error&) {
    return "invalid";
  }
}

}  // namespace

void sgemm(char transa, char transb, std::size_t m, std::size_t n, std::size_t k, float alpha,
           const float* a, std::size_t lda, const float* b, std::size_t ldb, float beta, float* c,
           std::size_t ldc) {
  sgemm_checked(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

PackedB::PackedB(char transb, std::size_t k, std::size_t n, const float* b, std::size_t ldb)
    : packed_(pack_checked(transb, k, n, b, ldb)) {}
PackedB::PackedB(PackedB&& other) noexcept : packed_(std::exchange(other.packed_, nullptr)) {}
PackedB& PackedB::operator=(PackedB&& other) noexcept {
  if (this != &other) {
    delete packed_;
    packed_ = std::exchange(other.packed_, nullptr);
  }
  return *this;
}
PackedB::~PackedB() {
  delete packed_;
}
std::size_t PackedB::k() const noexcept {
  return packed_ != nullptr ? packed_->view.k : 0;
}
std::size_t PackedB::n() const noexcept {
  return packed_ != nullptr ? packed_->view.n : 0;
}

void sgemm(char transa, std::size_t m, float alpha, const float* a, std::size_t lda,
           const PackedB& b, float beta, float* c, std::size_t ldc, const float* bias) {
  packed_checked(transa, m, alpha, a, lda, b.get(), beta, c, ldc, bias);
}

const char* kernel_name(mha_dtype dtype) {
  return kernel_name_of(dtype);
}

void gemm_bf16(char transa, char transb, std::size_t m, std::size_t n, std::size_t k, float alpha,
               const std::uint16_t* a, std::size_t lda, const std::uint16_t* b, std::size_t ldb,
               float beta, float* c, std::size_t ldc) {
  gemm_bf16_checked(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

PackedBf16B::PackedBf16B(char transb, std::size_t k, std::size_t n, const std::uint16_t* b,
                         std::size_t ldb)
    : packed_(bf16_pack_checked(transb, k, n, b, ldb)) {}
PackedBf16B::PackedBf16B(PackedBf16B&& other) noexcept
    : packed_(std::exchange(other.packed_, nullptr)) {}
PackedBf16B& PackedBf16B::operator=(PackedBf16B&& other) noexcept {
  if (this != &other) {
    delete packed_;
    packed_ = std::exchange(other.packed_, nullptr);
  }
  return *this;
}
PackedBf16B::~PackedBf16B() {
  delete packed_;
}
std::size_t PackedBf16B::k() const noexcept {
  return packed_ != nullptr ? packed_->packed.k : 0;
}
std::size_t PackedBf16B::n() const noexcept {
  return packed_ != nullptr ? packed_->packed.n : 0;
}

void gemm_bf16(char transa, std::size_t m, float alpha, const std::uint16_t* a, std::size_t lda,
               const PackedBf16B& b, float beta, float* c, std::size_t ldc) {
  bf16_packed_checked(transa, m, alpha, MHA_BF16, a, lda, b.get(), beta, c, ldc);
}

void gemm_bf16(char transa, std::size_t m, float alpha, const float* a, std::size_t lda,
               const PackedBf16B& b, float beta, float* c, std::size_t ldc) {
  bf16_packed_checked(transa, m, alpha, MHA_FP32, a, lda, b.get(), beta, c, ldc);
}

void fp32_to_bf16(std::size_t n, const float* x, std::uint16_t* y) {
  check_convert(n, x, sizeof(float), y, sizeof(std::uint16_t));
  detail::fp32_to_bf16(n, x, y);
}

void bf16_to_fp32(std::size_t n, const std::uint16_t* x, float* y) {
  check_convert(n, x, sizeof(std::uint16_t), y, sizeof(float));
  detail::bf16_to_fp32(n, x, y);
}

}  // namespace mha

extern "C" {

MHA_API mha_status mha_sgemm(char transa, char transb, size_t m, size_t n, size_t k, float alpha,
                             const float* a, size_t lda, const float* b, size_t ldb, float beta,
                             float* c, size_t ldc) {
  return mha::detail::guarded(
      [&] { mha::sgemm_checked(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc); });
}

MHA_API mha_status mha_sgemm_pack_b(char transb, size_t k, size_t n, const float* b, size_t ldb,
                                    mha_sgemm_packed_b** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(out != nullptr, "out: expected a pointer to receive the packed B");
    *out = mha::pack_checked(transb, k, n, b, ldb);
  });
}

MHA_API void mha_sgemm_packed_b_destroy(mha_sgemm_packed_b* packed) {
  delete packed;
}

MHA_API size_t mha_sgemm_packed_b_k(const mha_sgemm_packed_b* packed) {
  return packed != nullptr ? packed->view.k : 0;
}

MHA_API size_t mha_sgemm_packed_b_n(const mha_sgemm_packed_b* packed) {
  return packed != nullptr ? packed->view.n : 0;
}

MHA_API mha_status mha_sgemm_packed(char transa, size_t m, float alpha, const float* a, size_t lda,
                                    const mha_sgemm_packed_b* b, float beta, float* c, size_t ldc,
                                    const float* bias) {
  return mha::detail::guarded(
      [&] { mha::packed_checked(transa, m, alpha, a, lda, b, beta, c, ldc, bias); });
}

MHA_API const char* mha_kernel_name(mha_dtype dtype) {
  return mha::kernel_name_of(dtype);
}

MHA_API mha_status mha_gemm_bf16(char transa, char transb, size_t m, size_t n, size_t k,
                                 float alpha, const uint16_t* a, size_t lda, const uint16_t* b,
                                 size_t ldb, float beta, float* c, size_t ldc) {
  return mha::detail::guarded([&] {
    mha::gemm_bf16_checked(transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  });
}

MHA_API mha_status mha_gemm_bf16_pack_b(char transb, size_t k, size_t n, const uint16_t* b,
                                        size_t ldb, mha_gemm_bf16_packed_b** out) {
  return mha::detail::guarded([&] {
    mha::detail::check_arg(out != nullptr, "out: expected a pointer to receive the packed B");
    *out = mha::bf16_pack_checked(transb, k, n, b, ldb);
  });
}

MHA_API void mha_gemm_bf16_packed_b_destroy(mha_gemm_bf16_packed_b* packed) {
  delete packed;
}

MHA_API size_t mha_gemm_bf16_packed_b_k(const mha_gemm_bf16_packed_b* packed) {
  return packed != nullptr ? packed->packed.k : 0;
}

MHA_API size_t mha_gemm_bf16_packed_b_n(const mha_gemm_bf16_packed_b* packed) {
  return packed != nullptr ? packed->packed.n : 0;
}

MHA_API mha_status mha_gemm_bf16_packed(char transa, size_t m, float alpha, mha_dtype a_type,
                                        const void* a, size_t lda, const mha_gemm_bf16_packed_b* b,
                                        float beta, float* c, size_t ldc) {
  return mha::detail::guarded(
      [&] { mha::bf16_packed_checked(transa, m, alpha, a_type, a, lda, b, beta, c, ldc); });
}

MHA_API mha_status mha_fp32_to_bf16(size_t n, const float* x, uint16_t* y) {
  return mha::detail::guarded([&] { mha::fp32_to_bf16(n, x, y); });
}

MHA_API mha_status mha_bf16_to_fp32(size_t n, const uint16_t* x, float* y) {
  return mha::detail::guarded([&] { mha::bf16_to_fp32(n, x, y); });
}

}  // extern "C"
