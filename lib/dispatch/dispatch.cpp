#include "dispatch/dispatch.hpp"

#include <atomic>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "dispatch/cpu_features.hpp"
#include "gemm/kernels.hpp"
#include "reshape/kernels.hpp"
#include "softmax/kernels.hpp"

namespace mha::detail {
namespace {

constexpr Isa kPreference[] = {Isa::avx512, Isa::avx2, Isa::neon, Isa::scalar};

bool cpu_has(Isa isa) noexcept {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::scalar:
      return true;
    case Isa::avx2:
      return f.avx2_fma;
    case Isa::avx512:
      return f.avx512;
    case Isa::neon:
      return f.neon;
  }
  return false;
}

// An ISA's GEMM table fitted to this CPU's caches, once per ISA.
GemmKernels fitted(const GemmKernels& g) noexcept {
  const CacheSizes& c = cpu_caches();
  return fit_to_caches(g, c.l1d, c.l2);
}

const KernelSet* built_set(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar: {
      static const GemmKernels gemm = fitted(gemm_kernels_scalar);
      static const KernelSet s{Isa::scalar, &gemm, &softmax_kernels_scalar,
                               &reshape_kernels_scalar};
      return &s;
    }
#if MHA_BUILD_AVX2
    case Isa::avx2: {
      static const GemmKernels gemm = fitted(gemm_kernels_avx2);
      static const KernelSet s{Isa::avx2, &gemm, &softmax_kernels_avx2, &reshape_kernels_avx2};
      return &s;
    }
#endif
#if MHA_BUILD_AVX512
    case Isa::avx512: {
      static const GemmKernels gemm = fitted(gemm_kernels_avx512);
      static const KernelSet s{Isa::avx512, &gemm, &softmax_kernels_avx512,
                               &reshape_kernels_avx512};
      return &s;
    }
#endif
#if MHA_BUILD_NEON
    case Isa::neon: {
      static const GemmKernels gemm = fitted(gemm_kernels_neon);
      static const KernelSet s{Isa::neon, &gemm, &softmax_kernels_neon, &reshape_kernels_neon};
      return &s;
    }
#endif
    default:
      return nullptr;
  }
}

const KernelSet* best_set() noexcept {
  for (Isa isa : kPreference) {
    if (const KernelSet* s = kernels_for(isa)) return s;
  }
  return nullptr;  // unreachable: scalar is always built
}

// The automatic choice, or the one MHA_ISA forces. nullptr + message when
// MHA_ISA is unusable: every computing call then fails with that message,
// rather than silently running on another ISA than the one asked for.
struct Initial {
  const KernelSet* set = nullptr;
  std::string error;
};

Initial initial_choice() {
  Initial r;
  if (const std::string& bad = cpu_caches().error; !bad.empty()) {
    r.error = bad;
    return r;
  }
  const char* env = std::getenv("MHA_ISA");
  if (env == nullptr || *env == '\0') {
    r.set = best_set();
    return r;
  }
  auto isa = parse_isa(env);
  if (!isa) {
    r.error = std::string("MHA_ISA=") + env +
              " is not an ISA name (expected scalar, avx2, avx512 or neon)";
  } else if (!(r.set = kernels_for(*isa))) {
    r.error = std::string("MHA_ISA=") + env + " is not supported by this " +
              (built_set(*isa) ? "CPU/OS" : "build") + "; supported here:";
    for (Isa s : supported_isas()) r.error += std::string(" ") + std::string(isa_name(s));
  }
  return r;
}

const Initial& initial() {
  static const Initial i = initial_choice();
  return i;
}

std::atomic<const KernelSet*> forced{nullptr};

}  // namespace

const KernelSet* kernels_for(Isa isa) noexcept {
  return cpu_has(isa) ? built_set(isa) : nullptr;
}

const KernelSet& kernels() {
  if (const KernelSet* s = forced.load(std::memory_order_acquire)) return *s;
  const Initial& i = initial();
  if (i.set == nullptr) fail(MHA_UNSUPPORTED, i.error);
  return *i.set;
}

}  // namespace mha::detail

namespace mha {

std::string_view isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar:
      return "scalar";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::neon:
      return "neon";
  }
  return "unknown";
}

std::optional<Isa> parse_isa(std::string_view name) noexcept {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512, Isa::neon}) {
    if (name == isa_name(isa)) return isa;
  }
  return std::nullopt;
}

Isa current_isa() {
  return detail::kernels().isa;
}

bool isa_supported(Isa isa) noexcept {
  return detail::kernels_for(isa) != nullptr;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> r;
  for (Isa isa : detail::kPreference) {
    if (isa_supported(isa)) r.push_back(isa);
  }
  return r;
}

void set_isa(std::optional<Isa> isa) {
  const detail::KernelSet* s = nullptr;
  if (isa) {
    s = detail::kernels_for(*isa);
    if (s == nullptr) {
      detail::fail(MHA_UNSUPPORTED, "ISA ", isa_name(*isa), " is not supported by this ",
                   detail::built_set(*isa) ? "CPU/OS" : "build");
    }
  } else {
    s = detail::best_set();
  }
  detail::forced.store(s, std::memory_order_release);
}

}  // namespace mha

extern "C" {

MHA_API const char* mha_isa_name(void) {
  try {
    return mha::isa_name(mha::current_isa()).data();
  } catch (...) {
    return "invalid";
  }
}

MHA_API int mha_isa_supported(const char* isa) {
  if (isa == nullptr) return 0;
  auto parsed = mha::parse_isa(isa);
  return parsed && mha::isa_supported(*parsed) ? 1 : 0;
}

MHA_API mha_status mha_set_isa(const char* isa) {
  return mha::detail::guarded([&] {
    if (isa == nullptr || *isa == '\0') {
      mha::set_isa(std::nullopt);
      return;
    }
    auto parsed = mha::parse_isa(isa);
    if (!parsed) {
      mha::detail::fail(MHA_UNSUPPORTED, "mha_set_isa: '", isa,
                        "' is not an ISA name (expected scalar, avx2, avx512 or neon)");
    }
    mha::set_isa(*parsed);
  });
}

}  // extern "C"
