#!/usr/bin/env bash
# Formatting of the C and C++ sources (registered as the ctest "format"):
# every file under the source directories must be what clang-format (with the
# tree's .clang-format) makes of it.
#
#   check_format.sh <clang-format> <source root>
set -euo pipefail

if [[ $# -ne 2 ]]; then
  echo "usage: $0 <clang-format> <source root>" >&2
  exit 2
fi
clang_format=$1 root=$2
cd "$root"
mapfile -t files < <(find include lib tests bench demo -type f \
  \( -name '*.c' -o -name '*.cpp' -o -name '*.h' -o -name '*.hpp' \) | sort)
[[ ${#files[@]} -gt 0 ]] || { echo "check_format: no sources under $root" >&2; exit 1; }
if ! "$clang_format" --dry-run --Werror "${files[@]}"; then
  echo "check_format: run '$clang_format -i' on the files above" >&2
  exit 1
fi
echo "check_format: ${#files[@]} files formatted ($("$clang_format" --version))"
