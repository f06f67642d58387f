// Accuracy of the quantized KV caches (mha_kv_cache_create_ex), against
// float64 attention on unquantized K and V and beside the yardsticks of
// issue 28: a prefill of 1000 tokens, then 16 decode steps, whose outputs
// are compared. Identity projections make K, V and Q the inputs themselves
// (E = H·d, H 4 over 2 K/V heads), so each cache's error is its own:
//   ours:   the library's step outputs (fp32 or bf16 object; fp32/bf16,
//           int8 or E4M3 cache);
//   q8_0:   llama.cpp's q8_0 cache: blocks of 32 channels, scale amax/127
//           stored in fp16, codes round(x·127/amax);
//   e4m3:   one fp32 scale amax/448 per token and head, codes the nearest
//           E4M3 value;
// both yardsticks computed in float64 on the same data (on a bf16 object,
// on its bf16-rounded Q, K and V, with its output rounded to bf16, its own
// documented roundings).
// Error: RMS(out - ref) / RMS(ref) over the 16 steps' outputs of 8 data sets.
// Data: N(0, 1), and the same with 3 channels of every key 20x the others.
// Usage: mha_kv_quant_accuracy   (prints a Markdown table)
#include <mha/mha.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr std::size_t kPrefill = 1000, kSteps = 16, kLen = kPrefill + kSteps;
constexpr std::size_t kHeads = 4, kKvHeads = 2;
// Independent data sets per row, pooled: one set's ratio of two caches'
// errors moves by about +-5 % with the draw.
constexpr std::uint64_t kSeeds = 8;

void check(mha_status s) {
  if (s != MHA_OK) throw std::runtime_error(mha_last_error());
}

float bf16(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  b = (b + 0x7FFFu + ((b >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &b, sizeof b);
  return x;
}

// Round to nearest fp16 (normal range; the scales here are far from its
// limits), as llama.cpp's FP32_TO_FP16.
float fp16(float x) {
  int e;
  std::frexp(x, &e);
  const double ulp = std::ldexp(1.0, e - 11);
  return static_cast<float>(std::nearbyint(x / ulp) * ulp);
}

std::vector<double> e4m3_table() {
  std::vector<double> v;
  for (int c = 0; c <= 0x7E; ++c) {
    const int e = c >> 3, m = c & 7;
    v.push_back(e == 0 ? m * 0x1p-9 : std::ldexp(1.0 + m / 8.0, e - 7));
  }
  return v;
}

double nearest_e4m3(double y) {
  static const std::vector<double> t = e4m3_table();
  const double a = std::fabs(y);
  double best = t[0];
  for (double v : t) {
    if (std::fabs(v - a) < std::fabs(best - a)) best = v;
  }
  return std::copysign(best, y);
}

enum class Cache { exact, q8_0, e4m3 };

// The K/V features of rows x (E each, first kKvHeads·d used) as `c` stores them.
std::vector<double> yardstick(const std::vector<float>& x, std::size_t E, std::size_t d, Cache c) {
  std::vector<double> out(x.begin(), x.end());
  for (std::size_t r = 0; r < kLen; ++r) {
    for (std::size_t g = 0; g < kKvHeads; ++g) {
      const std::size_t span = c == Cache::q8_0 ? 32 : d;
      for (std::size_t c0 = 0; c0 < d && c != Cache::exact; c0 += span) {
        const float* src = &x[r * E + g * d + c0];
        float amax = 0;
        for (std::size_t i = 0; i < span; ++i) amax = std::max(amax, std::fabs(src[i]));
        for (std::size_t i = 0; i < span; ++i) {
          double& o = out[r * E + g * d + c0 + i];
          if (c == Cache::q8_0) {
            const float s = amax / 127.0f, id = s != 0 ? 1.0f / s : 0.0f;
            o = std::nearbyint(src[i] * id) * static_cast<double>(fp16(s));
          } else {
            const float s = amax / 448.0f;
            o = s != 0 ? nearest_e4m3(src[i] / static_cast<double>(s)) * s : 0.0;
          }
        }
      }
    }
  }
  return out;
}

// float64 attention of the decode tokens over all keys before them.
std::vector<double> attend(const std::vector<double>& q, const std::vector<double>& k,
                           const std::vector<double>& v, std::size_t E, std::size_t d) {
  std::vector<double> out(kSteps * E), s(kLen);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::size_t t = 0; t < kSteps; ++t) {
    const std::size_t pos = kPrefill + t;
    for (std::size_t h = 0; h < kHeads; ++h) {
      const std::size_t g = h / (kHeads / kKvHeads);
      double m = -INFINITY, sum = 0;
      for (std::size_t j = 0; j <= pos; ++j) {
        double dot = 0;
        for (std::size_t i = 0; i < d; ++i) dot += q[pos * E + h * d + i] * k[j * E + g * d + i];
        s[j] = dot * scale;
        m = std::max(m, s[j]);
      }
      for (std::size_t j = 0; j <= pos; ++j) sum += (s[j] = std::exp(s[j] - m));
      for (std::size_t i = 0; i < d; ++i) {
        double o = 0;
        for (std::size_t j = 0; j <= pos; ++j) o += s[j] * v[j * E + g * d + i];
        out[t * E + h * d + i] = o / sum;
      }
    }
  }
  return out;
}

std::string fmt(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", x);
  return buf;
}

// Squared errors and squared references, summed over seeds.
struct Errors {
  double e = 0, r = 0;
  template <class T>
  void add(const std::vector<T>& got, const std::vector<double>& ref) {
    for (std::size_t i = 0; i < ref.size(); ++i) {
      e += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
      r += ref[i] * ref[i];
    }
  }
  double rel() const { return std::sqrt(e / r); }
};

// The library's 16 decode outputs.
std::vector<float> ours(const std::vector<float>& q, const std::vector<float>& k,
                        const std::vector<float>& v, std::size_t E, mha_dtype compute,
                        mha_kv_dtype kv) {
  const std::size_t kvd = kKvHeads * E / kHeads;
  std::vector<float> wq(E * E, 0.0f), wkv(kvd * E, 0.0f);
  for (std::size_t i = 0; i < E; ++i) wq[i * E + i] = 1.0f;
  for (std::size_t i = 0; i < kvd; ++i) wkv[i * E + i] = 1.0f;
  const mha_config cfg{E, kHeads, 0, 0, kKvHeads};
  const mha_weights w{wq.data(), wkv.data(), wkv.data(), wq.data(),
                      nullptr,   nullptr,    nullptr,    nullptr};
  const mha_attention_options ao{sizeof(mha_attention_options), compute};
  mha_attention* a = nullptr;
  check(mha_attention_create_ex(&cfg, &w, &ao, &a));
  const mha_kv_cache_options ko{sizeof(mha_kv_cache_options), kv};
  mha_kv_cache* c = nullptr;
  check(mha_kv_cache_create_ex(a, 1, kLen, &ko, &c));
  std::vector<float> pre(kPrefill * E), out(kSteps * E);
  check(mha_attention_step(a, c, kPrefill, q.data(), k.data(), v.data(), pre.data()));
  for (std::size_t t = 0; t < kSteps; ++t) {
    const std::size_t at = (kPrefill + t) * E;
    check(mha_attention_step(a, c, 1, &q[at], &k[at], &v[at], &out[t * E]));
  }
  mha_kv_cache_destroy(c);
  mha_attention_destroy(a);
  return out;
}

}  // namespace

