// Double-precision references and test utilities shared by the suites.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace mha::test {

// Deterministic random data: the seed is fixed per test so failures replay.
std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo = -1.f,
                                 float hi = 1.f);

// Multiplier for randomized case counts, from MHA_TEST_SCALE (default 1).
// CI lowers it where each case is slow (sanitizers, qemu-aarch64); a suite
// always runs at least its fixed edge cases, so a small scale still tests.
double case_scale();
// Whether the suites run at full scale (case_scale() >= 1): the sweeps a
// reduced scale thins (CI's sanitizer and qemu runs) run whole.
bool full_scale();
// n scaled by case_scale(), at least `floor`.
std::size_t scaled(std::size_t n, std::size_t floor = 1);

// False when the suite runs where a second thread must not be started
// (qemu-user on aarch64); concurrency tests then skip with a WARN.
bool threads_allowed();

// Whether MHA_BF16_KERNEL forces a bf16 kernel set (CTest's bf16/<set>/
// runs): fp32 objects never reach those kernels, so the suites' bf16 runs
// may leave their fp32 cases to the plain runs.
bool bf16_kernels_forced();

// Whether a and b hold the same floats bit for bit (NaN payloads included);
// empty vectors compare equal.
bool same_bits(const std::vector<float>& a, const std::vector<float>& b);
// The same for n floats at a and b.
bool same_bits(const float* a, const float* b, std::size_t n);

}  // namespace mha::test
