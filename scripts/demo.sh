#!/usr/bin/env bash
# The main job (README): installs what is missing, builds, and runs gossip-sgd end to end.
# Until the daemon lands this is gossip-topo analysing the example topologies.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)" --target gossip-topo >/dev/null
for f in examples/ring8.pbtxt examples/torus4x4.pbtxt examples/exponential16.pbtxt; do
  echo "== gossip-topo analyze $f =="
  build/topology/gossip-topo analyze "$f"
done
