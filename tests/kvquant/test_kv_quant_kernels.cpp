// The quantized-KV formats and kernels (lib/kvquant): the codecs against
// brute force, and each ISA's products (the one MHA_ISA selects) bit for bit
// against the scalar emulation, and within fp32 rounding of a double
// reference, on edge shapes and extreme values.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <mha/isa.hpp>
#include <random>
#include <vector>

#include "gemm/gemm_bf16.hpp"
#include "kvquant/format.hpp"
#include "kvquant/kernels.hpp"

namespace {

namespace kvq = mha::detail::kvq;
using kvq::Code;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

const mha::detail::KvQuantKernels& kernels() {
  return mha::detail::kv_quant_kernels(mha::current_isa());
}

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// The smallest bf16 >= s > 0.
double bf16_up(double s) {
  float f = static_cast<float>(s);
  if (f < s) f = std::nextafter(f, FLT_MAX);
  std::uint32_t b = bits(f);
  if ((b & 0xFFFF) != 0) b = (b & 0xFFFF0000u) + 0x10000u;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// Every finite E4M3 value, by code 0x00..0x7E (positive).
std::vector<double> e4m3_values() {
  std::vector<double> v;
  for (int c = 0; c <= 0x7E; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? m * 0x1p-9 : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return v;
}

// The nearest E4M3 code to y >= 0, ties to the even code, saturating.
int nearest_e4m3(double y, const std::vector<double>& v) {
  int best = 0;
  for (int c = 1; c < static_cast<int>(v.size()); ++c) {
    const double db = std::fabs(v[best] - y), dc = std::fabs(v[c] - y);
    if (dc < db || (dc == db && c % 2 == 0)) best = c;
  }
  return best;
}

// A head-block of n keys of dimension d, from key and value rows (ld d).
struct Block {
  std::vector<std::uint8_t> k, v;
  Block(Code c, std::size_t d, std::size_t n, const std::vector<float>& keys,
        const std::vector<float>& values)
      : k((n + kvq::kStrip - 1) / kvq::kStrip * kvq::key_strip_bytes(d) + 64, 0xCD),
        v(n * kvq::value_row_bytes(d) + 64, 0xCD) {
    for (std::size_t j = 0; j < n; ++j) {
      kvq::put_key(c, d, k.data(), v.data(), j, &keys[j * d], &values[j * d]);
    }
  }
  kvq::KeyRuns keys() const { return {k.data(), v.data()}; }
};

// The same keys from key `first` of a block on (a multiple of kStrip), in
// pool blocks of `block_keys` keys taken out of order, each kv head
// of `heads` holding its head-block: the paged cache's layout, with the
// KeyRuns that address it.
struct Pool {
  std::vector<std::uint8_t> k, v;
  std::vector<std::size_t> blocks;
  kvq::KeyRuns runs;
  Pool(const Block& b, std::size_t d, std::size_t n, std::size_t first, std::size_t block_keys,
       std::size_t heads, std::size_t head) {
    const std::size_t sb = kvq::key_strip_bytes(d), rb = kvq::value_row_bytes(d);
    const std::size_t kb = block_keys / kvq::kStrip * sb, vb = block_keys * rb;
    const std::size_t count = (first + n + block_keys - 1) / block_keys;
    // Backwards with gaps, so later blocks lie before the first.
    for (std::size_t i = 0; i < count; ++i) blocks.push_back(2 * (count - 1 - i) + 1);
    k.assign(2 * count * heads * kb, 0xCD);
    v.assign(2 * count * heads * vb, 0xCD);
    for (std::size_t j = 0; j < n; j += kvq::kStrip) {
      const std::size_t at = first + j, blk = blocks[at / block_keys], local = at % block_keys;
      std::memcpy(&k[(blk * heads + head) * kb + local / kvq::kStrip * sb],
                  &b.k[j / kvq::kStrip * sb], sb);
      const std::size_t rows = std::min(kvq::kStrip, n - j);
      std::memcpy(&v[(blk * heads + head) * vb + local * rb], &b.v[j * rb], rows * rb);
    }
    const std::size_t b0 = (blocks[0] * heads + head);
    runs = {&k[b0 * kb], &v[b0 * vb], first, blocks.data(), block_keys, heads * kb, heads * vb};
  }
};

std::vector<float> random_floats(std::size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> x(n);
  for (float& f : x) f = dist(rng);
  return x;
}

// The products' edge cases: each code, head sizes and lengths that are not
// multiples of 16 or 32 (one channel, one key), 1-13 query rows, keys with
// one channel 1000x the others, zero value groups, and a rare NaN or
// infinity in a key or value group: f(code, d, n, rows, trial, block).
template <class F>
void for_each_edge_case(std::mt19937_64& rng, const F& f) {
  const std::size_t dims[] = {1, 3, 16, 31, 32, 33, 64, 80, 128, 130};
  const std::size_t lens[] = {1, 2, 15, 16, 17, 33, 64, 100, 256, 300};
  int trial = 0;
  for (Code c : {Code::int8, Code::e4m3}) {
    for (std::size_t d : dims) {
      for (std::size_t n : lens) {
        ++trial;
        // Up to 13 rows, and 29: past the dot tables' convert_rows, with
        // a remainder of one row after 4 tiles of 7.
        const std::size_t rows = trial % 10 == 0 ? 29 : 1 + static_cast<std::size_t>(trial) % 13;
        CAPTURE(static_cast<int>(c), d, n, rows);
        std::vector<float> keys = random_floats(n * d, rng), values = random_floats(n * d, rng);
        for (std::size_t j = 0; j < n; ++j) keys[j * d + (d - 1) / 2] *= 1000.0f;
        if (trial % 5 == 0) std::fill_n(values.begin(), d, 0.0f);
        if (trial % 11 == 0) keys[(n / 2) * d] = kNaN;
        if (trial % 13 == 0) values[(n - 1) * d + d - 1] = kInf;
        f(c, d, n, rows, trial, Block(c, d, n, keys, values));
      }
    }
  }
}
}  // namespace

TEST_CASE("kv quant: E4M3 codes are the nearest value, ties to even, saturating", "[kv_quant]") {
  const std::vector<double> v = e4m3_values();
  for (int c = 0; c <= 0x7E; ++c) {
    CHECK(kvq::code_value(Code::e4m3, static_cast<std::uint8_t>(c)) == static_cast<float>(v[c]));
    CHECK(kvq::code_value(Code::e4m3, static_cast<std::uint8_t>(c | 0x80)) ==
          -static_cast<float>(v[c]));
    CHECK(kvq::e4m3_code(v[c]) == c);
    if (c < 0x7E) {  // the midpoint to the next value: ties to even
      const double mid = (v[c] + v[c + 1]) / 2;
      CHECK(kvq::e4m3_code(mid) == (c % 2 == 0 ? c : c + 1));
      CHECK(kvq::e4m3_code(-mid) == (0x80 | (c % 2 == 0 ? c : c + 1)));
    }
  }
  CHECK(kvq::e4m3_code(448.0) == 0x7E);
  CHECK(kvq::e4m3_code(1e30) == 0x7E);
  CHECK(kvq::e4m3_code(-1e30) == 0xFE);
  CHECK(kvq::e4m3_code(-0.0) == 0x80);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> expo(-12.0, 9.0);
  for (int i = 0; i < 20000; ++i) {
    const double y = std::exp2(expo(rng));
    REQUIRE(kvq::e4m3_code(y) == nearest_e4m3(y, v));
  }
  for (int c = 0; c < 256; ++c) {
    CHECK(kvq::code_value(Code::int8, static_cast<std::uint8_t>(c)) ==
          static_cast<float>(static_cast<std::int8_t>(c)));
  }
}

TEST_CASE("kv quant: a group's scale covers its largest value, and rounding is nearest",
          "[kv_quant]") {
  std::mt19937_64 rng(2);
  for (Code c : {Code::int8, Code::e4m3}) {
    const float qmax = kvq::code_max(c);
    for (int trial = 0; trial < 2000; ++trial) {
      const std::size_t n = 1 + trial % 32;
      std::vector<float> x = random_floats(n, rng, std::ldexp(1.0f, trial % 200 - 100));
      if (trial % 7 == 0) x[trial % n] *= 1000.0f;
      std::uint8_t codes[32];
      const std::uint16_t sb = kvq::quantize_group(c, x.data(), n, codes);
      const double scale = kvq::bf16_value(sb);
      double amax = 0;
      for (float f : x) amax = std::max(amax, std::fabs(static_cast<double>(f)));
      REQUIRE((scale == 0 || (bits(static_cast<float>(scale)) & 0xFFFF) == 0));
      // E4M3: max|x| / 448 rounded up to bf16. int8: within the searched
      // range (bf16 steps are at most 2^-7 relative), and no worse than the
      // rounded-up scale.
      if (c == Code::e4m3) {
        REQUIRE(scale * qmax >= amax);
        REQUIRE(scale * qmax <= amax * (1 + 0x1p-7));
      } else {
        REQUIRE(scale * 128 * (1 + 0x1p-7) >= amax);
        REQUIRE(scale * 127 <= amax * (1 + 0x1p-7) * (1 + 6 * 0x1p-7));
        double sse = 0, sse_up = 0;
        const double up = bf16_up(amax / 127);
        for (std::size_t i = 0; i < n; ++i) {
          const double e = kvq::code_value(c, codes[i]) * scale - x[i];
          sse += e * e;
          const double eu = std::nearbyint(x[i] / up) * up - x[i];
          sse_up += eu * eu;
        }
        REQUIRE(sse <= sse_up * (1 + 1e-9) + 1e-300);
      }
      for (std::size_t i = 0; i < n; ++i) {
        const double y = x[i] / scale;
        const double back = kvq::code_value(c, codes[i]);
        if (c == Code::int8) {
          REQUIRE(back == std::nearbyint(std::clamp(y, -127.0, 127.0)));
        } else {
          REQUIRE(codes[i] == ((y < 0 || std::signbit(y) ? 0x80 : 0) |
                               nearest_e4m3(std::fabs(y), e4m3_values())));
        }
      }
    }
    // Zeros: a zero scale and zero codes. Non-finite: a NaN scale.
    std::vector<float> z(32, 0.0f);
    std::uint8_t codes[32];
    CHECK(kvq::quantize_group(c, z.data(), 32, codes) == 0);
    CHECK(std::all_of(codes, codes + 32, [](std::uint8_t b) { return b == 0; }));
    for (float bad : {kNaN, kInf, -kInf}) {
      z[5] = bad;
      CHECK(std::isnan(kvq::bf16_value(kvq::quantize_group(c, z.data(), 32, codes))));
    }
    // The largest floats: the scale rounds down rather than overflow.
    std::vector<float> big(4, FLT_MAX);
    big[1] = -FLT_MAX;
    const float s = kvq::bf16_value(kvq::quantize_group(c, big.data(), 4, codes));
    CHECK(std::isfinite(s));
    CHECK(std::isfinite(kvq::code_value(c, codes[0]) * s));
    CHECK(kvq::code_value(c, codes[1]) * s == -kvq::code_value(c, codes[0]) * s);
  }
}

// The ISA table's quantizer (int8's search in vector lanes) against the
// scalar one, on groups of every length, at every magnitude, with ties,
// zeros, subnormals, the largest floats and non-finite values.
TEST_CASE("kv quant: each ISA's quantizer is quantize_group's bits", "[kv_quant]") {
  std::mt19937_64 rng(4);
  for (Code c : {Code::int8, Code::e4m3}) {
    for (int trial = 0; trial < 4000; ++trial) {
      const std::size_t n = 1 + trial % 32;
      std::vector<float> x = random_floats(n, rng, std::ldexp(1.0f, trial % 280 - 150));
      if (trial % 7 == 0) x[trial % n] *= 1000.0f;
      if (trial % 5 == 0) {  // halfway between codes of the rounded-up scale
        for (std::size_t i = 0; i < n; ++i) x[i] = (static_cast<float>(i) - 15.5f) * 0.25f;
      }
      if (trial % 3 == 0) {  // 32 octaves: E4M3's subnormal and zero codes
        for (std::size_t i = 0; i < n; ++i) x[i] = std::ldexp(x[i], -static_cast<int>(i));
      }
      if (trial % 4 == 1) {  // scale 1 and values halfway between E4M3 codes
        const std::vector<double> v = e4m3_values();
        x[0] = 448.0f;
        for (std::size_t i = 1; i < n; ++i) {
          const std::size_t k = rng() % (v.size() - 1);
          x[i] = static_cast<float>((v[k] + v[k + 1]) / 2) * (rng() % 2 == 0 ? 1.0f : -1.0f);
        }
      }
      if (trial % 11 == 0) x[n / 2] = trial % 2 == 0 ? -0.0f : 1e-45f;
      if (trial % 13 == 0) std::fill(x.begin(), x.end(), 0.0f);
      if (trial % 17 == 0) x[0] = trial % 2 == 0 ? FLT_MAX : -FLT_MAX;
      if (trial % 19 == 0) x[n - 1] = trial % 3 == 0 ? kNaN : kInf;
      CAPTURE(static_cast<int>(c), trial, n);
      std::uint8_t got[32], want[32];
      std::fill_n(got, 32, std::uint8_t{0xAA});
      std::fill_n(want, 32, std::uint8_t{0xAA});
      REQUIRE(kernels().quantize(c, x.data(), n, got) == kvq::quantize_group(c, x.data(), n, want));
      REQUIRE(std::equal(got, got + 32, want));
    }
  }
}

TEST_CASE("kv quant: each ISA's products are the emulation's bits", "[kv_quant]") {
  std::mt19937_64 rng(3);
  for_each_edge_case(
      rng, [&](Code c, std::size_t d, std::size_t n, std::size_t rows, int, const Block& b) {
        const auto ci = static_cast<std::size_t>(c);
        // Odd strides and an unaligned start.
        const std::size_t ldq = d + 3, lds = n + 5, ldp = n + 1, ldo = d + 7;
        std::vector<float> qbuf(rows * ldq + 1), pbuf(rows * ldp + 1);
        std::vector<float> q0 = random_floats(qbuf.size(), rng);
        std::copy(q0.begin(), q0.end(), qbuf.begin());
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (float& f : pbuf) f = u(rng);
        const float* q = qbuf.data() + 1;
        const float* p = pbuf.data() + 1;
        std::vector<float> s(rows * lds + 1, 7.0f), s_ref(s);
        kernels().scores[ci](rows, d, q, ldq, b.keys(), n, 0.125f, s.data() + 1, lds);
        kvq::scores_emulated(c, rows, d, q, ldq, b.keys(), n, 0.125f, s_ref.data() + 1, lds);
        for (std::size_t i = 0; i < s.size(); ++i) REQUIRE(bits(s[i]) == bits(s_ref[i]));
        for (float beta : {0.0f, 1.0f, 0.5f}) {
          std::vector<float> o(rows * ldo + 1, beta == 0.0f ? kNaN : 2.0f), o_ref(o);
          kernels().values[ci](rows, d, p, ldp, b.keys(), n, beta, o.data() + 1, ldo);
          kvq::values_emulated(c, rows, d, p, ldp, b.keys(), n, beta, o_ref.data() + 1, ldo);
          for (std::size_t i = 0; i < o.size(); ++i) REQUIRE(bits(o[i]) == bits(o_ref[i]));
        }
      });
}

// A paged cache's keys: the products read keys that run on through pool
// blocks of whole strips in place, with the bits of the same keys in one
// head-block (and so of the emulation), from any strip of the first block.
TEST_CASE("kv quant: products over keys in blocks are the contiguous bits", "[kv_quant]") {
  std::mt19937_64 rng(5);
  int trial = 0;
  for (Code c : {Code::int8, Code::e4m3}) {
    const auto ci = static_cast<std::size_t>(c);
    for (std::size_t block_keys : {16, 32, 48, 64}) {
      for (std::size_t n : {1, 15, 16, 17, 70, 256}) {
        ++trial;
        const std::size_t d = trial % 3 == 0 ? 33 : 64, rows = 1 + trial % 9;
        const std::size_t first = trial % 2 == 0 ? 0 : block_keys - kvq::kStrip;
        CAPTURE(static_cast<int>(c), block_keys, n, d, rows, first);
        std::vector<float> keys = random_floats(n * d, rng), values = random_floats(n * d, rng);
        if (trial % 4 == 0) keys[(n / 2) * d] = kNaN;
        if (trial % 5 == 0) values[(n - 1) * d] = kInf;
        const Block b(c, d, n, keys, values);
        const Pool pool(b, d, n, first, block_keys, 3, 1);
        const std::vector<float> q = random_floats(rows * d, rng);
        std::vector<float> p(rows * n);
        std::uniform_real_distribution<float> u(0.0f, 1.0f);
        for (float& f : p) f = u(rng);
        std::vector<float> s(rows * n), s_ref(rows * n), s_emu(rows * n);
        kernels().scores[ci](rows, d, q.data(), d, pool.runs, n, 0.5f, s.data(), n);
        kernels().scores[ci](rows, d, q.data(), d, b.keys(), n, 0.5f, s_ref.data(), n);
        kvq::scores_emulated(c, rows, d, q.data(), d, pool.runs, n, 0.5f, s_emu.data(), n);
        for (std::size_t i = 0; i < s.size(); ++i) {
          REQUIRE(bits(s[i]) == bits(s_ref[i]));
          REQUIRE(bits(s_emu[i]) == bits(s_ref[i]));
        }
        std::vector<float> o(rows * d, 1.0f), o_ref(o), o_emu(o);
        kernels().values[ci](rows, d, p.data(), n, pool.runs, n, 1.0f, o.data(), d);
        kernels().values[ci](rows, d, p.data(), n, b.keys(), n, 1.0f, o_ref.data(), d);
        kvq::values_emulated(c, rows, d, p.data(), n, pool.runs, n, 1.0f, o_emu.data(), d);
        for (std::size_t i = 0; i < o.size(); ++i) {
          REQUIRE(bits(o[i]) == bits(o_ref[i]));
          REQUIRE(bits(o_emu[i]) == bits(o_ref[i]));
        }
      }
    }
  }
}

// MLA's latent rows are their own keys, so a shared cache stores the V rows
// alone and builds K strips from them: byte for byte the strips put_key
// writes for key == value, from one head-block or a pool's blocks, lanes
// past the keys zero; by the emulation and by the ISA's kernel (d past 64
// channels a block and 32 groups a pass, and short of them).
TEST_CASE("kv quant: K strips built from V rows are put_key's strips", "[kv_quant]") {
  std::mt19937_64 rng(11);
  int trial = 0;
  const auto strips_from_rows = {&kvq::strips_from_rows, kernels().strips_from_rows};
  for (Code c : {Code::int8, Code::e4m3}) {
    for (std::size_t d : {1, 15, 16, 31, 33, 64, 80, 100, 130, 576, 1100}) {
      for (std::size_t n : {1, 7, 16, 17, 40, 64}) {
        ++trial;
        CAPTURE(static_cast<int>(c), d, n);
        std::vector<float> rows = random_floats(n * d, rng);
        for (std::size_t j = 0; j < n; ++j) rows[j * d + d / 2] *= 1000.0f;
        if (trial % 3 == 0) std::fill_n(rows.begin(), d, 0.0f);
        if (trial % 5 == 0) rows[(n - 1) * d] = kNaN;
        if (trial % 7 == 0) rows[(n / 2) * d + d - 1] = -kInf;
        const Block b(c, d, n, rows, rows);
        const std::size_t sb = kvq::key_strip_bytes(d),
                          strips = (n + kvq::kStrip - 1) / kvq::kStrip;
        // Rows that run on through out-of-order blocks, from any strip of
        // the first.
        const std::size_t block_keys = trial % 2 == 0 ? 16 : 32;
        const Pool pool(b, d, n, trial % 4 == 0 ? kvq::kStrip : 0, block_keys, 2, 1);
        for (const auto build : strips_from_rows) {
          std::vector<std::uint8_t> built(strips * sb, 0xAB);
          build(d, b.keys(), n, built.data());
          REQUIRE(std::equal(built.begin(), built.end(), b.k.begin()));
          std::fill(built.begin(), built.end(), 0xAB);
          build(d, pool.runs, n, built.data());
          REQUIRE(std::equal(built.begin(), built.end(), b.k.begin()));
        }
      }
    }
  }
}

// Against double sums of the dequantized values: each score is a chain of d
// fp32 FMAs, so |error| <= d·2^-24·Σ|q·k| (the standard bound for recursive
// summation, gamma_d, with one rounding per step); likewise P·V over n keys.
// The stored values themselves are checked against the inputs above.
TEST_CASE("kv quant: products are within fp32 rounding of double ones", "[kv_quant]") {
  std::mt19937_64 rng(4);
  for (Code c : {Code::int8, Code::e4m3}) {
    const auto ci = static_cast<std::size_t>(c);
    for (std::size_t d : {5, 64, 96}) {
      const std::size_t n = 70, rows = 9;
      const std::vector<float> keys = random_floats(n * d, rng), values = random_floats(n * d, rng);
      const Block b(c, d, n, keys, values);
      std::vector<float> kd(n * d), vd(n * d);
      for (std::size_t j = 0; j < n; ++j) {
        kvq::get_key(c, d, b.k.data(), b.v.data(), j, &kd[j * d], &vd[j * d]);
      }
      const std::vector<float> q = random_floats(rows * d, rng);
      std::vector<float> p(rows * n);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (float& f : p) f = u(rng);
      std::vector<float> s(rows * n), o(rows * d);
      kernels().scores[ci](rows, d, q.data(), d, b.keys(), n, 1.0f, s.data(), n);
      kernels().values[ci](rows, d, p.data(), n, b.keys(), n, 0.0f, o.data(), d);
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < n; ++j) {
          double exact = 0, mag = 0;
          for (std::size_t i = 0; i < d; ++i) {
            exact += static_cast<double>(q[r * d + i]) * kd[j * d + i];
            mag += std::fabs(static_cast<double>(q[r * d + i]) * kd[j * d + i]);
          }
          REQUIRE(std::fabs(s[r * n + j] - exact) <= static_cast<double>(d) * 0x1p-24 * mag);
        }
        for (std::size_t i = 0; i < d; ++i) {
          double exact = 0, mag = 0;
          for (std::size_t j = 0; j < n; ++j) {
            exact += static_cast<double>(p[r * n + j]) * vd[j * d + i];
            mag += std::fabs(static_cast<double>(p[r * n + j]) * vd[j * d + i]);
          }
          REQUIRE(std::fabs(o[r * d + i] - exact) <= static_cast<double>(n) * 0x1p-24 * mag);
        }
      }
      // The stored values: int8 within a step of max|x| / 127 (half a step,
      // or the saturation of the top value under a smaller scale), E4M3
      // within half a unit of its 3-bit mantissa (2^-4 relative) or half its
      // subnormal step.
      for (std::size_t j = 0; j < n; ++j) {
        for (std::size_t i = 0; i < d; ++i) {
          double amax = 0;
          const std::size_t g0 = i / kvq::kGroup * kvq::kGroup;
          for (std::size_t t = g0; t < std::min(d, g0 + kvq::kGroup); ++t) {
            amax = std::max(amax, std::fabs(static_cast<double>(keys[j * d + t])));
          }
          const double scale = amax / kvq::code_max(c) * (1 + 0x1p-7);
          const double err = std::fabs(kd[j * d + i] - static_cast<double>(keys[j * d + i]));
          const double bound = c == Code::int8
                                   ? scale
                                   : std::max(std::fabs(keys[j * d + i]) * 0x1p-4, scale * 0x1p-10);
          REQUIRE(err <= bound);
        }
      }
    }
  }
}

