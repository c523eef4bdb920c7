#!/usr/bin/env bash
# The test command (README, .ci/run): installs what is missing, builds everything with Ninja on all
# cores, runs the whole CTest suite, then builds the unit tests again under AddressSanitizer +
# UndefinedBehaviorSanitizer and runs them, and checks the formatting (scripts/lint.sh). Exits
# non-zero on any failure.
#
#   scripts/test.sh              everything
#   GOSSIP_TEST_NO_ASAN=1 ...    skip the sanitizer pass (local iteration only; CI always runs it)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

bash scripts/setup.sh

echo "== build (Release; CUDA when nvcc is found) =="
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$jobs"

echo "== tests =="
# Tests labelled long take many minutes (the full soak, docs/fault.md "Long runs"): they are listed,
# not run.
(cd build && ctest --output-on-failure -j "$jobs" -LE long)
echo "== not run (label long; see docs/fault.md) =="
(cd build && ctest -N -L long | grep "Test *#" || true)

# The suite above ran the CPU kernels at the best instruction-set level this CPU has (common/isa.h).
# Run the tests of the dispatched kernels again at every lower level it supports, forced through
# GOSSIP_CPU, so an AVX-512 machine also tests the AVX2 and portable paths (and an AVX2 one the
# portable path): the sgd unit tests (GEMM, models, flat kernels), the simulator's unit tests
# (mixing kernels, the simulator against gossipd's rounding), the CRC-32C tests, and the
# exactness tests (real gossipd processes equal gossip-sim bit for bit).
best=$(build/sim/gossip-sim --version | sed -n 's/^cpu kernels: \([a-z0-9]*\).*/\1/p')
lower=()
case "$best" in
  avx512) lower=(avx2 portable) ;;
  avx2) lower=(portable) ;;
esac
for level in "${lower[@]}"; do
  echo "== kernel unit tests forced to GOSSIP_CPU=$level (this CPU: $best) =="
  (cd build && GOSSIP_CPU=$level ctest --output-on-failure -j "$jobs" \
    -R '^(sgd_tests|sim_tests|net_unit_tests:crc32c|daemon_integration_tests:exactness)')
done

if [[ "${GOSSIP_TEST_NO_ASAN:-0}" != 1 || "${CI:-}" == true ]]; then
  echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer =="
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS="-O1" \
    -DGOSSIP_SANITIZE=ON -DGOSSIP_CUDA=OFF -DGOSSIP_BUILD_BENCH=OFF >/dev/null
  cmake --build build-asan -j "$jobs"
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 ctest --output-on-failure -j "$jobs" -L unit)
fi
# Style: clang-format over every C++/CUDA source (.clang-format).
bash scripts/lint.sh

echo "== all tests passed =="
