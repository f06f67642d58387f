// The int8 GEMM's driver, packing, row quantization and scalar kernel set
// (gemm_i8.hpp); the vector sets are gemm_i8_<set>.cpp.
#include "gemm/gemm_i8.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "common/blocks.hpp"
#include "common/checked.hpp"
#include "common/error.hpp"
#include "common/parallel.hpp"
#include "common/scratch.hpp"
#include "dispatch/cpu_features.hpp"
#include "gemm/gemm.hpp"

namespace mha::detail {
namespace {

constexpr std::size_t kAlign = 64;

// The scalar set: one element at a time, in int64 (the vector sets' int32
// sums are exact, so they agree).
void ukernel_scalar(std::size_t kq, const std::uint8_t* a, std::size_t lda, const std::int8_t* b,
                    const std::int32_t* start, const float* sa, const float* sb, const float* bias,
                    float* c, std::size_t ldc, std::size_t m, std::size_t n) {
  constexpr std::size_t kNR = 4;
  for (std::size_t i = 0; i < m; ++i) {
    const auto* ai = reinterpret_cast<const std::int8_t*>(a + i * lda);
    for (std::size_t j = 0; j < n; ++j) {
      std::int64_t acc = start[j];
      for (std::size_t p = 0; p < kq; ++p) {
        for (std::size_t r = 0; r < 4; ++r) acc += ai[4 * p + r] * b[(p * kNR + j) * 4 + r];
      }
      const float y = static_cast<float>(static_cast<std::int32_t>(acc)) * (sa[i] * sb[j]);
      c[i * ldc + j] = bias != nullptr ? y + bias[j] : y;
    }
  }
}

// The scalar set's grouped kernel (I8Strip's arithmetic, one element at a
// time in int64): every set's emulation.
void ukernel_groups_scalar(const I8Strip& b, const std::uint8_t* a, std::size_t lda,
                           const float* sa, const float* bias, float* c, std::size_t ldc,
                           std::size_t m, std::size_t n) {
  constexpr std::size_t kNR = 4;
  const auto b_code = [&](std::size_t p, std::size_t j, std::size_t r) -> int {
    if (!b.int4) return b.codes[(p * kNR + j) * 4 + r];
    const auto byte = static_cast<std::uint8_t>(b.codes[(p / 2 * kNR + j) * 4 + r]);
    return (p % 2 != 0 ? byte >> 4 : byte & 15) - 8;
  };
  for (std::size_t i = 0; i < m; ++i) {
    const auto* ai = reinterpret_cast<const std::int8_t*>(a + i * lda);
    for (std::size_t j = 0; j < n; ++j) {
      float t = 0.0f;
      for (std::size_t g = 0, p0 = 0; p0 < b.kq; ++g, p0 += b.group_kq) {
        std::int64_t acc = b.start[g * b.stride + j];
        if (b.zeros != nullptr) {
          acc -=
              static_cast<std::int64_t>(b.zeros[g * b.stride + j]) * group_sum(a + i * lda, b, g);
        }
        for (std::size_t p = p0; p < p0 + b.group_kq && p < b.kq; ++p) {
          for (std::size_t r = 0; r < 4; ++r) acc += ai[4 * p + r] * b_code(p, j, r);
        }
        t = std::fma(static_cast<float>(static_cast<std::int32_t>(acc)), b.scales[g * b.stride + j],
                     t);
      }
      const float y = t * sa[i];
      c[i * ldc + j] = bias != nullptr ? y + bias[j] : y;
    }
  }
}

}  // namespace

void quantize_i8_scalar_offset(std::size_t k, const float* a, int a_offset, void* codes,
                               float* scale) {
  float amax = 0.0f;
  bool finite = true;
  for (std::size_t p = 0; p < k; ++p) {
    finite = finite && std::isfinite(a[p]);
    amax = std::max(amax, std::fabs(a[p]));
  }
  *scale = i8_row_scale(amax, finite);
  quantize_i8_from(1, a_offset, 0, k, a, *scale, codes);
}

void quantize_i8_scalar(std::size_t k, const float* a, void* codes, float* scale) {
  quantize_i8_scalar_offset(k, a, 0, codes, scale);
}

const GemmI8Kernels gemm_i8_kernels_scalar = {
    "scalar", 4, 4, 4, 1, 0, ukernel_scalar, quantize_i8_scalar, ukernel_groups_scalar};

namespace {

std::vector<const GemmI8Kernels*> runnable_sets() {
  [[maybe_unused]] const CpuFeatures& f = cpu_features();
  std::vector<const GemmI8Kernels*> r{&gemm_i8_kernels_scalar};
#if MHA_BUILD_AVX2_I8
  if (f.avx2_fma) r.push_back(&gemm_i8_kernels_avx2);
#endif
#if MHA_BUILD_AVX_VNNI
  if (f.avx_vnni) r.push_back(&gemm_i8_kernels_avx_vnni);
#endif
#if MHA_BUILD_AVX512_VNNI
  if (f.avx512_vnni) {
    r.push_back(&gemm_i8_kernels_avx512_vnni);
    r.push_back(&gemm_i8_kernels_avx_vnni_evex);
  }
#endif
#if MHA_BUILD_AMX_INT8
  if (f.amx_int8) r.push_back(&gemm_i8_kernels_amx_int8);
#endif
#if MHA_BUILD_NEON_DOT
  if (f.neon_dot) r.push_back(&gemm_i8_kernels_neon_dot);
#endif
#if MHA_BUILD_NEON_I8MM
  if (f.neon_i8mm) r.push_back(&gemm_i8_kernels_neon_i8mm);
#endif
  r.push_back(&gemm_i8_kernels_amx_emulated);
  return r;
}

}  // namespace

const std::vector<const GemmI8Kernels*>& gemm_i8_kernel_sets() {
  static const std::vector<const GemmI8Kernels*> sets = runnable_sets();
  return sets;
}

const GemmI8Kernels* gemm_i8_kernels_named(std::string_view name) {
  for (const GemmI8Kernels* g : gemm_i8_kernel_sets()) {
    if (name == g->name) return g;
  }
  return nullptr;
}

const GemmI8Kernels& gemm_i8_kernels(Isa isa) {
  if (const char* env = std::getenv("MHA_I8_KERNEL"); env != nullptr && *env != '\0') {
    if (const GemmI8Kernels* g = gemm_i8_kernels_named(env)) return *g;
    std::string sets;
    for (const GemmI8Kernels* g : gemm_i8_kernel_sets()) sets += std::string(" ") + g->name;
    fail(MHA_UNSUPPORTED, "MHA_I8_KERNEL=", env,
         " is not an int8 kernel set that this build and CPU run; supported here:", sets);
  }
  [[maybe_unused]] const CpuFeatures& f = cpu_features();
  switch (isa) {
#if MHA_BUILD_AVX512_VNNI
    case Isa::avx512:
#if MHA_BUILD_AMX_INT8
      if (f.amx_int8) return gemm_i8_kernels_amx_int8;
#endif
      if (f.avx512_vnni) return gemm_i8_kernels_avx512_vnni;
      [[fallthrough]];
#endif
#if MHA_BUILD_AVX2_I8
    case Isa::avx2:
#if MHA_BUILD_AVX_VNNI
      if (f.avx_vnni) return gemm_i8_kernels_avx_vnni;
#endif
      return gemm_i8_kernels_avx2;
#endif
#if MHA_BUILD_NEON_DOT
    case Isa::neon:
#if MHA_BUILD_NEON_I8MM
      if (f.neon_i8mm) return gemm_i8_kernels_neon_i8mm;
#endif
      if (f.neon_dot) return gemm_i8_kernels_neon_dot;
      break;
#endif
    default:
      break;
  }
  return gemm_i8_kernels_scalar;
}

float i8_row_scale(float amax, bool finite) {
  return finite ? amax / 127.0f : std::numeric_limits<float>::quiet_NaN();
}

void quantize_i8_from(std::size_t a_bytes, int a_offset, std::size_t p0, std::size_t k,
                      const float* a, float s, void* codes) {
  const bool zero = !(s > 0.0f);  // 0, or NaN
  const auto put = [&](std::size_t p, int q) {
    if (a_bytes == 2) {
      static_cast<std::int16_t*>(codes)[p] = static_cast<std::int16_t>(q + a_offset);
    } else {
      static_cast<std::uint8_t*>(codes)[p] = static_cast<std::uint8_t>(q + a_offset);
    }
  };
  for (std::size_t p = p0; p < k; ++p) {
    put(p, zero ? 0 : static_cast<int>(std::clamp(std::nearbyint(a[p] / s), -127.0f, 127.0f)));
  }
  for (std::size_t p = k; p < round_up(k, 8); ++p) put(p, 0);
}

namespace {

// The sections of a packed B: codes, then start, scales and (uint4) zeros
// per group and column.
struct I8Layout {
  std::size_t kq, group_kq, groups, strips, cols, strip_bytes, start_at, scales_at, zeros_at, total;
};
I8Layout i8_layout(const GemmI8Kernels& g, std::size_t k, std::size_t n, std::size_t group,
                   QuantCodes type, const char* what) {
  check_arg(k <= kI8MaxK, what, ": expected at most ", kI8MaxK,
            " input features for int8 activations (exact int32 sums), got ", k);
  I8Layout l{};
  l.kq = ceil_div(k, 4);
  l.group_kq = group == 0 || group >= k ? std::max<std::size_t>(l.kq, 1) : group / 4;
  l.groups = std::max<std::size_t>(ceil_div(l.kq, l.group_kq), 1);
  l.cols = checked_round_up(n, g.nr, what);
  l.strips = l.cols / g.nr;
  // An even number of k steps (int4: a byte holds two; int8: SMMLA reads
  // two at a time), the padding step zero.
  l.strip_bytes = ceil_div(l.kq, 2) * (type != QuantCodes::int8 ? 1 : 2) * g.nr * 4;
  const std::size_t section =
      checked_mul(l.groups, round_up(checked_mul(l.cols, 4, what), kAlign), what);
  l.start_at = checked_round_up(checked_mul(l.strips, l.strip_bytes, what), kAlign, what);
  l.scales_at = checked_add(l.start_at, section, what);
  l.zeros_at = checked_add(l.scales_at, section, what);
  l.total = type == QuantCodes::uint4 ? checked_add(l.zeros_at, section, what) : l.zeros_at;
  return l;
}

}  // namespace

PackedI8B PackedI8B::cols(std::size_t n0, std::size_t n1) const {
  PackedI8B r = *this;
  r.codes = codes + n0 / g->nr * strip_stride;
  r.start = start + n0;
  r.scales = scales + n0;
  if (zeros != nullptr) r.zeros = zeros + n0;
  r.n = n1 - n0;
  return r;
}

std::size_t packed_i8_b_bytes(const GemmI8Kernels& g, std::size_t k, std::size_t n,
                              std::size_t group, QuantCodes type, const char* what) {
  return i8_layout(g, k, n, group, type, what).total;
}

PackedI8B pack_i8_b(const GemmI8Kernels& g, std::size_t k, std::size_t n, std::size_t group,
                    QuantCodes type, const std::int8_t* w, std::size_t ldw, const float* scales,
                    const float* zeros, void* dst) {
  const I8Layout l = i8_layout(g, k, n, group, type, "int8 weights");
  const bool int4 = type != QuantCodes::int8, uint4 = type == QuantCodes::uint4;
  auto* base = static_cast<unsigned char*>(dst);
  auto* codes = reinterpret_cast<std::int8_t*>(base);
  auto* start = reinterpret_cast<std::int32_t*>(base + l.start_at);
  auto* sc = reinterpret_cast<float*>(base + l.scales_at);
  auto* zp = uint4 ? reinterpret_cast<std::int32_t*>(base + l.zeros_at) : nullptr;
  const std::size_t nr = g.nr, stride = round_up(l.cols * 4, kAlign) / 4;
  const std::size_t steps = round_up(l.kq, 2);
  for (std::size_t col = 0; col < l.cols; ++col) {
    std::int8_t* strip = codes + col / nr * l.strip_bytes;
    const std::size_t j = col % nr;
    for (std::size_t q = 0; q < l.groups; ++q) {
      std::int32_t sum = 0;
      // The last group takes the padding step, whose int4 code 0 is
      // stored as 8. uint4 codes count as code - 8, their zero point as
      // z - 8: the same differences.
      const std::size_t p1 = q + 1 == l.groups ? steps : (q + 1) * l.group_kq;
      for (std::size_t p = q * l.group_kq * 4; p < p1 * 4; ++p) {
        const int v = col < n && p < k ? w[col * ldw + p] - (uint4 ? 8 : 0) : 0;
        sum += v;
        if (!int4) {
          strip[(p / g.k_group * nr + j) * g.k_group + p % g.k_group] = static_cast<std::int8_t>(v);
          continue;
        }
        auto& byte = reinterpret_cast<std::uint8_t&>(strip[(p / 8 * nr + j) * 4 + p % 4]);
        const unsigned nibble = static_cast<unsigned>(v + 8) & 15u;
        byte = static_cast<std::uint8_t>(p / 4 % 2 == 0 ? (byte & 0xF0u) | nibble
                                                        : (byte & 0x0Fu) | nibble << 4);
      }
      start[q * stride + col] = -g.a_offset * sum;
      sc[q * stride + col] = col < n ? scales[col * l.groups + q] : 0.0f;
      if (uint4) {
        zp[q * stride + col] =
            col < n ? static_cast<std::int32_t>(zeros[col * l.groups + q]) - 8 : 0;
      }
    }
  }
  PackedI8B r;
  r.g = &g;
  r.codes = codes;
  r.start = start;
  r.scales = sc;
  r.zeros = zp;
  r.k = k;
  r.n = n;
  r.strip_stride = l.strip_bytes;
  r.group_kq = l.group_kq;
  r.stride = stride;
  r.int4 = int4;
  r.grouped = int4 || l.groups > 1;
  return r;
}

void i8_group_sums(const GemmI8Kernels& g, std::size_t k, std::size_t group_k,
                   const std::uint8_t* codes, std::int32_t* sums) {
  // One loop per code storage, each a plain sum the compiler vectorizes.
  for (std::size_t p0 = 0, q = 0; p0 < k; p0 += group_k, ++q) {
    const std::size_t p1 = std::min(k, p0 + group_k);
    std::int32_t sum = 0;
    if (g.a_bytes == 2) {
      for (std::size_t p = p0; p < p1; ++p) {
        std::int16_t v;
        std::memcpy(&v, codes + 2 * p, 2);
        sum += v;
      }
    } else if (g.a_offset != 0) {
      for (std::size_t p = p0; p < p1; ++p) sum += codes[p];
    } else {
      for (std::size_t p = p0; p < p1; ++p) sum += static_cast<std::int8_t>(codes[p]);
    }
    sums[q] = sum - g.a_offset * static_cast<std::int32_t>(p1 - p0);
  }
}

namespace {

// Rows of A quantized: the codes, then (uint4 weights) the int32 group
// sums, the row pitch in bytes (64-byte aligned); where the scales start in
// the scratch.
std::size_t sums_at(const GemmI8Kernels& g, std::size_t k) {
  return round_up(k, 8) * g.a_bytes;
}
std::size_t code_pitch(const PackedI8B& b) {
  const std::size_t groups = b.zeros != nullptr ? ceil_div(ceil_div(b.k, 4), b.group_kq) : 0;
  return round_up(sums_at(*b.g, b.k) + 4 * groups, kAlign);
}
// Floats of the codes: whole blocks of mr rows, and a tile row's 64 bytes
// to spare, which the AMX set's tile loads read past the last code
// (i8_amx.hpp); the scales follow.
std::size_t codes_floats(const PackedI8B& b, std::size_t m) {
  const char* what = "int8 activations";
  const std::size_t rows = checked_round_up(m, b.g->mr, what);
  return ceil_div(checked_add(checked_mul(rows, code_pitch(b), what), kAlign, what), 4);
}
std::size_t scratch_floats(const PackedI8B& b, std::size_t m) {
  return checked_add(codes_floats(b, m), m, "int8 activations");
}

// Rows per block whose codes stay in L2 while each B strip passes over them
// (256 KiB, the smallest L2 of the CPUs measured, at k 2048).
constexpr std::size_t kBlockBytes = 256 * 1024;

}  // namespace

void reserve_gemm_i8(std::size_t m, const PackedI8B& b) {
  if (m > 0 && b.n > 0) {
    reserve_gathered_a(m, b.k, b.perm);
    thread_scratch(ScratchSlot::kGemmI8A, scratch_floats(b, m));
  }
}

void gemm_i8(std::size_t m, const float* a_in, std::size_t lda_in, const PackedI8B& b, float* c,
             std::size_t ldc, const float* bias) {
  const GemmI8Kernels& g = *b.g;
  const std::size_t n = b.n, k = b.k, kq = round_up(k, 4) / 4;
  if (m == 0 || n == 0) return;
  std::size_t lda;
  const float* a = gathered_a(m, k, a_in, lda_in, b.perm, &lda);
  const std::size_t pitch = code_pitch(b), sums = sums_at(g, k);
  float* scratch = thread_scratch(ScratchSlot::kGemmI8A, scratch_floats(b, m));
  auto* codes = reinterpret_cast<std::uint8_t*>(scratch);
  float* sa = scratch + codes_floats(b, m);
  // A quarter of an fp32 multiply-add's time per int8 one (vpdpbusd: 64 per
  // instruction against 16 FMAs).
  const std::size_t threads = call_threads(m, n, k, 0.25);
  constexpr std::size_t kRowsPerTask = 16;
  parallel_for(ceil_div(m, kRowsPerTask), threads, [&](std::size_t t) {
    for (std::size_t i = t * kRowsPerTask; i < std::min(m, (t + 1) * kRowsPerTask); ++i) {
      g.quantize(k, a + i * lda, codes + i * pitch, sa + i);
      if (b.zeros != nullptr) {
        i8_group_sums(g, k, b.group_kq * 4, codes + i * pitch,
                      reinterpret_cast<std::int32_t*>(codes + i * pitch + sums));
      }
    }
  });
  const std::size_t mc = std::max(g.mr, kBlockBytes / pitch / g.mr * g.mr);
  run_gemm_blocks(
      g.mr, g.nr, m, n, threads,
      [&](std::size_t i0, std::size_t j0, std::size_t rows, std::size_t cols) {
        for (std::size_t ib = i0; ib < i0 + rows; ib += mc) {
          const std::size_t ie = std::min(i0 + rows, ib + mc);
          for (std::size_t j = j0; j < j0 + cols; j += g.nr) {
            const std::size_t nb = std::min(g.nr, j0 + cols - j);
            const std::int8_t* strip = b.codes + j / g.nr * b.strip_stride;
            const float* bj = bias != nullptr ? bias + j : nullptr;
            const I8Strip groups{
                strip,      b.start + j, b.scales + j, kq,
                b.group_kq, b.stride,    b.int4,       b.zeros != nullptr ? b.zeros + j : nullptr,
                sums};
            for (std::size_t i = ib; i < ie; i += g.mr) {
              const std::size_t mb = std::min(g.mr, ie - i);
              if (b.grouped) {
                g.ukernel_groups(groups, codes + i * pitch, pitch, sa + i, bj, c + i * ldc + j, ldc,
                                 mb, nb);
              } else {
                g.ukernel(kq, codes + i * pitch, pitch, strip, b.start + j, sa + i, b.scales + j,
                          bj, c + i * ldc + j, ldc, mb, nb);
              }
            }
          }
        }
      });
}

}  // namespace mha::detail
