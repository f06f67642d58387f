// mha_exp_ulp: the full accuracy sweep of the library's exp. For each ISA this
// build and CPU can run (or only those named on the command line), evaluates
// SoftmaxKernels::exp on every float in [-87.3, 88.7] and prints the maximum
// distance in ulp to the correctly rounded result float(exp(double(x))), the
// input where it occurs, and how many inputs are off by 1 and by 2 ulp.
//
//   build/bench/mha_exp_ulp            # every supported ISA
//   build/bench/mha_exp_ulp avx2 neon  # just these
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mha/isa.hpp>
#include <string>
#include <vector>

#include "dispatch/dispatch.hpp"
#include "softmax/kernels.hpp"

namespace {

std::uint32_t bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

float from_bits(std::uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof x);
  return x;
}

struct Result {
  std::int64_t worst = 0;
  float worst_x = 0;
  std::uint64_t count = 0, off1 = 0, off2 = 0, beyond = 0;
};

// Sweeps the floats with bit patterns [lo, hi] (one sign, ordered by bits).
void sweep(const mha::detail::SoftmaxKernels& k, std::uint32_t lo, std::uint32_t hi, Result& r) {
  constexpr std::uint32_t kChunk = 1 << 16;
  std::vector<float> x(kChunk), y(kChunk);
  for (std::uint64_t start = lo; start <= hi; start += kChunk) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(kChunk, hi - start + 1));
    for (std::size_t i = 0; i < n; ++i) x[i] = from_bits(static_cast<std::uint32_t>(start + i));
    k.exp(x.data(), y.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      const float ref = static_cast<float>(std::exp(static_cast<double>(x[i])));
      const std::int64_t d =
          std::llabs(static_cast<std::int64_t>(bits(y[i])) - static_cast<std::int64_t>(bits(ref)));
      r.count++;
      r.off1 += d == 1;
      r.off2 += d == 2;
      r.beyond += d > 2;
      if (d > r.worst) r.worst = d, r.worst_x = x[i];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<mha::Isa> isas;
  for (int i = 1; i < argc; ++i) {
    auto isa = mha::parse_isa(argv[i]);
    if (!isa || !mha::isa_supported(*isa)) {
      std::fprintf(stderr, "mha_exp_ulp: '%s' is not an ISA this build and CPU can run\n", argv[i]);
      return 2;
    }
    isas.push_back(*isa);
  }
  if (isas.empty()) isas = mha::supported_isas();
  int status = 0;
  for (mha::Isa isa : isas) {
    const auto& k = mha::detail::softmax_kernels(isa);
    Result r;
    sweep(k, 0, bits(88.7f), r);            // +0 .. 88.7
    sweep(k, bits(-0.f), bits(-87.3f), r);  // -0 .. -87.3
    std::printf(
        "%-7s exp over every float in [-87.3, 88.7] (%llu inputs): max %lld ulp at x=%.9g; "
        "1 ulp: %llu, 2 ulp: %llu, >2 ulp: %llu\n",
        std::string(mha::isa_name(isa)).c_str(), static_cast<unsigned long long>(r.count),
        static_cast<long long>(r.worst), static_cast<double>(r.worst_x),
        static_cast<unsigned long long>(r.off1), static_cast<unsigned long long>(r.off2),
        static_cast<unsigned long long>(r.beyond));
    if (r.worst > 2) status = 1;
  }
  return status;
}
