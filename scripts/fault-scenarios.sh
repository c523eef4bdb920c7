#!/usr/bin/env bash
# Runs gossipd's fault-tolerance scenarios (issue 8; docs/fault.md, "Fault scenarios") N times in a
# row and prints one summary line per run and a final table. Exits non-zero if any run failed.
#
#   scripts/fault-scenarios.sh [--runs N] [--build DIR] [--seed-base S] [--keep] [SCENARIO ...]
#
#   --runs N        runs per scenario (default 20); run k uses fault-plan seed S + k
#   --build DIR     build directory (default build); gossipd, gossip-faultproxy and gossip-topo are
#                   built there first if missing (or if --rebuild is given)
#   --rebuild       run ninja for those targets even if they exist
#   --seed-base S   first seed (default 1)
#   --keep          keep every run's files (a failing run's files are always kept)
#   SCENARIO        failstop kill1 kill2 gossip rejoin netns-delay-loss netns-partition netns-join (also:
#                   selftest, undisturbed); default: all but failstop, selftest and undisturbed
#
# A skipped run (exit 77: no network namespaces here) counts as skipped, not failed. The
# undisturbed reference runs and the Fashion-MNIST subset are cached in DIR/fault-scenarios-cache.
set -euo pipefail

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }

repo=$(cd "$(dirname "$0")/.." && pwd)
runs=20
build="$repo/build"
seed_base=1
keep=()
rebuild=0
scenarios=()
while (($#)); do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --runs) runs=${2:?--runs needs a number}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --seed-base) seed_base=${2:?--seed-base needs a number}; shift 2 ;;
    --keep) keep=(--keep); shift ;;
    --rebuild) rebuild=1; shift ;;
    -*) echo "fault-scenarios.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) scenarios+=("$1"); shift ;;
  esac
done
[[ $runs =~ ^[1-9][0-9]*$ ]] || { echo "fault-scenarios.sh: --runs must be a positive integer" >&2; exit 2; }
[[ $seed_base =~ ^[0-9]+$ ]] || { echo "fault-scenarios.sh: --seed-base must be an integer" >&2; exit 2; }
((${#scenarios[@]})) || scenarios=(kill1 kill2 gossip rejoin netns-delay-loss netns-partition)
for s in "${scenarios[@]}"; do
  case $s in
    selftest | failstop | undisturbed | kill1 | kill2 | gossip | rejoin | netns-delay-loss | netns-partition | netns-join) ;;
    *) echo "fault-scenarios.sh: unknown scenario '$s' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $build = /* ]] || build="$PWD/$build"

if ((rebuild)) || [[ ! -x $build/daemon/gossipd || ! -x $build/tests/fault/gossip-faultproxy ]]; then
  if [[ ! -f $build/build.ninja ]]; then
    cmake -S "$repo" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  fi
  ninja -C "$build" -j2 gossipd gossip-faultproxy gossip-topo
fi

cache="$build/fault-scenarios-cache"
mkdir -p "$cache"
results=$(mktemp /tmp/gossip-fault-scenarios-XXXXXX.jsonl)
trap 'rm -f "$results"' EXIT

for s in "${scenarios[@]}"; do
  for ((k = 0; k < runs; k++)); do
    seed=$((seed_base + k))
    echo "=== $s run $((k + 1))/$runs (seed $seed)"
    rc=0
    /usr/bin/python3 "$repo/tests/fault/scenarios/fault_scenarios.py" "$s" --build "$build" --seed "$seed" \
      --cache-dir "$cache" --summary-json "$results" "${keep[@]}" || rc=$?
    if ((rc != 0 && rc != 1 && rc != 77)); then
      # The driver itself broke (usage, crash): record it as a failed run.
      printf '{"scenario":"%s","seed":%d,"result":"FAIL","reason":"driver exit %d"}\n' "$s" "$seed" "$rc" >>"$results"
    fi
  done
done

/usr/bin/python3 - "$results" "${scenarios[@]}" <<'PY'
import json, sys
path, order = sys.argv[1], sys.argv[2:]
runs = [json.loads(l) for l in open(path) if l.strip()]
def mean(vals):
    vals = [v for v in vals if v is not None]
    return f"{sum(vals) / len(vals):.0f}" if vals else "-"
print()
print(f"{'scenario':<18} {'runs':>4} {'passed':>6} {'skipped':>7} {'mean-detect-ms':>14} {'mean-reweight-ms':>16} {'mean-rejoin-ms':>14}")
failed = 0
for s in order:
    rs = [r for r in runs if r["scenario"] == s]
    ok = [r for r in rs if r["result"] == "PASS"]
    skipped = [r for r in rs if r["result"] == "SKIP"]
    failed += len(rs) - len(ok) - len(skipped)
    print(f"{s:<18} {len(rs):>4} {len(ok):>6} {len(skipped):>7} {mean([r.get('detect_ms') for r in ok]):>14} "
          f"{mean([r.get('reweight_ms') for r in ok]):>16} {mean([r.get('rejoin_ms') for r in ok]):>14}")
for r in runs:
    if r["result"] == "FAIL":
        print(f"FAILED: {r['scenario']} seed {r['seed']}: {r.get('reason', '')[:300]}")
sys.exit(1 if failed else 0)
PY
