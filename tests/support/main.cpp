// Catch2 runner shared by every test binary. When MHA_ISA names an ISA,
// MHA_BF16_KERNEL a bf16 kernel set or MHA_I8_KERNEL an int8 one that this
// CPU (or build) cannot run, the
// whole binary reports itself skipped with exit code 77, which CTest's
// SKIP_RETURN_CODE turns into "Skipped".
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <mha/isa.hpp>

#include "gemm/gemm_bf16.hpp"
#include "gemm/gemm_i8.hpp"

namespace {

// Whether the environment variable names what `runs` says this CPU or build
// cannot run (saying so); an unset or empty one names nothing.
template <class Runs>
bool names_unsupported(const char* variable, Runs runs) {
  const char* want = std::getenv(variable);
  if (want == nullptr || *want == '\0' || runs(want)) return false;
  std::printf("SKIPPED: %s=%s is not supported on this CPU/build\n", variable, want);
  return true;
}

}  // namespace

int main(int argc, char* argv[]) {
  namespace d = mha::detail;
  const auto isa_runs = [](const char* want) {
    const auto isa = mha::parse_isa(want);
    return isa && mha::isa_supported(*isa);
  };
  const auto bf16_runs = [](const char* want) { return d::gemm_bf16_kernels_named(want); };
  const auto i8_runs = [](const char* want) { return d::gemm_i8_kernels_named(want); };
  if (names_unsupported("MHA_ISA", isa_runs) || names_unsupported("MHA_BF16_KERNEL", bf16_runs) ||
      names_unsupported("MHA_I8_KERNEL", i8_runs)) {
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
