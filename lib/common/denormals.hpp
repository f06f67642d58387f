// Denormal results flushed for a scope: the attention core's tasks. On x86
// each denormal result costs Intel cores a microcode assist, and attention
// makes them where weights are tiny: ALiBi's far keys give P·V products
// below 2^-126, which made ALiBi cost 1.15-1.19x on a BERT s512 fp32 forward
// (AMX Xeon, 1 thread), 1.02-1.06x flushed. The core does not read operands
// as zero (DAZ): the e4m3 cache's codes widen through denormal bit patterns.
// The bf16 kernels flush anyway (AMX, vdpbf16ps), and amx_bf16's one-row
// path asks for DAZ too, to read bf16 operands as its tiles do. Elsewhere a
// no-op. Internal linkage, as per-ISA objects include it too
// (tests/tools/check_symbols.sh).
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace mha::detail {
namespace {

// MXCSR's flush-to-zero (denormal results) set on this thread, with
// `operands` its denormals-are-zero too, and MXCSR as it was restored at the
// end of the scope.
class DenormalsFlushed {
 public:
#if defined(__x86_64__) || defined(__i386__)
  explicit DenormalsFlushed(bool operands = false) noexcept : saved_(_mm_getcsr()) {
    _mm_setcsr(saved_ | kFtz | (operands ? kDaz : 0u));
  }
  ~DenormalsFlushed() {
    _mm_setcsr(saved_);
  }
#else
  explicit DenormalsFlushed(bool = false) noexcept {}
#endif
  DenormalsFlushed(const DenormalsFlushed&) = delete;
  DenormalsFlushed& operator=(const DenormalsFlushed&) = delete;

 private:
#if defined(__x86_64__) || defined(__i386__)
  static constexpr unsigned kFtz = 0x8000, kDaz = 0x0040;
  unsigned saved_;
#endif
};

}  // namespace
}  // namespace mha::detail
