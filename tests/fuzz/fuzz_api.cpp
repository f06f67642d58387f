// libFuzzer target over the whole C ABI (mha.h).
//
// The input is a little program: a few bytes pick the ISA and the thread
// limit, then up to kMaxOps operations follow, each decoded from the bytes
// into arguments, valid or not: sgemm, pack_b + sgemm_packed, softmax, the
// three reshapes, attention objects with forwards (padded and ragged, with
// modifiers), KV-cache sequences (create, step, truncate, length, destroy)
// and paged caches (random steps over slots, truncations, resets), and MLA
// layers (small configs, one rule broken now and then) with forwards and
// latent caches of every mha_kv_dtype, contiguous and paged, stepped,
// truncated and reset.
// Tensor contents come from a PRNG seeded by the input, so the bytes go to
// shapes, strides, flags and masks.
// Every tensor is a heap buffer of exactly the extent the call describes
// ((rows - 1) * ld + cols floats), so ASan flags any read or write outside it.
//
// Oracles, per call:
//  - the documented validity rules (mha.h) give "must succeed", "must fail",
//    or, where mha.h leaves it open (zero sizes, reshape overlaps), "either";
//  - on success the outputs are compared with a double-precision reference
//    (tests/support for attention, the formulas below for GEMM and softmax),
//    and the padding between a row's end and the next row is checked
//    untouched;
//  - on failure the status is MHA_INVALID_ARGUMENT or MHA_OUT_OF_MEMORY,
//    mha_last_error() is a fresh non-empty message, and every output buffer
//    (and the out-pointer of a create) still holds the sentinel put there.
//
// Tolerances (u = 2^-24):
//  - GEMM: |c - ref| <= (k + 4) * 2u * (|alpha| sum_p |a_ip b_pj| + |beta c_ij|
//    + |bias_j|) + 1e-30: k + 4 roundings, Higham's gamma_{k+4} with a factor
//    2 margin, as tests/gemm/test_gemm.cpp; the 1e-30 absorbs underflow.
//  - softmax: tests/softmax/softmax_reference.hpp's bound, |y - ref| <=
//    ref * ((cols / 2 + 16) u + 2u (|z| + |max| + |z - max|)) + 2 FLT_MIN.
//  - attention and KV-cache steps: max |ours - ref| <= 1e-5 * max(1, max |ref|),
//    the metric (scaled_error) and bound of the oracle suites
//    (tests/attention/attention_case.hpp), which hold there for larger
//    shapes than the ones decoded here (E <= 32, kv_len <= 1110, inputs in
//    [-1, 1], additive masks in [-3, 3] or -inf).
//  - MLA: the forward against the double reference, each step against
//    mha_mla_forward over the same tokens; see kMlaTol.
//
// Sizes are sometimes huge (2^61 .. SIZE_MAX, whose byte counts overflow or
// cannot be allocated): each must be rejected, never wrapped to a small
// buffer. A failed create must leave *out untouched. tests/fuzz/corpus/
// regression-* are inputs that once crashed or broke those rules.
#include <fuzzer/FuzzedDataProvider.h>
#include <mha/mha.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "attention/attention_case.hpp"
#include "attention/projection/projection.hpp"
#include "gemm/gemm_bf16.hpp"
#include "support/attention_reference.hpp"
#include "support/mla_reference.hpp"

