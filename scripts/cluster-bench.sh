#!/usr/bin/env bash
# Cluster benchmark (docs/cluster.md): 8 hosts made of network namespaces (scripts/netns.sh), one
# `gossipd run` per host, all started from ONE topology file written by
# `gossip-topo generate ... --hosts <the 8 namespace addresses>`, every host's egress shaped with
# tc tbf, and with an added delay through gossip-delayline (scripts/netns.sh delay). For each grid point it prints the measured seconds per iteration (from gossipd's metrics,
# after warm-up iterations), gossip-sim's prediction for the same training config, topology and
# link (`gossip-sim run --config`), and the relative error, and appends a row to a CSV.
#
#   scripts/cluster-bench.sh [--quick] [--rounds] [--straggler [--staleness N] [--staleness-link N]] [--build DIR] [--out DIR] [--no-curves] [--only REGEX]
#                            [--delays "0 5"]          (added one-way delays in ms, every host's egress)
#                            [--sysctl KEY=VALUE]...   (set in every host, e.g. net.ipv4.tcp_congestion_control=reno)
#                            (the grid in docs/cluster.md uses that one, for Gloo and gossipd alike;
#                            without it each side keeps its default: gossipd's link.congestion_control
#                            "auto" replaces a BBR host default by CUBIC, Gloo keeps the host's)
#                            [--set FIELD=VALUE]...    (gossipd training config override, e.g. fault.policy=FAIL_STOP)
#
# Grid: per-host bandwidth {10mbit, 100mbit, 1gbit, unshaped} x added delay {0, 5 ms} x model {mlp: the demo's MLP
# 784-256-128-10, 235,146 parameters, 0.94 MB; mlp5m: MLP 784-2048-1536-10, 4,770,314
# parameters, 19.1 MB} x {D-PSGD on ring, one-peer exponential, static exponential; ALLREDUCE
# (Gloo ring allreduce)}. Left out, with the reason:
#   * mlp5m at 10mbit: one iteration moves 19-57 MB per host (30-46 s/it); the four cells alone
#     would take longer than the whole rest of the grid.
# The delay is netem's `delay` made in user space (this kernel has no netem): gossip-delayline holds
# every frame a host sends for the delay before it reaches the bridge, so TCP's round trip, window
# and ACK clock see it, for gossipd's and Gloo's connections alike. It forwards every byte once
# more on the machine's own cores, which bounds the delayed cells at high rates (docs/cluster.md).
# With --quick: the demo MLP at 100mbit, ring / one-peer exponential / ALLREDUCE, and ring /
# ALLREDUCE with 5 ms, few iterations, then DiLoCo and local-step gossip (H = 5, int8, 40 iterations)
# with their bytes checked against gossip-sim's (about 1 minute; registered in ctest). --only REGEX
# keeps the points whose id (model/bandwidth/topology, the bandwidth followed by +5ms where delayed)
# matches. Unless --no-curves (implied by --quick), the full grid ends
# with two longer runs at 100mbit of the demo MLP, D-PSGD on one-peer exponential and ALLREDUCE,
# for accuracy against wall-clock time (scripts/plot_cluster.py).
#
# With --rounds, instead of the grid: time to accuracy and bytes per node of local-step training
# (docs/cluster.md, "Communicating less") on the demo MLP at 10 Mbit/s and at 100 Mbit/s + each
# added delay of --delays other than 0 (default: 5 ms) —
# per-step ALLREDUCE (Gloo), DiLoCo (ALLREDUCE, H = 25 and 50, int8 with error feedback) and
# local-step gossip on the one-peer exponential graph (H = 10, 25 and 50, int8 CHOCO), 3750
# iterations each.
# With --straggler, instead of the grid: one slow host (docs/cluster.md, "A slow host"), node 3 at a
# quarter of its speed, the demo MLP on the one-peer exponential graph (D-PSGD, and asynchronous
# PUSH_SUM with staleness 64: push_sum_async), and ALLREDUCE: CPU-bound (unshaped links; node 3's
# gossipd in a cgroup whose CPU quota is a quarter of a node's share of the cores) and link-bound
# (100 Mbit/s; node 3's egress at 25 Mbit/s), each beside the same run unthrottled. Prints the s/it
# of the 7 others and of node 3, their iterations per second as a share of the unthrottled run's,
# and gossip-sim's prediction (--straggler node:3:4 / link:3:4; push_sum_async priced
# asynchronously); then the averaged model's test accuracy of push_sum_async after 1500
# iterations with node 3 slowed (the CPU quota, or the link) and without (gossipd evaluate); writes
# straggler.csv. --only REGEX picks points by "straggler/<cpu|link>/<topology>" and
# "straggler/accuracy/<cpu|link>".
# Each cluster run is timed without periodic evaluations; the averaged model's accuracy curve is
# gossip-sim's run of the same job (the same bits as the daemons), so the time to target is the
# cluster's wall-clock at the iteration where that curve first reaches the target, and the nodes'
# own final test accuracies (measured by the daemons) are printed beside the simulator's as a
# check. Per-step ALLREDUCE at 10 Mbit/s (1.4 s/it: 90 minutes) or with more than 5 ms of delay
# runs 6 iterations: its time is the s/it measured after the first 2, times the simulator's
# iterations to target. The target is per-step C-PSGD's final accuracy (gossip-sim, the same
# config) less 0.5 pp. Writes rounds.csv (measured and predicted time to
# target, bytes per node) for scripts/plot_cluster.py --rounds.
#
# Prediction inputs (gossip-sim's cost model, docs/sim.md), each measured once per run of this
# script, none fitted per point: the link bandwidth is the tbf rate times the payload fraction one
# iperf3 flow gets over a 100 Mbit/s tbf link (unshaped: one iperf3 flow's rate); the latency half
# the median 1-byte TCP round trip between two namespaces, measured for each delay; the CPU per
# byte the machine's busy time during the unshaped iperf3 flow over the bytes it sent and
# received; the share of a core
# per node nproc / 8 (the 8 hosts are namespaces of this machine); the compute time per model
# compute + mix of one gossipd running alone. ALLREDUCE is priced as Gloo's ring
# (--allreduce-model gloo: segments, two in flight, a ready message before each send).
#
# Output in OUT (default build/cluster-bench): cluster.csv, points/<id>/ (topology, config, each
# node's metrics and log), calibration.txt. Needs root for the namespaces: exits 77 ("skipped")
# where `scripts/netns.sh check` does. Uses GOSSIP_NETNS_PREFIX=cb and subnet 10.232.0 unless
# those are set, so it does not meet the test suite's namespaces; they are removed at exit.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
netns="$here/netns.sh"
export GOSSIP_NETNS_PREFIX=${GOSSIP_NETNS_PREFIX:-cb}
export GOSSIP_NETNS_SUBNET=${GOSSIP_NETNS_SUBNET:-10.232.0}
py=/usr/bin/python3

