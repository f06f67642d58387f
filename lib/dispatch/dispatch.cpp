#include "dispatch/dispatch.hpp"

#include <atomic>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/error.hpp"
#include "dispatch/cpu_features.hpp"

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

// Whether this build compiled the ISA's translation units (cmake/MhaIsa.cmake).
bool built(Isa isa) noexcept {
  switch (isa) {
    case Isa::scalar:
      return true;
#if MHA_BUILD_AVX2
    case Isa::avx2:
      return true;
#endif
#if MHA_BUILD_AVX512
    case Isa::avx512:
      return true;
#endif
#if MHA_BUILD_NEON
    case Isa::neon:
      return true;
#endif
    default:
      return false;
  }
}

Isa best_isa() noexcept {
  for (Isa isa : kPreference) {
    if (isa_runnable(isa)) return isa;
  }
  return Isa::scalar;
}

// The automatic choice, or the one MHA_ISA forces. No ISA + a message when
// MHA_ISA is unusable: every computing call then fails with that message,
// rather than silently running on another ISA than the one asked for.
struct Initial {
  std::optional<Isa> isa;
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
    r.isa = best_isa();
    return r;
  }
  auto isa = parse_isa(env);
  if (isa && isa_runnable(*isa)) {
    r.isa = isa;
    return r;
  }
  // Appended piece by piece: GCC 12 warns (-Wrestrict, a false positive)
  // on a chain of string + const char*.
  r.error = "MHA_ISA=";
  r.error += env;
  if (!isa) {
    r.error += " is not an ISA name (expected scalar, avx2, avx512 or neon)";
    return r;
  }
  r.error += built(*isa) ? " is not supported by this CPU/OS" : " is not supported by this build";
  r.error += "; supported here:";
  for (Isa s : supported_isas()) {
    r.error += ' ';
    r.error += isa_name(s);
  }
  return r;
}

const Initial& initial() {
  static const Initial i = initial_choice();
  return i;
}

// The ISA mha_set_isa forced, plus one; 0 when none is forced.
std::atomic<unsigned> forced{0};

}  // namespace

bool isa_runnable(Isa isa) noexcept {
  return built(isa) && cpu_has(isa);
}

Isa active_isa() {
  if (const unsigned f = forced.load(std::memory_order_acquire)) return static_cast<Isa>(f - 1);
  const Initial& i = initial();
  if (!i.isa) fail(MHA_UNSUPPORTED, i.error);
  return *i.isa;
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
  return detail::active_isa();
}

bool isa_supported(Isa isa) noexcept {
  return detail::isa_runnable(isa);
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> r;
  for (Isa isa : detail::kPreference) {
    if (isa_supported(isa)) r.push_back(isa);
  }
  return r;
}

void set_isa(std::optional<Isa> isa) {
  Isa chosen = detail::best_isa();
  if (isa) {
    if (!detail::isa_runnable(*isa)) {
      detail::fail(MHA_UNSUPPORTED, "ISA ", isa_name(*isa), " is not supported by this ",
                   detail::built(*isa) ? "CPU/OS" : "build");
    }
    chosen = *isa;
  }
  detail::forced.store(static_cast<unsigned>(chosen) + 1, std::memory_order_release);
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
