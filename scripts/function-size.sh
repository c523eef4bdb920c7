#!/usr/bin/env bash
# Lists the product functions longer than a threshold (STYLE.md: a function fits a screen, ≈ 60
# lines; no function over ~120), measured by clang-tidy's readability-function-size (LineThreshold:
# the lines of the body, comments and blank lines included; a lambda is counted on its own and in
# the function around it). Reads the compile commands of a configured build (compile_commands.json,
# which the top-level CMakeLists.txt always exports). Slow: about 15 s per file, so it runs two
# files at a time and takes a file list.
#
#   scripts/function-size.sh                      every product .cc (not tests/, bench/, generated)
#   scripts/function-size.sh sim/main.cc ...      these files only
#   FUNCTION_LINES=120 scripts/function-size.sh   another threshold (default 80)
#   BUILD_DIR=build-x JOBS=4 scripts/function-size.sh
#
# Prints one line per function over the threshold, longest first: "LINES path:line function", then
# a count. A kernel unit compiled once per instruction-set level (gossip_isa_sources) is measured
# through its portable unit. CUDA (.cu) and the libFuzzer targets (net/fuzz/, GOSSIP_FUZZ only) are
# not in a CPU build's compile commands and are named as skipped. Exits 0 (a list, not a verdict),
# 2 when the build directory or clang-tidy is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
build=${BUILD_DIR:-build}
threshold=${FUNCTION_LINES:-80}
jobs=${JOBS:-2}
command -v clang-tidy >/dev/null || { echo "function-size: clang-tidy is missing" >&2; exit 2; }
[[ -f $build/compile_commands.json ]] || {
  echo "function-size: no $build/compile_commands.json: configure the build first (README)" >&2
  exit 2
}

if (($#)); then
  files=("$@")
else
  mapfile -t files < <(git ls-files -- '*.cc' | grep -v -e '^tests/' -e '^bench/' -e '\.pb\.cc$')
fi

# The unit clang-tidy compiles for each file: the file itself, or the portable unit that includes
# it (build/<folder>/isa/<stem>_portable.cc), or nothing.
mapfile -t db_files < <(/usr/bin/python3 -c '
import json, sys
for e in json.load(open(sys.argv[1])):
    print(e["file"])' "$build/compile_commands.json")
declare -A in_db=()
for f in "${db_files[@]}"; do in_db[$f]=1; done
units=()
skipped=()
for f in "${files[@]}"; do
  if [[ -n ${in_db[$root/$f]:-} ]]; then
    units+=("$f|$root/$f")
    continue
  fi
  stem=$(basename "${f%.*}")
  unit=$root/$build/$(dirname "$f" | cut -d/ -f1)/isa/${stem}_portable.cc
  if [[ -n ${in_db[$unit]:-} ]]; then
    units+=("$f|$unit")
  else
    skipped+=("$f")
  fi
done

# One file: clang-tidy with only readability-function-size, diagnostics restricted to the file.
measure() {
  local file=${1%%|*} unit=${1#*|}
  local filter
  filter=$(printf '%s' "$file" | sed 's/[.[\*^$()+?{}|]/\\&/g')
  clang-tidy -p "$BUILD" --quiet --header-filter="(^|/)$filter\$" \
    --checks='-*,readability-function-size' \
    --config="{CheckOptions: [{key: readability-function-size.LineThreshold, value: $THRESHOLD}]}" \
    "$unit" 2>/dev/null |
    awk -v file="$file" '
      /warning: function .* exceeds recommended size/ {
        split($0, a, ":"); line = a[2]
        match($0, /function .* exceeds/); name = substr($0, RSTART + 9, RLENGTH - 17)
        next
      }
      /note: [0-9]+ lines including whitespace and comments/ && name != "" {
        match($0, /note: [0-9]+/); n = substr($0, RSTART + 6, RLENGTH - 6)
        print n, file ":" line, name
        name = ""
      }' || true
}
export -f measure
export BUILD=$build THRESHOLD=$threshold

echo "== function-size: ${#units[@]} files, functions over $threshold lines (clang-tidy" \
  "readability-function-size, $jobs at a time) =="
if ((${#units[@]})); then
  printf '%s\n' "${units[@]}" | xargs -P "$jobs" -I{} bash -c 'measure "$1"' _ {} |
    sort -rn -k1,1 | awk '!seen[$2 " " $3]++' | tee /tmp/function-size.$$
  echo "== $(wc -l </tmp/function-size.$$) functions over $threshold lines =="
  rm -f /tmp/function-size.$$
fi
if ((${#skipped[@]})); then
  echo "== skipped (not in $build/compile_commands.json): ${skipped[*]} =="
fi