namespace {

constexpr int kMaxOps = 6;
constexpr std::size_t kMaxAlloc = std::size_t{1} << 22;  // floats; larger: not allocated here
constexpr float kSentinel = -1234.5f;
constexpr double kU = 1.0 / 16777216.0;
constexpr double kAttentionTol = 1e-5;
// A bf16 object against the reference on its rounded weights: four roundings
// to bf16 (2^-9 each) of O(1) activations, 8e-3 at worst (the bound of
// tests/attention/test_attention_bf16.cpp), with a margin of 2.5.
constexpr double kBf16AttentionTol = 2e-2;

[[noreturn]] void fail(const char* fmt, ...) {
  std::va_list ap;
  va_start(ap, fmt);
  std::fputs("fuzz_api: oracle failed: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::abort();
}

#define FUZZ_CHECK(cond, ...)       \
  do {                              \
    if (!(cond)) fail(__VA_ARGS__); \
  } while (0)

// Sizes and data decoded from the fuzz input.
struct Decoder {
  FuzzedDataProvider& p;
  std::mt19937 rng;

  explicit Decoder(FuzzedDataProvider& provider)
      : p(provider), rng(provider.ConsumeIntegral<std::uint32_t>()) {}

  std::size_t dim(std::size_t max) {
    if (p.ConsumeIntegralInRange<int>(0, 15) == 0) {
      static constexpr std::size_t kHuge[] = {(std::size_t{1} << 61) + 1, std::size_t{1} << 62,
                                              (std::size_t{1} << 62) + 3, SIZE_MAX / 2, SIZE_MAX};
      return kHuge[p.ConsumeIntegralInRange<std::size_t>(0, 4)];
    }
    return p.ConsumeIntegralInRange<std::size_t>(0, max);
  }
  // A leading dimension for rows of `cols`: valid (max(1, cols) + 0..3) or,
  // rarely, one short.
  std::size_t ld(std::size_t cols) {
    const std::size_t lo = std::max<std::size_t>(1, cols);
    if (p.ConsumeIntegralInRange<int>(0, 15) == 0) return lo - 1;
    return lo + p.ConsumeIntegralInRange<std::size_t>(0, 3);
  }
  char trans() {
    static constexpr char kT[] = {'N', 'T', 'n', 't'};
    if (p.ConsumeIntegralInRange<int>(0, 15) == 0) return p.ConsumeIntegral<char>();
    return kT[p.ConsumeIntegralInRange<int>(0, 3)];
  }
  float scalar() {
    static constexpr float kS[] = {0.f, 1.f, -1.f, 0.5f, 2.f, -0.75f};
    const int i = p.ConsumeIntegralInRange<int>(0, 6);
    return i < 6 ? kS[i] : uniform(-2.f, 2.f);
  }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
  bool coin(int one_in = 2) { return p.ConsumeIntegralInRange<int>(0, one_in - 1) == 0; }
  std::vector<float> values(std::size_t n, float lo = -1.f, float hi = 1.f) {
    std::vector<float> v(n);
    for (float& x : v) x = uniform(lo, hi);
    return v;
  }
};

// a * b * ... in size_t, or nullopt-like false on overflow.
bool mul(std::size_t& acc, std::size_t x) {
  return !__builtin_mul_overflow(acc, x, &acc);
}

// Floats spanned by a rows x cols matrix with leading dimension ld: 0 when
// empty, SIZE_MAX when the count or its bytes overflow.
std::size_t extent(std::size_t rows, std::size_t cols, std::size_t ld) {
  if (rows == 0 || cols == 0) return 0;
  std::size_t e = rows - 1;
  if (!mul(e, ld) || __builtin_add_overflow(e, cols, &e)) return SIZE_MAX;
  std::size_t bytes = e;
  return mul(bytes, sizeof(float)) ? e : SIZE_MAX;
}
std::size_t product(std::initializer_list<std::size_t> dims) {
  std::size_t n = 1;
  for (std::size_t d : dims)
    if (!mul(n, d)) return SIZE_MAX;
  std::size_t bytes = n;
  return mul(bytes, sizeof(float)) ? n : SIZE_MAX;
}

// A tensor of exactly `n` floats (a 16-float stand-in when it cannot exist,
// for calls that must fail before touching it).
struct Buffer {
  std::vector<float> v;
  bool impossible = false;   // byte count overflows size_t
  bool unallocated = false;  // fits size_t but too large to allocate here
  explicit Buffer(std::size_t n) {
    if (n == SIZE_MAX)
      impossible = true;
    else if (n > kMaxAlloc)
      unallocated = true;
    v.assign(impossible || unallocated ? 16 : n, kSentinel);
  }
  float* ptr(bool null_if_empty) { return v.empty() && null_if_empty ? nullptr : v.data(); }
};

enum class Expect { ok, fail, either };

const char* const kMarker = "mha-fuzz-marker";

// Leaves a known message in mha_last_error(), so a failure that forgets to
// set its own is caught.
void prime_error() {
  FUZZ_CHECK(mha_set_isa(kMarker) != MHA_OK, "mha_set_isa accepted '%s'", kMarker);
  FUZZ_CHECK(std::strstr(mha_last_error(), kMarker) != nullptr,
             "mha_set_isa's message does not name the ISA: %s", mha_last_error());
}

void check_failure(mha_status st, const char* call) {
  FUZZ_CHECK(st == MHA_INVALID_ARGUMENT || st == MHA_OUT_OF_MEMORY,
             "%s failed with status %d (expected INVALID_ARGUMENT or OUT_OF_MEMORY)", call,
             static_cast<int>(st));
  const char* msg = mha_last_error();
  FUZZ_CHECK(msg != nullptr && msg[0] != '\0', "%s failed with an empty mha_last_error()", call);
  FUZZ_CHECK(std::strstr(msg, kMarker) == nullptr,
             "%s failed without setting mha_last_error() (still: %s)", call, msg);
}

void check_expectation(mha_status st, Expect e, const char* call) {
  if (st != MHA_OK) {
    FUZZ_CHECK(e != Expect::ok, "%s failed (%d: %s) on valid arguments", call, static_cast<int>(st),
               mha_last_error());
    check_failure(st, call);
  } else {
    FUZZ_CHECK(e != Expect::fail, "%s succeeded on invalid arguments", call);
  }
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool trans_ok(char t) {
  return t == 'N' || t == 'n' || t == 'T' || t == 't';
}
bool is_t(char t) {
  return t == 'T' || t == 't';
}

// ---------------------------------------------------------------- GEMM ---

struct GemmArgs {
  char ta, tb;
  std::size_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  bool null_empty;
};

// C after the call must equal alpha op(A) op(B) + beta C0 (+ bias) within the
// header's bound; the padding of each C row must be untouched.
void check_gemm_result(const GemmArgs& g, const float* a, const float* b, const float* bias,
                       const std::vector<float>& c0, const std::vector<float>& c,
                       const char* call) {
  // Rows of C that c holds (m may be huge when n is 0).
  const std::size_t rows = g.ldc == 0 ? 0 : std::min(g.m, (c.size() + g.ldc - 1) / g.ldc);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t j = 0; j < g.ldc && i * g.ldc + j < c.size(); ++j) {
      const std::size_t at = i * g.ldc + j;
      if (j >= g.n) {
        FUZZ_CHECK(std::memcmp(&c[at], &c0[at], sizeof(float)) == 0,
                   "%s wrote C padding at row %zu col %zu", call, i, j);
        continue;
      }
      double acc = 0, mag = 0;
      if (g.alpha != 0.f)
        for (std::size_t p = 0; p < g.k; ++p) {
          const double x = is_t(g.ta) ? a[p * g.lda + i] : a[i * g.lda + p];
          const double y = is_t(g.tb) ? b[j * g.ldb + p] : b[p * g.ldb + j];
          acc += x * y;
          mag += std::fabs(x * y);
        }
      double ref = g.alpha * acc, bound = std::fabs(g.alpha) * mag;
      if (g.beta != 0.f) {
        ref += static_cast<double>(g.beta) * c0[at];
        bound += std::fabs(static_cast<double>(g.beta) * c0[at]);
      }
      if (bias != nullptr) {
        ref += bias[j];
        bound += std::fabs(bias[j]);
      }
      bound = bound * static_cast<double>(g.k + 4) * 2 * kU + 1e-30;
      FUZZ_CHECK(std::fabs(c[at] - ref) <= bound,
                 "%s: C[%zu][%zu] = %.9g, reference %.9g, bound %.3g (m %zu n %zu k %zu "
                 "alpha %g beta %g ta %c tb %c)",
                 call, i, j, static_cast<double>(c[at]), ref, bound, g.m, g.n, g.k,
                 static_cast<double>(g.alpha), static_cast<double>(g.beta), g.ta, g.tb);
    }
}

GemmArgs decode_gemm(Decoder& d) {
  GemmArgs g;
  g.ta = d.trans();
  g.tb = d.trans();
  g.m = d.dim(20);
  g.n = d.dim(20);
  g.k = d.dim(20);
  g.lda = d.ld(is_t(g.ta) ? g.m : g.k);
  g.ldb = d.ld(is_t(g.tb) ? g.k : g.n);
  g.ldc = d.ld(g.n);
  g.alpha = d.scalar();
  g.beta = d.scalar();
  g.null_empty = d.coin();
  return g;
}

// Fills A and B for the product: NaN when the documentation says they are
// not read (k == 0 or alpha == 0), so a read shows up in C.
void fill_operand(Decoder& d, Buffer& x, bool unread) {
  for (float& v : x.v) v = unread ? NAN : d.uniform(-1.f, 1.f);
}

void fuzz_sgemm(Decoder& d) {
  const GemmArgs g = decode_gemm(d);
  const std::size_t a_rows = is_t(g.ta) ? g.k : g.m, a_cols = is_t(g.ta) ? g.m : g.k;
  const std::size_t b_rows = is_t(g.tb) ? g.n : g.k, b_cols = is_t(g.tb) ? g.k : g.n;
  Buffer a(extent(a_rows, a_cols, g.lda)), b(extent(b_rows, b_cols, g.ldb)),
      c(extent(g.m, g.n, g.ldc));
  const bool noop = g.m == 0 || g.n == 0;
  const bool unread = g.k == 0 || g.alpha == 0.f;
  if (a.unallocated || b.unallocated || c.unallocated) return;
  // One non-empty matrix passed as NULL, sometimes: mha.h allows NULL only
  // for a matrix with no elements.
  const int null_arg = d.p.ConsumeIntegralInRange<int>(0, 23);
  const bool null_bad = (null_arg == 1 && a_rows != 0 && a_cols != 0) ||
                        (null_arg == 2 && b_rows != 0 && b_cols != 0) ||
                        (null_arg == 3 && g.m != 0 && g.n != 0);
  Expect e = Expect::ok;
  if (!trans_ok(g.ta) || !trans_ok(g.tb) || g.lda < std::max<std::size_t>(1, a_cols) ||
      g.ldb < std::max<std::size_t>(1, b_cols) || g.ldc < std::max<std::size_t>(1, g.n) || null_bad)
    e = Expect::fail;
  else if (noop)
    e = a.impossible || b.impossible || c.impossible ? Expect::either : Expect::ok;
  else if (c.impossible || (!unread && (a.impossible || b.impossible)))
    e = Expect::fail;
  else if (a.impossible || b.impossible)
    e = Expect::either;  // a matrix that cannot exist but is documented as unread
  const bool impossible = a.impossible || b.impossible || c.impossible;
  fill_operand(d, a, unread);
  fill_operand(d, b, unread);
  // beta == 0 must not read C: NaN there would show.
  for (float& v : c.v) v = g.beta == 0.f ? NAN : d.uniform(-1.f, 1.f);
  const std::vector<float> c0 = c.v;
  prime_error();
  const mha_status st =
      mha_sgemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, null_arg == 1 ? nullptr : a.ptr(g.null_empty),
                g.lda, null_arg == 2 ? nullptr : b.ptr(g.null_empty), g.ldb, g.beta,
                null_arg == 3 ? nullptr : c.ptr(g.null_empty), g.ldc);
  check_expectation(st, e, "mha_sgemm");
  if (st != MHA_OK) {
    FUZZ_CHECK(same_bits(c.v, c0), "mha_sgemm failed but changed C");
    return;
  }
  if (impossible) return;
  check_gemm_result(g, a.v.data(), b.v.data(), nullptr, c0, c.v, "mha_sgemm");
}

void fuzz_packed(Decoder& d, const std::vector<std::string>& isas) {
  GemmArgs g = decode_gemm(d);
  const std::size_t b_rows = is_t(g.tb) ? g.n : g.k, b_cols = is_t(g.tb) ? g.k : g.n;
  Buffer b(extent(b_rows, b_cols, g.ldb));
  if (b.unallocated) return;
  for (float& v : b.v) v = d.uniform(-1.f, 1.f);
  Expect e = Expect::ok;
  if (!trans_ok(g.tb) || g.k == 0 || g.n == 0 || g.ldb < std::max<std::size_t>(1, b_cols) ||
      b.impossible)
    e = Expect::fail;
  auto* const sentinel = reinterpret_cast<mha_sgemm_packed_b*>(std::uintptr_t{0x5e7});
  mha_sgemm_packed_b* packed = sentinel;
  prime_error();
  const mha_status st = mha_sgemm_pack_b(g.tb, g.k, g.n, b.ptr(g.null_empty), g.ldb, &packed);
  check_expectation(st, e, "mha_sgemm_pack_b");
  if (st != MHA_OK) {
    FUZZ_CHECK(packed == sentinel, "mha_sgemm_pack_b failed but wrote *out");
    return;
  }
  FUZZ_CHECK(mha_sgemm_packed_b_k(packed) == g.k && mha_sgemm_packed_b_n(packed) == g.n,
             "packed_b_k/n report %zu/%zu, packed %zu/%zu", mha_sgemm_packed_b_k(packed),
             mha_sgemm_packed_b_n(packed), g.k, g.n);

  const std::size_t a_rows = is_t(g.ta) ? g.k : g.m, a_cols = is_t(g.ta) ? g.m : g.k;
  Buffer a(extent(a_rows, a_cols, g.lda)), c(extent(g.m, g.n, g.ldc));
  const bool use_bias = d.coin();
  std::vector<float> bias = use_bias ? d.values(g.n) : std::vector<float>{};
  if (!a.unallocated && !c.unallocated) {
    fill_operand(d, a, g.alpha == 0.f);
    for (float& v : c.v) v = g.beta == 0.f ? NAN : d.uniform(-1.f, 1.f);
    const std::vector<float> c0 = c.v;
    // For m >= 2 without bias the packed product equals mha_sgemm on the ISA
    // it was packed with (mha.h), even after the ISA is switched.
    std::vector<float> plain;
    const bool compare_plain = g.m >= 2 && !use_bias && trans_ok(g.ta) && !a.impossible &&
                               !c.impossible && g.lda >= std::max<std::size_t>(1, a_cols) &&
                               g.ldc >= std::max<std::size_t>(1, g.n);
    if (compare_plain) {
      plain = c0;
      FUZZ_CHECK(mha_sgemm(g.ta, g.tb, g.m, g.n, g.k, g.alpha, a.v.data(), g.lda, b.v.data(), g.ldb,
                           g.beta, plain.data(), g.ldc) == MHA_OK,
                 "mha_sgemm failed on the packed call's arguments: %s", mha_last_error());
    }
    if (d.coin(3))
      mha_set_isa(isas[d.p.ConsumeIntegralInRange<std::size_t>(0, isas.size() - 1)].c_str());
    Expect e2 = Expect::ok;
    if (!trans_ok(g.ta) || g.lda < std::max<std::size_t>(1, a_cols) ||
        g.ldc < std::max<std::size_t>(1, g.n))
      e2 = Expect::fail;
    else if (c.impossible || (a.impossible && g.alpha != 0.f))
      e2 = g.m == 0 ? Expect::either : Expect::fail;
    else if (g.m == 0 || a.impossible)
      e2 = Expect::either;
    const bool null_packed = d.coin(16);
    if (null_packed) e2 = Expect::fail;
    prime_error();
    const mha_status st2 = mha_sgemm_packed(
        g.ta, g.m, g.alpha, a.ptr(g.null_empty), g.lda, null_packed ? nullptr : packed, g.beta,
        c.ptr(g.null_empty), g.ldc, use_bias ? bias.data() : nullptr);
    check_expectation(st2, e2, "mha_sgemm_packed");
    if (st2 != MHA_OK) {
      FUZZ_CHECK(same_bits(c.v, c0), "mha_sgemm_packed failed but changed C");
    } else if (!c.impossible && !a.impossible) {
      check_gemm_result(g, a.v.data(), b.v.data(), use_bias ? bias.data() : nullptr, c0, c.v,
                        "mha_sgemm_packed");
      if (compare_plain)
        FUZZ_CHECK(same_bits(c.v, plain), "mha_sgemm_packed (m %zu) differs from mha_sgemm", g.m);
    }
  }
  mha_sgemm_packed_b_destroy(packed);
}

// ------------------------------------------------------------- softmax ---

bool kept(const mha_softmax_options& o, std::size_t i, std::size_t j) {
  if (o.valid_len != nullptr && j >= o.valid_len[i]) return false;
  if (o.causal && static_cast<long long>(j) > static_cast<long long>(i) + o.causal_offset)
    return false;
  return true;
}

// y against the double softmax of x, the rules of mha.h (masked columns 0,
// rows with nothing kept or all -inf 0, NaN/+inf rows NaN at kept columns).
void check_softmax(std::size_t rows, std::size_t cols, const float* x, std::size_t ldx,
                   const float* y, std::size_t ldy, const mha_softmax_options& o) {
  const double s = o.scale == 0.f ? 1.0 : o.scale;
  std::vector<double> z(cols);
  for (std::size_t i = 0; i < rows; ++i) {
    double m = -INFINITY;
    bool bad = false;
    for (std::size_t j = 0; j < cols; ++j) {
      if (!kept(o, i, j)) continue;
      const double a = o.additive != nullptr ? o.additive[i * o.additive_ld + j] : 0.0;
      // z as the library forms it in float (one rounding), so overflow to
      // +inf and inf - inf follow the float rule.
      const float zf = o.additive != nullptr
                           ? std::fma(x[i * ldx + j], static_cast<float>(s), static_cast<float>(a))
                           : x[i * ldx + j] * static_cast<float>(s);
      z[j] = std::isfinite(zf) ? static_cast<double>(x[i * ldx + j]) * s + a : double(zf);
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
    const double tol = (static_cast<double>(cols) / 2.0 + 16) * kU + 2 * kU * spread;
    for (std::size_t j = 0; j < cols; ++j) {
      const float got = y[i * ldy + j];
      if (!kept(o, i, j) || (!bad && m == -INFINITY)) {
        FUZZ_CHECK(got == 0.f, "softmax[%zu][%zu] = %g, expected 0 (%zu x %zu)", i, j,
                   static_cast<double>(got), rows, cols);
      } else if (bad) {
        FUZZ_CHECK(std::isnan(got), "softmax[%zu][%zu] = %g, expected NaN (%zu x %zu)", i, j,
                   static_cast<double>(got), rows, cols);
      } else {
        const double ref = std::exp(z[j] - m) / sum;
        FUZZ_CHECK(std::fabs(got - ref) <= ref * tol + 2.0 * FLT_MIN,
                   "softmax[%zu][%zu] = %.9g, reference %.9g, tolerance %.3g (%zu x %zu)", i, j,
                   static_cast<double>(got), ref, ref * tol, rows, cols);
      }
    }
  }
}

void fuzz_softmax(Decoder& d) {
  const std::size_t rows = d.dim(12), cols = d.dim(40);
  const std::size_t ldx = d.ld(cols);
  // Where y lies: 0 its own buffer, 1 in place (y == x, the same or another
  // ld), 2 inside x at a small offset (a partial overlap).
  const int layout = d.coin(6) ? 2 : d.coin() ? 1 : 0;
  const std::size_t ldy = layout == 1 && !d.coin(4) ? ldx : d.ld(cols);
  const std::size_t offset = layout == 2 ? d.p.ConsumeIntegralInRange<std::size_t>(1, 7) : 0;
  mha_softmax_options o{};
  static constexpr float kScales[] = {0.f, 1.f, 0.125f, -1.f, 3.f, 1e30f, INFINITY, NAN};
  o.scale = d.coin() ? kScales[d.p.ConsumeIntegralInRange<int>(0, 7)] : d.uniform(-4.f, 4.f);
  o.causal = d.coin(3) ? 1 : 0;
  o.causal_offset = d.p.ConsumeIntegralInRange<std::ptrdiff_t>(-5, 45);
  const bool use_opt = !d.coin(8);
  const int additive = d.p.ConsumeIntegralInRange<int>(0, 3);  // 0 none, 1 one row, 2-3 an ld
  const bool use_valid = d.coin(3);
  const std::size_t ext_x = extent(rows, cols, ldx), ext_y = extent(rows, cols, ldy);
  if (rows > kMaxAlloc || cols > kMaxAlloc || ext_x > kMaxAlloc || ext_y > kMaxAlloc) {
    // Extents whose bytes overflow: the call must fail before reading (an
    // empty one may also succeed as a no-op).
    if (ext_x != SIZE_MAX && ext_y != SIZE_MAX && ext_x != 0) return;
    std::vector<float> x(16), y(16);
    prime_error();
    check_expectation(mha_softmax(rows, cols, x.data(), ldx, y.data(), ldy, nullptr),
                      ext_x == 0 ? Expect::either : Expect::fail,
                      "mha_softmax (huge rows or cols)");
    return;
  }
  std::vector<std::size_t> valid(use_valid ? rows : 0);
  for (auto& v : valid) v = d.p.ConsumeIntegralInRange<std::size_t>(0, cols + 3);
  o.valid_len = use_valid ? valid.data() : nullptr;
  std::vector<float> add;
  if (additive != 0) {
    o.additive_ld = additive == 1 ? 0 : d.ld(cols);
    add = d.values(additive == 1 ? cols : extent(rows, cols, o.additive_ld), -3.f, 3.f);
    for (float& v : add)
      if (d.coin(8)) v = -INFINITY;
    o.additive = add.empty() ? nullptr : add.data();
  }
  const mha_softmax_options used = use_opt ? o : mha_softmax_options{};

  // x: random, a few specials, and (sometimes) NaN in the columns the masks
  // drop, which mha.h says are never read.
  std::vector<float> xb(layout == 0 ? ext_x : std::max(ext_x, ext_y + offset));
  for (float& v : xb) v = d.uniform(-8.f, 8.f);
  const bool poison_masked = d.coin();
  // rows may be huge when cols is 0.
  for (std::size_t i = 0; cols != 0 && i < rows; ++i)
    for (std::size_t j = 0; j < cols; ++j) {
      float& v = xb[i * ldx + j];
      if (d.coin(16)) {
        static constexpr float kSpecial[] = {-INFINITY, INFINITY, NAN, 1e30f, -1e30f, 88.f};
        v = kSpecial[d.p.ConsumeIntegralInRange<int>(0, 5)];
      }
      if (poison_masked && !kept(used, i, j)) v = NAN;
    }
  std::vector<float> yb(layout == 0 ? ext_y : 0, kSentinel);
  float* x = xb.empty() ? nullptr : xb.data();
  float* y = layout == 0 ? (yb.empty() ? nullptr : yb.data()) : xb.data() + offset;
  const std::vector<float> x0 = xb, y0 = yb;

  const bool empty = rows == 0 || cols == 0;
  Expect e = Expect::ok;
  // Overlap, element by element: y sharing an element with x is an error
  // unless it is the same matrix (x == y, ldx == ldy); interleaved rows that
  // share no element are not named by mha.h, so either outcome passes.
  bool shared = false;
  if (layout != 0 && !empty) {
    std::vector<char> in_x(xb.size(), 0);
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) in_x[i * ldx + j] = 1;
    for (std::size_t i = 0; i < rows; ++i)
      for (std::size_t j = 0; j < cols; ++j) shared = shared || in_x[offset + i * ldy + j];
  }
  const bool same_matrix = layout == 1 && ldx == ldy;
  if (ldx < cols || ldy < cols || (use_opt && !std::isfinite(o.scale)) ||
      (use_opt && o.additive != nullptr && o.additive_ld != 0 && o.additive_ld < cols) ||
      (shared && !same_matrix))
    e = Expect::fail;
  else if (layout == 2 && !shared)
    e = Expect::either;
  if (empty) e = Expect::either;
  char call[200];
  std::snprintf(call, sizeof call,
                "mha_softmax(rows %zu, cols %zu, ldx %zu, ldy %zu, y %s%zu, opt %d: scale %g "
                "additive %d ld %zu)",
                rows, cols, ldx, ldy, layout == 0 ? "separate" : "x + ", offset, use_opt ? 1 : 0,
                static_cast<double>(o.scale), additive, o.additive_ld);
  prime_error();
  const mha_status st = mha_softmax(rows, cols, x, ldx, y, ldy, use_opt ? &o : nullptr);
  check_expectation(st, e, call);
  if (st != MHA_OK) {
    FUZZ_CHECK(same_bits(xb, x0) && same_bits(yb, y0), "mha_softmax failed but changed x or y");
    return;
  }
  if (empty) return;
  check_softmax(rows, cols, x0.data(), ldx, y, ldy, used);
  // Padding between the rows of y holds what it held before.
  const float* pad0 = layout == 0 ? y0.data() : x0.data() + offset;
  for (std::size_t i = 0; i + 1 < rows; ++i)
    for (std::size_t j = cols; j < ldy; ++j)
      FUZZ_CHECK(std::memcmp(&y[i * ldy + j], &pad0[i * ldy + j], sizeof(float)) == 0,
                 "mha_softmax wrote y padding at row %zu col %zu", i, j);
}

// ------------------------------------------------------------- reshape ---

void fuzz_reshape(Decoder& d) {
  const int op = d.p.ConsumeIntegralInRange<int>(0, 2);
  const std::size_t B = d.dim(3), S = d.dim(5), H = d.dim(4), D = d.dim(6);
  const std::size_t n = product({B, S, H, D});
  if (n == SIZE_MAX || n > kMaxAlloc / 3) {
    if (n != SIZE_MAX) return;
    // Sizes whose bytes overflow: the call must fail before touching these.
    std::vector<float> x(16), y(16), z(16), w(16);
    prime_error();
    mha_status st = op == 0   ? mha_split_heads(B, S, H, D, x.data(), y.data())
                    : op == 1 ? mha_merge_heads(B, S, H, D, x.data(), y.data())
                              : mha_split_qkv(B, S, H, D, x.data(), y.data(), z.data(), w.data());
    check_expectation(st, Expect::fail, "mha reshape (overflowing sizes)");
    return;
  }
  const int alias = d.p.ConsumeIntegralInRange<int>(0, 7);  // 0: output aliases the input
  const bool null_in = d.coin(16);
  std::vector<float> x = d.values(op == 2 ? 3 * n : n);
  std::vector<float> outs[3];
  for (auto& o : outs) o.assign(n, kSentinel);
  float* px = null_in ? nullptr : x.data();
  float* py[3] = {outs[0].data(), outs[1].data(), outs[2].data()};
  if (alias == 0 && n > 0) py[op == 2 ? d.p.ConsumeIntegralInRange<int>(0, 2) : 0] = x.data();
  const std::vector<float> x0 = x;
  Expect e = (null_in && n > 0) ? Expect::fail : Expect::ok;
  // mha.h requires disjoint outputs only of split_qkv; the others: either.
  if (alias == 0 && n > 0 && !null_in) e = op == 2 ? Expect::fail : Expect::either;
  if (n == 0) e = Expect::either;
  prime_error();
  const mha_status st = op == 0   ? mha_split_heads(B, S, H, D, px, py[0])
                        : op == 1 ? mha_merge_heads(B, S, H, D, px, py[0])
                                  : mha_split_qkv(B, S, H, D, px, py[0], py[1], py[2]);
  check_expectation(st, e, "mha reshape");
  if (st != MHA_OK) {
    FUZZ_CHECK(same_bits(x, x0), "a failed reshape changed its input");
    for (int i = 0; i < 3; ++i)
      if (py[i] != x.data())
        FUZZ_CHECK(
            std::all_of(outs[i].begin(), outs[i].end(), [](float v) { return v == kSentinel; }),
            "a failed reshape wrote output %d", i);
    return;
  }
  if (n == 0 || alias == 0) return;
  const std::size_t E = H * D;
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t s = 0; s < S; ++s)
      for (std::size_t h = 0; h < H; ++h)
        for (std::size_t t = 0; t < D; ++t) {
          const std::size_t heads_at = ((b * H + h) * S + s) * D + t;
          if (op == 0)
            FUZZ_CHECK(outs[0][heads_at] == x0[(b * S + s) * E + h * D + t],
                       "split_heads moved wrong");
          else if (op == 1)
            FUZZ_CHECK(outs[0][(b * S + s) * E + h * D + t] == x0[heads_at],
                       "merge_heads moved wrong");
          else
            for (int part = 0; part < 3; ++part)
              FUZZ_CHECK(outs[part][heads_at] == x0[(b * S + s) * 3 * E + part * E + h * D + t],
                         "split_qkv moved part %d wrong", part);
        }
}

