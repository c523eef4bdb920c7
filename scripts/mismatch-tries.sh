#!/usr/bin/env bash
# A job whose nodes disagree on the model size, started again and again: how long each try takes to
# end and what the launcher says (docs/fault.md, "A configuration mismatch ends the job").
#
#   scripts/mismatch-tries.sh [--build DIR] [--tries N] [--nodes N] [--connect-ms MS]
#                             [--mode attach|hosts] [--keep]
#
# --mode attach (default): one `gossipd launch --attach-dir --trainer` of a ring of N nodes on
#   loopback; every trainer is tests/daemon/attach_trainer, node 2's builds an MLP with 20 hidden
#   units (262 parameters) where the others build 16 (210). The trainers start 0-1.5 s apart, in an
#   order that changes with the try, so that some attach after their neighbours refused each other.
# --mode hosts: gossipd's own model, two launches as on two hosts (`--host 127.0.0.1` runs every
#   node but node 2, `--host 127.0.0.2` runs node 2 with a training config of 20 hidden units); the
#   second starts 0-1.5 s after the first.
#
# timeouts.connect_ms is 120 s (--connect-ms), so a try that waited for it stands out. Each try
# prints its time, the launcher's exit code and its exit line's first failure; the script ends
# with "K of N tries ended in < 15 s with the cause on the launcher's output" and the times (min,
# median, max), and exits 1 unless every try did. Needs gossipd and attach_trainer built in DIR
# (default build): ninja -C build gossipd attach_trainer.
set -euo pipefail

build=build tries=20 nodes=8 connect_ms=120000 mode=attach keep=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --tries) tries=$2; shift 2 ;;
    --nodes) nodes=$2; shift 2 ;;
    --connect-ms) connect_ms=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "mismatch-tries.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $mode == attach || $mode == hosts ]] || { echo "--mode attach|hosts, not $mode" >&2; exit 2; }
((nodes >= 4)) || { echo "--nodes: at least 4 (node 2 and two neighbours of each side)" >&2; exit 2; }
build=$(cd "$build" && pwd)
gossipd=$build/daemon/gossipd trainer=$build/tests/daemon/attach_trainer
for b in "$gossipd" "$trainer"; do
  [[ -x $b ]] || { echo "missing $b (ninja -C $build gossipd attach_trainer)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/mismatch-tries.XXXXXX)
trap '[[ $keep == 1 ]] || rm -rf "$work"' EXIT
config() {  # config HIDDEN
  cat <<EOF
seed: 21
model { kind: MLP hidden: $1 }
data { dataset: SYNTHETIC_LOGISTIC num_examples: 1024 dim: 10 test_examples: 256 noise: 3 }
batch_size: 8
optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 }
iterations: 200
eval_every: 100
metrics_every: 10
checkpoint { every: 100 keep: 2 }
timeouts { connect_ms: $connect_ms deadline_ms: 20000 heartbeat_ms: 300 }
EOF
}
config 16 > "$work/train.pbtxt"
config 20 > "$work/train-other.pbtxt"

# A ring of `nodes` on ports from a base that changes per try; node 2 on 127.0.0.2 in hosts mode.
topology() {  # topology BASE_PORT
  echo 'name: "mismatch"'
  for ((i = 0; i < nodes; i++)); do
    local host=127.0.0.1
    [[ $mode == hosts && $i == 2 ]] && host=127.0.0.2
    echo "node { id: $i address: \"$host:$(($1 + i))\" }"
  done
  for ((i = 0; i < nodes; i++)); do echo "edge { from: $i to: $(((i + 1) % nodes)) }"; done
  echo 'weights: METROPOLIS_HASTINGS'
}

now() { date +%s.%N; }
launch() {  # launch DIR [ARGS...]: gossipd launch in DIR, output in DIR.out
  local dir=$1; shift
  timeout 300 "$gossipd" launch "$work/topo.pbtxt" --insecure --workdir "$dir" \
    --set checkpoint.dir="$dir/ckpt" "$@" > "$dir.out" 2>&1
}

times=() passed=0
for ((t = 1; t <= tries; t++)); do
  topology $((27000 + (t % 50) * 20)) > "$work/topo.pbtxt"
  run=$work/try-$t
  begin=$(now)
  if [[ $mode == attach ]]; then
    # Trainer k waits ((3k + t) mod 4) / 2 s: which nodes attach late changes with the try.
    delay="((GOSSIP_NODE_ID * 3 + $t) % 4 * 5)"
    cmd="sleep \$(( $delay / 10 )).\$(( $delay % 10 )); "
    cmd+="exec $trainer --config $work/train.pbtxt --node \$GOSSIP_NODE_ID "
    cmd+="--nodes \$GOSSIP_NUM_NODES \$( [ \$GOSSIP_NODE_ID = 2 ] && echo --set model.hidden=20 )"
    rc=0
    launch "$run" --config "$work/train.pbtxt" --attach-dir "$run-sock" --trainer "$cmd" || rc=$?
    outs=("$run.out")
  else
    launch "$run" --config "$work/train.pbtxt" --host 127.0.0.1 & first=$!
    sleep "$((t % 4 * 5 / 10)).$((t % 4 * 5 % 10))"
    rc2=0
    launch "$run-b" --config "$work/train-other.pbtxt" --host 127.0.0.2 || rc2=$?
    rc=0
    wait $first || rc=$?
    outs=("$run.out" "$run-b.out")
  fi
  took=$(echo "$(now) - $begin" | bc)
  times+=("$took")
  line=$(grep -h -m1 'first failure: node ' "${outs[0]}" || true)
  cause=${line#*first failure: }
  ok=no
  if [[ $rc == 2 && $cause == *parameters* ]] && (($(echo "$took < 15" | bc))); then
    ok=yes
    passed=$((passed + 1))
  fi
  printf 'try %2d: %6.1f s  exit %s  ok %s  first failure: %s\n' "$t" "$took" "$rc" "$ok" \
    "${cause:-none on the output of the launcher}"
  if [[ $ok != yes ]]; then
    echo "  kept: ${outs[*]}"
    keep=1
  fi
done
sorted=$(printf '%s\n' "${times[@]}" | sort -g)
median=$(echo "$sorted" | sed -n "$(((tries + 1) / 2))p")
printf '%d of %d tries ended in < 15 s with the cause on the launcher'"'"'s output (mode %s, %d nodes, connect_ms %d); time min %.1f s, median %.1f s, max %.1f s\n' \
  "$passed" "$tries" "$mode" "$nodes" "$connect_ms" "$(echo "$sorted" | head -1)" "$median" \
  "$(echo "$sorted" | tail -1)"
[[ $passed == "$tries" ]]
