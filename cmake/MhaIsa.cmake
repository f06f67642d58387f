# Which ISA kernels this build compiles, and the flags for each.
#
# Habit: one ISA per translation unit. Only the files passed to
# mha_isa_sources() get ISA flags; everything else compiles for the baseline of
# the target (x86-64 / armv8-a), so nothing that runs before CPU detection can
# contain an instruction the CPU lacks.
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  set(MHA_ARCH_X86 ON)
  set(MHA_ISAS scalar avx2 avx512)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  set(MHA_ARCH_ARM64 ON)
  set(MHA_ISAS scalar neon)
else()
  set(MHA_ISAS scalar)
endif()

set(MHA_ISA_FLAGS_scalar "")
set(MHA_ISA_FLAGS_avx2 -mavx2 -mfma)
set(MHA_ISA_FLAGS_avx512 -mavx512f -mavx512dq -mavx512bw -mavx512vl -mavx2 -mfma)
set(MHA_ISA_FLAGS_neon "")  # NEON is part of the armv8-a baseline
# Extensions: kernel sets beyond an ISA's own kernels, compiled when the base
# ISA is and chosen by the operation from the CPU's feature bits (they are
# not ISAs of their own: MHA_ISA never names them). Each is named as its
# kernel set, e.g. the bf16 GEMM's "avx512_bf16" in mha_kernel_name.
set(MHA_ISA_FLAGS_avx512_bf16 ${MHA_ISA_FLAGS_avx512} -mavx512bf16)
set(MHA_EXTENSION_BASE_avx512_bf16 avx512)
# AMX-BF16's tiles, with AVX512_BF16's conversions (every AMX CPU has it).
set(MHA_ISA_FLAGS_amx_bf16 ${MHA_ISA_FLAGS_avx512_bf16} -mamx-tile -mamx-bf16)
set(MHA_EXTENSION_BASE_amx_bf16 avx512)
# vdpbf16ps with AVX512_VBMI's byte tables (the quantized KV codes to bf16).
set(MHA_ISA_FLAGS_avx512_vbmi_bf16 ${MHA_ISA_FLAGS_avx512_bf16} -mavx512vbmi)
set(MHA_EXTENSION_BASE_avx512_vbmi_bf16 avx512)
# bf16 widened to fp32 in registers: the base ISA's instructions only.
set(MHA_ISA_FLAGS_avx512_widen ${MHA_ISA_FLAGS_avx512})
set(MHA_EXTENSION_BASE_avx512_widen avx512)
set(MHA_ISA_FLAGS_avx2_widen ${MHA_ISA_FLAGS_avx2})
set(MHA_EXTENSION_BASE_avx2_widen avx2)
# The int8 GEMM's sets (gemm_i8.hpp): vpdpbusd; vpmaddwd on AVX2 alone;
# Arm's SDOT (FEAT_DotProd, optional from Armv8.2-A).
set(MHA_ISA_FLAGS_avx512_vnni ${MHA_ISA_FLAGS_avx512} -mavx512vnni)
set(MHA_EXTENSION_BASE_avx512_vnni avx512)
# AMX-INT8's tiles, on AVX512_VNNI's operands (every AMX CPU has it).
set(MHA_ISA_FLAGS_amx_int8 ${MHA_ISA_FLAGS_avx512_vnni} -mamx-tile -mamx-int8)
set(MHA_EXTENSION_BASE_amx_int8 avx512)
set(MHA_ISA_FLAGS_avx2_i8 ${MHA_ISA_FLAGS_avx2})
set(MHA_EXTENSION_BASE_avx2_i8 avx2)
# AVX-VNNI: vpdpbusd in VEX on ymm, for AVX2 CPUs without AVX-512.
set(MHA_ISA_FLAGS_avx_vnni ${MHA_ISA_FLAGS_avx2} -mavxvnni)
set(MHA_EXTENSION_BASE_avx_vnni avx2)
set(MHA_ISA_FLAGS_neon_dot -march=armv8.2-a+dotprod)
set(MHA_EXTENSION_BASE_neon_dot neon)
# SMMLA (FEAT_I8MM: Armv8.6-A, optional from Armv8.2-A).
set(MHA_ISA_FLAGS_neon_i8mm -march=armv8.2-a+i8mm)
set(MHA_EXTENSION_BASE_neon_i8mm neon)
# FEAT_BF16 (BFDOT, BFCVTN): Armv8.6-A, optional from Armv8.2-A.
set(MHA_ISA_FLAGS_neon_bf16 -march=armv8.2-a+bf16)
set(MHA_EXTENSION_BASE_neon_bf16 neon)
# BFMMLA is FEAT_BF16's too (HWCAP2_BF16), with the same flags.
set(MHA_ISA_FLAGS_neon_bfmmla ${MHA_ISA_FLAGS_neon_bf16})
set(MHA_EXTENSION_BASE_neon_bfmmla neon)

# mha_isa_sources(<target> <isa> <file>...): add the files to <target>, compiled
# with that ISA's flags, with MHA_ISA_<isa>=1 defined. Files for ISAs this build
# does not target are ignored, so callers can list every ISA unconditionally.
function(mha_isa_sources target isa)
  if(NOT isa IN_LIST MHA_ISAS)
    return()
  endif()
  target_sources(${target} PRIVATE ${ARGN})
  string(TOUPPER ${isa} ISA)
  set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES
    COMPILE_OPTIONS "${MHA_ISA_FLAGS_${isa}}"
    COMPILE_DEFINITIONS "MHA_ISA_${ISA}=1")
endfunction()

# mha_isa_extension_sources(<target> <extension> <file>...): add the files with
# the extension's flags and MHA_ISA_<EXTENSION>=1, when this build targets the
# extension's base ISA (the library then sees MHA_BUILD_<EXTENSION>=1).
function(mha_isa_extension_sources target extension)
  if(NOT MHA_EXTENSION_BASE_${extension} IN_LIST MHA_ISAS)
    return()
  endif()
  target_sources(${target} PRIVATE ${ARGN})
  string(TOUPPER ${extension} EXT)
  target_compile_definitions(${target} PRIVATE MHA_BUILD_${EXT}=1)
  set_source_files_properties(${ARGN} TARGET_DIRECTORY ${target} PROPERTIES
    COMPILE_OPTIONS "${MHA_ISA_FLAGS_${extension}}"
    COMPILE_DEFINITIONS "MHA_ISA_${EXT}=1")
endfunction()