// ------------------------------------------------------------ attention ---

// An attention object with the host copy of its weights, for the reference;
// E, kdim and vdim with the config's defaults resolved.
struct Model {
  mha_config cfg{};
  mha::test::RandomWeights w;
  mha_attention* attn = nullptr;
  std::size_t E = 0, kdim = 0, vdim = 0;
  double tol = kAttentionTol;  // of every comparison with the reference
  Model(const mha_config& c, std::uint32_t seed) : cfg(c), w(c, seed & 1, seed) {}
  ~Model() { mha_attention_destroy(attn); }
};

void fuzz_forward(Decoder& d, const Model& m) {
  const std::size_t batch = d.dim(3), L = d.dim(6);
  std::size_t S = d.dim(9);
  if (d.coin(24)) S = 1030 + d.p.ConsumeIntegralInRange<std::size_t>(0, 80);  // split-KV
  const std::size_t H = m.cfg.num_heads;
  const std::size_t nq = product({batch, L, m.E}), nk = product({batch, S, m.kdim}),
                    nv = product({batch, S, m.vdim}), nw = product({batch, H, L, S});
  const bool impossible = nq == SIZE_MAX || nk == SIZE_MAX || nv == SIZE_MAX || nw == SIZE_MAX;
  if (!impossible && (nq > kMaxAlloc || nk > kMaxAlloc || nv > kMaxAlloc || nw > kMaxAlloc)) return;
  const int weights_mode = d.p.ConsumeIntegralInRange<int>(0, 2);  // none, per head, averaged
  const bool self = m.kdim == m.E && m.vdim == m.E && L == S && d.coin();
  Buffer q(nq), k(self ? 0 : nk), v(self ? 0 : nv), out(nq);
  Buffer w(weights_mode == 0 ? 0 : weights_mode == 1 ? nw : product({batch, L, S}));
  for (auto* b : {&q, &k, &v}) b->v = d.values(b->v.size());
  mha_mask mask{};
  std::vector<unsigned char> padding;
  std::vector<float> additive;
  const bool use_mask = !impossible && d.coin();
  if (use_mask) {
    mask.causal = d.coin() ? 1 : 0;
    if (d.coin()) {
      padding.resize(batch * S);
      const int density = d.p.ConsumeIntegralInRange<int>(0, 4);
      for (auto& p : padding) p = static_cast<int>(d.rng() % 4) < density ? 1 : 0;
      mask.key_padding = padding.data();
    }
    const int add = d.p.ConsumeIntegralInRange<int>(0, 2);
    // [L, S] or [batch, H, L, S]: when batch is 0, L * S alone may be huge.
    const std::size_t na = add == 2 ? nw : product({L, S});
    if (add != 0 && na <= kMaxAlloc) {
      mask.additive_per_head = add == 2;
      additive = d.values(na, -3.f, 3.f);
      for (float& a : additive)
        if (d.rng() % 8 == 0) a = -INFINITY;
      mask.additive = additive.data();
    }
  }
  // A NULL input or output, or a zero size: must fail.
  const int null_arg = d.p.ConsumeIntegralInRange<int>(0, 15);
  const float* qp = null_arg == 1 ? nullptr : q.v.data();
  const float* kp = null_arg == 2 ? nullptr : self ? qp : k.v.data();
  const float* vp = null_arg == 3 ? nullptr : self ? qp : v.v.data();
  float* op = null_arg == 4 ? nullptr : out.v.data();
  Expect e = Expect::ok;
  if (null_arg >= 1 && null_arg <= 4) e = Expect::fail;
  if (batch == 0 || L == 0 || S == 0 || impossible || null_arg == 5) e = Expect::fail;
  const std::vector<float> w0 = w.v;
  prime_error();
  const mha_status st = mha_attention_forward(
      null_arg == 5 ? nullptr : m.attn, batch, L, S, qp, kp, vp, use_mask ? &mask : nullptr, op,
      weights_mode == 0 ? nullptr : w.v.data(), weights_mode == 2);
  check_expectation(st, e, "mha_attention_forward");
  if (st != MHA_OK) {
    FUZZ_CHECK(std::all_of(out.v.begin(), out.v.end(), [](float x) { return x == kSentinel; }),
               "mha_attention_forward failed but wrote out");
    FUZZ_CHECK(same_bits(w.v, w0), "mha_attention_forward failed but wrote attn_weights");
    return;
  }
  const mha::test::ReferenceResult ref = mha::test::reference_attention(
      m.cfg, m.w.view(), batch, L, S, q.v.data(), kp, vp, use_mask ? &mask : nullptr,
      weights_mode != 0, weights_mode == 2);
  const double err = mha::test::scaled_error(out.v, ref.out);
  FUZZ_CHECK(err <= m.tol,
             "forward out error %.3g > %.0e (E %zu H %zu kv_heads %zu kdim %zu vdim %zu batch %zu "
             "q_len %zu kv_len %zu)",
             err, m.tol, m.E, H, m.cfg.num_kv_heads, m.kdim, m.vdim, batch, L, S);
  if (weights_mode != 0) {
    const double werr = mha::test::scaled_error(w.v, ref.weights);
    FUZZ_CHECK(werr <= m.tol, "forward weights error %.3g", werr);
  }
}

// A cache's options, from the input: NULL, each dtype, an unknown dtype or
// a wrong struct_size (those two must fail); and the tolerance of its steps
// against the unquantized reference (values in [-1, 1]: an int8 group's
// step is at most 1/127 of its largest value, an E4M3 value within 2^-4 of
// its input).
struct KvOptions {
  mha_kv_cache_options o{sizeof(mha_kv_cache_options), MHA_KV_DEFAULT};
  bool null = true, valid = true;
  const mha_kv_cache_options* get() const { return null ? nullptr : &o; }
  double tol(const Model& m) const {
    return o.dtype == MHA_KV_INT8       ? std::max(m.tol, 3e-2)
           : o.dtype == MHA_KV_FP8_E4M3 ? std::max(m.tol, 1.5e-1)
                                        : m.tol;
  }
};
KvOptions decode_kv_options(Decoder& d) {
  KvOptions k;
  const int how = d.p.ConsumeIntegralInRange<int>(0, 7);
  k.null = how == 0;
  if (how >= 1 && how <= 3) k.o.dtype = static_cast<mha_kv_dtype>(how - 1);
  if (how == 4) k.o.dtype = static_cast<mha_kv_dtype>(d.p.ConsumeIntegral<int>() | 4);
  if (how == 5) k.o.struct_size = d.p.ConsumeIntegralInRange<std::size_t>(0, 64) | 1;
  k.valid = how <= 3 || how >= 6;
  return k;
}

void fuzz_cache(Decoder& d, const Model& m) {
  const std::size_t batch = d.dim(3), max_len = d.dim(12);
  auto* const sentinel = reinterpret_cast<mha_kv_cache*>(std::uintptr_t{0x5e7});
  mha_kv_cache* cache = sentinel;
  Expect e = batch == 0 || max_len == 0 ? Expect::fail : Expect::ok;
  // Caches whose bytes overflow or cannot be allocated: fail (OOM is fine).
  std::size_t kv =
      product({batch, max_len, m.cfg.num_kv_heads ? m.cfg.num_kv_heads : m.cfg.num_heads,
               m.E / m.cfg.num_heads});
  if (kv == SIZE_MAX || kv > (std::size_t{1} << 40)) e = Expect::fail;
  const KvOptions ko = decode_kv_options(d);
  if (!ko.valid) e = Expect::fail;
  const double tol = ko.tol(m);
  prime_error();
  const mha_status st = ko.null && d.coin()
                            ? mha_kv_cache_create(m.attn, batch, max_len, &cache)
                            : mha_kv_cache_create_ex(m.attn, batch, max_len, ko.get(), &cache);
  check_expectation(st, e, "mha_kv_cache_create");
  if (st != MHA_OK) {
    FUZZ_CHECK(cache == sentinel, "mha_kv_cache_create failed but wrote *out");
    return;
  }
  FUZZ_CHECK(mha_kv_cache_length(cache) == 0, "a new cache has length %zu",
             mha_kv_cache_length(cache));
  // The host's copy of every position's inputs, per batch row.
  std::vector<std::vector<float>> hq(batch), hk(batch), hv(batch);
  std::size_t len = 0;
  for (int op = 0; op < 6 && d.p.remaining_bytes() > 0; ++op) {
    if (d.coin(4)) {
      const std::size_t to = d.p.ConsumeIntegralInRange<std::size_t>(0, len + 2);
      prime_error();
      const mha_status ts = mha_kv_cache_truncate(cache, to);
      check_expectation(ts, to <= len ? Expect::ok : Expect::fail, "mha_kv_cache_truncate");
      if (ts == MHA_OK) {
        len = to;
        for (std::size_t b = 0; b < batch; ++b) {
          hq[b].resize(len * m.E);
          hk[b].resize(len * m.kdim);
          hv[b].resize(len * m.vdim);
        }
      }
      FUZZ_CHECK(mha_kv_cache_length(cache) == len, "length %zu after truncate, expected %zu",
                 mha_kv_cache_length(cache), len);
      continue;
    }
    const std::size_t n_new = d.dim(5);
    const std::size_t nq = product({batch, n_new, m.E});
    if (nq == SIZE_MAX || nq > kMaxAlloc) {
      std::vector<float> tiny(16);
      prime_error();
      check_expectation(mha_attention_step(m.attn, cache, n_new, tiny.data(), tiny.data(),
                                           tiny.data(), tiny.data()),
                        Expect::fail, "mha_attention_step (overflowing n_new)");
      continue;
    }
    std::vector<float> q = d.values(nq), k = d.values(batch * n_new * m.kdim),
                       v = d.values(batch * n_new * m.vdim), out(nq, kSentinel);
    const int null_arg = d.p.ConsumeIntegralInRange<int>(0, 15);
    Expect se = n_new == 0 || n_new > max_len - len ? Expect::fail : Expect::ok;
    if (null_arg >= 1 && null_arg <= 4) se = Expect::fail;
    prime_error();
    const mha_status ss =
        mha_attention_step(m.attn, cache, n_new, null_arg == 1 ? nullptr : q.data(),
                           null_arg == 2 ? nullptr : k.data(), null_arg == 3 ? nullptr : v.data(),
                           null_arg == 4 ? nullptr : out.data());
    check_expectation(ss, se, "mha_attention_step");
    if (ss != MHA_OK) {
      FUZZ_CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }),
                 "mha_attention_step failed but wrote out");
      FUZZ_CHECK(mha_kv_cache_length(cache) == len, "a failed step changed the length");
      continue;
    }
    // Reference: a causal forward of the new queries over every position.
    const std::size_t S = len + n_new;
    std::vector<float> rq(batch * n_new * m.E), rk, rv;
    for (std::size_t b = 0; b < batch; ++b) {
      std::copy_n(&q[b * n_new * m.E], n_new * m.E, &rq[b * n_new * m.E]);
      hq[b].insert(hq[b].end(), &q[b * n_new * m.E], &q[(b + 1) * n_new * m.E]);
      hk[b].insert(hk[b].end(), &k[b * n_new * m.kdim], &k[(b + 1) * n_new * m.kdim]);
      hv[b].insert(hv[b].end(), &v[b * n_new * m.vdim], &v[(b + 1) * n_new * m.vdim]);
      rk.insert(rk.end(), hk[b].begin(), hk[b].end());
      rv.insert(rv.end(), hv[b].begin(), hv[b].end());
    }
    len = S;
    FUZZ_CHECK(mha_kv_cache_length(cache) == len, "length %zu after a step, expected %zu",
               mha_kv_cache_length(cache), len);
    mha_mask causal{};
    causal.causal = 1;
    const mha::test::ReferenceResult ref = mha::test::reference_attention(
        m.cfg, m.w.view(), batch, n_new, S, rq.data(), rk.data(), rv.data(), &causal, false, false);
    const double err = mha::test::scaled_error(out, ref.out);
    FUZZ_CHECK(err <= tol, "step out error %.3g (batch %zu n_new %zu length %zu)", err, batch,
               n_new, S);
  }
  mha_kv_cache_destroy(cache);
}

// Modifiers decoded from the input, sometimes with one invalid field, and
// the per-head arrays they point to. lse is the caller's (it knows the rows).
struct Mods {
  mha_mods m{};
  std::vector<float> slopes, sinks;
  bool on = false;  // passed (else NULL)
  bool valid = true;
  const mha_mods* ptr() const { return on ? &m : nullptr; }
};

Mods decode_mods(Decoder& d, const Model& m) {
  Mods r;
  r.on = !d.coin(3);
  if (!r.on) return r;
  const std::size_t H = m.cfg.num_heads, hd = m.E / H;
  r.m.struct_size = sizeof(mha_mods);
  r.m.causal = d.coin() ? 1 : 0;
  if (d.coin(3)) r.m.window = d.coin(8) ? SIZE_MAX : d.p.ConsumeIntegralInRange<std::size_t>(1, 40);
  if (d.coin(3)) {
    r.slopes = d.values(H, 0.f, 1.f);
    r.m.alibi_slopes = r.slopes.data();
  }
  if (d.coin(3)) r.m.softcap = d.uniform(0.5f, 30.f);
  if (d.coin(3)) {
    r.sinks = d.values(H, -2.f, 2.f);
    r.m.sinks = r.sinks.data();
  }
  if (d.coin(3)) {
    r.m.rope_dim = 2 * d.p.ConsumeIntegralInRange<std::size_t>(0, hd / 2);
    r.m.rope_theta = d.coin() ? 0.f : d.uniform(10.f, 20000.f);
    r.m.rope_interleaved = d.coin() ? 1 : 0;
  }
  // Each of these breaks a rule of mha.h's mha_mods.
  switch (d.p.ConsumeIntegralInRange<int>(0, 23)) {
    case 0:
      r.m.struct_size = 0;
      break;
    case 1:
      r.m.rope_dim = hd % 2 == 1 ? hd : hd + 2;
      break;
    case 2:
      r.m.softcap = d.coin() ? -1.f : NAN;
      break;
    case 3:
      r.sinks.assign(H, 0.f);
      r.sinks[H - 1] = INFINITY;
      r.m.sinks = r.sinks.data();
      break;
    case 4:
      r.m.rope_interleaved = 2;
      break;
    case 5:
      r.m.rope_theta = -5.f;
      break;
    default:
      return r;
  }
  r.valid = false;
  return r;
}