quick=0
curves=1
rounds=0
straggler=0
build="$root/build"
out=""
only=""
sysctls=()
sets=()
# --staleness: push_sum_async's. The slow node's messages reach a neighbour every 3 of its
# iterations on the one-peer exponential graph of 8: 12 of a 4x faster node's, and far more under
# a CPU quota that stops it for most of each period (measured: node 3 at 13x the others' s/it).
# --staleness-link: push_sum_async's on the link-bound points. There the slow node's messages
# (0.94 MB, 0.3 s each at 25 Mbit/s) reach each of its 3 out-neighbours every 0.9 s, about 90 of
# the others' iterations: with τ = 64 they wait for it (measured: the others keep 86% of their
# it/s, and the averaged model loses 0.79 pp).
staleness=64
staleness_link=160
delays="0 5"
usage_error() {
  echo "cluster-bench.sh: $1 (see --help)" >&2
  exit 2
}
while (($#)); do
  case $1 in
    --quick) quick=1; curves=0; shift; continue ;;
    --no-curves) curves=0; shift; continue ;;
    --rounds) rounds=1; shift; continue ;;
    --straggler) straggler=1; shift; continue ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --build | --out | --only | --sysctl | --delays | --set | --staleness | --staleness-link)
      (($# >= 2)) || usage_error "$1 needs a value"
      [[ -n $2 ]] || usage_error "$1: empty value" ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
  case $1 in
    --build) build=$2 ;;
    --out) out=$2 ;;
    --only)
      # [[ =~ ]] returns 2 for a pattern that is no extended regular expression.
      rc=0
      [[ "" =~ $2 ]] || rc=$?
      ((rc != 2)) || usage_error "--only: '$2' is not an extended regular expression"
      only=$2 ;;
    --sysctl)
      [[ $2 =~ ^[A-Za-z0-9_./-]+=.+$ ]] || usage_error "--sysctl: '$2' is not KEY=VALUE (e.g. net.ipv4.tcp_congestion_control=reno)"
      sysctls+=("$2") ;;
    --delays) delays=${2//,/ } ;;
    --staleness)
      [[ $2 =~ ^[1-9][0-9]*$ ]] || usage_error "--staleness: '$2' is not an integer >= 1"
      staleness=$2 ;;
    --staleness-link)
      [[ $2 =~ ^[1-9][0-9]*$ ]] || usage_error "--staleness-link: '$2' is not an integer >= 1"
      staleness_link=$2 ;;
    --set)
      [[ $2 =~ ^[A-Za-z0-9_.]+=.*$ ]] || usage_error "--set: '$2' is not FIELD=VALUE (e.g. fault.policy=FAIL_STOP)"
      sets+=(--set "$2") ;;
  esac
  shift 2
