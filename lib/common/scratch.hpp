// Thread-local scratch memory for the hot paths: grown on first use to the
// largest size asked for, then reused, so steady-state calls never allocate.
// Page faults are expensive in VMs (a 280 ms call measured at 950 ms when
// glibc returned freed blocks to the kernel and they were touched again), so
// scratch is never shrunk or freed before the thread exits.
#pragma once

#include <cstddef>

namespace mha::detail {

// Independent buffers per thread. A caller holds one slot while it runs code
// that may take another: the attention driver holds kAttention and calls GEMM,
// which packs into kGemmA/kGemmB.
enum class ScratchSlot : unsigned {
  kGemmA,
  kGemmB,
  kGemmTransposedB,
  kBf16AsFp32A,   // a bf16 GEMM's operands converted to fp32 for sgemm, which
  kBf16AsFp32B,   // then packs into the kGemm slots
  kBf16RoundedA,  // an fp32 A rounded to bf16 for a packed bf16 B
  kAttention,
  kAttentionTask,
  kCount
};

// 64-byte-aligned scratch of at least `floats` floats for this thread and slot.
// The pointer stays valid until the same thread asks the same slot for more.
float* thread_scratch(ScratchSlot slot, std::size_t floats);

}  // namespace mha::detail
