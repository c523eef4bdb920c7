#!/usr/bin/env bash
# Style check (run by scripts/test.sh): every C++ and CUDA source of the project must be formatted
# as .clang-format says (Google style, 100 columns), and docs/design.md §2's module table must match
# the CMake arrows (scripts/check-design.py). Prints the offending lines and exits 1 when one is
# not; `scripts/lint.sh --fix` formats the sources in place instead.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "lint: clang-format is missing (scripts/setup.sh installs it)" >&2; exit 1; }
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  mapfile -t files < <(git ls-files -- '*.cc' '*.h' '*.cu' '*.cuh')
else
  mapfile -t files < <(find . -path ./build\* -prune -o \( -name '*.cc' -o -name '*.h' -o -name '*.cu' \
    -o -name '*.cuh' \) -type f -print | sed 's|^\./||')
fi
if [[ "${1:-}" == --fix ]]; then
  clang-format -i "${files[@]}"
  exit 0
fi
echo "== lint: clang-format --dry-run -Werror over ${#files[@]} files =="
clang-format --dry-run -Werror "${files[@]}"
# docs/design.md §2's module table against the CMake files' target_link_libraries.
echo "== lint: scripts/check-design.py =="
python3 scripts/check-design.py
echo "== lint: clean =="
