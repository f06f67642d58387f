// The bf16 kernels of attention objects created in a scope: the CPU's own, or
// the bit-exact vdpbf16ps emulation forced on every ISA, so that the bf16
// attention core runs under every ISA, sanitizer and emulator.
#pragma once

#include "gemm/gemm_bf16.hpp"

namespace mha::test {

struct Bf16Kernels {
  explicit Bf16Kernels(bool emulated) : emulated_(emulated) {
    if (emulated)
      mha::detail::set_gemm_bf16_kernels_override(
          &mha::detail::gemm_bf16_kernels_emulated_vdpbf16ps);
  }
  ~Bf16Kernels() {
    if (emulated_) mha::detail::set_gemm_bf16_kernels_override(nullptr);
  }
  Bf16Kernels(const Bf16Kernels&) = delete;
  Bf16Kernels& operator=(const Bf16Kernels&) = delete;
  bool emulated_;
};

}  // namespace mha::test
