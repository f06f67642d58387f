// Run with MHA_L2_CACHE_BYTES set to something that is not a size (set by
// CTest): a computing call must fail with MHA_UNSUPPORTED and a message
// naming the variable, not run on blocks fitted to a garbled size. A process
// of its own, because the caches are read once, at first use.
#include <mha/mha.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mha/gemm.hpp>

int main() {
  const char* value = std::getenv("MHA_L2_CACHE_BYTES");
  if (value == nullptr) {
    std::printf("FAIL: MHA_L2_CACHE_BYTES must be set\n");
    return 1;
  }
  float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1}, c[4] = {};
  const mha_status status = mha_sgemm('N', 'N', 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2);
  const char* message = mha_last_error();
  std::printf("MHA_L2_CACHE_BYTES=%s: status %d, message: %s\n", value, static_cast<int>(status),
              message);
  bool ok = status == MHA_UNSUPPORTED && std::strstr(message, "MHA_L2_CACHE_BYTES") != nullptr;
  try {
    mha::sgemm('N', 'N', 2, 2, 2, 1.f, a, 2, b, 2, 0.f, c, 2);
    ok = false;
  } catch (const mha::Error& e) {
    ok = ok && e.status() == MHA_UNSUPPORTED;
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