namespace {

// The dot table that serves a bf16 object here (null where there is none).
const mha::detail::KvQuantDotKernels* dot_kernels() {
  const mha::detail::GemmBf16Kernels* g16 = mha::detail::gemm_bf16_kernels(mha::current_isa());
  return g16 != nullptr ? mha::detail::kv_quant_dot_kernels(*g16) : nullptr;
}

// Q rows as the dot products take them: bf16 pairs (nearest even),
// dot_pairs(d) per row, ldq apart, zero past d.
std::vector<std::uint32_t> bf16_pairs(const std::vector<float>& q, std::size_t rows, std::size_t d,
                                      std::size_t ldq) {
  std::vector<std::uint32_t> out(rows * ldq + 1, 0);
  auto* words = reinterpret_cast<std::uint16_t*>(out.data() + 1);
  mha::detail::emulated_round_rows(rows, d, q.data(), d, words, 2 * ldq);
  return out;
}

float pair_element(const std::uint32_t* q, std::size_t i) {
  return kvq::bf16_value(static_cast<std::uint16_t>(q[i / 2] >> (16 * (i % 2))));
}

}  // namespace

TEST_CASE("kv quant: the dot products' code values are the codes' values", "[kv_quant]") {
  for (Code c : {Code::int8, Code::e4m3}) {
    for (int b = 0; b < 256; ++b) {
      const auto code = static_cast<std::uint8_t>(b);
      const std::uint16_t bf = kvq::dot_code_bf16(c, code);
      if (c == Code::int8 && b == 0x80) {
        CHECK(bf == 0x8000);  // never written; -0 from its sign and magnitude 0
        continue;
      }
      CHECK(kvq::bf16_value(bf) == kvq::code_value(c, code));
      CHECK(bits(kvq::bf16_value(bf)) == bits(kvq::code_value(c, code)));
    }
  }
}

