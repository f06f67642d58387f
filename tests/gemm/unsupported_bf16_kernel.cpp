// Run with MHA_BF16_KERNEL naming a kernel set this CPU or build cannot run
// (set by CTest): every bf16 computation must fail with MHA_UNSUPPORTED and
// a message naming it, writing nothing, while fp32 goes on. A process of its
// own, because the choice is read once, at first use, from the environment.
#include <mha/mha.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main() {
  const char* forced = std::getenv("MHA_BF16_KERNEL");
  if (forced == nullptr || *forced == '\0') {
    std::printf("FAIL: MHA_BF16_KERNEL must name a kernel set, got none\n");
    return 1;
  }
  bool ok = true;
  const auto expect = [&](bool cond, const char* what) {
    if (!cond) std::printf("FAIL: %s\n", what);
    ok = ok && cond;
  };
  const std::vector<std::uint16_t> a(4, 0x3f80), b(4, 0x3f80);
  std::vector<float> c(4, 7.f);
  mha_status status =
      mha_gemm_bf16('N', 'N', 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2);
  std::string message = mha_last_error();
  std::printf("gemm: status %d, message: %s\n", static_cast<int>(status), message.c_str());
  expect(status == MHA_UNSUPPORTED, "mha_gemm_bf16 returns MHA_UNSUPPORTED");
  expect(message.find(forced) != std::string::npos, "the message names the kernel set");
  expect(c == std::vector<float>(4, 7.f), "C is untouched");
  expect(std::strcmp(mha_kernel_name(MHA_BF16), "invalid") == 0, "mha_kernel_name is invalid");

  const mha_config config{4, 1, 0, 0, 0};
  const std::vector<float> w(16, 0.f);
  const mha_weights weights{w.data(), w.data(), w.data(), w.data(),
                            nullptr,  nullptr,  nullptr,  nullptr};
  const mha_attention_options bf16{sizeof(mha_attention_options), MHA_BF16, MHA_WEIGHTS_COMPUTE, 0};
  mha_attention* attn = nullptr;
  status = mha_attention_create_ex(&config, &weights, &bf16, &attn);
  std::printf("bf16 create: status %d, message: %s\n", static_cast<int>(status), mha_last_error());
  expect(status == MHA_UNSUPPORTED && attn == nullptr, "a bf16 object is not created");
  status = mha_attention_create(&config, &weights, &attn);
  expect(status == MHA_OK && attn != nullptr, "an fp32 object is");
  mha_attention_destroy(attn);
  std::printf("%s\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
