// The kernel set the library runs on. Each operation has a small table of
// function pointers per ISA (lib/<op>/kernels.hpp), defined in that ISA's own
// translation unit; a KernelSet groups one ISA's tables. The choice is made
// once (CPU detection + MHA_ISA) and read with one atomic load afterwards.
#pragma once

#include <mha/isa.hpp>

namespace mha::detail {

struct GemmKernels;
struct SoftmaxKernels;
struct ReshapeKernels;

struct KernelSet {
  Isa isa;
  const GemmKernels* gemm;
  const SoftmaxKernels* softmax;
  const ReshapeKernels* reshape;
};

// The set for the current ISA. Throws mha::Error(MHA_UNSUPPORTED) if MHA_ISA
// asked for an ISA that cannot run here.
const KernelSet& kernels();
// The set for a given ISA, or nullptr if this build or CPU cannot run it.
const KernelSet* kernels_for(Isa isa) noexcept;

}  // namespace mha::detail
