#!/usr/bin/env bash
# Symbol hygiene of the built library (registered as the ctest "symbols").
#
#   check_symbols.sh <nm> <libmha.so> <file listing mha_objects' object files>
#
# 1. Exports: every dynamic symbol libmha.so defines must be public API: a C
#    function mha_* or a C++ entity in namespace mha (including its vtables
#    and typeinfo), but nothing in mha::detail (internal by contract).
# 2. Linker merging (xsimd#633, numpy#25274): a weak (COMDAT) function defined in a
#    per-ISA object (file name *_avx2.*, *_avx512.*, *_neon.*, or one of the
#    extensions of cmake/MhaIsa.cmake: *_avx2_widen.*, *_avx512_widen.*,
#    *_avx512_bf16.*, *_avx512_vbmi_bf16.*, *_amx_bf16.*, *_amx_int8.*,
#    *_avx512_vnni.*, *_avx_vnni.*, *_avx_vnni_evex.* (AVX512_VNNI's flags),
#    *_neon_bf16.*, *_neon_bfmmla.*, *_neon_dot.*,
#    *_neon_i8mm.*) must not also be defined in an object built for another
#    ISA or extension, or for the baseline. The linker keeps one copy of such a function for the
#    whole library, so an inline helper compiled with -mavx512f could end up
#    being what baseline code calls before the CPU check. Per-ISA code must
#    use its own namespace or internal linkage. (*_scalar.* objects are
#    compiled with baseline flags and count as baseline.)
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 <nm> <libmha.so> <object list file>" >&2
  exit 2
fi
nm=$1 lib=$2 objlist=$3
command -v c++filt >/dev/null || { echo "check_symbols: c++filt not found" >&2; exit 2; }
fail=0

# --- 1. exported symbols ---------------------------------------------------
# posix format: "<name> <type> [<value> <size>]", names still mangled.
mapfile -t exported < <("$nm" -D --defined-only --format=posix "$lib" | awk '{print $1}')
[[ ${#exported[@]} -gt 0 ]] || { echo "check_symbols: $lib exports nothing" >&2; exit 1; }
mapfile -t demangled < <(printf '%s\n' "${exported[@]}" | c++filt)
bad=()
for i in "${!exported[@]}"; do
  m=${exported[$i]} d=${demangled[$i]}
  if [[ $m == "$d" ]]; then
    # C symbol (or a linker-defined one such as _init/_fini, never present
    # with --defined-only on this toolchain).
    [[ $m == mha_* ]] || bad+=("$d")
  else
    # Strip "vtable for ", "typeinfo for ", "typeinfo name for ", etc.
    core=${d#vtable for }
    core=${core#typeinfo name for }
    core=${core#typeinfo for }
    core=${core#non-virtual thunk to }
    if [[ $core == mha::detail::* || $core != mha::* ]]; then
      bad+=("$d")
    fi
  fi
done
if [[ ${#bad[@]} -gt 0 ]]; then
  echo "FAIL: $lib exports ${#bad[@]} symbol(s) outside the public API (mha_*, mha::):"
  printf '  %s\n' "${bad[@]}"
  fail=1
else
  echo "ok: ${#exported[@]} exported symbols, all mha_* or mha::"
fi

# --- 2. weak functions shared between ISA objects --------------------------
isa_of() {
  case $(basename "$1") in
    *_avx512.*) echo avx512 ;;
    *_avx512_widen.*) echo avx512_widen ;;
    *_avx512_bf16.*) echo avx512_bf16 ;;
    *_avx512_vbmi_bf16.*) echo avx512_vbmi_bf16 ;;
    *_amx_bf16.*) echo amx_bf16 ;;
    *_amx_int8.*) echo amx_int8 ;;
    *_avx512_vnni.* | *_avx_vnni_evex.*) echo avx512_vnni ;;
    *_avx_vnni.*) echo avx_vnni ;;
    *_avx2.*) echo avx2 ;;
    *_avx2_widen.*) echo avx2_widen ;;
    *_neon.*) echo neon ;;
    *_neon_bf16.*) echo neon_bf16 ;;
    *_neon_bfmmla.*) echo neon_bfmmla ;;
    *_neon_dot.*) echo neon_dot ;;
    *_neon_i8mm.*) echo neon_i8mm ;;
    *) echo baseline ;;
  esac
}
# "<isa> <type> <symbol>" for every defined global/weak symbol of every object.
table=$(
  while IFS= read -r obj; do
    [[ -n $obj ]] || continue
    [[ -f $obj ]] || { echo "check_symbols: missing object $obj" >&2; exit 2; }
    isa=$(isa_of "$obj")
    "$nm" --defined-only --format=posix "$obj" | awk -v isa="$isa" '$2 ~ /^[WVTDBRu]$/ {print isa, $2, $1}'
  done < "$objlist"
)
nisa=$(printf '%s\n' "$table" | awk '$1 != "baseline"' | wc -l)
# A weak code symbol (W) from a per-ISA object that is defined under another ISA.
shared=$(printf '%s\n' "$table" | awk '
  { defs[$3] = defs[$3] " " $1; if ($2 == "W" && $1 != "baseline") weak[$3] = 1 }
  END {
    for (s in weak) {
      n = split(defs[s], isas, " "); first = isas[1]
      for (i = 2; i <= n; ++i) if (isas[i] != first) { print s " (" defs[s] " )"; break }
    }
  }' | sort)
if [[ -n $shared ]]; then
  echo "FAIL: weak functions defined in per-ISA objects and also in objects of another ISA"
  echo "      (the linker keeps one copy for all; give per-ISA code its own namespace):"
  printf '%s\n' "$shared" | while IFS= read -r line; do
    echo "  $(c++filt <<<"${line%% (*}")  (${line#* (}"
  done
  fail=1
else
  echo "ok: no weak function shared between ISA objects ($nisa symbols in per-ISA objects)"
fi
exit $fail
