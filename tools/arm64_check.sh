#!/usr/bin/env bash
# Builds the CPU codec and its tests for AArch64 (NEON kernels) with Debian's cross compiler and
# runs them under qemu-user: the Arm path (Grace hosts) is tested on an x86 machine. Installs
# g++-aarch64-linux-gnu and qemu-user when missing (as root).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
need=()
command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "arm64_check: missing ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq "${need[@]}" >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq "${need[@]}" >/dev/null; }
fi
JOBS=${JOBS:-$(nproc)}
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE="$PWD/tests/arm64/toolchain.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DZIPCCL_CUDA=OFF -DZIPCCL_BUILD_PLUGIN=OFF -DZIPCCL_BUILD_TOOLS=OFF -DZIPCCL_TEST_MODULES= >/dev/null
cmake --build build-arm64 -j"$JOBS" --target codec_tests
# The kernels report which set ran; on AArch64 it must be NEON, not the scalar fallback.
ctest --test-dir build-arm64 --output-on-failure -j"$JOBS" -R '^(Kernels|RoundTrip|Frame|Malformed|Huffman|Detect)' "$@"