// A sequence's rows [0, q_len) of out (ld E) and lse (ld H) against the
// reference for batch 1 with mods (causal added if `causal`); with no keys,
// out is the output bias and lse the sink or -inf (mha.h).
void check_sequence(const Model& m, const Mods& mods, bool causal, std::size_t q_len,
                    std::size_t kv_len, const float* q, const float* k, const float* v,
                    const float* out, const float* lse, const char* call, double tol) {
  const std::size_t E = m.E, H = m.cfg.num_heads;
  if (q_len == 0) return;
  const mha_weights w = m.w.view();
  if (kv_len == 0) {
    for (std::size_t i = 0; i < q_len * E; ++i) {
      const float bias = w.out_bias != nullptr ? w.out_bias[i % E] : 0.f;
      FUZZ_CHECK(out[i] == bias, "%s: a sequence without keys got out %g, not the bias %g", call,
                 out[i], bias);
    }
    for (std::size_t i = 0; lse != nullptr && i < q_len * H; ++i) {
      const float want = mods.m.sinks != nullptr ? mods.m.sinks[i % H] : -INFINITY;
      FUZZ_CHECK(lse[i] == want, "%s: a sequence without keys got lse %g, not %g", call, lse[i],
                 want);
    }
    return;
  }
  mha_mods mm{};
  mm.struct_size = sizeof(mha_mods);
  if (mods.on) mm = mods.m;
  mm.causal = mm.causal || causal;
  const mha::test::ReferenceResult ref = mha::test::reference_attention(
      m.cfg, w, 1, q_len, kv_len, q, k, v, nullptr, false, false, &mm);
  const double err = mha::test::scaled_error(std::vector<float>(out, out + q_len * E), ref.out);
  FUZZ_CHECK(err <= tol, "%s out error %.3g (q_len %zu kv_len %zu)", call, err, q_len, kv_len);
  if (lse != nullptr) {
    const double lerr = mha::test::lse_error(std::vector<float>(lse, lse + q_len * H), ref.lse);
    FUZZ_CHECK(lerr <= tol, "%s lse error %.3g", call, lerr);
  }
}

// Lengths of up to 4 sequences, now and then one long enough for split-KV.
std::vector<std::size_t> decode_lengths(Decoder& d, std::size_t num) {
  std::vector<std::size_t> lens(num);
  for (auto& n : lens)
    n = d.coin(24) ? 1030 + d.p.ConsumeIntegralInRange<std::size_t>(0, 80)
                   : d.p.ConsumeIntegralInRange<std::size_t>(0, 9);
  return lens;
}

std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& lens) {
  std::vector<std::size_t> start(lens.size() + 1, 0);
  for (std::size_t i = 0; i < lens.size(); ++i) start[i + 1] = start[i] + lens[i];
  return start;
}

// Breaks an offsets array now and then (a nonzero start, a decrease, or a
// total whose bytes overflow); true if it did.
bool corrupt_offsets(Decoder& d, std::vector<std::size_t>& start) {
  switch (d.p.ConsumeIntegralInRange<int>(0, 19)) {
    case 0:
      start[0] = 1;
      return true;
    case 1:
      if (start.size() < 3) return false;
      start[1] = start[2] + 1;
      return true;
    case 2:
      start.back() = std::size_t{1} << 61;
      return true;
    default:
      return false;
  }
}

void fuzz_ragged(Decoder& d, const Model& m) {
  const std::size_t num = d.p.ConsumeIntegralInRange<std::size_t>(0, 4), H = m.cfg.num_heads;
  std::vector<std::size_t> q_start = offsets_of(decode_lengths(d, num));
  const bool own_kv = d.coin();
  std::vector<std::size_t> kv_start = own_kv ? offsets_of(decode_lengths(d, num)) : q_start;
  const std::size_t Q = q_start.back(), K = kv_start.back();
  bool bad = corrupt_offsets(d, q_start);
  if (own_kv && !bad) bad = corrupt_offsets(d, kv_start);
  std::vector<float> q = d.values(Q * m.E), k = d.values(K * m.kdim), v = d.values(K * m.vdim);
  std::vector<float> out(Q * m.E, kSentinel), lse(Q * H, kSentinel);
  Mods mods = decode_mods(d, m);
  if (mods.on && d.coin()) mods.m.lse = lse.data();
  const int null_arg = d.p.ConsumeIntegralInRange<int>(0, 15);
  Expect e = bad || !mods.valid ? Expect::fail : Expect::ok;
  if ((null_arg == 1 || null_arg == 4) && Q > 0) e = Expect::fail;
  if ((null_arg == 2 || null_arg == 3) && K > 0) e = Expect::fail;
  const mha_ragged seqs{sizeof(mha_ragged), num, q_start.data(),
                        own_kv ? kv_start.data() : nullptr};
  prime_error();
  const mha_status st = mha_attention_forward_ragged(
      m.attn, &seqs, null_arg == 1 ? nullptr : q.data(), null_arg == 2 ? nullptr : k.data(),
      null_arg == 3 ? nullptr : v.data(), mods.ptr(), null_arg == 4 ? nullptr : out.data());
  check_expectation(st, e, "mha_attention_forward_ragged");
  if (st != MHA_OK) {
    FUZZ_CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }) &&
                   std::all_of(lse.begin(), lse.end(), [](float x) { return x == kSentinel; }),
               "mha_attention_forward_ragged failed but wrote out or lse");
    return;
  }
  for (std::size_t i = 0; i < num; ++i) {
    check_sequence(m, mods, false, q_start[i + 1] - q_start[i], kv_start[i + 1] - kv_start[i],
                   q.data() + q_start[i] * m.E, k.data() + kv_start[i] * m.kdim,
                   v.data() + kv_start[i] * m.vdim, out.data() + q_start[i] * m.E,
                   mods.m.lse ? lse.data() + q_start[i] * H : nullptr,
                   "mha_attention_forward_ragged", m.tol);
  }
}

// The first position a window starting at position j lets a step read
// (mha.h: a key tile, at most 256 keys, before it).
std::size_t first_read(std::size_t j) {
  return j > 256 ? j - 256 : 0;
}

// The blocks of a paged cache as mha.h describes them: per slot a table of
// block ids from its first held position, shared blocks counted (forks),
// a kept shared block copied before a truncate writes it.
struct BlockMirror {
  std::size_t bt, num_blocks, next = 0;
  std::vector<std::vector<std::size_t>> tables;
  std::vector<std::size_t> first;  // first position held
  std::map<std::size_t, std::size_t> refs;
  BlockMirror(std::size_t slots, std::size_t block_tokens, std::size_t blocks)
      : bt(block_tokens), num_blocks(blocks), tables(slots), first(slots, 0) {}
  std::size_t held() const { return refs.size(); }
  std::size_t free() const { return num_blocks - held(); }
  std::size_t take() {
    refs[next] = 1;
    return next++;
  }
  void unref(std::size_t b) {
    if (--refs[b] == 0) refs.erase(b);
  }
  // Blocks slot s needs beyond its table to hold len positions.
  std::size_t need(std::size_t s, std::size_t len) const {
    const std::size_t want = (len + bt - 1) / bt - first[s] / bt;
    return want > tables[s].size() ? want - tables[s].size() : 0;
  }
  void grow(std::size_t s, std::size_t len) {
    for (std::size_t n = need(s, len); n > 0; --n) tables[s].push_back(take());
  }
  // Whether truncating slot s (length len) to `to` needs a block copied.
  bool truncate_copies(std::size_t s, std::size_t len, std::size_t to) const {
    return to % bt != 0 && to < len && refs.at(tables[s][to / bt - first[s] / bt]) > 1;
  }
  void truncate(std::size_t s, std::size_t len, std::size_t to) {
    const bool copy = truncate_copies(s, len, to);
    const std::size_t keep = to == 0 ? 0 : (to + bt - 1) / bt - first[s] / bt;
    while (tables[s].size() > keep) {
      unref(tables[s].back());
      tables[s].pop_back();
    }
    if (to == 0) first[s] = 0;
    if (copy) {
      std::size_t& b = tables[s][to / bt - first[s] / bt];
      unref(b);
      b = take();
    }
  }
  void fork(std::size_t src, std::size_t dst, std::size_t len) {
    if (len == 0) return;
    const std::size_t blocks = (len + bt - 1) / bt - first[src] / bt;
    const bool partial = len % bt != 0;
    for (std::size_t i = 0; i + (partial ? 1 : 0) < blocks; ++i) {
      ++refs[tables[src][i]];
      tables[dst].push_back(tables[src][i]);
    }
    if (partial) tables[dst].push_back(take());
    first[dst] = first[src];
  }
  void drop_before(std::size_t s, std::size_t pos) {
    const std::size_t upto = pos / bt;
    if (upto <= first[s] / bt) return;
    const std::size_t drop = std::min(upto - first[s] / bt, tables[s].size());
    for (std::size_t b = 0; b < drop; ++b) unref(tables[s][b]);
    tables[s].erase(tables[s].begin(), tables[s].begin() + static_cast<std::ptrdiff_t>(drop));
    first[s] += drop * bt;
  }
};

// One slot's tree step (mha_attention_step_tree; sometimes bad parents)
// and the accept of a path (sometimes not root-to-node, or too long), each
// checked against the mirror: every row against the double reference of
// its path, and an accepted path becomes the slot's history. A failed
// accept is followed by an empty one, which drops the tree.
void fuzz_tree(Decoder& d, const Model& m, const Mods& mods, mha_paged_kv_cache* cache,
               BlockMirror& blocks, std::vector<std::vector<float>>& hq,
               std::vector<std::vector<float>>& hk, std::vector<std::vector<float>>& hv,
               double tol) {
  const std::size_t num_slots = hk.size(), H = m.cfg.num_heads, bt = blocks.bt;
  const std::size_t slot = d.p.ConsumeIntegralInRange<std::size_t>(0, num_slots - 1);
  const std::size_t n = d.p.ConsumeIntegralInRange<std::size_t>(1, 8);
  const std::size_t L = hk[slot].size() / std::max<std::size_t>(1, m.kdim);
  const std::size_t first = blocks.first[slot], w = mods.m.window;
  std::vector<std::int32_t> parent(n);
  bool bad = false;
  for (std::size_t r = 0; r < n; ++r) {
    const auto p = d.p.ConsumeIntegralInRange<std::int64_t>(-2, static_cast<std::int64_t>(r));
    parent[r] = static_cast<std::int32_t>(r == 0 && p >= 0 && !d.coin(8) ? -1 : p);
    bad = bad || parent[r] < -1 || parent[r] >= static_cast<std::int32_t>(r);
  }
  Expect e = bad || !mods.valid ? Expect::fail : Expect::ok;
  if (n > blocks.num_blocks * bt - (L - first)) e = Expect::fail;
  if (first != 0 && (!mods.on || w == 0 || w > L + 1 - first || first_read(L + 1 - w) < first))
    e = Expect::fail;
  if (e == Expect::ok && blocks.need(slot, L + n) > blocks.free()) e = Expect::fail;
  const std::vector<float> q = d.values(n * m.E), k = d.values(n * m.kdim),
                           v = d.values(n * m.vdim);
  std::vector<float> out(n * m.E, kSentinel), lse(n * H, kSentinel);
  Mods step_mods = mods;
  if (step_mods.on && d.coin()) step_mods.m.lse = lse.data();
  const std::size_t slots[] = {slot}, q_start[] = {0, n};
  prime_error();
  const mha_status st =
      mha_attention_step_tree(m.attn, cache, 1, slots, q_start, parent.data(), q.data(), k.data(),
                              v.data(), step_mods.ptr(), out.data());
  check_expectation(st, e, "mha_attention_step_tree");
  if (st != MHA_OK) {
    FUZZ_CHECK(std::all_of(out.begin(), out.end(), [](float x) { return x == kSentinel; }),
               "a failed tree step wrote out");
    return;
  }
  blocks.grow(slot, L + n);
  const auto path_to = [&](std::size_t r) {
    std::vector<std::size_t> p{r};
    while (parent[p.back()] >= 0) p.push_back(static_cast<std::size_t>(parent[p.back()]));
    std::reverse(p.begin(), p.end());
    return p;
  };
  // The slot's history with a path's tokens after it.
  const auto with_path = [&](const std::vector<std::size_t>& path, const std::vector<float>& h,
                             const std::vector<float>& x, std::size_t width) {
    std::vector<float> all(h);
    for (std::size_t j : path)
      all.insert(all.end(), x.begin() + j * width, x.begin() + (j + 1) * width);
    return all;
  };
  for (std::size_t r = 0; r < n; ++r) {
    const std::vector<std::size_t> path = path_to(r);
    const std::vector<float> pk = with_path(path, hk[slot], k, m.kdim);
    const std::vector<float> pv = with_path(path, hv[slot], v, m.vdim);
    check_sequence(m, mods, true, 1, L + path.size(), q.data() + r * m.E, pk.data(), pv.data(),
                   out.data() + r * m.E, step_mods.m.lse ? lse.data() + r * H : nullptr,
                   "mha_attention_step_tree", tol);
  }
  // A path to a random token, a random prefix of it, sometimes spoilt.
  std::vector<std::size_t> path = path_to(d.p.ConsumeIntegralInRange<std::size_t>(0, n - 1));
  path.resize(d.p.ConsumeIntegralInRange<std::size_t>(0, path.size()));
  bool valid = true;
  if (!path.empty() && d.coin(8)) {
    path[d.p.ConsumeIntegralInRange<std::size_t>(0, path.size() - 1)] =
        d.p.ConsumeIntegralInRange<std::size_t>(0, n);
    for (std::size_t j = 0; j < path.size(); ++j) {
      valid = valid && path[j] < n &&
              parent[path[j]] == (j == 0 ? -1 : static_cast<std::int32_t>(path[j - 1]));
    }
  }
  prime_error();
  const mha_status as = mha_kv_cache_accept_path(cache, slot, path.size(), path.data());
  check_expectation(as, valid ? Expect::ok : Expect::fail, "mha_kv_cache_accept_path");
  FUZZ_CHECK(as == MHA_OK || mha_kv_cache_slot_length(cache, slot) == L + n,
             "a failed mha_kv_cache_accept_path changed the slot's length");
  if (as != MHA_OK) {
    path.clear();
    FUZZ_CHECK(mha_kv_cache_accept_path(cache, slot, 0, nullptr) == MHA_OK,
               "an empty mha_kv_cache_accept_path failed");
  }
  blocks.truncate(slot, L + n, L + path.size());
  hq[slot] = with_path(path, hq[slot], q, m.E);
  hk[slot] = with_path(path, hk[slot], k, m.kdim);
  hv[slot] = with_path(path, hv[slot], v, m.vdim);
}

