// BFMMLA's numerics (FEAT_BF16 without FEAT_EBF16): emulated_bfmmla against
// hand-derived bits everywhere, and against vbfmmlaq_f32 bit for bit on an
// aarch64 CPU with BF16 and I8MM (qemu 7.2's default CPU has both): the
// model neon_bfmmla's bits rest on (test_gemm_bf16 holds the kernels to
// emulated_bfdot, of which emulated_bfmmla is two steps).
#include <array>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <random>

#include "gemm/gemm_bf16.hpp"
#include "support/reference.hpp"

#if defined(__aarch64__)
#include <arm_neon.h>
#include <sys/auxv.h>
#endif

namespace {

using Block = std::array<std::uint32_t, 4>;    // the 2 x 2 fp32 outputs' bits
using Operand = std::array<std::uint16_t, 8>;  // 2 rows (or columns) of 4 bf16

Block emulated(const Block& c, const Operand& a, const Operand& b) {
  float f[4];
  std::memcpy(f, c.data(), sizeof f);
  mha::detail::emulated_bfmmla(f, a.data(), b.data());
  Block out;
  std::memcpy(out.data(), f, sizeof f);
  return out;
}

#if defined(__aarch64__)
bool cpu_has_bfmmla() {
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  return (hw2 & HWCAP2_BF16) != 0 && (hw2 & HWCAP2_I8MM) != 0;
}

// Only this function may contain BFMMLA: the rest of the file runs on CPUs
// without it (the skip under QEMU_CPU=cortex-a72).
__attribute__((target("arch=armv8.6-a+bf16+i8mm"))) Block hardware(const Block& c, const Operand& a,
                                                                   const Operand& b) {
  const float32x4_t acc = vreinterpretq_f32_u32(vld1q_u32(c.data()));
  const bfloat16x8_t av = vreinterpretq_bf16_u16(vld1q_u16(a.data()));
  const bfloat16x8_t bv = vreinterpretq_bf16_u16(vld1q_u16(b.data()));
  Block out;
  vst1q_u32(out.data(), vreinterpretq_u32_f32(vbfmmlaq_f32(acc, av, bv)));
  return out;
}
#else
bool cpu_has_bfmmla() {
  return false;
}
Block hardware(const Block& c, const Operand&, const Operand&) {
  return c;
}
#endif

}  // namespace