// Each table on the shapes and extremes of the fp32 products' test, and on
// keys in out-of-order pool blocks, against the emulation bit for bit.
TEST_CASE("kv quant: the bf16 dot products are the emulation's bits", "[kv_quant]") {
  const mha::detail::KvQuantDotKernels* dot = dot_kernels();
  if (dot == nullptr) {
    WARN("no bf16 dot table on this CPU: only the emulation's accuracy is tested");
    return;
  }
  std::mt19937_64 rng(21);
  for_each_edge_case(rng, [&](Code c, std::size_t d, std::size_t n, std::size_t rows, int trial,
                              const Block& b) {
    const auto ci = static_cast<std::size_t>(c);
    // Odd strides and unaligned starts; tiny and huge query rows.
    const std::size_t ldq = kvq::dot_pairs(d) + 3, lds = n + 5, ldp = n + 1, ldo = d + 7;
    std::vector<float> q0 = random_floats(rows * d, rng);
    if (trial % 3 == 0) q0[0] = 1e-39f;
    if (trial % 4 == 0) q0[rows * d - 1] = 3e38f;
    const std::vector<std::uint32_t> qp = bf16_pairs(q0, rows, d, ldq);
    std::vector<float> pbuf(rows * ldp + 1);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    for (float& f : pbuf) f = u(rng);
    if (trial % 7 == 0) pbuf[1] = 1e-40f;
    const float* p = pbuf.data() + 1;
    // Unaligned scratch, NaN before the call: the kernels align what they
    // use and read only what they write.
    std::vector<std::uint16_t> scratch(mha::detail::dot_pbuf_words(*dot, rows, n, d) + 1);
    std::vector<std::uint32_t> work(mha::detail::dot_score_work_words(*dot, rows, d) + 1,
                                    0x7FC07FC0u);
    std::vector<float> s(rows * lds + 1, 7.0f), s_ref(s);
    dot->scores[ci](rows, d, qp.data() + 1, ldq, b.keys(), n, 0.125f, s.data() + 1, lds,
                    work.data() + 1);
    kvq::scores_dot_emulated(c, rows, d, qp.data() + 1, ldq, b.keys(), n, 0.125f, s_ref.data() + 1,
                             lds);
    for (std::size_t i = 0; i < s.size(); ++i) REQUIRE(bits(s[i]) == bits(s_ref[i]));
    for (float beta : {0.0f, 1.0f, 0.5f}) {
      std::vector<float> o(rows * ldo + 1, beta == 0.0f ? kNaN : 2.0f), o_ref(o);
      dot->values[ci](rows, d, p, ldp, b.keys(), n, beta, o.data() + 1, ldo, scratch.data() + 1);
      kvq::values_dot_emulated(c, rows, d, p, ldp, b.keys(), n, beta, o_ref.data() + 1, ldo);
      for (std::size_t i = 0; i < o.size(); ++i) REQUIRE(bits(o[i]) == bits(o_ref[i]));
    }
    // The same keys in a pool of blocks, from a later strip of the first.
    const std::size_t block_keys = trial % 2 == 0 ? 16 : 48;
    const Pool pool(b, d, n, trial % 3 == 0 ? kvq::kStrip : 0, block_keys, 3, 1);
    std::vector<float> sp(s.size(), 7.0f), op(rows * ldo + 1, 2.0f), o1(op);
    dot->scores[ci](rows, d, qp.data() + 1, ldq, pool.runs, n, 0.125f, sp.data() + 1, lds,
                    work.data() + 1);
    for (std::size_t i = 0; i < s.size(); ++i) REQUIRE(bits(sp[i]) == bits(s[i]));
    dot->values[ci](rows, d, p, ldp, pool.runs, n, 1.0f, op.data() + 1, ldo, scratch.data() + 1);
    dot->values[ci](rows, d, p, ldp, b.keys(), n, 1.0f, o1.data() + 1, ldo, scratch.data() + 1);
    for (std::size_t i = 0; i < op.size(); ++i) REQUIRE(bits(op[i]) == bits(o1[i]));
  });
}