// A paged cache through random steps, truncations, resets and forks, against
// a host mirror: each slot's inputs so far and its blocks (BlockMirror).
// The modifiers are fixed per cache (its K is stored after RoPE).
void fuzz_paged(Decoder& d, const Model& m) {
  const std::size_t num_slots = d.dim(4), bt = d.dim(20), num_blocks = d.dim(12);
  const std::size_t H = m.cfg.num_heads;
  auto* const sentinel = reinterpret_cast<mha_paged_kv_cache*>(std::uintptr_t{0x5e7});
  mha_paged_kv_cache* cache = sentinel;
  const std::size_t kvh = m.cfg.num_kv_heads ? m.cfg.num_kv_heads : H;
  const std::size_t pool = product({num_blocks, bt, kvh * (m.E / H), 2});
  Expect e = num_slots == 0 || bt == 0 || num_blocks == 0 ? Expect::fail : Expect::ok;
  if (num_slots > (std::size_t{1} << 20) || pool == SIZE_MAX || pool > (std::size_t{1} << 40))
    e = e == Expect::fail ? Expect::fail : Expect::either;
  if (pool == SIZE_MAX) e = Expect::fail;
  const KvOptions ko = decode_kv_options(d);
  if (!ko.valid) e = Expect::fail;
  const double tol = ko.tol(m);
  prime_error();
  const mha_status st =
      ko.null && d.coin()
          ? mha_kv_cache_create_paged(m.attn, num_slots, bt, num_blocks, &cache)
          : mha_kv_cache_create_paged_ex(m.attn, num_slots, bt, num_blocks, ko.get(), &cache);
  check_expectation(st, e, "mha_kv_cache_create_paged");
  if (st != MHA_OK) {
    FUZZ_CHECK(cache == sentinel, "mha_kv_cache_create_paged failed but wrote *out");
    return;
  }
  if (num_slots > 8 || pool > kMaxAlloc) {  // created, but too big to step here
    mha_paged_kv_cache_destroy(cache);
    return;
  }
  Mods mods = decode_mods(d, m);
  std::vector<std::vector<float>> hq(num_slots), hk(num_slots), hv(num_slots);
  BlockMirror blocks(num_slots, bt, num_blocks);
  const std::vector<std::size_t>& first = blocks.first;
  const auto len = [&](std::size_t s) { return hk[s].size() / std::max<std::size_t>(1, m.kdim); };
  const auto check_blocks = [&](const char* when) {
    FUZZ_CHECK(mha_kv_cache_free_blocks(cache) == blocks.free(), "%zu free blocks %s, expected %zu",
               mha_kv_cache_free_blocks(cache), when, blocks.free());
  };
  const auto check_lengths = [&](const char* when) {
    for (std::size_t s = 0; s < num_slots; ++s) {
      FUZZ_CHECK(mha_kv_cache_slot_length(cache, s) == len(s),
                 "slot %zu length %zu %s, expected %zu", s, mha_kv_cache_slot_length(cache, s),
                 when, len(s));
    }
  };
  for (int op = 0; op < 6 && d.p.remaining_bytes() > 0; ++op) {
    check_blocks("before an operation");
    if (d.coin(4)) {
      const std::size_t s = d.p.ConsumeIntegralInRange<std::size_t>(0, num_slots);
      const std::size_t to = d.p.ConsumeIntegralInRange<std::size_t>(0, len(s % num_slots) + 1);
      const bool valid = s < num_slots && to <= len(s) && (to == 0 || to >= first[s]);
      const bool ok = valid && (!blocks.truncate_copies(s, len(s), to) || blocks.free() > 0);
      prime_error();
      check_expectation(mha_kv_cache_truncate_slot(cache, s, to), ok ? Expect::ok : Expect::fail,
                        "mha_kv_cache_truncate_slot");
      if (!ok) {
        check_blocks("after a failed truncate");
        check_lengths("after a failed truncate");
        continue;
      }
      blocks.truncate(s, len(s), to);
      hq[s].resize(to * m.E);
      hk[s].resize(to * m.kdim);
      hv[s].resize(to * m.vdim);
      continue;
    }
    if (d.coin(4)) {
      // A fork (sometimes of bad slots, into a busy one, or too long).
      const std::size_t src = d.p.ConsumeIntegralInRange<std::size_t>(0, num_slots);
      const std::size_t dst = d.p.ConsumeIntegralInRange<std::size_t>(0, num_slots);
      const std::size_t n = d.p.ConsumeIntegralInRange<std::size_t>(0, len(src % num_slots) + 1);
      const bool valid = src < num_slots && dst < num_slots && src != dst && len(dst) == 0 &&
                         n <= len(src) && (n == 0 || n >= first[src]);
      const bool ok = valid && (n % bt == 0 || blocks.free() > 0);
      prime_error();
      check_expectation(mha_kv_cache_fork_slot(cache, src, dst, n), ok ? Expect::ok : Expect::fail,
                        "mha_kv_cache_fork_slot");
      if (!ok) {
        check_blocks("after a failed fork");
        check_lengths("after a failed fork");
        continue;
      }
      blocks.fork(src, dst, n);
      hq[dst].assign(hq[src].begin(), hq[src].begin() + static_cast<std::ptrdiff_t>(n * m.E));
      hk[dst].assign(hk[src].begin(), hk[src].begin() + static_cast<std::ptrdiff_t>(n * m.kdim));
      hv[dst].assign(hv[src].begin(), hv[src].begin() + static_cast<std::ptrdiff_t>(n * m.vdim));
      check_lengths("after a fork");
      continue;
    }
    if (d.coin(4)) {
      fuzz_tree(d, m, mods, cache, blocks, hq, hk, hv, tol);
      check_blocks("after a tree step");
      check_lengths("after a tree step");
      continue;
    }
    // A step over a random subset of slots (sometimes one twice or out of
    // range), each with 0..9 new tokens (now and then a long prompt).
    const std::size_t num = d.p.ConsumeIntegralInRange<std::size_t>(0, num_slots);
    std::vector<std::size_t> slots(num);
    for (std::size_t i = 0; i < num; ++i) slots[i] = (i + op) % num_slots;
    bool bad = false;
    if (num > 0 && d.coin(16)) {
      slots[0] = d.coin() ? num_slots : slots[num - 1];
      bad = slots[0] == num_slots || num > 1;
    }
    std::vector<std::size_t> q_start = offsets_of(decode_lengths(d, num));
    if (corrupt_offsets(d, q_start)) bad = true;
    const std::size_t rows = q_start.back();
    const bool fits = !bad && rows <= (std::size_t{1} << 16);
    std::vector<float> q = d.values(fits ? rows * m.E : 16),
                       k = d.values(fits ? rows * m.kdim : 16),
                       v = d.values(fits ? rows * m.vdim : 16);
    std::vector<float> out(fits ? rows * m.E : 16, kSentinel), lse(fits ? rows * H : 16, kSentinel);
    Mods step_mods = mods;
    if (step_mods.on && fits && d.coin()) step_mods.m.lse = lse.data();
    Expect se = bad || !mods.valid ? Expect::fail : Expect::ok;
    std::size_t need = 0;
    for (std::size_t i = 0; se == Expect::ok && i < num; ++i) {
      const std::size_t s = slots[i], n = q_start[i + 1] - q_start[i], w = mods.m.window;
      if (n > num_blocks * bt - (len(s) - first[s])) se = Expect::fail;  // outgrows the pool
      if (first[s] != 0 && (!mods.on || w == 0 || w > len(s) + 1 - first[s] ||
                            first_read(len(s) + 1 - w) < first[s]))
        se = Expect::fail;
      need += blocks.need(s, len(s) + n);
    }
    if (se == Expect::ok && need > blocks.free()) se = Expect::fail;  // MHA_OUT_OF_MEMORY
    prime_error();
    const std::size_t shared_before = mha_kv_cache_shared_chunks(cache);
    const mha_status ss =
        mha_attention_step_ragged_mods(m.attn, cache, num, slots.data(), q_start.data(), q.data(),
                                       k.data(), v.data(), step_mods.ptr(), out.data());
    check_expectation(ss, se, "mha_attention_step_ragged_mods");
    // Cascade runs only over decode rows (a slot's one new token) with no
    // window or ALiBi, each shared chunk a full one of 512 keys or more that
    // two of them read; a failed step keeps the last count.
    const std::size_t shared = mha_kv_cache_shared_chunks(cache);
    const bool may_share =
        ss == MHA_OK && !(mods.on && (mods.m.window != 0 || mods.m.alibi_slopes != nullptr));
    std::size_t chunks = 0;
    for (std::size_t i = 0; may_share && i < num; ++i) {
      if (q_start[i + 1] - q_start[i] == 1) chunks += len(slots[i]) / 512;
    }
    FUZZ_CHECK(ss == MHA_OK ? shared <= (may_share ? chunks / 2 : 0) : shared == shared_before,
               "mha_kv_cache_shared_chunks gave %zu after a step (%s)", shared,
               ss == MHA_OK ? "ok" : "failed");
    const auto untouched = [](const std::vector<float>& x) {
      return std::all_of(x.begin(), x.end(), [](float y) { return y == kSentinel; });
    };
    FUZZ_CHECK(ss == MHA_OK || (untouched(out) && untouched(lse)),
               "a failed paged step wrote out or lse");
    if (ss != MHA_OK) {
      check_lengths("after a failed paged step");
      check_blocks("after a failed paged step");
      continue;
    }
    for (std::size_t i = 0; i < num; ++i) {
      const std::size_t s = slots[i], n = q_start[i + 1] - q_start[i], r0 = q_start[i];
      hq[s].insert(hq[s].end(), q.data() + r0 * m.E, q.data() + (r0 + n) * m.E);
      hk[s].insert(hk[s].end(), k.data() + r0 * m.kdim, k.data() + (r0 + n) * m.kdim);
      hv[s].insert(hv[s].end(), v.data() + r0 * m.vdim, v.data() + (r0 + n) * m.vdim);
      const std::size_t L = len(s), w = mods.m.window;
      blocks.grow(s, L);
      FUZZ_CHECK(mha_kv_cache_slot_length(cache, s) == L, "slot %zu length %zu, expected %zu", s,
                 mha_kv_cache_slot_length(cache, s), L);
      check_sequence(m, mods, true, n, L, hq[s].data() + (L - n) * m.E, hk[s].data(), hv[s].data(),
                     out.data() + r0 * m.E, step_mods.m.lse ? lse.data() + r0 * H : nullptr,
                     "mha_attention_step_ragged_mods", tol);
      if (mods.on && w != 0 && L + 1 > w) blocks.drop_before(s, first_read(L + 1 - w));
    }
  }
  check_blocks("at the end");
  mha_paged_kv_cache_destroy(cache);
  FUZZ_CHECK(mha_kv_cache_shared_chunks(nullptr) == 0, "mha_kv_cache_shared_chunks(NULL) != 0");
}

// A weight's codes, scales and zeros (create's quantization in `type` and
// groups of `group`), and the values a quantized object multiplies by:
// (code - zero) * scale.
struct QuantWeight {
  std::vector<std::int8_t> codes;
  std::vector<float> scales, zeros;
  std::size_t groups, len;
  QuantWeight(mha::detail::QuantCodes type, std::size_t group, const std::vector<float>& x,
              std::size_t rows)
      : codes(x.size()),
        scales(rows * mha::detail::quant_groups(x.size() / rows, group)),
        zeros(type == mha::detail::QuantCodes::uint4 ? scales.size() : 0),
        groups(scales.size() / rows),
        len(groups == 1 ? x.size() / rows : group) {
    mha::detail::quantize_rows(type, group, rows, x.size() / rows, x.data(), codes.data(),
                               scales.data(), zeros.empty() ? nullptr : zeros.data(), "w");
  }
  void widen(std::vector<float>& x) const {
    const std::size_t rows = scales.size() / groups, cols = x.size() / rows;
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::size_t q = i / cols * groups + i % cols / len;
      x[i] = (float(codes[i]) - (zeros.empty() ? 0.0f : zeros[q])) * scales[q];
    }
  }
};

void fuzz_attention(Decoder& d) {
  mha_config c{};
  c.num_heads = d.dim(4);
  const std::size_t head_dim = d.dim(8);
  c.embed_dim = d.coin(16) ? d.dim(17) : c.num_heads * head_dim;
  c.kdim = d.coin() ? 0 : d.dim(9);
  c.vdim = d.coin() ? 0 : d.dim(9);
  c.num_kv_heads = d.coin() ? 0 : d.dim(4);
  const int null_weight = d.p.ConsumeIntegralInRange<int>(0, 15);
  const std::size_t kvh = c.num_kv_heads ? c.num_kv_heads : c.num_heads;
  const bool valid = c.embed_dim != 0 && c.num_heads != 0 && c.embed_dim % c.num_heads == 0 &&
                     kvh != 0 && c.num_heads % kvh == 0 && null_weight > 3;
  const std::size_t wsize = valid ? product({c.embed_dim, c.embed_dim}) : 0;
  const std::size_t kvsize =
      valid ? product({kvh * (c.embed_dim / c.num_heads), std::max({c.kdim, c.vdim, c.embed_dim})})
            : 0;
  // Weights are only materialized for small valid configs; invalid ones get
  // a config the library must reject before reading any weight.
  if (wsize > kMaxAlloc || kvsize > kMaxAlloc) return;
  mha_config safe = c;
  if (!valid) safe = mha_config{1, 1, 1, 1, 1};
  Model m(safe, d.p.ConsumeIntegral<std::uint32_t>());
  m.cfg = valid ? c : safe;
  m.E = m.cfg.embed_dim;
  m.kdim = m.cfg.kdim ? m.cfg.kdim : m.E;
  m.vdim = m.cfg.vdim ? m.cfg.vdim : m.E;
  mha_weights w = m.w.view();
  if (null_weight == 0) w.q_weight = nullptr;
  if (null_weight == 1) w.k_weight = nullptr;
  if (null_weight == 2) w.v_weight = nullptr;
  if (null_weight == 3) w.out_weight = nullptr;
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  // mha_attention_create, or create_ex with quantized weights, bf16 or (rarely)
  // bad options.
  const int how = d.p.ConsumeIntegralInRange<int>(0, 15);
  mha_attention_options opt{};
  opt.struct_size = how == 15 ? 0 : sizeof(mha_attention_options);
  opt.compute = how == 14 ? static_cast<mha_dtype>(d.p.ConsumeIntegral<int>() | 2) : MHA_BF16;
  // Quantized weights: int8 (half of them given as codes, how 8), int4 or
  // uint4, per row or in groups.
  const bool quant = how == 8 || how == 9;
  const int fmt = quant && how == 9 ? d.p.ConsumeIntegralInRange<int>(0, 2) : 0;
  if (quant) {
    opt.compute = MHA_FP32;
    opt.weight_format = fmt == 0   ? MHA_WEIGHTS_INT8
                        : fmt == 1 ? MHA_WEIGHTS_INT4
                                   : MHA_WEIGHTS_UINT4;
    opt.weight_group = how == 8 ? 0 : std::size_t{32} << d.p.ConsumeIntegralInRange<int>(0, 2);
    if (how == 9 && d.coin()) opt.weight_group = 0;
  }
  // Weight-only or int8 activations on int8, int4 or uint4 weights, fp32
  // or bf16 compute: codes made at create or int8 ones given (how 8).
  const bool w8a8 = quant && d.coin();
  if (w8a8) opt.activations = MHA_ACTIVATIONS_INT8;
  if (quant && d.coin()) opt.compute = MHA_BF16;
  const auto type = fmt == 0   ? mha::detail::QuantCodes::int8
                    : fmt == 1 ? mha::detail::QuantCodes::int4
                               : mha::detail::QuantCodes::uint4;
  const bool bf16 = how >= 10;
  // Sometimes on the vdpbf16ps emulation, so that the dot path and the bf16
  // attention core (bf16 K/V) run on any CPU; an object keeps the kernels
  // it was created with.
  const bool emulated = bf16 && d.coin();
  if (emulated)
    mha::detail::set_gemm_bf16_kernels_override(&mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps);
  // Quantized weights as create quantizes them, int8 given as codes (how
  // 8); other objects quantize nothing (empty weights), work a run need
  // not spend on them.
  const std::size_t kv_rows = m.w.k.size() / m.kdim, group = opt.weight_group;
  const std::vector<float> none;
  const QuantWeight q8(type, group, quant ? m.w.q : none, m.E),
      k8(type, group, quant ? m.w.k : none, kv_rows),
      v8(type, group, quant ? m.w.v : none, kv_rows), o8(type, group, quant ? m.w.o : none, m.E);
  const mha_int8_weights codes{sizeof(mha_int8_weights),
                               w.q_weight ? q8.codes.data() : nullptr,
                               w.k_weight ? k8.codes.data() : nullptr,
                               w.v_weight ? v8.codes.data() : nullptr,
                               w.out_weight ? o8.codes.data() : nullptr,
                               q8.scales.data(),
                               k8.scales.data(),
                               v8.scales.data(),
                               o8.scales.data(),
                               w.q_bias,
                               w.k_bias,
                               w.v_bias,
                               w.out_bias};
  prime_error();
  mha_status st;
  if (quant && how == 8) {
    st = mha_attention_create_int8(&c, &codes, d.coin() ? nullptr : &opt, &attn);
  } else {
    st = bf16 || quant ? mha_attention_create_ex(&c, &w, &opt, &attn)
                       : mha_attention_create(&c, &w, &attn);
  }
  if (emulated) mha::detail::set_gemm_bf16_kernels_override(nullptr);
  check_expectation(st, valid && how < 14 ? Expect::ok : Expect::fail, "mha_attention_create");
  if (st != MHA_OK) {
    FUZZ_CHECK(attn == sentinel, "mha_attention_create failed but wrote *out");
    return;
  }
  m.attn = attn;
  if (bf16) {
    // The reference runs on the weights the object stores: rounded to bf16.
    m.w.round_to_bf16();
    m.tol = kBf16AttentionTol;
  }
  if (quant) {
    // Or widened from their codes, which the fp32 tolerance then holds.
    q8.widen(m.w.q);
    k8.widen(m.w.k);
    v8.widen(m.w.v);
    o8.widen(m.w.o);
  }
  // W8A8 rounds each projection input to int8 codes as well: half a step,
  // 1/254 of its row's largest magnitude, per input (measured at most
  // 1.1e-2 on test_attention_w8a8's layers; a margin of 9).
  if (w8a8) m.tol = std::max(m.tol, 1e-1);
  // A bf16 core on the widened weights: the bf16 objects' tolerance.
  if (quant && opt.compute == MHA_BF16) m.tol = std::max(m.tol, kBf16AttentionTol);
  for (int op = 0; op < 4 && d.p.remaining_bytes() > 0; ++op) {
    switch (d.p.ConsumeIntegralInRange<int>(0, 5)) {
      case 0:
        fuzz_cache(d, m);
        break;
      case 1:
        fuzz_ragged(d, m);
        break;
      case 2:
        fuzz_paged(d, m);
        break;
      default:
        fuzz_forward(d, m);
        break;
    }
  }
}