done
out=${out:-$build/cluster-bench}
[[ -n ${delays// /} ]] || usage_error "--delays: no delay given"
for d in $delays; do
  [[ $d =~ ^[0-9]+$ ]] || usage_error "--delays: '$d' is not a whole number of ms"
  ((10#$d <= 10000)) || usage_error "--delays: $d ms is more than 10 s"
done
((quick == 0)) || delays="0 5"
export GOSSIP_DELAYLINE=${GOSSIP_DELAYLINE:-$build/tests/fault/gossip-delayline}

gossipd="$build/daemon/gossipd"
topo_bin="$build/topology/gossip-topo"
sim="$build/sim/gossip-sim"
for b in "$gossipd" "$topo_bin" "$sim" "$GOSSIP_DELAYLINE"; do
  [[ -x $b ]] || { echo "cluster-bench.sh: $b not built (cmake --build $build --target gossipd gossip-topo gossip-sim gossip-delayline)" >&2; exit 2; }
done
data=/usr/share/datasets/fashion-mnist
[[ -f $data/train-images-idx3-ubyte.gz ]] || { echo "cluster-bench.sh: SKIP: no Fashion-MNIST in $data" >&2; exit 77; }

rc=0
"$netns" check || rc=$?
((rc == 0)) || exit "$rc"

nodes=8
mkdir -p "$out/points"
csv="$out/cluster.csv"
cleanup() {
  local pids
  pids=$(jobs -p)
  [[ -z $pids ]] || kill $pids 2>/dev/null || true
  wait 2>/dev/null || true
  "$netns" down 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$netns" up "$nodes"
for ((i = 0; i < nodes; i++)); do
  for kv in ${sysctls[@]+"${sysctls[@]}"}; do "$netns" exec "$i" sysctl -q -w "$kv"; done
done

hosts=""
for ((i = 0; i < nodes; i++)); do
  hosts+="${hosts:+,}$("$netns" addr "$i")"
done

# ---- calibration, once per run
"$netns" rate off
# Latency: half the median round trip of a 1-byte TCP ping-pong between two hosts.
tcp_latency_s() { "$py" -c "print('%.7f' % ($("$netns" rtt 0 1 350) / 2))"; }
declare -A lat_of
lat_delays=$(printf '%s\n' 0 $delays | sort -un | tr '\n' ' ')
for d in $lat_delays; do
  ((d == 0)) || "$netns" delay "$d"
  lat_of[$d]=$(tcp_latency_s)
  ((d == 0)) || "$netns" delay off
done
# One iperf3 flow between two hosts for 3 s: prints "payload_bits_per_s bytes busy_cpu_s", the
# busy CPU time being the whole machine's (/proc/stat) while the flow ran.
iperf_flow() {
  "$netns" exec 1 iperf3 -s -1 -p 5299 >/dev/null 2>&1 &
  sleep 0.5
  local before after
  before=$(head -1 /proc/stat)
  "$netns" exec 0 iperf3 -c "$("$netns" addr 1)" -p 5299 -t 3 -J 2>/dev/null >"$out/iperf.json" || true
  after=$(head -1 /proc/stat)
  wait || true
  "$py" - "$out/iperf.json" "$before" "$after" "$(getconf CLK_TCK)" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))["end"]["sum_received"]
busy = lambda line: sum(int(v) for k, v in enumerate(line.split()[1:]) if k in (0, 1, 2, 5, 6, 7))
print("%.6g %d %.4f" % (j["bits_per_second"], j["bytes"], (busy(sys.argv[3]) - busy(sys.argv[2])) / int(sys.argv[4])))
PY
}
unshaped_bps=1e10 payload_fraction=1 cpu_per_byte=0
if command -v iperf3 >/dev/null; then
  read -r unshaped_bps flow_bytes flow_cpu < <(iperf_flow) || unshaped_bps=1e10
  # Every byte of the flow was sent once and received once on this machine's cores.
  cpu_per_byte=$("$py" -c "print('%.4g' % ($flow_cpu / (2 * $flow_bytes)))")
  "$netns" rate 100mbit
  read -r shaped_bps _ _ < <(iperf_flow)
  payload_fraction=$("$py" -c "print('%.4f' % min(1.0, $shaped_bps / 100e6))")
  "$netns" rate off
fi
cpu_share=$("$py" -c "print('%.4f' % min(1.0, $(nproc) / $nodes))")
{
  for d in $lat_delays; do
    echo "latency_s[${d}ms] ${lat_of[$d]} (half the median TCP 1-byte round trip between two hosts, unshaped, delay $d ms)"
  done
  echo "unshaped_bps $unshaped_bps (one iperf3 flow between two hosts)"
  echo "payload_fraction $payload_fraction (one iperf3 flow over a link shaped to 100 Mbit/s: payload / rate)"
  echo "cpu_per_byte_s $cpu_per_byte (busy CPU of the whole machine during the unshaped flow / (bytes sent + received))"
  echo "cpu_share $cpu_share (cores $(nproc) / $nodes nodes: every host is a namespace of this machine)"
  echo "cpu $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') x $(nproc)"
  echo "sysctl ${sysctls[*]:-(defaults)}; tcp_congestion_control $("$netns" exec 0 sysctl -n net.ipv4.tcp_congestion_control)"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
} | tee "$out/calibration.txt"

# --straggler's slow host (empty: none): its node id, its egress rate, the cgroup its gossipd runs in.
slow_node=3 slow_rate="" slow_cgroup=""

# ---- configs
write_config() {  # FILE HIDDEN... ; iterations and eval come from --set at run time
  local f=$1
  shift
  {
    echo "seed: 1"
    echo -n "model { kind: MLP"
    for h in "$@"; do echo -n " hidden: $h"; done
    echo " }"
    echo "data { dataset: FASHION_MNIST path: \"$data\" }"
    echo "shard { scheme: IID }"
    echo "batch_size: 32"
    echo "optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 schedule: STEP step_size: 1500 step_factor: 0.3 }"
    echo "iterations: 10"
    echo "eval_every: 0"
    echo "eval_examples: 2000"
    echo "metrics_every: 1"
    echo "timeouts { connect_ms: 60000 deadline_ms: 120000 heartbeat_ms: 1000 }"
  } >"$f"
}
write_config "$out/mlp.pbtxt" 256 128
write_config "$out/mlp5m.pbtxt" 2048 1536
write_config "$out/tiny.pbtxt" 8

# Compute time per model: one gossipd alone (no neighbours, a core of its own), the mean
# compute_s + mix_s of its iterations after two warm-up ones.
declare -A compute_of
for model in tiny mlp mlp5m; do
  [[ $quick == 0 && $rounds == 0 && $straggler == 0 || $model != mlp5m ]] || continue
  d="$out/calibration-$model"
  rm -rf "$d"
  mkdir -p "$d"
  echo "node { id: 0 address: \"$("$netns" addr 0):7190\" }" >"$d/topology.pbtxt"
  n_it=$([[ $model == mlp5m ]] && echo 8 || echo 30)
  "$netns" exec 0 "$gossipd" run "$d/topology.pbtxt" --node 0 --config "$out/$model.pbtxt" --insecure \
    --metrics "$d/metrics.jsonl" --checkpoint-dir "$d/ckpt" --checkpoint-every 0 --iterations "$n_it" \
    >"$d/log.txt" 2>&1 || { echo "cluster-bench.sh: calibration run of $model failed, see $d/log.txt" >&2; exit 1; }
  compute_of[$model]=$("$py" - "$d/metrics.jsonl" <<'PY'
import json, sys
rows = [r for r in map(json.loads, open(sys.argv[1])) if r.get("type") == "iter" and r["iteration"] >= 2]
print("%.6f" % (sum(r["compute_s"] + r["mix_s"] for r in rows) / len(rows)))
PY
)
  echo "compute_s[$model] ${compute_of[$model]} (one gossipd alone: compute + mix per iteration)" | tee -a "$out/calibration.txt"
done

# Iterations (warm-up, measured) per model and bandwidth: about 10-25 s of exchange per point.
iterations() {
  case "$1/$2" in
    mlp/10mbit) echo "2 4" ;;
    mlp/100mbit) echo "4 20" ;;
    mlp/*) echo "5 40" ;;
    mlp5m/100mbit) echo "1 3" ;;
    mlp5m/*) echo "2 6" ;;
  esac
}
[[ $quick == 0 ]] || iterations() { echo "3 8"; }

bps_of() {
  case $1 in
    off) echo "$unshaped_bps" ;;
    *mbit) echo "${1%mbit}e6" ;;
    *gbit) echo "${1%gbit}e9" ;;
  esac
}

echo "id,model,params,bandwidth,delay_ms,topology,algorithm,warmup,measured,measured_s_per_it,predicted_s_per_it,rel_error,compute_s,exchange_s,wait_s,mix_s,sim_compute_s,bytes_sent_per_it,tcp_retrans,tcp_timeouts,tbf_drops,load1,congestion_control" >"$csv"

# TCP retransmitted segments, TCP retransmission timeouts and tbf drops summed over the hosts.
counters() {
  local i r=0 t=0 d=0 a b c
  for ((i = 0; i < nodes; i++)); do
    read -r a b < <("$netns" exec "$i" nstat -az TcpRetransSegs TcpExtTCPTimeouts |
      awk '$1 == "TcpRetransSegs" {r = $2} $1 == "TcpExtTCPTimeouts" {t = $2} END {print r + 0, t + 0}')
    c=$("$netns" exec "$i" tc -s qdisc show dev eth0 | awk '/dropped/ {gsub(",", ""); print $7; exit}')
    r=$((r + a)) t=$((t + b)) d=$((d + ${c:-0}))
  done
  echo "$r $t $d"
}

# gossip-sim's prediction for the run in DIR: prints "seconds_per_iteration parameters".
# ALGO PUSH_SUM: asynchronous push-sum (push_sum_async's staleness), which gossip-sim prices
# asynchronously.
predict() {  # MODEL BW DELAY DIR ALGO MESSAGE_OVERHEAD_S [STRAGGLER]
  local model=$1 bw=$2 delay=$3 dir=$4 algo=$5 overhead=$6 straggler=${7:-none}
  local fraction=$payload_fraction
  [[ $bw != off ]] || fraction=1  # unshaped: the bandwidth is iperf3's payload rate already
  local model_flag=(--algorithm dpsgd)
  [[ $algo != ALLREDUCE ]] || model_flag=(--algorithm cpsgd-allreduce --allreduce-model gloo)
  [[ $algo != PUSH_SUM ]] || model_flag=(--set algorithm=PUSH_SUM --set "staleness=$staleness")
  "$sim" run --config "$out/$model.pbtxt" --set "iterations=1" --nodes "$nodes" --topology "$dir/topology.pbtxt" \
    --bandwidth "$(bps_of "$bw")" --latency "${lat_of[$delay]}s" --compute-time "${compute_of[$model]}s" \
    --payload-fraction "$fraction" --cpu-share "$cpu_share" --cpu-per-byte "${cpu_per_byte}s" \
    --message-overhead "${overhead}s" --straggler "$straggler" "${model_flag[@]}" --threads 1 --json 2>"$dir/sim.err" | "$py" -c '
import json, sys
j = json.load(sys.stdin)
s = j["series"][0]
print("%.6f %d" % (s["seconds_per_iteration"], round(j["config"]["message_bytes"] / 4)))'
}

# Runs 8 gossipd processes, one per namespace, into DIR, and sets meas_s compute exchange wait_s
# mix sent retrans rto drops load1 (the measured figures of the run).
run_cluster() {  # MODEL BW DELAY TOPO WARM MEAS EVAL_EVERY DIR
  local model=$1 bw=$2 delay=$3 topo=$4 warm=$5 meas=$6 eval_every=$7 dir=$8
  local id="$model/$(link_of "$bw" "$delay")/$topo"
  rm -rf "$dir"
  mkdir -p "$dir"
  local gen=$topo algo=DPSGD extra=()
  if [[ $topo == allreduce ]]; then gen=ring algo=ALLREDUCE; fi
  # Asynchronous push-sum (PUSH_SUM with staleness) on the one-peer exponential graph.
  if [[ $topo == push_sum_async ]]; then
    gen=one_peer_exponential algo=PUSH_SUM extra=(--set "staleness=$staleness")
  fi
  "$topo_bin" generate "$gen" --nodes "$nodes" --hosts "$hosts" --base-port 7100 --name "cb_$gen" >"$dir/topology.pbtxt"
  "$netns" rate "$bw"
  [[ -z $slow_rate ]] || "$netns" rate "$slow_rate" "$slow_node"
  set_delay "$delay"
  local total=$((warm + meas)) pids=() i before after
  before=$(counters)
  for ((i = 0; i < nodes; i++)); do
    # The slow host of --straggler's CPU points: its gossipd starts inside the quota's cgroup
    # (entered before `ip netns exec`, which mounts a /sys of its own; children inherit it).
    local wrap=()
    if [[ -n $slow_cgroup && $i == "$slow_node" ]]; then
      wrap=(sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$slow_cgroup")
    fi
    ${wrap[@]+"${wrap[@]}"} "$netns" exec "$i" "$gossipd" run "$dir/topology.pbtxt" --node "$i" --config "$out/$model.pbtxt" \
      --insecure --metrics "$dir/metrics-$i.jsonl" --checkpoint-dir "$dir/ckpt" --checkpoint-every 0 \
      --iterations "$total" --eval-every "$eval_every" --set "algorithm=$algo" ${extra[@]+"${extra[@]}"} \
      ${sets[@]+"${sets[@]}"} >"$dir/log-$i.txt" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "cluster-bench.sh: node $i of $id failed (exit $?), see $dir/log-$i.txt" >&2; failed=1; }
  done
  ((failed == 0)) || return 1
  after=$(counters)
  local b1 b2 b3 a1 a2 a3
  read -r b1 b2 b3 <<<"$before"
  read -r a1 a2 a3 <<<"$after"
  retrans=$((a1 - b1)) rto=$((a2 - b2)) drops=$((a3 - b3))
  rm -rf "$dir/ckpt"
  load1=$(cut -d' ' -f1 /proc/loadavg)
  # Measured: per node, its iterations in the window where every node runs — from the moment the
  # last node ended its warm-up to the moment the first node ended its last iteration — over the
  # window's length; the mean over nodes. In lock step that is the wall time from the end of the
  # warm-up to the last iteration over the measured count; asynchronous nodes run at their own
  # rates, and a slow node's start (data loading at a quarter of the CPU) is outside the window.
  local m
  m=$("$py" - "$dir" "$nodes" "$warm" <<'PY'
import json, sys
d, n, warm = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
per, keys = [], ["compute_s", "exchange_s", "wait_s", "mix_s"]
sums, cnt, sent = {k: 0.0 for k in keys}, 0, 0
its = []
for i in range(n):
    it = {}
    for line in open(f"{d}/metrics-{i}.jsonl"):
        r = json.loads(line)
        if r.get("type") == "iter":
            it[r["iteration"]] = r
    its.append(it)
t_a = max(it[warm]["wall_ms"] for it in its)
t_b = min(it[max(it)]["wall_ms"] for it in its)
for it in its:
    last = max(it)
    inside = [t for t in it if t_a < it[t]["wall_ms"] <= t_b]
    if t_b > t_a and len(inside) >= 2:
        per.append((t_b - t_a) / 1000.0 / len(inside))
    else:  # no common window: the node's own measured span
        per.append((it[last]["wall_ms"] - it[warm]["wall_ms"]) / 1000.0 / (last - warm))
    for t in range(warm + 1, last + 1):
        for k in keys: sums[k] += it[t][k]
        sent += it[t]["bytes_sent"]
        cnt += 1
print("%.6f %s %d %s" % (sum(per) / n, " ".join("%.6f" % (sums[k] / cnt) for k in keys), sent // cnt,
                         " ".join("%.6f" % p for p in per)))
PY
)
  read -r meas_s compute exchange wait_s mix sent per_node <<<"$m"
}

# The link part of a point's id: the bandwidth, then +<delay>ms where a delay is added.
link_of() { if (($2 == 0)); then echo "$1"; else echo "$1+$2ms"; fi; }

# Puts the delay line in (or takes it out) when the delay differs from the current one.
cur_delay=0
set_delay() {
  [[ $1 != "$cur_delay" ]] || return 0
  if (($1 == 0)); then "$netns" delay off; else "$netns" delay "$1"; fi
  cur_delay=$1
}

# One grid point: run_cluster, gossip-sim's prediction, the summary line and a CSV row.
run_point() {  # MODEL BW DELAY TOPO [ITERS_OVERRIDE "W M"] [EVAL_EVERY]
  local model=$1 bw=$2 delay=$3 topo=$4 wm=${5:-} eval_every=${6:-0}
  local id="$model/$(link_of "$bw" "$delay")/$topo"
  [[ -z $only || $id =~ $only ]] || return 0
  [[ -n $wm ]] || wm=$(iterations "$model" "$bw")
  local warm=${wm% *} meas=${wm#* }
  local dir="$out/points/${id//\//_}"
  [[ $eval_every == 0 ]] || dir+="_curve"
  run_cluster "$model" "$bw" "$delay" "$topo" "$warm" "$meas" "$eval_every" "$dir"
  local algo=DPSGD
  [[ $topo != allreduce ]] || algo=ALLREDUCE
  local c=${compute_of[$model]}
  local pred params
  read -r pred params < <(predict "$model" "$bw" "$delay" "$dir" "$algo" "${overhead_of[$algo]}")
  local err
  err=$("$py" -c "print('%+.3f' % (($pred - $meas_s) / $meas_s))")
  # The congestion control the point's TCP used: Gloo's sockets keep the host's default; gossipd's
  # links log theirs (link.congestion_control, "auto" unless --set).
  local cc
  cc=$("$netns" exec 0 sysctl -n net.ipv4.tcp_congestion_control)
  if [[ $algo == DPSGD ]]; then
    local line
    line=$(grep -m1 -o 'links: TCP congestion control .*' "$dir/log-0.txt" || true)
    [[ $line =~ ^'links: TCP congestion control '(auto:\ )?([a-z0-9_]+)' in place of' ]] && cc=${BASH_REMATCH[2]}
    [[ $line =~ ^'links: TCP congestion control '([a-z0-9_]+)' (configured)' ]] && cc=${BASH_REMATCH[1]}
  fi
  printf '%-34s measured %8.4f s/it  predicted %8.4f s/it  error %s  (compute %.4f exchange %.4f wait %.4f mix %.4f; retrans %d rto %d tbf drops %d; load %s; %s)\n' \
    "$id" "$meas_s" "$pred" "$err" "$compute" "$exchange" "$wait_s" "$mix" "$retrans" "$rto" "$drops" "$load1" "$cc"
  [[ $eval_every != 0 ]] || echo "$id,$model,$params,$bw,$delay,$topo,$algo,$warm,$meas,$meas_s,$pred,$err,$compute,$exchange,$wait_s,$mix,$c,$sent,$retrans,$rto,$drops,$load1,$cc" >>"$csv"
}

# run_cluster with a config and settings of its own (the rounds runs): MODEL is the config's name in
# OUT (mlp or rounds), TOTAL iterations, EVAL_EVERY, then gossipd --set arguments.
run_cluster_with() {  # MODEL BW DELAY TOPO TOTAL EVAL_EVERY DIR [--set K=V]...
  local model=$1 bw=$2 delay=$3 topo=$4 total=$5 eval_every=$6 dir=$7
  shift 7
  rm -rf "$dir"
  mkdir -p "$dir"
  local gen=$topo
  [[ $topo != allreduce ]] || gen=ring
  "$topo_bin" generate "$gen" --nodes "$nodes" --hosts "$hosts" --base-port 7100 --name "cb_$gen" >"$dir/topology.pbtxt"
  "$netns" rate "$bw"
  set_delay "$delay"
  local pids=() i failed=0
  for ((i = 0; i < nodes; i++)); do
    "$netns" exec "$i" "$gossipd" run "$dir/topology.pbtxt" --node "$i" --config "$out/$model.pbtxt" \
      --insecure --metrics "$dir/metrics-$i.jsonl" --checkpoint-dir "$dir/ckpt" --checkpoint-every 0 \
      --iterations "$total" --eval-every "$eval_every" ${sets[@]+"${sets[@]}"} "$@" >"$dir/log-$i.txt" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { echo "cluster-bench.sh: node $i of $dir failed (exit $?), see $dir/log-$i.txt" >&2; failed=1; }
  done
  rm -rf "$dir/ckpt"
  ((failed == 0))
}

# gossip-sim's time to TARGET for the rounds run in DIR (its topology file and settings), with the
# cost model's measured inputs; prints seconds (nan when the simulation does not reach it).
predict_rounds() {  # BW DELAY DIR TOPO ITERATIONS TARGET [--set K=V]...
  local bw=$1 delay=$2 dir=$3 topo=$4 its=$5 target=$6
  shift 6
  local fraction=$payload_fraction sim_algo=dpsgd model_flag=()
  [[ $bw != off ]] || fraction=1
  [[ $topo != allreduce ]] || { sim_algo=cpsgd-allreduce; model_flag=(--allreduce-model gloo); }
  local algo=DPSGD
  [[ $topo != allreduce ]] || algo=ALLREDUCE
  "$sim" run --config "$out/rounds.pbtxt" --set "iterations=$its" "$@" --nodes "$nodes" --topology "$dir/topology.pbtxt" \
    --algorithm "$sim_algo" --bandwidth "$(bps_of "$bw")" --latency "${lat_of[$delay]}s" --compute-time "${compute_of[mlp]}s" \
    --payload-fraction "$fraction" --cpu-share "$cpu_share" --cpu-per-byte "${cpu_per_byte}s" \
    --message-overhead "${overhead_of[$algo]}s" ${model_flag[@]+"${model_flag[@]}"} --target-accuracy "$target" \
    --threads "$(nproc)" --csv "$dir/sim.csv" --json 2>"$dir/sim.err" | "$py" -c '
import json, sys
s = json.load(sys.stdin)["series"][0]
print("%.3f" % s["time_to_target_s"] if s["time_to_target_s"] is not None else "nan")'
}

# Per-message overhead, once per run for each implementation (gossipd's exchange, Gloo's
# allreduce): 8 nodes unshaped on a model of 6,370 parameters (25 KB messages), so that what is
# left of an iteration beyond the model without it is the messages' fixed cost. D-PSGD on the
# ring: each node sends and receives 4 messages per iteration; ALLREDUCE: 4(n − 1).
declare -A overhead_of=([DPSGD]=0 [ALLREDUCE]=0)
for algo in DPSGD ALLREDUCE; do
  topo=ring
  [[ $algo == DPSGD ]] || topo=allreduce
  d="$out/calibration-tiny-$topo"
  run_cluster tiny off 0 "$topo" 5 40 0 "$d"
  read -r base _ < <(predict tiny off 0 "$d" "$algo" 0)
  per_node=$([[ $algo == DPSGD ]] && echo 4 || echo $((4 * (nodes - 1))))
  overhead_of[$algo]=$("$py" -c "print('%.4g' % max(0.0, ($meas_s - $base) / $per_node))")
  echo "message_overhead_s[$algo] ${overhead_of[$algo]} (8 nodes, 6,370 parameters, unshaped: $meas_s s/it, $base s/it without it, $per_node messages per node)" | tee -a "$out/calibration.txt"
done

# ---- --rounds: time to accuracy and bytes per node of local-step training
if ((rounds)); then
  rounds_csv="$out/rounds.csv"
  echo "link,config,iterations,final_accuracy,target,iterations_to_target,time_to_target_s,predicted_time_to_target_s,rel_error,bytes_per_node,wall_s,cluster_local_final,sim_local_final,source" >"$rounds_csv"
  cfg="$out/rounds.pbtxt"
  # Every simulated evaluation on the whole test set (the daemons' final one is).
  sed -e 's/^eval_every: 0/eval_every: 250/' -e 's/^iterations: 10/iterations: 3750/' -e 's/^eval_examples: .*/eval_examples: 10000/' "$out/mlp.pbtxt" >"$cfg"
  # The target: per-step C-PSGD's final accuracy (gossip-sim, the same config) less 0.5 pp.
  "$sim" run --config "$cfg" --nodes "$nodes" --topology ring --algorithm cpsgd-allreduce --set algorithm=ALLREDUCE \
    --threads "$(nproc)" --quiet --csv "$out/rounds-cpsgd.csv" >/dev/null 2>"$out/rounds-cpsgd.err"
  read -r target base_final < <("$py" - "$out/rounds-cpsgd.csv" <<'PY'
import csv, sys
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["algorithm"] == "cpsgd-allreduce"]
final = float(rows[-1]["test_accuracy"])
print("%.4f %.4f" % (final - 0.005, final))
PY
)
  echo "rounds: per-step C-PSGD reaches $base_final after 3750 iterations (gossip-sim); target $target" | tee -a "$out/calibration.txt"
  # name|topology|iterations|settings (gossipd --set, space-separated)
  configs=(
    "allreduce|allreduce|3750|algorithm=ALLREDUCE"
    "diloco-h25|allreduce|3750|algorithm=ALLREDUCE local_steps=25 compression.kind=INT8"
    "gossip-h25|one_peer_exponential|3750|local_steps=25 compression.kind=INT8"
    "gossip-h10|one_peer_exponential|3750|local_steps=10 compression.kind=INT8"
    "diloco-h50|allreduce|3750|algorithm=ALLREDUCE local_steps=50 compression.kind=INT8"
    "gossip-h50|one_peer_exponential|3750|local_steps=50 compression.kind=INT8"
  )
  # 10 Mbit/s, then 100 Mbit/s with each added delay of --delays (default 5 ms).
  links=("10mbit 0")
  for d in $delays; do ((d == 0)) || links+=("100mbit $d"); done
  for link in "${links[@]}"; do
    read -r bw delay <<<"$link"
    for c in "${configs[@]}"; do
      IFS='|' read -r name topo its settings <<<"$c"
      id="$(link_of "$bw" "$delay")/$name"
      [[ -z $only || $id =~ $only ]] || continue
      dir="$out/rounds/${id//\//_}"
      set_args=()
      for kv in $settings; do set_args+=(--set "$kv"); done
      local_warm=()
      if [[ $name == allreduce && ($bw == 10mbit || $delay -gt 5) ]]; then
        run_cluster_with mlp "$bw" "$delay" "$topo" 6 0 "$dir" "${set_args[@]}"
        local_warm=(2)
      else
        run_cluster_with rounds "$bw" "$delay" "$topo" "$its" 0 "$dir" "${set_args[@]}"
      fi
      pred=$(predict_rounds "$bw" "$delay" "$dir" "$topo" "$its" "$target" "${set_args[@]}")
      series=dpsgd
      [[ $topo != allreduce ]] || series=cpsgd-allreduce
      line=$("$py" "$root/scripts/rounds_point.py" point "$dir" "$nodes" "$dir/sim.csv" "$series" "$target" ${local_warm[@]+"${local_warm[@]}"})
      read -r it_target t_target final bytes wall cluster_local sim_local source <<<"$line"
      err=$("$py" -c "import math; m, p = float('$t_target'), float('$pred'); print('%+.3f' % ((p - m) / m) if m > 0 and math.isfinite(p) else 'nan')")
      printf '%-28s to %.4f: %s its, %8.1f s measured, %8.1f s predicted (%s); final %.4f; %s bytes per node; nodes final %s cluster, %s sim\n' \
        "$id" "$target" "$it_target" "$t_target" "$pred" "$err" "$final" "$bytes" "$cluster_local" "$sim_local"
      echo "$(link_of "$bw" "$delay"),$name,$its,$final,$target,$it_target,$t_target,$pred,$err,$bytes,$wall,$cluster_local,$sim_local,$source" >>"$rounds_csv"
    done
  done
  "$netns" rate off
  set_delay 0
  echo "cluster-bench.sh: wrote $rounds_csv"
  exit 0
fi

if ((straggler)); then
  # CPU: cgroup v1's cpu controller (cfs quota), or v2's cpu.max.
  cg=""
  if [[ -d /sys/fs/cgroup/cpu && -w /sys/fs/cgroup/cpu ]]; then
    cg=/sys/fs/cgroup/cpu/gossip-cb-slow
    mkdir -p "$cg"
    echo 100000 >"$cg/cpu.cfs_period_us"
    # A quarter of a node's share of the cores (nproc / 8 of a core each).
    echo "$("$py" -c "print(int(100000 * $cpu_share / 4))")" >"$cg/cpu.cfs_quota_us"
  elif [[ -f /sys/fs/cgroup/cgroup.controllers ]] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then
    cg=/sys/fs/cgroup/gossip-cb-slow
    mkdir -p "$cg"
    echo "$("$py" -c "print(int(100000 * $cpu_share / 4))") 100000" >"$cg/cpu.max"
  fi
  scsv="$out/straggler.csv"
  echo "id,bound,topology,slow,measured_others_s_per_it,measured_slow_s_per_it,unthrottled_s_per_it,others_share,predicted_s_per_it,predicted_unthrottled_s_per_it,rel_error,averaged_test_accuracy" >"$scsv"
  staleness_cpu=$staleness
  for bound in cpu link; do
    bw=off wm="20 300"
    [[ $bound == cpu ]] || { bw=100mbit wm="4 40"; }
    staleness=$staleness_cpu
    [[ $bound == cpu ]] || staleness=$staleness_link
    for t in one_peer_exponential allreduce push_sum_async; do
      [[ -z $only || "straggler/$bound/$t" =~ $only ]] || continue
      algo=DPSGD
      [[ $t != allreduce ]] || algo=ALLREDUCE
      base="$out/points/straggler_${bound}_${t}"
      # Asynchronous nodes run at their own rates: enough iterations that the others are still
      # running once the slow node has started and warmed up.
      [[ $t != push_sum_async ]] || { [[ $bound == cpu ]] && wm="20 1500" || wm="4 160"; }
      slow_rate="" slow_cgroup=""
      run_cluster mlp "$bw" 0 "$t" "${wm% *}" "${wm#* }" 0 "${base}_unthrottled"
      ref=$meas_s
      palgo=$algo
      [[ $t != push_sum_async ]] || palgo=PUSH_SUM
      read -r ref_pred _ < <(predict mlp "$bw" 0 "${base}_unthrottled" "$palgo" "${overhead_of[$algo]}")
      if [[ $bound == cpu ]]; then
        [[ -n $cg ]] || { echo "straggler cpu/$t: SKIP: no writable cgroup cpu controller" >&2; continue; }
        slow_cgroup=$cg spec="node:$slow_node:4"
      else
        slow_rate=25mbit spec="link:$slow_node:4"
      fi
      run_cluster mlp "$bw" 0 "$t" "${wm% *}" "${wm#* }" 0 "${base}_slow"
      slow_rate="" slow_cgroup=""
      # Asynchronous push-sum (staleness in the config) is priced asynchronously by gossip-sim: the
      # others never wait for the slow node, which ends with them (sim/cost_model.h).
      read -r pred _ < <(predict mlp "$bw" 0 "${base}_slow" "$palgo" "${overhead_of[$algo]}" "$spec")
      read -r others slow share err < <("$py" - "$slow_node" "$ref" "$pred" $per_node <<'PY'
import sys
k, ref, pred = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
per = [float(v) for v in sys.argv[4:]]
others = sum(p for i, p in enumerate(per) if i != k) / (len(per) - 1)
print("%.6f %.6f %.4f %+.3f" % (others, per[k], ref / others, (pred - others) / others))
PY
)
      printf 'straggler %-4s %-22s %-10s others %8.4f s/it (slow node %8.4f)  unthrottled %8.4f  others keep %5.1f%%  predicted %8.4f (unthrottled %8.4f)  error %s\n' \
        "$bound" "$t" "$spec" "$others" "$slow" "$ref" "$("$py" -c "print(100 * $share)")" "$pred" "$ref_pred" "$err"
      echo "mlp/$bw/$t/$spec,$bound,$t,$spec,$others,$slow,$ref,$share,$pred,$ref_pred,$err," >>"$scsv"
    done
  done
  # Accuracy: the averaged model of asynchronous push-sum after 1500 iterations of the demo MLP
  # (the slow node takes minutes under the quota), with node 3 slowed — under the CPU quota on
  # unshaped links (cpu), or its egress at 25 of 100 Mbit/s (link) — and without (gossipd evaluate
  # of the 8 final parameter files).
  for bound in cpu link; do
    [[ -z $only || "straggler/accuracy/$bound" =~ $only ]] || continue
    if [[ $bound == cpu && -z $cg ]]; then
      echo "straggler accuracy cpu: SKIP: no writable cgroup cpu controller" >&2
      continue
    fi
    bw=off
    [[ $bound == cpu ]] || bw=100mbit
    staleness=$staleness_cpu
    [[ $bound == cpu ]] || staleness=$staleness_link
    for variant in unthrottled slow; do
      adir="$out/points/straggler_accuracy_${bound}_$variant"
      slow_cgroup="" slow_rate=""
      if [[ $variant == slow && $bound == cpu ]]; then slow_cgroup=$cg; fi
      if [[ $variant == slow && $bound == link ]]; then slow_rate=25mbit; fi
      saved=(${sets[@]+"${sets[@]}"})
      sets+=(--dump-params "$adir/final")
      run_cluster mlp "$bw" 0 push_sum_async 1 1499 0 "$adir"
      sets=(${saved[@]+"${saved[@]}"})
      slow_cgroup="" slow_rate=""
      acc=$("$gossipd" evaluate --config "$out/mlp.pbtxt" "$adir"/final/node_*.f32 | grep -o 'test accuracy [0-9.]*' | cut -d' ' -f3)
      read -r others slow < <("$py" - "$slow_node" $per_node <<'PY'
import sys
k = int(sys.argv[1])
per = [float(v) for v in sys.argv[2:]]
print("%.6f %.6f" % (sum(p for i, p in enumerate(per) if i != k) / (len(per) - 1), per[k]))
PY
)
      printf 'straggler accuracy %-4s push_sum_async %-11s averaged model %s after 1500 iterations (others %8.4f s/it, node 3 %8.4f s/it)\n' "$bound" "$variant" "$acc" "$others" "$slow"
      echo "mlp/$bw/push_sum_async/accuracy/$variant,$bound,push_sum_async,$variant,$others,$slow,,,,,,$acc" >>"$scsv"
    done
  done
  [[ -z $cg ]] || rmdir "$cg" 2>/dev/null || true
  "$netns" rate off
  echo "cluster-bench.sh: wrote $scsv"
  exit 0
fi

# --quick's rounds points: DiLoCo and local-step gossip, H = 5 with int8, 40 iterations at
# 100 Mbit/s; every node must finish, and the bytes each node's metrics count must equal what
# gossip-sim's cost model says the same run sends (the mean over nodes for the ring, whose chunks
# differ by a block; every node alike for one-peer gossip), to the byte.
quick_rounds() {
  sed -e 's/^iterations: 10/iterations: 40/' -e 's/^eval_examples: .*/eval_examples: 500/' "$out/mlp.pbtxt" >"$out/rounds.pbtxt"
  local c name topo settings dir set_args kv sim_bytes
  for c in "diloco-h5|allreduce|algorithm=ALLREDUCE local_steps=5 compression.kind=INT8" \
           "gossip-h5|one_peer_exponential|local_steps=5 compression.kind=INT8"; do
    IFS='|' read -r name topo settings <<<"$c"
    dir="$out/rounds/100mbit_$name"
    set_args=()
    for kv in $settings; do set_args+=(--set "$kv"); done
    run_cluster_with rounds 100mbit 0 "$topo" 40 0 "$dir" "${set_args[@]}"
    sim_bytes=$("$sim" run --config "$out/rounds.pbtxt" "${set_args[@]}" --nodes "$nodes" --topology "$dir/topology.pbtxt" \
      --algorithm "$([[ $topo == allreduce ]] && echo cpsgd-allreduce || echo dpsgd)" --compute-time 1ms --threads 1 --json 2>/dev/null |
      "$py" -c 'import json, sys; print(json.load(sys.stdin)["series"][0]["bytes_per_node"])')
    "$py" - "$dir" "$nodes" "$sim_bytes" "$topo" "100mbit/$name" <<'PY'
import json, sys
d, n, want, topo, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], sys.argv[5]
sent = [sum(r.get("bytes_sent", 0) for r in map(json.loads, open(f"{d}/metrics-{i}.jsonl")) if r.get("type") == "iter")
        for i in range(n)]
got = sum(sent) / n
bad = abs(got - want) > 1e-6 * want or (topo != "allreduce" and len(set(sent)) != 1)
print(f"rounds/{name}: {got:.1f} bytes per node sent, gossip-sim's cost model {want:.1f}" + (" MISMATCH" if bad else ""))
sys.exit("cluster-bench.sh: FAILED: rounds/%s: bytes per node %s, gossip-sim %s" % (name, sent, want) if bad else 0)
PY
  done
}

topologies="ring one_peer_exponential exponential allreduce"
if ((quick)); then
  for t in ring one_peer_exponential allreduce; do run_point mlp 100mbit 0 "$t"; done
  for t in ring allreduce; do run_point mlp 100mbit 5 "$t"; done
  quick_rounds
else
  for delay in $delays; do
    for model in mlp mlp5m; do
      for bw in off 1gbit 100mbit 10mbit; do
        [[ "$model/$bw" != mlp5m/10mbit ]] || continue
        for t in $topologies; do run_point "$model" "$bw" "$delay" "$t"; done
      done
    done
  done
  if ((curves)); then
    for t in one_peer_exponential allreduce; do run_point mlp 100mbit 0 "$t" "1 600" 25; done
  fi
fi
"$netns" rate off
set_delay 0
echo "cluster-bench.sh: wrote $csv"

# Invariants every point must meet, whatever the timings (what the ctest registration checks):
# all nodes finished, each value is a finite positive number, and the payload each node sent per
# iteration is exactly what the algorithm sends: D-PSGD Δ_out·4d bytes (ring 2, one-peer
# exponential 1, static exponential log2(n) = 3 out-neighbours), ALLREDUCE 2(n-1)·ceil(d/n)·4.
lat_args=()
for d in $lat_delays; do lat_args+=("$d=${lat_of[$d]}"); done
"$py" - "$csv" "$nodes" "${lat_args[@]}" <<'PY'
import csv, math, sys
path, n = sys.argv[1], int(sys.argv[2])
lat = {int(k): float(v) for k, v in (a.split("=") for a in sys.argv[3:])}
out_degree = {"ring": 2, "one_peer_exponential": 1, "exponential": 3}
rows = list(csv.DictReader(open(path)))
if not rows:
    sys.exit(f"cluster-bench.sh: {path}: no points")
bad = []
for r in rows:
    d = int(r["params"])
    want = 2 * (n - 1) * -(-d // n) * 4 if r["algorithm"] == "ALLREDUCE" else out_degree[r["topology"]] * 4 * d
    for k in ("measured_s_per_it", "predicted_s_per_it", "compute_s"):
        v = float(r[k])
        if not (math.isfinite(v) and v > 0):
            bad.append(f"{r['id']}: {k} = {r[k]}")
    if not r["congestion_control"]:
        bad.append(f"{r['id']}: no congestion control recorded")
    if int(r["bytes_sent_per_it"]) != want:
        bad.append(f"{r['id']}: {r['bytes_sent_per_it']} bytes sent per iteration, expected {want}")
# The delay line adds what it was asked to: one way, d ms more than the direct path (+10% for the
# forwarding and the timer).
for d, l in lat.items():
    if d and not (0.0 <= (l - lat[0]) * 1e3 - d <= 0.1 * d + 0.5):
        bad.append(f"delay {d} ms: measured one-way latency {l * 1e3:.3f} ms against {lat[0] * 1e3:.3f} ms without")
if bad:
    sys.exit("cluster-bench.sh: FAILED: " + "; ".join(bad))
print(f"cluster-bench.sh: {len(rows)} points, payload per iteration as the algorithms send it")
PY
