#include <mha/mha.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <mha/isa.hpp>
#include <sstream>
#include <string>

#include "dispatch/cpu_features.hpp"
#include "dispatch/dispatch.hpp"
#include "gemm/kernels.hpp"
#include "reshape/kernels.hpp"
#include "softmax/kernels.hpp"

TEST_CASE("the ISA forced through MHA_ISA is the one in use", "[dispatch]") {
  const char* forced = std::getenv("MHA_ISA");
  REQUIRE(forced != nullptr);
  CHECK(std::string(mha_isa_name()) == forced);
  CHECK(mha::isa_name(mha::current_isa()) == forced);
  CHECK(mha_isa_supported(forced) == 1);
}

TEST_CASE("AVX512_BF16 is detected as the kernel reports it, and only with AVX-512", "[dispatch]") {
  const mha::detail::CpuFeatures& f = mha::detail::cpu_features();
  CHECK((!f.avx512_bf16 || f.avx512));
  // Linux reads the same CPUID bit for /proc/cpuinfo's "avx512_bf16" flag.
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("flags", 0) != 0) {
  }
  if (line.rfind("flags", 0) != 0) {
    WARN("skipped: no x86 flags line in /proc/cpuinfo");
    return;
  }
  std::istringstream flags(line.substr(line.find(':') + 1));
  bool listed = false;
  for (std::string flag; flags >> flag;) listed = listed || flag == "avx512_bf16";
  CHECK(f.avx512_bf16 == (listed && f.avx512));
}

TEST_CASE("FEAT_BF16 is detected as the kernel reports it, and only with NEON", "[dispatch]") {
  const mha::detail::CpuFeatures& f = mha::detail::cpu_features();
  CHECK((!f.neon_bf16 || f.neon));
  // Linux lists HWCAP2_BF16 as "bf16" on /proc/cpuinfo's "Features" line
  // (qemu-user 7.2 shows the host's file instead, which has none).
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line) && line.rfind("Features", 0) != 0) {
  }
  if (line.rfind("Features", 0) != 0) {
    WARN("skipped: no aarch64 Features line in /proc/cpuinfo");
    return;
  }
  std::istringstream features(line.substr(line.find(':') + 1));
  bool listed = false;
  for (std::string feature; features >> feature;) listed = listed || feature == "bf16";
  CHECK(f.neon_bf16 == listed);
}

TEST_CASE("scalar is always supported and every supported ISA has full tables", "[dispatch]") {
  CHECK(mha::isa_supported(mha::Isa::scalar));
  for (mha::Isa isa : mha::supported_isas()) {
    INFO(mha::isa_name(isa));
    CHECK(mha::detail::isa_runnable(isa));
    // Each operation's table for the ISA is its own, not scalar's stand-in.
    const bool own = isa == mha::Isa::scalar;
    CHECK((&mha::detail::softmax_kernels(isa) == &mha::detail::softmax_kernels_scalar) == own);
    CHECK((&mha::detail::reshape_kernels(isa) == &mha::detail::reshape_kernels_scalar) == own);
    CHECK((mha::detail::gemm_kernels(isa).ukernel == mha::detail::gemm_kernels_scalar.ukernel) ==
          own);
  }
}

TEST_CASE("set_isa switches and restores, and rejects what cannot run", "[dispatch]") {
  const mha::Isa before = mha::current_isa();
  {
    mha::ScopedIsa scoped(mha::Isa::scalar);
    CHECK(std::string(mha_isa_name()) == "scalar");
  }
  CHECK(mha::current_isa() == before);
  CHECK(mha_set_isa("sse9") == MHA_UNSUPPORTED);
  CHECK(std::string(mha_last_error()).find("sse9") != std::string::npos);
#if defined(__x86_64__)
  CHECK(mha_isa_supported("neon") == 0);
  CHECK(mha_set_isa("neon") == MHA_UNSUPPORTED);
#else
  CHECK(mha_isa_supported("avx2") == 0);
  CHECK(mha_set_isa("avx2") == MHA_UNSUPPORTED);
#endif
  CHECK(mha::current_isa() == before);
  CHECK(mha_isa_supported(nullptr) == 0);
}

TEST_CASE("cache sizes parse as sysfs and MHA_L2_CACHE_BYTES write them", "[dispatch]") {
  using mha::detail::parse_cache_size;
  CHECK(parse_cache_size("48K") == 48 * 1024);
  CHECK(parse_cache_size("2048K") == 2 * 1024 * 1024);
  CHECK(parse_cache_size("2M") == 2 * 1024 * 1024);
  CHECK(parse_cache_size("2m") == 2 * 1024 * 1024);
  CHECK(parse_cache_size("1048576") == 1024 * 1024);
  for (const char* bad :
       {"", "K", "0", "0K", "-1M", "2Q", "2 M", "2MB", " 2M", "99999999999999M"}) {
    INFO("'" << bad << "'");
    CHECK(parse_cache_size(bad) == 0);
  }
  CHECK(parse_cache_size(nullptr) == 0);
  // This process started without a bad override (that case runs in a process
  // of its own: dispatch_bad_cache_override).
  CHECK(mha::detail::cpu_caches().error.empty());
}
