#!/usr/bin/env bash
# Runs each libFuzzer target of gossip_net for SECONDS (default 60), one after the other.
#
#   scripts/fuzz.sh [SECONDS]
#
# Builds the targets with clang (-fsanitize=fuzzer,address,undefined) in build-fuzz/ (override
# with GOSSIP_FUZZ_BUILD_DIR), starts each from the committed seed corpus net/fuzz/corpus/<target>/
# (copied, so the committed corpus only changes when you choose to merge), and prints the number
# of executions. Crash reproducers land in build-fuzz/fuzz-artifacts/<target>/; commit a fixed one
# into the corpus so the normal test run replays it. Exits non-zero if any target crashed.
set -euo pipefail

seconds=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GOSSIP_FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=(frame_decoder hello)

if [[ ! -f $build/build.ninja ]]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang \
    -DGOSSIP_FUZZ=ON -DGOSSIP_CUDA=OFF -DGOSSIP_BUILD_BENCH=OFF >/dev/null
fi
cmake --build "$build" -j2 --target "${targets[@]/#/fuzz_}"

status=0
for t in "${targets[@]}"; do
  work=$build/fuzz-corpus/$t
  artifacts=$build/fuzz-artifacts/$t
  mkdir -p "$work" "$artifacts"
  cp -n "$root/net/fuzz/corpus/$t/"* "$work/" 2>/dev/null || true
  log=$build/fuzz-$t.log
  echo "fuzz: $t for ${seconds}s (log $log)"
  if "$build/net/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$artifacts/" -print_final_stats=1 "$work" >"$log" 2>&1; then
    result=ok
  else
    result="CRASH (see $artifacts)"
    status=1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  echo "fuzz: $t: $result, $execs executions"
done
exit $status
