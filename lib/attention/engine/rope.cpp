#include "attention/engine/rope.hpp"

#include <cmath>

#include "common/parallel.hpp"

namespace mha::detail {
namespace {

// Threads for `rows` items of `per_row` floats: ~64k floats each, below which
// a thread's wake-up costs more than it saves.
std::size_t threads_for(std::size_t rows, std::size_t per_row) {
  return 1 + rows * per_row / 65536;
}

}  // namespace

std::size_t rope_table_floats(const AttentionMods& m, std::size_t positions) {
  return positions * m.rope_dim;
}

void rope_table(const AttentionMods& m, std::ptrdiff_t first, std::size_t positions, float* table) {
  const std::size_t half = m.rope_dim / 2;
  const double theta = m.rope_theta, amp = m.rope_amplitude;
  // One task per frequency: its pow once, then every position's angle.
  parallel_for(half, threads_for(half, 2 * positions), [&](std::size_t t) {
    const double inv_freq =
        m.rope_inv_freq != nullptr
            ? m.rope_inv_freq[t]
            : std::pow(theta, -2.0 * static_cast<double>(t) / static_cast<double>(m.rope_dim));
    for (std::size_t p = 0; p < positions; ++p) {
      const double pos = static_cast<double>(m.rope_offset) +
                         static_cast<double>(first + static_cast<std::ptrdiff_t>(p));
      const double angle = pos * inv_freq;
      table[p * m.rope_dim + t] = static_cast<float>(amp * std::cos(angle));
      table[p * m.rope_dim + half + t] = static_cast<float>(amp * std::sin(angle));
    }
  });
}

void rope_apply(const AttentionMods& m, const float* table, std::ptrdiff_t table_first,
                std::ptrdiff_t pos0, std::size_t batch, std::size_t len, std::size_t heads,
                std::size_t head_dim, float* x, std::size_t ld) {
  const std::size_t half = m.rope_dim / 2;
  // Pair t: features (t, t + half), or (2t, 2t + 1) when interleaved.
  const std::size_t stride = m.rope_interleaved ? 2 : 1, other = m.rope_interleaved ? 1 : half;
  parallel_for(batch * len, threads_for(batch * len, heads * m.rope_dim), [&](std::size_t r) {
    const auto t = static_cast<std::ptrdiff_t>(r % len);
    const float* c = table + static_cast<std::size_t>(pos0 - table_first + t) * m.rope_dim;
    const float* sn = c + half;
    for (std::size_t g = 0; g < heads; ++g) {
      float* v = x + r * ld + g * head_dim;
      for (std::size_t p = 0; p < half; ++p) {
        const float a = v[p * stride], b = v[p * stride + other];
        v[p * stride] = a * c[p] - b * sn[p];
        v[p * stride + other] = b * c[p] + a * sn[p];
      }
    }
  });
}

}  // namespace mha::detail
