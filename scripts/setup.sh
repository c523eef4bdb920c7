#!/usr/bin/env bash
# Installs every Debian package gossip-sgd needs to build, test, benchmark and demo, and nothing
# else. Quiet and quick when all are present; idempotent. Needs root (or sudo) only when
# something is missing.
set -euo pipefail

pkgs=(
  # build
  cmake ninja-build g++ clang pkg-config libclang-rt-14-dev clang-format
  # libraries (docs/design.md §2)
  libasio-dev libeigen3-dev libspectra-dev libprotobuf-dev protobuf-compiler
  libcli11-dev doctest-dev libssl-dev zlib1g-dev
  # Gloo: the ring allreduce of gossipd's ALLREDUCE baseline (C-PSGD)
  libgloo-dev
  # real data (the default data set)
  dataset-fashion-mnist
  # tools the tests and benchmarks call
  openssl iproute2 nftables iperf3
  # a real Slurm for scripts/slurm-check.sh (srun -n 8 gossipd run --from-env): controller, node
  # daemon, the munge authentication they share, and srun/sbatch
  slurmctld slurmd munge slurm-client
  # a real Prometheus server, which the metrics test starts to scrape gossipd --metrics-listen
  # and query through its HTTP API (tests/daemon/gossipd_prometheus_test.cc)
  prometheus
  # cross-checks, references and plots (/usr/bin/python3, never the hot path)
  python3-numpy python3-scipy python3-matplotlib python3-torch libopenblas0-pthread
  # the Kubernetes example's manifest test (tests/daemon/k8s_manifest_test.py)
  python3-yaml
)

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
((${#missing[@]} == 0)) && exit 0

echo "setup: installing ${missing[*]}" >&2
sudo=()
((EUID == 0)) || sudo=(sudo)
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done" >&2