// A task sizes its scratch once, for its most rows, and calls the products
// on fewer too (a query set's last block): at 1000 channels (32 groups) a
// call of up to convert_rows rows needs more p' than a converting call
// does, within the same scratch (ASan sees an overrun).
TEST_CASE("kv quant: dot scratch sized for many rows serves fewer", "[kv_quant]") {
  const mha::detail::KvQuantDotKernels* dot = dot_kernels();
  if (dot == nullptr) {
    WARN("no bf16 dot table on this CPU");
    return;
  }
  std::mt19937_64 rng(23);
  const std::size_t d = 1000, n = 40, most = dot->convert_rows + 9, ldq = kvq::dot_pairs(d);
  const std::vector<float> keys = random_floats(n * d, rng), values = random_floats(n * d, rng);
  const Block b(Code::int8, d, n, keys, values);
  const std::vector<std::uint32_t> qp = bf16_pairs(random_floats(most * d, rng), most, d, ldq);
  std::vector<float> p(most * n, 0.25f);
  std::vector<std::uint16_t> pbuf(mha::detail::dot_pbuf_words(*dot, most, n, d));
  std::vector<std::uint32_t> work(mha::detail::dot_score_work_words(*dot, most, d));
  for (std::size_t rows : {std::size_t{1}, dot->convert_rows, most}) {
    CAPTURE(rows);
    std::vector<float> s(rows * n), s_ref(s), o(rows * d), o_ref(o);
    dot->scores[0](rows, d, qp.data() + 1, ldq, b.keys(), n, 1.0f, s.data(), n, work.data());
    kvq::scores_dot_emulated(Code::int8, rows, d, qp.data() + 1, ldq, b.keys(), n, 1.0f,
                             s_ref.data(), n);
    dot->values[0](rows, d, p.data(), n, b.keys(), n, 0.0f, o.data(), d, pbuf.data());
    kvq::values_dot_emulated(Code::int8, rows, d, p.data(), n, b.keys(), n, 0.0f, o_ref.data(), d);
    for (std::size_t i = 0; i < s.size(); ++i) REQUIRE(bits(s[i]) == bits(s_ref[i]));
    for (std::size_t i = 0; i < o.size(); ++i) REQUIRE(bits(o[i]) == bits(o_ref[i]));
  }
}

