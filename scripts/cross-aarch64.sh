#!/usr/bin/env bash
# Cross-compiles gossip-sgd for aarch64 into build-aarch64/ (Release, no CUDA) with Debian's
# g++-aarch64-linux-gnu and the arm64 libraries of Debian's multiarch, installing what is missing
# (needs root or sudo then). On aarch64 the CPU kernels have one level, portable (common/isa.h).
# Without gossipd's ALLREDUCE (GOSSIP_GLOO=OFF): Debian's libgloo-dev cannot be installed for arm64
# beside the host's (not Multi-Arch), so there is no arm64 Gloo to link here; a native arm64 build
# has it.
# scripts/test-aarch64.sh runs the unit tests of this build under qemu-user.
#
#   scripts/cross-aarch64.sh            libraries, programs and unit tests
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh  # the host side: cmake, ninja, protoc, header-only libraries

sudo=()
((EUID == 0)) || sudo=(sudo)
pkgs=(g++-aarch64-linux-gnu libprotobuf-dev:arm64 libssl-dev:arm64 zlib1g-dev:arm64 qemu-user file)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "cross-aarch64: installing ${missing[*]}" >&2
  dpkg --print-foreign-architectures | grep -qx arm64 || "${sudo[@]}" dpkg --add-architecture arm64
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-aarch64 -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" -DGOSSIP_CUDA=OFF \
  -DGOSSIP_BUILD_BENCH=OFF -DGOSSIP_GLOO=OFF "${launcher[@]}" >/dev/null
cmake --build build-aarch64 -j "$(nproc)"
file build-aarch64/daemon/gossipd | grep -q 'ARM aarch64' ||
  { echo "cross-aarch64: build-aarch64/daemon/gossipd is not an aarch64 binary" >&2; exit 1; }
echo "cross-aarch64: built build-aarch64/ for aarch64"
