// Thread-local scratch memory for the hot paths: grown on first use to the
// largest size asked for, then reused, so steady-state calls never allocate.
// Page faults are expensive in VMs (a 280 ms call measured at 950 ms when
// glibc returned freed blocks to the kernel and they were touched again), so
// scratch is never shrunk or freed before the thread exits.
#pragma once

#include <cstddef>
#include <type_traits>

#include "common/aligned.hpp"
#include "common/checked.hpp"

namespace mha::detail {

// Independent buffers per thread. A caller holds one slot while it runs code
// that may take another: the attention driver holds kAttention and calls GEMM,
// which packs into kGemmA/kGemmB.
enum class ScratchSlot : unsigned {
  kGemmA,
  kGemmB,
  kGemmTransposedB,
  kGemmQuantB,     // a quantized B strip widened to fp32 (gemm_quant_b)
  kGemmI8A,        // an fp32 A quantized to int8 codes (gemm_i8)
  kGemmGatheredA,  // A's columns in a weight's input order (gemm_i8, gemm_quant_b)
  kBf16AsFp32A,    // a bf16 GEMM's operands converted to fp32 for sgemm, which
  kBf16AsFp32B,    // then packs into the kGemm slots
  kBf16RoundedA,   // an fp32 A rounded to bf16 for a packed bf16 B
  kAttention,
  kAttentionTask,
  kRagged,   // a ragged pass's per-sequence arrays (offsets, plan, K/V views)
  kCascade,  // a plan's shared chunks and their sequences
  kTree,     // a tree step's rows (their slots, indices, paths)
  kTreePaths,
  kProjection,  // a projection's own intermediates (MLA's heads before o_proj)
  kCount
};

// 64-byte-aligned scratch of at least `floats` floats for this thread and slot.
// The pointer stays valid until the same thread asks the same slot for more.
float* thread_scratch(ScratchSlot slot, std::size_t floats);

// thread_scratch as room for n objects of a trivial type (no constructor runs;
// the caller writes every element before reading it).
template <class T>
T* thread_scratch_array(ScratchSlot slot, std::size_t n) {
  static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T> &&
                alignof(T) <= 64);
  const std::size_t bytes = checked_mul(n, sizeof(T), "per-call arrays");
  return reinterpret_cast<T*>(thread_scratch(slot, ceil_div(bytes, sizeof(float))));
}

}  // namespace mha::detail