// The emulation against double sums of the dequantized keys and values
// with the same bf16 Q: each score is a chain of at most 32 roundings per
// group, one per group's scaled sum and one for alpha, so |error| <=
// (d + 3 + groups)·2^-24·Σ|q·k|; P·V rounds each p·scale to bf16 (2^-9
// relative) and then sums n of them, so |error| <= (2^-9 + (n + 2)·2^-24)
// ·Σ|p·v|.
TEST_CASE("kv quant: the bf16 dot products are within their roundings of double ones",
          "[kv_quant]") {
  std::mt19937_64 rng(22);
  for (Code c : {Code::int8, Code::e4m3}) {
    for (std::size_t d : {5, 64, 96}) {
      const std::size_t n = 71, rows = 9, ldq = kvq::dot_pairs(d);
      const std::vector<float> keys = random_floats(n * d, rng), values = random_floats(n * d, rng);
      const Block b(c, d, n, keys, values);
      std::vector<float> kd(n * d), vd(n * d);
      for (std::size_t j = 0; j < n; ++j) {
        kvq::get_key(c, d, b.k.data(), b.v.data(), j, &kd[j * d], &vd[j * d]);
      }
      const std::vector<std::uint32_t> qp = bf16_pairs(random_floats(rows * d, rng), rows, d, ldq);
      const std::uint32_t* q = qp.data() + 1;
      std::vector<float> p(rows * n);
      std::uniform_real_distribution<float> u(0.0f, 1.0f);
      for (float& f : p) f = u(rng);
      std::vector<float> s(rows * n), o(rows * d);
      kvq::scores_dot_emulated(c, rows, d, q, ldq, b.keys(), n, 1.0f, s.data(), n);
      kvq::values_dot_emulated(c, rows, d, p.data(), n, b.keys(), n, 0.0f, o.data(), d);
      const double gamma_s = static_cast<double>(d + 3 + kvq::groups(d)) * 0x1p-24;
      const double gamma_o = 0x1p-9 + static_cast<double>(n + 2) * 0x1p-24;
      for (std::size_t r = 0; r < rows; ++r) {
        for (std::size_t j = 0; j < n; ++j) {
          double exact = 0, mag = 0;
          for (std::size_t i = 0; i < d; ++i) {
            const double t = static_cast<double>(pair_element(q + r * ldq, i)) * kd[j * d + i];
            exact += t;
            mag += std::fabs(t);
          }
          REQUIRE(std::fabs(s[r * n + j] - exact) <= gamma_s * mag);
        }
        for (std::size_t i = 0; i < d; ++i) {
          double exact = 0, mag = 0;
          for (std::size_t j = 0; j < n; ++j) {
            exact += static_cast<double>(p[r * n + j]) * vd[j * d + i];
            mag += std::fabs(static_cast<double>(p[r * n + j]) * vd[j * d + i]);
          }
          REQUIRE(std::fabs(o[r * d + i] - exact) <= gamma_o * mag);
        }
      }
    }
  }
}
