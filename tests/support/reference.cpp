#include "support/reference.hpp"

#include <cstdlib>
#include <cstring>

namespace mha::test {

std::vector<float> random_vector(std::size_t n, std::uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

double case_scale() {
  static const double scale = [] {
    const char* v = std::getenv("MHA_TEST_SCALE");
    double s = v ? std::strtod(v, nullptr) : 1.0;
    return s > 0 ? s : 1.0;
  }();
  return scale;
}

bool full_scale() {
  return case_scale() >= 1.0;
}

std::size_t scaled(std::size_t n, std::size_t floor) {
  const auto s = static_cast<std::size_t>(static_cast<double>(n) * case_scale());
  return s < floor ? floor : s;
}

bool threads_allowed() {
  const char* v = std::getenv("MHA_TEST_SINGLE_THREAD");
  return v == nullptr || std::strcmp(v, "1") != 0;
}

bool bf16_kernels_forced() {
  const char* v = std::getenv("MHA_BF16_KERNEL");
  return v != nullptr && *v != '\0';
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && same_bits(a.data(), b.data(), a.size());
}

bool same_bits(const float* a, const float* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(float)) == 0;
}

}  // namespace mha::test
