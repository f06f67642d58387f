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

int main(int argc, char* argv[]) {
  if (const char* want = std::getenv("MHA_ISA"); want != nullptr && *want != '\0') {
    auto isa = mha::parse_isa(want);
    if (!isa || !mha::isa_supported(*isa)) {
      std::printf("SKIPPED: MHA_ISA=%s is not supported on this CPU/build\n", want);
      return 77;
    }
  }
  if (const char* want = std::getenv("MHA_BF16_KERNEL"); want != nullptr && *want != '\0') {
    if (mha::detail::gemm_bf16_kernels_named(want) == nullptr) {
      std::printf("SKIPPED: MHA_BF16_KERNEL=%s is not supported on this CPU/build\n", want);
      return 77;
    }
  }
  if (const char* want = std::getenv("MHA_I8_KERNEL"); want != nullptr && *want != '\0') {
    if (mha::detail::gemm_i8_kernels_named(want) == nullptr) {
      std::printf("SKIPPED: MHA_I8_KERNEL=%s is not supported on this CPU/build\n", want);
      return 77;
    }
  }
  return Catch::Session().run(argc, argv);
}
