#!/usr/bin/env bash
# The GPU checks in one go, on a machine with a CUDA device: build with the CUDA backend (Gloo off:
# no GPU check needs ALLREDUCE), run the tests labelled gpu, the Python client's CUDA staging test
# with an interpreter whose PyTorch has CUDA (among the gpu tests), sgd_bench's GPU figures against PyTorch on the same
# GPU, and the main job (scripts/demo.sh's run) with device CUDA. Each step's log is written to
# $OUT (default build-gpu/out); a failing step is reported and the next one still runs; the exit
# status is the number of failed steps.
#
#   scripts/gpu-check.sh [PYTHON]     # PYTHON: the interpreter with a CUDA PyTorch (default python3)
#
# Where the machine has no package registry, run ../shared/device/fetch-deps.sh first and carry
# .devdeps (with dataset-fashion-mnist's .deb in it for the main job): this sources its unpacker.
set -uo pipefail
cd "$(dirname "$0")/.."
py=${1:-python3}
out=${OUT:-build-gpu/out}
mkdir -p "$out"
[[ -f .devdeps/unpack-deps.sh ]] && source .devdeps/unpack-deps.sh
data=/usr/share/datasets/fashion-mnist
[[ -d $data ]] || data=/opt/devdeps/usr/share/datasets/fashion-mnist

failed=0
step() {  # step NAME COMMAND...: run, log to $out/NAME.log, report the time and status
  local name=$1 t0=$SECONDS rc
  shift
  "$@" >"$out/$name.log" 2>&1
  rc=$?
  printf '%-10s rc=%d  %3d s\n' "$name" "$rc" $((SECONDS - t0))
  ((rc == 0)) || { failed=$((failed + 1)); tail -n 25 "$out/$name.log"; }
}

step gpu nvidia-smi
step configure cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DGOSSIP_CUDA=ON \
  -DGOSSIP_GLOO=OFF -DGOSSIP_TEST_PYTHON="$(command -v "$py")" ${CMAKE_PREFIX_PATH:+-DProtobuf_PROTOC_EXECUTABLE="$(command -v protoc)"}
step build cmake --build build-gpu -j "$(nproc)" --target gossipd gossip-sim gossip-topo \
  sgd_gpu_tests daemon_gpu_tests attach_peer sgd_bench
step ctest ctest --test-dir build-gpu -L gpu --output-on-failure
grep -E 'tests passed|Skipped|Failed|Not Run' "$out/ctest.log"
step bench build-gpu/bench/sgd_bench --threads 1 --seconds 2 --kernels avx2 --skip-mix \
  --gpu-torch-python "$py"
sed -n '/== gpu/,$p' "$out/bench.log"
step main build-gpu/daemon/gossipd launch examples/ring8.pbtxt \
  --config examples/fmnist-mlp-train.pbtxt --set device=CUDA --set data.path="$data" \
  --workdir build-gpu/demo-run --progress-interval 10
tail -n 4 "$out/main.log"
cp build-gpu/demo-run/summary.json build-gpu/demo-run/node-0/log.txt "$out/" 2>/dev/null
exit "$failed"