TEST_CASE("emulated_bfmmla: two BFDOT steps per output, each rounded to odd", "[gemm][bf16]") {
  // (C[0][0], row 0 of A, column 0 of B, the result's bits); the other
  // outputs see zeros. bf16 1 = 3f80, 2^-15 = 3800, 2^-30 = 3080,
  // 2^-70 = 1c80, 2^127 = 7f00, 2 = 4000.
  struct Case {
    std::uint32_t c;
    std::array<std::uint16_t, 4> a, b;
    std::uint32_t want;
  };
  const Case cases[] = {
      {0, {0x3f80, 0x3f80, 0x3f80, 0x3f80}, {0x3f80, 0x3f80, 0x3f80, 0x3f80}, 0x40800000u},  // 4
      // k 0-1 first (1), then 1 + (-1 + 2^-60): the inner sum rounds to odd
      // (-(1 - 2^-24)), so 2^-24, not the exact 2^-60 of one fused sum.
      {0, {0x3f80, 0, 0xbf80, 0x3080}, {0x3f80, 0, 0x3f80, 0x3080}, 0x33800000u},
      // 1, + 2^-30 (k 0-1: 1 + 2^-23 by rounding to odd), then - 1: 2^-23;
      // k 2-3 first would give 2^-30, as would one fused sum.
      {0x3f800000u, {0x3800, 0, 0xbf80, 0}, {0x3800, 0, 0x3f80, 0}, 0x34000000u},
      // The accumulator 1 plus 2^-30: toward zero, then the last bit set.
      {0x3f800000u, {0x3800, 0, 0, 0}, {0x3800, 0, 0, 0}, 0x3f800001u},
      // -1 + 2^-30 in the second step: 1 - 2^-24, odd already.
      {0xbf800000u, {0, 0, 0x3800, 0}, {0, 0, 0x3800, 0}, 0xbf7fffffu},
      {0x00000001u, {0, 0, 0, 0}, {0, 0, 0, 0}, 0u},  // denormal C read as 0
      {0x80000001u, {0x3f80, 0, 0, 0}, {0x3f80, 0, 0, 0}, 0x3f800000u},
      {0, {0x1c80, 0, 0, 0}, {0x1c80, 0, 0, 0}, 0u},            // 2^-140: flushed
      {0, {0x0001, 0x3f80, 0, 0}, {0x3f80, 0x0040, 0, 0}, 0u},  // denormal inputs read as 0
      {0, {0x7f00, 0, 0, 0}, {0x4000, 0, 0, 0}, 0x7f800000u},   // 2^128: infinity
      {0, {0xff00, 0, 0x7f00, 0}, {0x4000, 0, 0x4000, 0}, 0x7fc00000u},  // -inf + inf
      {0, {0, 0, 0x7fa1, 0}, {0, 0, 0x3f80, 0}, 0x7fc00000u},            // NaN: the default NaN
      {0x7fa00001u, {0, 0, 0, 0}, {0, 0, 0, 0}, 0x7fc00000u},            // a NaN accumulator too
      {0, {0x7f80, 0, 0, 0}, {0, 0, 0, 0}, 0x7fc00000u},                 // inf * 0
  };
  const bool hw = cpu_has_bfmmla();
  for (const Case& t : cases) {
    const Block c{t.c, 0, 0, 0};
    Operand a{}, b{};
    std::copy(t.a.begin(), t.a.end(), a.begin());
    std::copy(t.b.begin(), t.b.end(), b.begin());
    INFO("C " << std::hex << t.c << " A " << t.a[0] << ' ' << t.a[1] << ' ' << t.a[2] << ' '
              << t.a[3] << " B " << t.b[0] << ' ' << t.b[1] << ' ' << t.b[2] << ' ' << t.b[3]);
    CHECK(emulated(c, a, b)[0] == t.want);
    if (hw) CHECK(hardware(c, a, b)[0] == t.want);
  }
}

TEST_CASE("vbfmmlaq_f32 (BFMMLA) gives the bits of emulated_bfmmla", "[gemm][bf16]") {
  if (!cpu_has_bfmmla()) {
    WARN("skipped: this CPU has no BFMMLA (FEAT_BF16 and FEAT_I8MM)");
    return;
  }
  std::mt19937_64 rng(30);
  // Kinds of bf16 operand: every bit pattern; exponents near the top
  // (products and sums overflowing); exponents near the bottom (denormal
  // inputs, products and sums under 2^-126); and 1.0-ish values, where the
  // sums of close magnitudes cancel and round.
  const auto bf16 = [&](int kind) {
    auto v = static_cast<std::uint16_t>(rng());
    if (kind == 1) v = static_cast<std::uint16_t>((v & 0x807fu) | (0xf0u + rng() % 16) << 7);
    if (kind == 2) v = static_cast<std::uint16_t>((v & 0x807fu) | (rng() % 64) << 7);
    if (kind == 3) v = static_cast<std::uint16_t>((v & 0x807fu) | (0x70u + rng() % 32) << 7);
    return v;
  };
  // The accumulator: any bits, or a float of the same kinds (bf16 widened
  // plus random low bits).
  const auto fp32 = [&](int kind) {
    if (kind == 0) return static_cast<std::uint32_t>(rng());
    return static_cast<std::uint32_t>(bf16(kind)) << 16 |
           static_cast<std::uint32_t>(rng() & 0xffffu);
  };
  const std::size_t blocks = mha::test::scaled(200000, 20000);
  std::size_t mismatches = 0;
  for (std::size_t t = 0; t < blocks; ++t) {
    const int kind = static_cast<int>(t % 4);
    Block c;
    Operand a, b;
    for (std::uint32_t& x : c) x = fp32(kind);
    for (std::uint16_t& x : a) x = bf16(kind);
    for (std::uint16_t& x : b) x = bf16(kind);
    const Block want = emulated(c, a, b), got = hardware(c, a, b);
    if (got != want && ++mismatches <= 5) {
      INFO("block " << t << " kind " << kind);
      CHECK(got == want);
    }
  }
  INFO(blocks << " blocks");
  CHECK(mismatches == 0);
}
