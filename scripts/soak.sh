#!/usr/bin/env bash
# Soak test (docs/fault.md, "Long runs"): gossipd must not grow while it trains. Runs (a) one
# gossipd alone (a one-node topology) for --one-iterations and (b) a connected pair on loopback
# (`gossip-topo generate complete --nodes 2`) for --pair-iterations, samples every process's VmRSS
# from /proc/PID/status every --interval seconds, prints the samples and a summary per process,
# and fails when a process's VmRSS after the warm-up (--warmup seconds; a run that ends sooner:
# past a third of it) grows by more than
# --max-growth-mb, or when a run does not exit 0.
#
#   scripts/soak.sh [--build DIR] [--out DIR] [--quick] [--one-iterations N] [--pair-iterations N]
#                   [--warmup S] [--interval S] [--max-growth-mb MB] [--base-port P]
#
# The lone node listens on P, the pair on P+1 and P+2 (default: three free ports found at random).
#
# Defaults: 10^7 iterations alone, 10^6 in the pair (minutes: a few at ~200 000 iterations/s
# alone, ~5 000 in the pair on loopback), warm-up 5 s, a sample per second, 4 MB allowed.
# --quick: 4·10^6 and 10^5 iterations (about 30 s), the ctest `integration` case; a per-iteration
# leak of a few hundred bytes still shows as tens of MB. The training config is
# examples/synthetic-logistic-train.pbtxt with checkpoints and evaluation off and a metrics line per
# 10^5 iterations, so that files do not grow either; node output goes to OUT (default
# build/soak). Exit: 0 flat, 1 grown or a run failed, 2 bad arguments.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

