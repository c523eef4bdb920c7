#!/usr/bin/env bash
# Runs the unit tests of the aarch64 cross build (scripts/cross-aarch64.sh, which it calls first)
# under qemu-user: every test labelled unit, each test executable through qemu-aarch64 with the
# arm64 libraries of Debian's multiarch. Not part of scripts/test.sh: emulation is slow (README
# "CPUs" gives the time).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/cross-aarch64.sh
echo "== unit tests of build-aarch64/ under qemu-aarch64 =="
# The toolchain file names qemu-aarch64 as CMAKE_CROSSCOMPILING_EMULATOR, so ctest runs each test
# through it.
# Left out: the death test of GOSSIP_CHECK (common_tests), whose forked child calls abort(): under
# qemu-user that child spins instead of dying (measured: 47% of a core for 20 minutes), so the
# test can only time out. It runs natively on every other build.
(cd build-aarch64 && ctest --output-on-failure -j "$(nproc)" -L unit \
  -E '^common_tests: passing checks do nothing, failing ones abort')
echo "== aarch64 unit tests passed =="
