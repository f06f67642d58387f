// The ISA the library runs on. The choice is made once (CPU detection +
// MHA_ISA) and read with one atomic load afterwards. Dispatch knows no
// operation: each operation maps an Isa to its own kernel table
// (lib/<op>/kernels.hpp), the way XNNPACK's *-config.c fill theirs.
#pragma once

#include <mha/isa.hpp>

namespace mha::detail {

// The ISA calls made now run on. Throws mha::Error(MHA_UNSUPPORTED) if
// MHA_ISA (or MHA_L2_CACHE_BYTES) asked for something that cannot run here.
Isa active_isa();
// Whether this build has kernels for `isa` and this CPU/OS can run them.
bool isa_runnable(Isa isa) noexcept;

}  // namespace mha::detail

namespace mha::detail {

// One operation's kernel tables by ISA, for an operation to fill once with
// the ISAs this build compiled (MHA_IF_BUILT_*: nullptr for the others).
template <class T>
struct IsaTables {
  const T* scalar;
  const T* avx2;
  const T* avx512;
  const T* neon;
  // The table of an ISA that can run here (isa_runnable).
  const T& operator()(Isa isa) const noexcept {
    const T* t = isa == Isa::avx2     ? avx2
                 : isa == Isa::avx512 ? avx512
                 : isa == Isa::neon   ? neon
                                      : scalar;
    return t != nullptr ? *t : *scalar;
  }
};

}  // namespace mha::detail

#if MHA_BUILD_AVX2
#define MHA_IF_BUILT_AVX2(table) (&(table))
#else
#define MHA_IF_BUILT_AVX2(table) nullptr
#endif
#if MHA_BUILD_AVX512
#define MHA_IF_BUILT_AVX512(table) (&(table))
#else
#define MHA_IF_BUILT_AVX512(table) nullptr
#endif
#if MHA_BUILD_NEON
#define MHA_IF_BUILT_NEON(table) (&(table))
#else
#define MHA_IF_BUILT_NEON(table) nullptr
#endif
