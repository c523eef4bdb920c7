#!/usr/bin/env bash
# The main job (README): installs what is missing, builds, and trains an MLP on Fashion-MNIST with
# decentralized parallel SGD across 8 real gossipd processes on a loopback ring (TLS 1.3 links with
# a throwaway CA), showing the launcher's progress line and the final accuracy of the averaged
# model; then the same run as centralized PSGD (C-PSGD) in the simulator, for comparison.
#
#   scripts/demo.sh            # both steps (a few minutes on 2 cores)
#   DEMO_SKIP_CPSGD=1 scripts/demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target gossipd gossip-topo gossip-sim >/dev/null

echo "== gossip-topo analyze examples/ring8.pbtxt =="
build/topology/gossip-topo analyze examples/ring8.pbtxt
echo
echo "== gossipd launch examples/ring8.pbtxt --config examples/fmnist-mlp-train.pbtxt =="
rm -rf demo-run
build/daemon/gossipd launch examples/ring8.pbtxt --config examples/fmnist-mlp-train.pbtxt \
  --workdir demo-run --checkpoint-dir demo-run/checkpoints --progress-interval 10

if [[ -z ${DEMO_SKIP_CPSGD:-} ]]; then
  echo
  echo "== the same problem as C-PSGD (one shared model, 8 nodes' gradients averaged) in gossip-sim =="
  build/sim/gossip-sim run --algorithm cpsgd --problem fmnist-mlp --nodes 8 --batch-size 32 \
    --lr 0.05 --momentum 0.9 --lr-schedule step --lr-step 1500 --lr-factor 0.3 \
    --iterations 3750 --eval-every 3750 --seed 1 --quiet
fi