// ------------------------------------------------------ llama.cpp blocks ---

// fp16 bits widened to fp32 (the test's own, as mha.h states it).
float fp16_value(std::uint16_t h) {
  const int e = h >> 10 & 31, m = h & 1023;
  const float sign = (h & 0x8000u) != 0 ? -1.0f : 1.0f;
  if (e == 31) return m != 0 ? NAN : sign * INFINITY;
  return sign * (e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(1024 + m), e - 25));
}

// mha_attention_create_blocks on random Q8_0 or Q4_0 blocks: scales of
// random fp16 bits (NaN and infinities among them, now and then) and input
// widths on and off the block size. It must fail, writing nothing, exactly
// where a width is not a multiple of 32 or a scale is not finite; a
// weight-only object then gives the bits of an fp32 object on the decoded
// weights (mha.h), and one with int8 activations runs a forward.
void fuzz_blocks(Decoder& d) {
  const bool q8 = d.coin();
  const mha_block_format format = q8 ? MHA_BLOCKS_Q8_0 : MHA_BLOCKS_Q4_0;
  mha_config c{};
  c.num_heads = 1 + d.p.ConsumeIntegralInRange<std::size_t>(0, 3);
  c.embed_dim = c.num_heads * (d.coin(6) ? 8 : 32);
  c.kdim = d.coin() ? 0 : 32 * d.p.ConsumeIntegralInRange<std::size_t>(1, 3) + (d.coin(6) ? 16 : 0);
  c.vdim = c.kdim;
  c.num_kv_heads = 1;
  const std::size_t E = c.embed_dim, kdim = c.kdim ? c.kdim : E, kv = E / c.num_heads;
  const bool bad_scales = d.coin(6);
  bool finite = true;
  // One matrix [rows x in] as blocks, and its weights decoded.
  const auto make = [&](std::size_t rows, std::size_t in, std::vector<unsigned char>& bytes,
                        std::vector<float>& w) {
    const std::size_t size = q8 ? 34 : 18, blocks = rows * (in / 32);
    bytes.resize(std::max<std::size_t>(blocks * size, 1));
    w.resize(rows * in);
    for (auto& b : bytes) b = static_cast<unsigned char>(d.rng());
    for (std::size_t b = 0; b < blocks; ++b) {
      unsigned char* blk = bytes.data() + b * size;
      // A sane exponent (2^-14 .. 2^-7) unless this input asks for bad ones.
      if (!bad_scales) {
        blk[1] = static_cast<unsigned char>((blk[1] & 0x83u) | (1u + (blk[1] >> 2 & 7u)) << 2);
      }
      const float scale = fp16_value(static_cast<std::uint16_t>(blk[0] | blk[1] << 8));
      finite = finite && std::isfinite(scale);
      for (std::size_t j = 0; j < 32; ++j) {
        const int code = q8 ? static_cast<std::int8_t>(blk[2 + j])
                            : (j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4) - 8;
        w[b * 32 + j] = static_cast<float>(code) * scale;
      }
    }
  };
  std::vector<unsigned char> qb, kb, vb, ob;
  std::vector<float> qw, kw, vw, ow;
  make(E, E, qb, qw);
  make(kv, kdim, kb, kw);
  make(kv, kdim, vb, vw);
  make(E, E, ob, ow);
  const mha_block_weights bw{sizeof bw, format,  qb.data(), kb.data(), vb.data(),
                             ob.data(), nullptr, nullptr,   nullptr,   nullptr};
  mha_attention_options o{};
  o.struct_size = sizeof o;
  o.weight_format = q8 ? MHA_WEIGHTS_INT8 : MHA_WEIGHTS_INT4;
  o.weight_group = 32;
  const bool int8 = d.coin();
  if (int8) {
    o.activations = MHA_ACTIVATIONS_INT8;
    o.compute = d.coin() ? MHA_BF16 : MHA_FP32;
  }
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  prime_error();
  const mha_status st =
      mha_attention_create_blocks(&c, &bw, int8 || d.coin() ? &o : nullptr, &attn);
  const bool valid = E % 32 == 0 && kdim % 32 == 0 && finite;
  check_expectation(st, valid ? Expect::ok : Expect::fail, "mha_attention_create_blocks");
  if (st != MHA_OK) {
    FUZZ_CHECK(attn == sentinel, "mha_attention_create_blocks failed but wrote *out");
    return;
  }
  const std::size_t L = 1 + d.p.ConsumeIntegralInRange<std::size_t>(0, 4), S = L + 1;
  const std::vector<float> x = d.values(L * E), kvx = d.values(S * kdim);
  std::vector<float> out(L * E, NAN), ref(L * E, NAN);
  FUZZ_CHECK(mha_attention_forward(attn, 1, L, S, x.data(), kvx.data(), kvx.data(), nullptr,
                                   out.data(), nullptr, 0) == MHA_OK,
             "forward on a blocks object failed: %s", mha_last_error());
  if (!int8) {
    const mha_weights w{qw.data(), kw.data(), vw.data(), ow.data(),
                        nullptr,   nullptr,   nullptr,   nullptr};
    mha_attention* fp32 = nullptr;
    FUZZ_CHECK(mha_attention_create(&c, &w, &fp32) == MHA_OK, "fp32 create failed");
    FUZZ_CHECK(mha_attention_forward(fp32, 1, L, S, x.data(), kvx.data(), kvx.data(), nullptr,
                                     ref.data(), nullptr, 0) == MHA_OK,
               "fp32 forward failed");
    mha_attention_destroy(fp32);
    FUZZ_CHECK(same_bits(out, ref), "blocks object differs from the fp32 one on its weights");
  }
  mha_attention_destroy(attn);
}

