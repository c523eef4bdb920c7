#!/usr/bin/env bash
# A real Slurm on this machine runs gossipd: munged, slurmctld and one slurmd with 8 task slots,
# all on unprivileged ports with their keys, state and logs in a temporary directory; then
# `sbatch --wait examples/slurm/gossip.sbatch` (srun -n 8 gossipd run --from-env, TLS with the
# job's own CA) trains a job whose topology is generated from the config on srun's node list, and
# its final parameters must equal `gossipd launch` of the same job (the file gossip-topo writes for
# that host list) bit for bit, node by node. The daemons are stopped on exit, however it ends.
#
#   scripts/slurm-check.sh [BUILD_DIR]      (default: build; run by ctest, label integration)
#
# Exit 0: passed; 1: failed; 77: skipped, with the reason, where Slurm cannot run here (packages
# missing and not installable, daemons that do not start). Installs Debian's slurmctld, slurmd,
# munge and slurm-client when they are missing and this is root (scripts/setup.sh lists them).
set -euo pipefail

src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build}" && pwd)
gossipd=$build/daemon/gossipd
topo_bin=$build/topology/gossip-topo
nodes=8

skip() {
  echo "slurm-check: SKIPPED: $*" >&2
  exit 77
}
fail() {
  echo "slurm-check: FAILED: $*" >&2
  exit 1
}
[[ -x $gossipd && -x $topo_bin ]] || fail "build gossipd and gossip-topo in $build first"

# --- packages
need=(munged mungekey slurmctld slurmd srun sbatch sinfo)
missing() { for c in "${need[@]}"; do command -v "$c" >/dev/null || return 0; done; return 1; }
if missing; then
  ((EUID == 0)) && command -v apt-get >/dev/null ||
    skip "Slurm is not installed (Debian: apt-get install slurmctld slurmd munge slurm-client)"
  echo "slurm-check: installing slurmctld slurmd munge slurm-client" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd munge slurm-client \
    >/dev/null 2>&1 || skip "apt-get install slurmctld slurmd munge slurm-client failed"
  missing && skip "Slurm's commands are still missing after installing"
fi