int main() {
  std::printf(
      "| data | d | object | fp32 cache | bf16 cache | int8 | q8_0 ref | int8 / q8_0 | fp8 e4m3 "
      "| e4m3 ref | fp8 / e4m3 |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (bool outliers : {false, true}) {
    for (std::size_t d : {64, 128}) {
      for (mha_dtype compute : {MHA_FP32, MHA_BF16}) {
        const bool b = compute == MHA_BF16;
        Errors def, i8, f8, q8, e4;
        for (std::uint64_t seed = 0; seed < kSeeds; ++seed) {
          const std::size_t E = kHeads * d;
          std::mt19937_64 rng(7 + d + 1000 * seed);
          std::normal_distribution<float> n01(0.0f, 1.0f);
          std::vector<float> q(kLen * E), k(kLen * E), v(kLen * E);
          for (auto* x : {&q, &k, &v}) {
            for (float& f : *x) f = n01(rng);
          }
          if (outliers) {
            for (std::size_t r = 0; r < kLen; ++r) {
              for (std::size_t g = 0; g < kKvHeads; ++g) {
                for (std::size_t ch : {3, 17, 40}) k[r * E + g * d + ch] *= 20.0f;
              }
            }
          }
          const std::vector<double> qd(q.begin(), q.end());
          const std::vector<double> ref =
              attend(qd, yardstick(k, E, d, Cache::exact), yardstick(v, E, d, Cache::exact), E, d);
          std::vector<float> qr = q, kr = k, vr = v;
          if (b) {
            for (auto* x : {&qr, &kr, &vr}) {
              for (float& f : *x) f = bf16(f);
            }
          }
          const std::vector<double> qrd(qr.begin(), qr.end());
          const auto yard = [&](Cache c) {
            std::vector<double> o =
                attend(qrd, yardstick(kr, E, d, c), yardstick(vr, E, d, c), E, d);
            if (b) {
              for (double& x : o) x = bf16(static_cast<float>(x));
            }
            return o;
          };
          def.add(ours(q, k, v, E, compute, MHA_KV_DEFAULT), ref);
          i8.add(ours(q, k, v, E, compute, MHA_KV_INT8), ref);
          f8.add(ours(q, k, v, E, compute, MHA_KV_FP8_E4M3), ref);
          q8.add(yard(Cache::q8_0), ref);
          e4.add(yard(Cache::e4m3), ref);
        }
        std::printf("| %s | %zu | %s | %s | %s | %.3g | %.3g | %.3f | %.3g | %.3g | %.3f |\n",
                    outliers ? "keys with 3 channels 20x" : "N(0,1)", d, b ? "bf16" : "fp32",
                    b ? "-" : fmt(def.rel()).c_str(), b ? fmt(def.rel()).c_str() : "-", i8.rel(),
                    q8.rel(), i8.rel() / q8.rel(), f8.rel(), e4.rel(), f8.rel() / e4.rel());
      }
    }
  }
  return 0;
}
