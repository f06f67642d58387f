// Checked size arithmetic, the one place where sizes derived from caller
// arguments are multiplied, added and rounded: every entry point computes
// element counts, byte counts and the padded/packed extents it allocates with
// these, so a size that wraps past SIZE_MAX becomes an MHA_INVALID_ARGUMENT
// naming the argument instead of a short buffer. Also the one address-range
// test behind every overlap check.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>

#include "common/error.hpp"

namespace mha::detail {

// The largest object the C++ memory model can address (pointer differences
// must fit ptrdiff_t), and so the bound for any array a caller can pass.
inline constexpr std::size_t kMaxObjectBytes =
    static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());

// Non-throwing forms: false if the result wraps.
[[nodiscard]] inline bool mul_ok(std::size_t a, std::size_t b, std::size_t& r) noexcept {
  return !__builtin_mul_overflow(a, b, &r);
}
[[nodiscard]] inline bool add_ok(std::size_t a, std::size_t b, std::size_t& r) noexcept {
  return !__builtin_add_overflow(a, b, &r);
}
// x rounded up to a multiple of m (m >= 1).
[[nodiscard]] inline bool round_up_ok(std::size_t x, std::size_t m, std::size_t& r) noexcept {
  std::size_t t;
  if (!add_ok(x, m - 1, t)) return false;
  r = t / m * m;
  return true;
}

// Throwing forms: MHA_INVALID_ARGUMENT naming `what` when the result wraps.
inline std::size_t checked_mul(std::size_t a, std::size_t b, const char* what) {
  std::size_t r;
  if (!mul_ok(a, b, r)) invalid_argument(what, ": size ", a, " x ", b, " overflows");
  return r;
}
inline std::size_t checked_add(std::size_t a, std::size_t b, const char* what) {
  std::size_t r;
  if (!add_ok(a, b, r)) invalid_argument(what, ": size ", a, " + ", b, " overflows");
  return r;
}
inline std::size_t checked_round_up(std::size_t x, std::size_t m, const char* what) {
  std::size_t r;
  if (!round_up_ok(x, m, r))
    invalid_argument(what, ": size ", x, " rounded up to ", m, " overflows");
  return r;
}

// Bytes of `floats` floats, which must fit one addressable object.
inline std::size_t float_bytes(std::size_t floats, const char* what) {
  const std::size_t bytes = checked_mul(floats, sizeof(float), what);
  if (bytes > kMaxObjectBytes) {
    invalid_argument(what, ": ", floats, " floats (", bytes, " bytes) exceed the largest object (",
                     kMaxObjectBytes, " bytes)");
  }
  return bytes;
}

// Floats spanned by a row-major rows x cols matrix with row stride ld, from
// its first element to one past its last ((rows-1)*ld + cols; 0 if empty),
// checked as bytes too.
inline std::size_t matrix_floats(std::size_t rows, std::size_t cols, std::size_t ld,
                                 const char* what) {
  if (rows == 0 || cols == 0) return 0;
  const std::size_t n = checked_add(checked_mul(rows - 1, ld, what), cols, what);
  float_bytes(n, what);
  return n;
}

// Checks that `bytes` bytes from p do not wrap the address space (a caller's
// array of that size cannot exist there) and returns bytes.
inline std::size_t addressable(const void* p, std::size_t bytes, const char* what) {
  std::uintptr_t end;
  if (p != nullptr && __builtin_add_overflow(reinterpret_cast<std::uintptr_t>(p), bytes, &end)) {
    invalid_argument(what, ": ", bytes, " bytes from address ", p, " wrap the address space");
  }
  return bytes;
}

// Byte range [p, p + bytes) of one argument, for overlaps().
struct Extent {
  const void* p;
  std::size_t bytes;
};

// Whether two byte ranges share a byte; empty or null ranges share none.
// Compares integers, not pointers, since the ranges may be unrelated objects.
inline bool overlaps(Extent a, Extent b) noexcept {
  if (a.p == nullptr || b.p == nullptr || a.bytes == 0 || b.bytes == 0) return false;
  const auto lo_a = reinterpret_cast<std::uintptr_t>(a.p);
  const auto lo_b = reinterpret_cast<std::uintptr_t>(b.p);
  return lo_a < lo_b + b.bytes && lo_b < lo_a + a.bytes;
}

// The extent of a row-major rows x cols matrix of `elem`-byte elements with
// row stride ld at p, its bytes checked and its range addressable.
inline Extent matrix_extent(const void* p, std::size_t rows, std::size_t cols, std::size_t ld,
                            const char* what, std::size_t elem = sizeof(float)) {
  // Sizes below 2^28 cannot overflow (2^56 elements of at most 8 bytes), nor
  // wrap a user-space address: the checks of a tiny GEMM cost its runtime.
  constexpr std::size_t kSmall = std::size_t{1} << 28;
  if ((rows | cols | ld) < kSmall && elem <= 8) {
    return {p, rows == 0 || cols == 0 ? 0 : ((rows - 1) * ld + cols) * elem};
  }
  return {p, addressable(p, matrix_floats(rows, cols, ld, what) * elem, what)};
}

// The extent of a dense tensor of `elem`-byte elements with these dimensions
// at p, its element count and bytes checked and its range addressable.
inline Extent tensor_extent(const void* p, std::initializer_list<std::size_t> dims,
                            const char* what, std::size_t elem = sizeof(float)) {
  std::size_t n = 1;
  for (std::size_t d : dims) n = checked_mul(n, d, what);
  const std::size_t bytes = checked_mul(n, elem, what);
  if (bytes > kMaxObjectBytes) {
    invalid_argument(what, ": ", bytes, " bytes exceed the largest object (", kMaxObjectBytes,
                     " bytes)");
  }
  return {p, addressable(p, bytes, what)};
}

// MHA_INVALID_ARGUMENT unless `out` and `in` are disjoint or, where
// `same_allowed`, start at the same address (an in-place call).
inline void check_no_overlap(Extent out, Extent in, bool same_allowed, const char* out_name,
                             const char* in_name) {
  if (same_allowed && out.p == in.p) return;
  if (overlaps(out, in)) {
    invalid_argument(out_name, " overlaps ", in_name, ": expected disjoint arrays",
                     same_allowed ? " (or the very same array, in place)" : "");
  }
}

}  // namespace mha::detail