# --- a temporary cluster (short path: munge's socket must fit in a Unix socket address)
tmp=$(mktemp -d /tmp/gslurm.XXXXXX)
pids=()
cleanup() {
  local rc=$?
  # Our own daemons only, by the pids they wrote (never by name: other Slurms may run here).
  for f in slurmd slurmctld munge/munged; do
    [[ -s $tmp/$f.pid ]] && kill "$(cat "$tmp/$f.pid")" 2>/dev/null || true
  done
  sleep 1
  for f in slurmd slurmctld munge/munged; do
    [[ -s $tmp/$f.pid ]] && kill -9 "$(cat "$tmp/$f.pid")" 2>/dev/null || true
  done
  if ((rc == 0 || rc == 77)) || [[ -n ${GOSSIP_KEEP_SLURM_DIR:-} ]]; then
    [[ -n ${GOSSIP_KEEP_SLURM_DIR:-} ]] && echo "slurm-check: kept $tmp" >&2 || rm -rf "$tmp"
  else
    echo "slurm-check: logs kept in $tmp" >&2
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 143' TERM INT
mkdir -p "$tmp"/{munge,state,spool,log}
user=$(id -un)

# A free TCP port on this host (bash's /dev/tcp: a refused connection means nobody listens).
free_port() {
  local p
  for _ in $(seq 50); do
    p=$((20000 + RANDOM % 30000))
    (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
  done
  fail "no free port found"
}

mungekey --create --keyfile="$tmp/munge/munge.key" >/dev/null 2>&1 ||
  dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 600 "$tmp/munge/munge.key"
munge_sock=$tmp/munge/munge.sock
munged --key-file="$tmp/munge/munge.key" --socket="$munge_sock" --pid-file="$tmp/munge/munged.pid" \
  --log-file="$tmp/munge/munged.log" --seed-file="$tmp/munge/seed" --force >/dev/null 2>&1 ||
  skip "munged did not start: $(tail -3 "$tmp/munge/munged.log" 2>/dev/null | tr '\n' ' ')"
munge -S "$munge_sock" -n | unmunge -S "$munge_sock" >/dev/null 2>&1 ||
  skip "munge credentials do not round-trip through munged"

ctld_port=$(free_port)
slurmd_port=$(free_port)
ctld_host=$(hostname -s)
cat >"$tmp/slurm.conf" <<EOF
# A one-node cluster for scripts/slurm-check.sh: no cgroups, no accounting, unprivileged ports.
ClusterName=gossipcheck
SlurmctldHost=$ctld_host(127.0.0.1)
SlurmUser=$user
SlurmdUser=$user
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$munge_sock
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdLogFile=$tmp/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
# 8 task slots whatever the machine has: slurmd takes the CPU count below as given.
SlurmdParameters=config_overrides
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$nodes State=UNKNOWN
PartitionName=check Nodes=localhost Default=YES MaxTime=30 State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf
# The test's own Slurm, not one the caller's environment points at.
unset SLURM_JOB_ID SLURM_JOBID SLURM_PROCID SLURM_NTASKS SLURM_JOB_NODELIST SLURM_STEP_ID

slurmctld -i >/dev/null 2>&1 ||
  skip "slurmctld did not start: $(tail -3 "$tmp/log/slurmctld.log" 2>/dev/null | tr '\n' ' ')"
# -N: this slurmd is node "localhost" whatever the machine is called, so the node list srun gives
# the tasks names a host that resolves here.
slurmd -N localhost >/dev/null 2>&1 ||
  skip "slurmd did not start: $(tail -3 "$tmp/log/slurmd.log" 2>/dev/null | tr '\n' ' ')"
for _ in $(seq 60); do
  state=$(sinfo -h -N -o %T 2>/dev/null || true)
  [[ $state == idle ]] && break
  sleep 0.5
done
[[ $state == idle ]] || skip "the node did not become idle (state '${state:-none}'): slurmctld: \
$(tail -2 "$tmp/log/slurmctld.log" | tr '\n' ' ') slurmd: $(tail -2 "$tmp/log/slurmd.log" | tr '\n' ' ')"
echo "slurm-check: Slurm $(sinfo -V | awk '{print $2}') up in $tmp (slurmctld :$ctld_port, slurmd :$slurmd_port, 1 node, $nodes slots)" >&2

# --- the job: the harness's small MLP on synthetic data, 60 iterations, generated topology
base_port=$(free_port)
cat >"$tmp/train.pbtxt" <<EOF
seed: 21
model { kind: MLP hidden: 16 }
data { dataset: SYNTHETIC_LOGISTIC num_examples: 1024 dim: 10 test_examples: 256 noise: 3 }
batch_size: 8
optimizer { kind: MOMENTUM lr: 0.05 momentum: 0.9 weight_decay: 0.0001 }
iterations: 60
eval_every: 20
metrics_every: 10
timeouts { connect_ms: 30000 deadline_ms: 20000 heartbeat_ms: 300 }
topology { generator: "one_peer_exponential" base_port: $base_port }
EOF

job_out=$tmp/job.out
rc=0
(cd "$tmp" && GOSSIPD=$gossipd GOSSIP_GEN_CERTS=$src/scripts/gen-certs.sh \
  timeout 300 sbatch --wait --ntasks=$nodes --output="$job_out" \
  "$src/examples/slurm/gossip.sbatch" "$tmp/train.pbtxt" "$tmp/job") >"$tmp/sbatch.out" 2>&1 || rc=$?
if ((rc != 0)); then
  cat "$tmp/sbatch.out" "$job_out" >&2 2>/dev/null || true
  fail "sbatch --wait examples/slurm/gossip.sbatch exited $rc"
fi
grep -q "TLS 1.3" "$job_out" || fail "the job's nodes did not connect over TLS: $(head -5 "$job_out")"

# --- the same job from gossipd launch of the file gossip-topo writes for srun's host list
"$topo_bin" generate one_peer_exponential --nodes $nodes --hosts localhost:$nodes \
  --base-port "$base_port" >"$tmp/topo.pbtxt"
fingerprint=$(sed -n 's/.*fingerprint \([0-9a-f]*\).*/\1/p' "$tmp/topo.pbtxt" | head -1)
n_fp=$(grep -c "fingerprint $fingerprint" "$job_out" || true)
((n_fp == nodes)) || fail "$n_fp of $nodes Slurm tasks generated gossip-topo's topology ($fingerprint)"
(cd "$tmp" && timeout 300 "$gossipd" launch "$tmp/topo.pbtxt" --config "$tmp/train.pbtxt" \
  --insecure --workdir "$tmp/launch" --set checkpoint.dir="$tmp/launch-ckpt" \
  >"$tmp/launch.out" 2>&1) || { cat "$tmp/launch.out" >&2; fail "gossipd launch failed"; }

for ((i = 0; i < nodes; i++)); do
  a=$tmp/job/final/node_$i.f32
  b=$tmp/launch/final/node_$i.f32
  [[ -s $a && -s $b ]] || fail "node $i: missing final parameters ($a, $b)"
  cmp -s "$a" "$b" || fail "node $i: srun's final parameters differ from gossipd launch's"
done
cmp -s "$tmp/job/final/node_0.f32" "$tmp/job/final/node_1.f32" &&
  fail "nodes 0 and 1 ended equal: the comparison would prove nothing"
# It trained: every node evaluated its model at the last iteration.
accuracies=()
for ((i = 0; i < nodes; i++)); do
  line=$(grep '"type":"eval","node":'$i',"iteration":60,' "$tmp/job/checkpoints/node-$i/metrics.jsonl" || true)
  [[ -n $line ]] || fail "node $i: no evaluation at iteration 60 in its metrics"
  accuracies+=("$(sed 's/.*"test_accuracy":\([0-9.]*\).*/\1/' <<<"$line")")
done
echo "slurm-check: OK: sbatch examples/slurm/gossip.sbatch (srun -n $nodes gossipd run --from-env, TLS) \
trained 60 iterations, test accuracy per node ${accuracies[*]}; final parameters of all $nodes nodes \
equal gossipd launch's bit for bit (topology $fingerprint)" >&2
