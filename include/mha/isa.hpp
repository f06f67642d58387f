// ISA selection. The library picks the best ISA once, at first use, from
// CPUID/XGETBV (x86) or the target (aarch64); MHA_ISA overrides it.
#pragma once

#include <mha/mha.h>

#include <cstddef>
#include <optional>
#include <string_view>
#include <vector>

namespace mha {

// The same spelling everywhere: enum, file suffixes, MHA_ISA, test names.
enum class Isa { scalar, avx2, avx512, neon };

MHA_API std::string_view isa_name(Isa isa) noexcept;
// Parses "scalar", "avx2", "avx512" or "neon"; nullopt for anything else.
MHA_API std::optional<Isa> parse_isa(std::string_view name) noexcept;
// The ISA calls use now. Throws mha::Error(MHA_UNSUPPORTED) if MHA_ISA names
// an ISA this build or CPU cannot run.
MHA_API Isa current_isa();
// Whether this build has kernels for `isa` and the CPU/OS can run them.
MHA_API bool isa_supported(Isa isa) noexcept;
// Every ISA this build and CPU can run, best first.
MHA_API std::vector<Isa> supported_isas();
// Forces `isa` (throws MHA_UNSUPPORTED if not supported); nullopt restores the
// automatic choice.
MHA_API void set_isa(std::optional<Isa> isa);

// Scoped override, for tests and benchmarks that sweep ISAs.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : previous_(current_isa()) { set_isa(isa); }
  ~ScopedIsa() { set_isa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

// Thread-count control; see mha_set_num_threads.
MHA_API void set_num_threads(std::size_t n) noexcept;
MHA_API std::size_t num_threads() noexcept;

}  // namespace mha