die_usage() {
  echo "soak.sh: $1 (see --help)" >&2
  exit 2
}
whole() { [[ $2 =~ ^[0-9]{1,12}$ ]] || die_usage "$1: '$2' is not a whole number (at most 12 digits)"; }
count() { whole "$1" "$2"; ((10#$2 >= 1)) || die_usage "$1: must be at least 1"; }
positive() { [[ $2 =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)$ ]] && awk "BEGIN{exit !($2 > 0)}" ||
  die_usage "$1: '$2' is not a positive number"; }

build="$root/build"
out=""
one_iterations=10000000
pair_iterations=1000000
warmup_s=5
interval_s=1
max_growth_mb=4
base_port=0
while (($#)); do
  case $1 in
    -h | --help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --quick) one_iterations=4000000; pair_iterations=100000; shift; continue ;;
    --build | --out | --one-iterations | --pair-iterations | --warmup | --interval | \
      --max-growth-mb | --base-port) ;;
    *) die_usage "unknown argument '$1'" ;;
  esac
  (($# >= 2)) || die_usage "$1 needs a value"
  [[ -n $2 ]] || die_usage "$1: empty value"
  case $1 in
    --build) build=$2 ;;
    --out) out=$2 ;;
    --one-iterations) count "$1" "$2"; one_iterations=$((10#$2)) ;;
    --pair-iterations) count "$1" "$2"; pair_iterations=$((10#$2)) ;;
    --warmup) positive "$1" "$2"; warmup_s=$2 ;;
    --interval) positive "$1" "$2"; interval_s=$2 ;;
    --max-growth-mb) positive "$1" "$2"; max_growth_mb=$2 ;;
    --base-port)
      whole "$1" "$2"
      ((10#$2 <= 65533)) || die_usage "--base-port: $2 is not in 0..65533"
      base_port=$((10#$2)) ;;
  esac
  shift 2
done
out=${out:-$build/soak}
gossipd="$build/daemon/gossipd"
topo_bin="$build/topology/gossip-topo"
for b in "$gossipd" "$topo_bin"; do
  [[ -x $b ]] || { echo "soak.sh: $b not built (cmake --build $build --target gossipd gossip-topo)" >&2; exit 2; }
done

if ((base_port == 0)); then
  # Three free loopback ports in a row (one node alone, then the pair), outside the kernel's
  # ephemeral range; another process may still take one first (the run then fails, naming it).
  base_port=$(python3 - <<'EOF'
import random, socket
lo, hi = (int(v) for v in open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
def free(p):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
            return True
        except OSError:
            return False
for _ in range(200):
    p = random.randrange(20000, 60000)
    if not (p + 2 < lo or p > hi):
        continue
    if all(free(p + k) for k in range(3)):
        print(p)
        break
else:
    print(0)
EOF
)
  ((base_port > 0)) || { echo "soak.sh: no three free loopback ports in a row found" >&2; exit 1; }
fi
rm -rf "$out"
mkdir -p "$out"
# One training config per run: each run owns its checkpoint directory.
for run in one pair; do
  sed "s#run/checkpoints#$out/$run-checkpoints#" "$root/examples/synthetic-logistic-train.pbtxt" \
    >"$out/$run.train.pbtxt"
done
printf 'name: "one"\nnode { id: 0 address: "127.0.0.1:%d" }\n' "$base_port" >"$out/one.pbtxt"
"$topo_bin" generate complete --nodes 2 --base-port $((base_port + 1)) >"$out/pair.pbtxt"

pids=()
cleanup() {
  local p
  for p in ${pids[@]+"${pids[@]}"}; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status" 2>/dev/null || true; }

# start RUN NODE ITERATIONS: node NODE of OUT/RUN.pbtxt in the background (log: OUT/RUNNODE.log);
# its pid goes to pids.
start() {
  "$gossipd" run "$out/$1.pbtxt" --node "$2" --config "$out/$1.train.pbtxt" --insecure \
    --iterations "$3" --set checkpoint.every=0 --set eval_every=0 --set metrics_every=100000 \
    >"$out/$1$2.log" 2>&1 &
  pids+=($!)
}

# watch KEY LABEL PID...: samples each pid's VmRSS until all have exited (into OUT/KEY.rss: seconds,
# then kB per pid), prints them, checks each pid's growth after the warm-up and its exit status
# (node k's log: OUT/KEYk.log). Returns 1 on failure.
watch() {
  local key=$1 name=$2
  shift 2
  local -a watched=("$@")
  local t0 now alive p r line samples="$out/$key.rss"
  t0=$(date +%s.%N)
  : >"$samples"
  while :; do
    alive=0
    now=$(date +%s.%N)
    line=$(awk -v a="$now" -v b="$t0" 'BEGIN{printf "%.1f", a - b}')
    for p in "${watched[@]}"; do
      r=$(rss_kb "$p")
      [[ -n $r ]] && alive=1
      line+=" ${r:--}"
    done
    ((alive)) || break
    echo "$line" >>"$samples"
    sleep "$interval_s"
  done
  local seconds rc=0 status k
  seconds=$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN{printf "%.1f", a - b}')
  echo "== $name: VmRSS (kB) of node ${!watched[*]} every ${interval_s} s =="
  awk 'NR == 1 || NR % 10 == 0 {print "  " $0} END {print "  " $0}' "$samples"
  for k in "${!watched[@]}"; do
    status=0
    wait "${watched[$k]}" || status=$?
    if ((status != 0)); then
      echo "soak.sh: $name node $k exited $status (log: $out/$key$k.log)" >&2
      rc=1
    fi
    # Column k+2: this process. Baseline: the first sample at or after the warm-up.
    awk -v col=$((k + 2)) -v warm="$warmup_s" -v limit="$max_growth_mb" -v name="$name" \
      -v node="$k" -v secs="$seconds" '
      $col != "-" { t[++n] = $1; v[n] = $col; if (first == "") first = $col }
      END {
        # The baseline: the first sample at or after the warm-up; a run that ended sooner (a fast
        # CPU) takes its first sample past a third of the run, when it has three or more.
        start = 0
        for (i = 1; i <= n && !start; ++i) if (t[i] >= warm) start = i
        if (!start && n >= 3) for (i = 1; i <= n && !start; ++i) if (t[i] >= t[n] / 3) start = i
        if (!start) { printf "soak.sh: %s node %s: %d samples, none after the %s s warm-up\n", name, node, n, warm > "/dev/stderr"; exit 1 }
        base = v[start]; max = base; last = v[n]
        for (i = start; i <= n; ++i) if (v[i] > max) max = v[i]
        growth = (max - base) / 1024
        printf "%s node %s: %.1f s, VmRSS %.1f MB at start, %.1f MB after warm-up, %.1f MB at the end, max %.1f MB: growth %.2f MB (limit %s MB) %s\n",
          name, node, secs, first / 1024, base / 1024, last / 1024, max / 1024, growth, limit, growth <= limit ? "flat" : "GROWN"
        exit growth <= limit ? 0 : 1
      }' "$samples" || rc=1
  done
  return $rc
}

failed=0
start one 0 "$one_iterations"
watch one "one node, $one_iterations iterations" "${pids[0]}" || failed=1
grep -h "finished" "$out/one0.log" | tail -1 || true

start pair 0 "$pair_iterations"
start pair 1 "$pair_iterations"
watch pair "connected pair, $pair_iterations iterations" "${pids[1]}" "${pids[2]}" || failed=1
grep -h "finished" "$out/pair0.log" | tail -1 || true
pids=()
exit $failed
