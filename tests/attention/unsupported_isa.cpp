// Run with MHA_ISA naming an ISA this CPU or build cannot run (set by CTest):
// creating an attention object must fail with MHA_UNSUPPORTED and a message
// naming that ISA, not crash. A process of its own, because the ISA choice is
// made once, at first use, from the environment.
#include <mha/mha.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mha/attention.hpp>
#include <vector>

int main() {
  const char* forced = std::getenv("MHA_ISA");
  if (forced == nullptr || mha_isa_supported(forced)) {
    std::printf("FAIL: MHA_ISA must name an unsupported ISA, got %s\n", forced ? forced : "none");
    return 1;
  }
  const mha_config config{4, 1, 0, 0, 0};
  const std::vector<float> w(16, 0.f);
  const mha_weights weights{w.data(), w.data(), w.data(), w.data(),
                            nullptr,  nullptr,  nullptr,  nullptr};
  mha_attention* attn = nullptr;
  const mha_status status = mha_attention_create(&config, &weights, &attn);
  const char* message = mha_last_error();
  std::printf("status %d, handle %p, message: %s\n", static_cast<int>(status),
              static_cast<void*>(attn), message);
  bool ok = status == MHA_UNSUPPORTED && attn == nullptr && std::strstr(message, forced) != nullptr;
  try {
    mha::MultiheadAttention cpp(config, weights);
    ok = false;
  } catch (const mha::Error& e) {
    ok = ok && e.status() == MHA_UNSUPPORTED;
  }
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