// mha_attention_create_checkpoint on a random GPTQ, GPTQ v2 or AWQ layer
// set: random nibbles (every code and zero is valid), scales of random fp16
// bits (now and then NaN or infinite), widths on and off the packing's 8, a
// group now and then off the list, and g_idx absent, the identity, or (q,
// k and v) act order: the first and last inputs' groups swapped. It must
// fail, writing nothing, exactly where mha.h says; a weight-only object
// then gives the bits of an fp32 object on the weights decoded as mha.h
// states the layouts, in group order (each group's inputs ascending), with
// the inputs gathered alike; one with int8 activations runs a forward.
void fuzz_checkpoint(Decoder& d) {
  const auto layout = static_cast<mha_checkpoint_layout>(d.p.ConsumeIntegralInRange<int>(0, 2));
  const bool awq = layout == MHA_CHECKPOINT_AWQ;
  mha_config c{};
  c.num_heads = 1 + d.p.ConsumeIntegralInRange<std::size_t>(0, 3);
  c.embed_dim = c.num_heads * (d.coin(6) ? 12 : 32);
  c.kdim = d.coin() ? 0 : 32 * d.p.ConsumeIntegralInRange<std::size_t>(1, 3) + (d.coin(6) ? 4 : 0);
  c.vdim = c.kdim;
  c.num_kv_heads = 1;
  const std::size_t E = c.embed_dim, kdim = c.kdim ? c.kdim : E, kv = E / c.num_heads;
  static constexpr std::size_t kGroups[] = {0, 32, 64, 128, 16};
  const std::size_t group = kGroups[d.p.ConsumeIntegralInRange<int>(0, d.coin(6) ? 4 : 3)];
  const bool bad_scales = d.coin(6);
  const int g_idx_kind = d.p.ConsumeIntegralInRange<int>(0, 2);  // none, identity, act order
  bool finite = true;
  struct Layer {
    std::vector<std::int32_t> qweight, qzeros, g_idx;
    std::vector<std::uint16_t> scales;
    std::vector<float> w;            // decoded, in group order
    std::vector<std::size_t> order;  // group order's input q is input order[q]
  };
  // One layer [rows x in], and its weights decoded (when the sizes allow).
  const auto make = [&](std::size_t rows, std::size_t in, bool act_order, Layer& l) {
    const std::size_t groups = group == 0 || group >= in ? 1 : (in + group - 1) / group;
    const std::size_t len = groups == 1 ? in : group;
    l.qweight.resize(std::max<std::size_t>(in * rows / 8, 1));
    l.qzeros.resize(std::max<std::size_t>(groups * rows / 8, 1));
    l.scales.resize(groups * rows);
    for (auto& x : l.qweight) x = static_cast<std::int32_t>(d.rng());
    for (auto& x : l.qzeros) x = static_cast<std::int32_t>(d.rng());
    for (auto& h : l.scales) {
      h = static_cast<std::uint16_t>(d.rng());
      // A sane exponent (2^-14 .. 2^-7) unless this input asks for bad ones.
      if (!bad_scales) h = static_cast<std::uint16_t>((h & 0x83FFu) | (1u + (h >> 10 & 7u)) << 10);
      finite = finite && std::isfinite(fp16_value(h));
    }
    for (std::size_t p = 0; p < in; ++p) l.g_idx.push_back(static_cast<std::int32_t>(p / len));
    if (act_order && groups > 1) std::swap(l.g_idx[0], l.g_idx[in - 1]);
    // Group order: each group's inputs ascending.
    for (std::size_t g = 0; g < groups; ++g) {
      for (std::size_t p = 0; p < in; ++p) {
        if (static_cast<std::size_t>(l.g_idx[p]) == g) l.order.push_back(p);
      }
    }
    if (in % 8 != 0 || rows % 8 != 0) return;
    const auto nib = [](std::int32_t word, unsigned t) {
      return static_cast<int>(static_cast<std::uint32_t>(word) >> (4 * t) & 15u);
    };
    static constexpr unsigned kAwq[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    l.w.resize(rows * in);
    for (std::size_t j = 0; j < rows; ++j) {
      for (std::size_t q = 0; q < in; ++q) {
        const std::size_t p = l.order[q], g = static_cast<std::size_t>(l.g_idx[p]);
        const int code = awq ? nib(l.qweight[p * (rows / 8) + j / 8], kAwq[j % 8])
                             : nib(l.qweight[p / 8 * rows + j], static_cast<unsigned>(p % 8));
        const int stored =
            nib(l.qzeros[g * (rows / 8) + j / 8], awq ? kAwq[j % 8] : static_cast<unsigned>(j % 8));
        const int z = layout == MHA_CHECKPOINT_GPTQ ? stored + 1 : stored;
        l.w[j * in + q] = static_cast<float>(code - z) * fp16_value(l.scales[g * rows + j]);
      }
    }
  };
  const bool act_order = g_idx_kind == 2;
  Layer q, k, v, o;
  make(E, E, act_order, q);
  make(kv, kdim, act_order, k);
  make(kv, kdim, act_order, v);
  make(E, E, false, o);
  const auto matrix = [&](const Layer& l) {
    return mha_checkpoint_matrix{l.qweight.data(), l.qzeros.data(), l.scales.data(),
                                 g_idx_kind == 0 ? nullptr : l.g_idx.data(), nullptr};
  };
  const mha_checkpoint_weights cw{sizeof cw, layout,    group,    matrix(q),
                                  matrix(k), matrix(v), matrix(o)};
  mha_attention_options opt{};
  opt.struct_size = sizeof opt;
  opt.weight_format = MHA_WEIGHTS_UINT4;
  opt.weight_group = group;
  const bool int8 = d.coin();
  if (int8) {
    opt.activations = MHA_ACTIVATIONS_INT8;
    opt.compute = d.coin() ? MHA_BF16 : MHA_FP32;
  }
  auto* const sentinel = reinterpret_cast<mha_attention*>(std::uintptr_t{0x5e7});
  mha_attention* attn = sentinel;
  prime_error();
  const mha_status st =
      mha_attention_create_checkpoint(&c, &cw, int8 || d.coin() ? &opt : nullptr, &attn);
  const bool valid = E % 8 == 0 && kdim % 8 == 0 && kv % 8 == 0 && finite && group != 16 &&
                     (g_idx_kind == 0 || !awq);
  check_expectation(st, valid ? Expect::ok : Expect::fail, "mha_attention_create_checkpoint");
  if (st != MHA_OK) {
    FUZZ_CHECK(attn == sentinel, "mha_attention_create_checkpoint failed but wrote *out");
    return;
  }
  const std::size_t L = 1 + d.p.ConsumeIntegralInRange<std::size_t>(0, 4), S = L + 1;
  const std::vector<float> x = d.values(L * E), kvx = d.values(S * kdim);
  std::vector<float> out(L * E, NAN), ref(L * E, NAN);
  FUZZ_CHECK(mha_attention_forward(attn, 1, L, S, x.data(), kvx.data(), kvx.data(), nullptr,
                                   out.data(), nullptr, 0) == MHA_OK,
             "forward on a checkpoint object failed: %s", mha_last_error());
  if (!int8) {
    // The inputs gathered in q's and k's group order.
    const auto gather = [](const std::vector<float>& in, const std::vector<std::size_t>& order) {
      std::vector<float> r(in.size());
      for (std::size_t i = 0; i < in.size(); ++i) {
        r[i] = in[i / order.size() * order.size() + order[i % order.size()]];
      }
      return r;
    };
    const std::vector<float> xg = gather(x, q.order), kvg = gather(kvx, k.order);
    const mha_weights w{q.w.data(), k.w.data(), v.w.data(), o.w.data(),
                        nullptr,    nullptr,    nullptr,    nullptr};
    mha_attention* fp32 = nullptr;
    FUZZ_CHECK(mha_attention_create(&c, &w, &fp32) == MHA_OK, "fp32 create failed");
    FUZZ_CHECK(mha_attention_forward(fp32, 1, L, S, xg.data(), kvg.data(), kvg.data(), nullptr,
                                     ref.data(), nullptr, 0) == MHA_OK,
               "fp32 forward failed");
    mha_attention_destroy(fp32);
    FUZZ_CHECK(same_bits(out, ref), "checkpoint object differs from the fp32 one on its weights");
  }
  mha_attention_destroy(attn);
}

// ------------------------------------------------------------------ MLA ---

// Forward against the double reference (tests/support/mla_reference.hpp)
// and steps against mha_mla_forward over the same tokens, both by
// scaled_error. fp32: 1e-4 (test_mla holds 1e-5 on its own shapes; here a
// config takes any decoded eps, theta, pairing and YaRN setting, and a step
// reassociates W_UK and W_UV through fp32: a margin of 10). bf16 objects:
// test_mla's 3e-2 against the reference, twice that between the two forms,
// which round different products. Quantized latent caches: the KV-quant
// limits above (int8 3e-2, E4M3 0.15) added. Largest seen in ~150k runs:
// fp32 4e-7 (forward and steps), bf16 1.4e-2 (forward), int8 9e-3, E4M3
// 5.9e-2.
constexpr double kMlaTol = 1e-4;
constexpr double kBf16MlaTol = 3e-2;

// An MLA object with the host copy of its weights, for the reference.
struct MlaObject {
  mha::test::MlaLayer layer;
  mha_mla* mla = nullptr;
  std::size_t E = 0, latent = 0;  // hidden_size, dr + r
  bool bf16 = false;
  double tol = kMlaTol;       // forward against the reference
  double step_tol = kMlaTol;  // a step against the forward
  MlaObject(const mha_mla_config& c, std::uint32_t seed) : layer(c, seed) {}
  ~MlaObject() { mha_mla_destroy(mla); }
};

// Out of mha_mla_forward over rows [batch, seq, E] of x from position 0.
std::vector<float> mla_forward_of(const MlaObject& m, std::size_t batch, std::size_t seq,
                                  const std::vector<float>& x) {
  std::vector<float> out(batch * seq * m.E, kSentinel);
  FUZZ_CHECK(mha_mla_forward(m.mla, batch, seq, 0, x.data(), out.data()) == MHA_OK,
             "mha_mla_forward failed on the tokens of a step that succeeded: %s", mha_last_error());
  return out;
}

// Rows [from, from + n) of `ref` (ld E) against `got`, by scaled_error.
void check_mla_rows(const MlaObject& m, const float* got, const std::vector<float>& ref,
                    std::size_t from, std::size_t n, double tol, const char* call) {
  const std::vector<float> ours(got, got + n * m.E);
  const std::vector<double> want(ref.begin() + from * m.E, ref.begin() + (from + n) * m.E);
  const double err = mha::test::scaled_error(ours, want);
  FUZZ_CHECK(err <= tol, "%s: error %.3g against mha_mla_forward > %.0e (rows %zu..%zu, E %zu)",
             call, err, tol, from, from + n, m.E);
}

// A step's tolerance: the object's, plus a quantized cache's (the two
// errors add on a bf16 object).
double mla_cache_tol(const MlaObject& m, const KvOptions& k) {
  return m.step_tol + (k.o.dtype == MHA_KV_INT8       ? 3e-2
                       : k.o.dtype == MHA_KV_FP8_E4M3 ? 1.5e-1
                                                      : 0.0);
}

// A small attention object (E 2, one head), for calls that mix the
// families: mha.h rejects an MLA cache in mha_attention_step and an
// attention cache in mha_mla_step. Made once, on the first ISA asked.
mha_attention* family_attention() {
  static mha_attention* const attn = [] {
    static const float w[4] = {1.f, 0.5f, -0.5f, 1.f};
    const mha_config c{2, 1, 0, 0, 0};
    const mha_weights ws{w, w, w, w, nullptr, nullptr, nullptr, nullptr};
    mha_attention* a = nullptr;
    FUZZ_CHECK(mha_attention_create(&c, &ws, &a) == MHA_OK, "mha_attention_create: %s",
               mha_last_error());
    return a;
  }();
  return attn;
}

bool untouched(const std::vector<float>& x) {
  return std::all_of(x.begin(), x.end(), [](float y) { return y == kSentinel; });
}

void fuzz_mla_forward(Decoder& d, const MlaObject& m) {
  const std::size_t batch = d.dim(3), seq = d.dim(6);
  constexpr auto kMaxPos = static_cast<std::size_t>(std::numeric_limits<std::ptrdiff_t>::max());
  // From 0, a few thousand on, or at the last positions a call may reach
  // (PTRDIFF_MAX; one more must fail).
  std::size_t offset = 0;
  bool past_end = false;
  switch (d.p.ConsumeIntegralInRange<int>(0, 7)) {
    case 0:
      offset = d.p.ConsumeIntegralInRange<std::size_t>(1, 5000);
      break;
    case 1:
      past_end = d.coin();
      offset = seq <= kMaxPos ? kMaxPos - seq + (past_end ? 1 : 0) : SIZE_MAX;
      past_end = past_end || seq > kMaxPos;
      break;
    default:
      break;
  }
  const std::size_t n = product({batch, seq, m.E});
  Buffer x(n), out(n);
  if (x.unallocated) return;
  x.v = d.values(x.v.size());
  const bool in_place = d.coin(4);
  const int null_arg = d.p.ConsumeIntegralInRange<int>(0, 15);
  Expect e = batch == 0 || seq == 0 || x.impossible ? Expect::fail : Expect::ok;
  if (null_arg >= 1 && null_arg <= 3) e = Expect::fail;
  // mha.h names no last position; the library stops at PTRDIFF_MAX.
  if (past_end && e == Expect::ok) e = Expect::either;
  const std::vector<float> x0 = x.v;
  float* op = in_place ? x.v.data() : out.v.data();
  prime_error();
  const mha_status st =
      mha_mla_forward(null_arg == 3 ? nullptr : m.mla, batch, seq, offset,
                      null_arg == 1 ? nullptr : x.v.data(), null_arg == 2 ? nullptr : op);
  check_expectation(st, e, "mha_mla_forward");
  if (st != MHA_OK) {
    FUZZ_CHECK(untouched(out.v) && same_bits(x.v, x0), "mha_mla_forward failed but wrote out or x");
    return;
  }
  // Angles at positions near PTRDIFF_MAX are rounded differently by any
  // two orders of evaluation: only success is checked there.
  if (offset > 5000) return;
  const std::vector<double> ref = mha::test::mla_reference(m.layer, batch, seq, offset, x0.data());
  const double err = mha::test::scaled_error(std::vector<float>(op, op + n), ref);
  FUZZ_CHECK(err <= m.tol,
             "mha_mla_forward error %.3g > %.0e (E %zu H %zu q_lora %zu r %zu dn %zu dr %zu dv %zu "
             "batch %zu seq %zu offset %zu)",
             err, m.tol, m.E, m.layer.cfg.num_heads, m.layer.cfg.q_lora_rank,
             m.layer.cfg.kv_lora_rank, m.layer.cfg.qk_nope_head_dim, m.layer.cfg.qk_rope_head_dim,
             m.layer.cfg.v_head_dim, batch, seq, offset);
}

// A contiguous latent cache through steps and truncations, against a host
// copy of every batch row's tokens.
void fuzz_mla_cache(Decoder& d, const MlaObject& m, const mha_mla* other) {
  // Now and then (fp32, one batch row: the forward that checks each step
  // then spans every position) long enough for the core's split-KV decode,
  // which takes 1024 keys.
  const bool long_cache = !m.bf16 && d.coin(16);
  const std::size_t batch = long_cache ? 1 : d.dim(3), E = m.E;
  const std::size_t max_len =
      long_cache ? d.p.ConsumeIntegralInRange<std::size_t>(1000, 1100) : d.dim(12);
  auto* const sentinel = reinterpret_cast<mha_kv_cache*>(std::uintptr_t{0x5e7});
  mha_kv_cache* cache = sentinel;
  Expect e = batch == 0 || max_len == 0 ? Expect::fail : Expect::ok;
  const std::size_t kv = product({batch, max_len, m.latent, 2});
  if (kv == SIZE_MAX || kv > (std::size_t{1} << 40)) e = Expect::fail;
  const KvOptions ko = decode_kv_options(d);
  if (!ko.valid) e = Expect::fail;
  prime_error();
  const mha_status st = mha_mla_kv_cache_create(m.mla, batch, max_len, ko.get(), &cache);
  check_expectation(st, e, "mha_mla_kv_cache_create");
  if (st != MHA_OK) {
    FUZZ_CHECK(cache == sentinel, "mha_mla_kv_cache_create failed but wrote *out");
    return;
  }
  const double tol = mla_cache_tol(m, ko);
  std::vector<std::vector<float>> hx(batch);
  std::size_t len = 0;
  FUZZ_CHECK(mha_kv_cache_length(cache) == 0, "a new latent cache has length %zu",
             mha_kv_cache_length(cache));
  for (int op = 0; op < 6 && d.p.remaining_bytes() > 0; ++op) {
    if (d.coin(4)) {
      const std::size_t to = d.p.ConsumeIntegralInRange<std::size_t>(0, len + 2);
      prime_error();
      const mha_status ts = mha_kv_cache_truncate(cache, to);
      check_expectation(ts, to <= len ? Expect::ok : Expect::fail, "mha_kv_cache_truncate (MLA)");
      if (ts == MHA_OK) {
        len = to;
        for (auto& h : hx) h.resize(len * E);
      }
      FUZZ_CHECK(mha_kv_cache_length(cache) == len, "latent cache length %zu, expected %zu",
                 mha_kv_cache_length(cache), len);
      continue;
    }
    const std::size_t n_new = d.coin(16) ? max_len - len : d.dim(5);  // sometimes a fill
    const std::size_t nx = product({batch, n_new, E});
    const bool fits = nx != SIZE_MAX && nx <= kMaxAlloc;
    std::vector<float> x = d.values(fits ? nx : 16), out(fits ? nx : 16, kSentinel);
    const bool in_place = d.coin(4);
    // 1-2: NULL x or out, 3: a cache of another mha_mla, 4: NULL mla, 5: this
    // cache in mha_attention_step, 6: an attention cache in mha_mla_step.
    const int bad_arg = d.p.ConsumeIntegralInRange<int>(0, 15);
    Expect se = !fits || n_new == 0 || n_new > max_len - len ? Expect::fail : Expect::ok;
    if (bad_arg >= 1 && bad_arg <= 6) se = Expect::fail;
    const std::vector<float> x0 = x;
    float* o = in_place ? x.data() : out.data();
    const mha_mla* mla = bad_arg == 3 ? other : bad_arg == 4 ? nullptr : m.mla;
    mha_kv_cache* attention_cache = nullptr;
    if (bad_arg == 6)
      FUZZ_CHECK(mha_kv_cache_create(family_attention(), 1, 4, &attention_cache) == MHA_OK,
                 "mha_kv_cache_create: %s", mha_last_error());
    prime_error();
    const mha_status ss =
        bad_arg == 5
            ? mha_attention_step(family_attention(), cache, n_new, x.data(), x.data(), x.data(), o)
            : mha_mla_step(mla, bad_arg == 6 ? attention_cache : cache, n_new,
                           bad_arg == 1 ? nullptr : x.data(), bad_arg == 2 ? nullptr : o);
    check_expectation(ss, se, bad_arg == 5 ? "mha_attention_step (an MLA cache)" : "mha_mla_step");
    if (attention_cache != nullptr) {
      FUZZ_CHECK(mha_kv_cache_length(attention_cache) == 0,
                 "mha_mla_step advanced an attention cache");
      mha_kv_cache_destroy(attention_cache);
    }
    if (ss != MHA_OK) {
      FUZZ_CHECK(untouched(out) && same_bits(x, x0), "mha_mla_step failed but wrote out or x");
      FUZZ_CHECK(mha_kv_cache_length(cache) == len, "a failed mha_mla_step changed the length");
      continue;
    }
    for (std::size_t b = 0; b < batch; ++b)
      hx[b].insert(hx[b].end(), x0.begin() + b * n_new * E, x0.begin() + (b + 1) * n_new * E);
    const std::size_t S = len + n_new;
    FUZZ_CHECK(mha_kv_cache_length(cache) == S,
               "latent cache length %zu after a step, expected %zu", mha_kv_cache_length(cache), S);
    std::vector<float> all;
    for (const auto& h : hx) all.insert(all.end(), h.begin(), h.end());
    const std::vector<float> ref = mla_forward_of(m, batch, S, all);
    for (std::size_t b = 0; b < batch; ++b) {
      const std::vector<float> ref_b(ref.begin() + b * S * E, ref.begin() + (b + 1) * S * E);
      check_mla_rows(m, o + b * n_new * E, ref_b, len, n_new, tol, "mha_mla_step");
    }
    len = S;
  }
  mha_kv_cache_destroy(cache);
}

// A paged latent cache through ragged steps, truncations and resets, against
// a host copy of each slot's tokens.
void fuzz_mla_paged(Decoder& d, const MlaObject& m, const mha_mla* other) {
  // Now and then (fp32) blocks of 256, where paged steps are bit-identical
  // to contiguous ones, in a pool that holds decode_lengths' long prompts.
  const bool long_pool = !m.bf16 && d.coin(16);
  const std::size_t num_slots = d.dim(4), E = m.E;
  const std::size_t bt = long_pool ? 256 : d.dim(20);
  const std::size_t num_blocks =
      long_pool ? d.p.ConsumeIntegralInRange<std::size_t>(4, 10) : d.dim(12);
  auto* const sentinel = reinterpret_cast<mha_paged_kv_cache*>(std::uintptr_t{0x5e7});
  mha_paged_kv_cache* cache = sentinel;
  const std::size_t pool = product({num_blocks, bt, m.latent, 2});
  Expect e = num_slots == 0 || bt == 0 || num_blocks == 0 ? Expect::fail : Expect::ok;
  if (num_slots > (std::size_t{1} << 20) || pool == SIZE_MAX || pool > (std::size_t{1} << 40))
    e = e == Expect::fail ? Expect::fail : Expect::either;
  if (pool == SIZE_MAX) e = Expect::fail;
  const KvOptions ko = decode_kv_options(d);
  if (!ko.valid) e = Expect::fail;
  prime_error();
  const mha_status st =
      mha_mla_kv_cache_create_paged(m.mla, num_slots, bt, num_blocks, ko.get(), &cache);
  check_expectation(st, e, "mha_mla_kv_cache_create_paged");
  if (st != MHA_OK) {
    FUZZ_CHECK(cache == sentinel, "mha_mla_kv_cache_create_paged failed but wrote *out");
    return;
  }
  if (num_slots > 8 || pool > kMaxAlloc) {  // created, but too big to step here
    mha_paged_kv_cache_destroy(cache);
    return;
  }
  const double tol = mla_cache_tol(m, ko);
  std::vector<std::vector<float>> hx(num_slots);
  const auto len = [&](std::size_t s) { return hx[s].size() / E; };
  const auto blocks = [&](std::size_t s) { return (len(s) + bt - 1) / bt; };
  for (int op = 0; op < 6 && d.p.remaining_bytes() > 0; ++op) {
    std::size_t held = 0;
    for (std::size_t s = 0; s < num_slots; ++s) held += blocks(s);
    FUZZ_CHECK(mha_kv_cache_free_blocks(cache) == num_blocks - held,
               "%zu free latent blocks, expected %zu from the slots' lengths",
               mha_kv_cache_free_blocks(cache), num_blocks - held);
    if (d.coin(4)) {
      const std::size_t s = d.p.ConsumeIntegralInRange<std::size_t>(0, num_slots);
      const bool reset = d.coin();
      const std::size_t to =
          reset ? 0 : d.p.ConsumeIntegralInRange<std::size_t>(0, len(s % num_slots) + 1);
      const bool ok = s < num_slots && to <= len(s);
      prime_error();
      check_expectation(
          reset ? mha_kv_cache_reset_slot(cache, s) : mha_kv_cache_truncate_slot(cache, s, to),
          ok ? Expect::ok : Expect::fail,
          reset ? "mha_kv_cache_reset_slot (MLA)" : "mha_kv_cache_truncate_slot (MLA)");
      if (ok) hx[s].resize(to * E);
      continue;
    }
    // A step over a random subset of slots (sometimes one twice or out of
    // range), each with 0..9 new tokens (now and then a prompt longer than
    // any pool here).
    const std::size_t num = d.p.ConsumeIntegralInRange<std::size_t>(0, num_slots);
    std::vector<std::size_t> slots(num);
    for (std::size_t i = 0; i < num; ++i) slots[i] = (i + op) % num_slots;
    bool bad = false;
    if (num > 0 && d.coin(16)) {
      slots[0] = d.coin() ? num_slots : slots[num - 1];
      bad = slots[0] == num_slots || num > 1;
    }
    std::vector<std::size_t> q_start = offsets_of(decode_lengths(d, num));
    if (corrupt_offsets(d, q_start)) bad = true;
    const std::size_t rows = q_start.back();
    const bool fits = !bad && rows <= (std::size_t{1} << 16);
    std::vector<float> x = d.values(fits ? rows * E : 16), out(fits ? rows * E : 16, kSentinel);
    const bool in_place = d.coin(4);
    const int bad_arg = d.p.ConsumeIntegralInRange<int>(0, 15);  // as in fuzz_mla_cache
    Expect se = bad ? Expect::fail : Expect::ok;
    std::size_t need = 0;
    for (std::size_t i = 0; se == Expect::ok && i < num; ++i) {
      const std::size_t s = slots[i], n = q_start[i + 1] - q_start[i];
      if (n > num_blocks * bt - len(s)) se = Expect::fail;  // outgrows the pool
      need += (len(s) + n + bt - 1) / bt - blocks(s);
    }
    if (se == Expect::ok && need > num_blocks - held) se = Expect::fail;  // MHA_OUT_OF_MEMORY
    if ((bad_arg == 1 || bad_arg == 2) && rows > 0) se = Expect::fail;
    if (bad_arg >= 3 && bad_arg <= 6) se = Expect::fail;
    const std::vector<float> x0 = x;
    float* o = in_place ? x.data() : out.data();
    const mha_mla* mla = bad_arg == 3 ? other : bad_arg == 4 ? nullptr : m.mla;
    mha_paged_kv_cache* attention_cache = nullptr;
    if (bad_arg == 6)
      FUZZ_CHECK(mha_kv_cache_create_paged(family_attention(), num_slots + 1, 4, 4,
                                           &attention_cache) == MHA_OK,
                 "mha_kv_cache_create_paged: %s", mha_last_error());
    prime_error();
    const mha_status ss =
        bad_arg == 5
            ? mha_attention_step_ragged(family_attention(), cache, num, slots.data(),
                                        q_start.data(), x.data(), x.data(), x.data(), o)
            : mha_mla_step_ragged(mla, bad_arg == 6 ? attention_cache : cache, num, slots.data(),
                                  q_start.data(), bad_arg == 1 ? nullptr : x.data(),
                                  bad_arg == 2 ? nullptr : o);
    check_expectation(
        ss, se, bad_arg == 5 ? "mha_attention_step_ragged (an MLA cache)" : "mha_mla_step_ragged");
    if (attention_cache != nullptr) {
      FUZZ_CHECK(mha_kv_cache_free_blocks(attention_cache) == 4,
                 "mha_mla_step_ragged took blocks of an attention cache");
      mha_paged_kv_cache_destroy(attention_cache);
    }
    if (ss != MHA_OK) {
      FUZZ_CHECK(untouched(out) && same_bits(x, x0), "a failed mha_mla_step_ragged wrote out or x");
      for (std::size_t s = 0; s < num_slots; ++s)
        FUZZ_CHECK(mha_kv_cache_slot_length(cache, s) == len(s),
                   "a failed mha_mla_step_ragged changed slot %zu", s);
      FUZZ_CHECK(mha_kv_cache_free_blocks(cache) == num_blocks - held,
                 "a failed mha_mla_step_ragged changed the free blocks");
      continue;
    }
    for (std::size_t i = 0; i < num; ++i) {
      const std::size_t s = slots[i], n = q_start[i + 1] - q_start[i], r0 = q_start[i];
      hx[s].insert(hx[s].end(), x0.begin() + r0 * E, x0.begin() + (r0 + n) * E);
      const std::size_t L = len(s);
      FUZZ_CHECK(mha_kv_cache_slot_length(cache, s) == L,
                 "latent slot %zu length %zu, expected %zu", s, mha_kv_cache_slot_length(cache, s),
                 L);
      if (n == 0) continue;
      check_mla_rows(m, o + r0 * E, mla_forward_of(m, 1, L, hx[s]), L - n, n, tol,
                     "mha_mla_step_ragged");
    }
  }
  mha_paged_kv_cache_destroy(cache);
}

// A small MLA config from the input; `broken` names at most one rule of
// mha.h's mha_mla_create to break: 0..6 a field of the config (then false),
// 7..12 a weight or the options, which fuzz_mla breaks.
bool decode_mla(Decoder& d, mha_mla_config& c, int& broken) {
  const auto in = [&](std::size_t lo, std::size_t hi) {
    return d.p.ConsumeIntegralInRange<std::size_t>(lo, hi);
  };
  c = mha_mla_config{};
  c.struct_size = sizeof(mha_mla_config);
  c.hidden_size = in(1, 8);
  c.num_heads = in(1, 3);
  // The latent norms' ranks from 3: RMSNorm amplifies its input's rounding by
  // 1 / rms(x) (up to 1 / sqrt(eps) = 1000), and the rms of fewer than 3
  // values comes near 0 too often for the tolerances below (a rank of 1 is
  // x / sqrt(x^2 + eps): 0.6 off on a bf16 object, seen).
  c.q_lora_rank = d.coin() ? 0 : in(3, 6);
  c.kv_lora_rank = in(3, 8);
  c.qk_nope_head_dim = in(1, 4);
  c.qk_rope_head_dim = 2 * in(1, 3);
  c.v_head_dim = in(1, 5);
  static constexpr float kEps[] = {0.f, 1e-6f, 1e-3f, 0.25f};
  static constexpr float kTheta[] = {0.f, 10000.f, 500.f, 50000.f, 2.5f};
  c.rms_norm_eps = kEps[in(0, 3)];
  c.rope_theta = kTheta[in(0, 4)];
  c.rope_halves = d.coin() ? 1 : 0;
  if (d.coin()) {
    // YaRN: production settings and others (the mscales held to [0, 1.5],
    // where the scores stay O(1) and the tolerances above hold).
    static constexpr float kFactor[] = {40.f, 4.f, 1.f, 0.5f};
    static constexpr std::size_t kOrig[] = {4096, 64, 2, 1};
    static constexpr float kMscale[] = {0.f, 1.f, 0.707f, 1.5f};
    c.yarn_factor = d.coin(5) ? d.uniform(1.f, 64.f) : kFactor[in(0, 3)];
    c.yarn_original_max_position = kOrig[in(0, 3)];
    c.yarn_beta_fast = d.coin() ? 0.f : d.uniform(1.f, 64.f);
    c.yarn_beta_slow = d.coin() ? 0.f : d.uniform(0.5f, 4.f);
    c.yarn_mscale = kMscale[in(0, 3)];
    c.yarn_mscale_all_dim = kMscale[in(0, 3)];
  }
  broken = d.p.ConsumeIntegralInRange<int>(0, 31);
  float* const floats[] = {&c.rms_norm_eps,       &c.rope_theta,     &c.yarn_factor,
                           &c.yarn_beta_fast,     &c.yarn_beta_slow, &c.yarn_mscale,
                           &c.yarn_mscale_all_dim};
  std::size_t* const sizes[] = {&c.hidden_size,      &c.num_heads,        &c.kv_lora_rank,
                                &c.qk_nope_head_dim, &c.qk_rope_head_dim, &c.v_head_dim,
                                &c.q_lora_rank};
  static constexpr float kBadFloat[] = {NAN, INFINITY, -INFINITY, -1.f, -1e-30f};
  switch (broken) {
    case 0:  // struct_size
      c.struct_size = d.coin() ? 0 : sizeof(mha_mla_config) - 8;
      return false;
    case 1:  // a size of 0 (q_lora_rank aside)
      *sizes[in(0, 5)] = 0;
      return false;
    case 2:  // an odd rope dim
      c.qk_rope_head_dim = 2 * in(0, 2) + 1;
      return false;
    case 3:  // a negative or non-finite float
      *floats[in(0, 6)] = kBadFloat[in(0, 4)];
      return false;
    case 4:
      c.rope_halves = d.coin() ? 2 : -1;
      return false;
    case 5:  // YaRN without its original length
      c.yarn_factor = 4.f;
      c.yarn_original_max_position = 0;
      return false;
    case 6: {  // sizes whose products overflow
      static constexpr std::size_t kHuge[] = {(std::size_t{1} << 61) + 1, std::size_t{1} << 62,
                                              SIZE_MAX / 2, SIZE_MAX};
      *sizes[in(0, 6)] = kHuge[in(0, 3)];
      return false;
    }
    default:  // 7..12: a weight or the options (fuzz_mla); the rest: none
      if (broken > 12) broken = -1;
      return true;
  }
}

void fuzz_mla(Decoder& d) {
  mha_mla_config c{};
  int broken = -1;
  const bool config_ok = decode_mla(d, c, broken);
  // Options: NULL, fp32, bf16, or (cases 11 and 12) an unknown compute type
  // or a wrong struct_size.
  const int how = d.p.ConsumeIntegralInRange<int>(0, 15);
  mha_attention_options opt{sizeof(mha_attention_options), how >= 13 ? MHA_BF16 : MHA_FP32,
                            MHA_WEIGHTS_COMPUTE, 0};
  if (broken == 11) opt.compute = static_cast<mha_dtype>(d.p.ConsumeIntegral<int>() | 2);
  if (broken == 12) opt.struct_size = d.coin() ? 0 : sizeof(mha_attention_options) + 4;
  const bool use_opt = how >= 12 || broken == 11 || broken == 12;
  // How 12: int8 weights per row, weight-only or with int8 activations.
  const bool quant = how == 12 && broken != 11 && broken != 12 && d.coin();
  if (quant) {
    opt.weight_format = MHA_WEIGHTS_INT8;
    if (d.coin()) opt.activations = MHA_ACTIVATIONS_INT8;
  }
  // A bf16 or quantized object's inputs to the norms carry its rounding
  // (2^-9, or a code step): ranks from 16, where an rms near 0 does not
  // occur.
  if (config_ok && (opt.compute == MHA_BF16 || quant)) {
    if (c.q_lora_rank != 0) c.q_lora_rank += 13;
    c.kv_lora_rank += 13;
  }
  // The weights are those of the valid config the input began with (a broken
  // size or rope dim must be rejected before any weight is read).
  mha_mla_config safe = c;
  if (!config_ok) {
    safe = mha_mla_config{};
    safe.hidden_size = safe.num_heads = safe.kv_lora_rank = safe.qk_nope_head_dim = 1;
    safe.qk_rope_head_dim = 2;
    safe.v_head_dim = 1;
  }
  MlaObject m(safe, d.p.ConsumeIntegral<std::uint32_t>());
  mha_mla_weights w = m.layer.view();
  bool valid = config_ok;
  switch (broken) {
    case 7:  // q_proj given with q_lora_rank != 0, or missing without it
      if (c.q_lora_rank != 0) {
        w.q_proj = w.q_b_proj;
      } else {
        w.q_proj = nullptr;
      }
      valid = false;
      break;
    case 8: {  // another weight missing
      const float** const required[] = {
          &w.kv_a_proj_with_mqa, &w.kv_a_layernorm, &w.kv_b_proj, &w.o_proj,
          &w.q_a_proj,           &w.q_a_layernorm,  &w.q_b_proj};
      *required[d.p.ConsumeIntegralInRange<int>(0, c.q_lora_rank != 0 ? 6 : 3)] = nullptr;
      valid = false;
      break;
    }
    case 9:
      w.struct_size = d.coin() ? 0 : sizeof(mha_mla_weights) + 8;
      valid = false;
      break;
    case 10:  // q_lora_rank 0 with q_a_* given: mha.h names no rule against them
      if (c.q_lora_rank == 0) w.q_a_proj = w.q_a_layernorm = w.kv_a_layernorm;
      break;
    default:
      break;
  }
  if (broken == 11 || broken == 12) valid = false;
  const bool bf16 = use_opt && opt.compute == MHA_BF16 && valid;
  const bool emulated = bf16 && d.coin();
  if (emulated)
    mha::detail::set_gemm_bf16_kernels_override(&mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps);
  auto* const sentinel = reinterpret_cast<mha_mla*>(std::uintptr_t{0x5e7});
  mha_mla* mla = sentinel;
  prime_error();
  const mha_status st = mha_mla_create(&c, &w, use_opt ? &opt : nullptr, &mla);
  // A second object of the same layer: its caches are not m's.
  mha_mla* other = nullptr;
  if (st == MHA_OK) mha_mla_create(&c, &w, use_opt ? &opt : nullptr, &other);
  if (emulated) mha::detail::set_gemm_bf16_kernels_override(nullptr);
  check_expectation(st, valid ? Expect::ok : Expect::fail, "mha_mla_create");
  if (st != MHA_OK) {
    FUZZ_CHECK(mla == sentinel, "mha_mla_create failed but wrote *out");
    return;
  }
  FUZZ_CHECK(other != nullptr, "a second mha_mla_create of the same layer failed: %s",
             mha_last_error());
  m.mla = mla;
  m.E = c.hidden_size;
  m.latent = c.qk_rope_head_dim + c.kv_lora_rank;
  if (bf16) {
    m.bf16 = true;
    m.tol = kBf16MlaTol;
    m.step_tol = 2 * kBf16MlaTol;
  }
  // int8 codes, half a step of 1/254 of a row's range per weight (and per
  // input with int8 activations): test_mla measured 7.6e-3 and 1.2e-2; a
  // margin of 8 or more.
  if (quant && valid) {
    m.tol = 1e-1;
    m.step_tol = 2e-1;
  }
  for (int op = 0; op < 4 && d.p.remaining_bytes() > 0; ++op) {
    switch (d.p.ConsumeIntegralInRange<int>(0, 3)) {
      case 0:
        fuzz_mla_cache(d, m, other);
        break;
      case 1:
        fuzz_mla_paged(d, m, other);
        break;
      default:
        fuzz_mla_forward(d, m);
        break;
    }
  }
  mha_mla_destroy(other);
}

std::vector<std::string> supported_isas() {
  std::vector<std::string> out;
  for (const char* isa : {"avx512", "avx2", "neon", "scalar"})
    if (mha_isa_supported(isa)) out.emplace_back(isa);
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::vector<std::string> isas = supported_isas();
  FuzzedDataProvider p(data, size);
  Decoder d(p);
  const std::string& isa = isas[p.ConsumeIntegralInRange<std::size_t>(0, isas.size() - 1)];
  FUZZ_CHECK(mha_set_isa(isa.c_str()) == MHA_OK, "mha_set_isa(%s) failed", isa.c_str());
  static constexpr std::size_t kThreads[] = {1, 0, 2};
  mha_set_num_threads(kThreads[p.ConsumeIntegralInRange<int>(0, 2)]);
  for (int op = 0; op < kMaxOps && p.remaining_bytes() > 0; ++op) {
    // One byte: 250..255 pick MLA, 244..249 llama.cpp's blocks, 238..243
    // GPTQ and AWQ checkpoints, the rest `% 5` as this byte did before they
    // joined, so that most of the committed corpus keeps its meaning.
    const int pick = p.ConsumeIntegralInRange<int>(0, 255);
    if (pick >= 250) {
      fuzz_mla(d);
      continue;
    }
    if (pick >= 244) {
      fuzz_blocks(d);
      continue;
    }
    if (pick >= 238) {
      fuzz_checkpoint(d);
      continue;
    }
    switch (pick % 5) {
      case 0:
        fuzz_sgemm(d);
        break;
      case 1:
        fuzz_packed(d, isas);
        break;
      case 2:
        fuzz_softmax(d);
        break;
      case 3:
        fuzz_reshape(d);
        break;
      default:
        fuzz_attention(d);
        break;
    }
  }
  return 0;
}
