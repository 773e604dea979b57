#!/usr/bin/env bash
# The AArch64 build, tested on an x86 machine: cross-built with Debian's g++-aarch64-linux-gnu and
# linked by Zig for glibc 2.28 (tools/cmake/glibc_baseline.cmake: aarch64-linux-gnu.2.28), as the
# x86_64 build is, then run under qemu-aarch64 with an arm64 Debian userland as -L prefix
# (tools/arm64_root.sh; made once, kept outside the clone):
#   - the codec tests, asserting the NEON kernels ran, not the scalar fallback;
#   - the plugin's conformance suite over loopback sockets (a cut for CI time: see below);
#   - glibc_baseline (no symbol version above 2.28 in the plugin, the tool, libzipccl.so) and
#     glibc_compat.c's definitions against arm64 glibc (GlibcCompat.*);
#   - the tool round trip, the plugin through `zipccl doctor`, the arm64 .deb, and libzipccl.so from an
#     arm64 CPython + numpy through ctypes (tests/arm64);
#   - then the aarch64 wheel, built from the sdist, and tests/python on that arm64 CPython
#     (tools/arm64_wheel.sh; it ends with pytest's summary line). ZIPCCL_ARM64_WHEEL=0 leaves it out:
#     tools/test.sh runs it beside its next stages.
# Prints the plugin's `file` and highest glibc symbol version. Installs g++-aarch64-linux-gnu and
# qemu-user when missing (as root). Extra arguments go to ctest.
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
root=$(tools/arm64_root.sh)
cmake -S . -B build-arm64 -DCMAKE_TOOLCHAIN_FILE="$PWD/tests/arm64/toolchain.cmake" -DCMAKE_BUILD_TYPE=Release \
  -DZIPCCL_ARM64_ROOT="$root" -DZIPCCL_CUDA=OFF -DZIPCCL_BUILD_PLUGIN=ON -DZIPCCL_BUILD_TOOLS=ON \
  -DZIPCCL_BUILD_CAPI=ON -DZIPCCL_TEST_MODULES= -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON >/dev/null
cmake --build build-arm64 -j"$JOBS" --target codec_tests nccl-net-zipccl zipccl zipccl_capi \
  test_plugin_conformance glibc_compat_test
plugin=build-arm64/plugin/libnccl-net-zipccl.so
echo "arm64_check: $(file -b "$plugin" | cut -d, -f1-2); highest glibc symbol version: $(objdump -T "$plugin" |
  grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
# The kernels report which set ran; on AArch64 it must be NEON, not the scalar fallback.
# The plugin's conformance suite (the x86 build runs 3 policies x 6 ABI versions) is cut for CI time
# under emulation: `always` (every message coded, 64 KiB segments, 3 data streams) through the newest
# ABI table, `auto6` (IPv6, the splitting paths, 6 streams, no inline payloads) through v9 and `never`
# (the raw path) through v7, the oldest. Left out here, run on x86: DataStreamsAllCarryTheTraffic
# (it counts bytes per socket with TCP_INFO, which qemu-user does not emulate), PluginThrow (RLIMIT_AS
# does not reach qemu's own mappings) and GlibcCompat.DlFindObjectAgreesWithGlibc (glibc's answer for
# the main program, which qemu maps, not ld.so, differs from the loaded segments; the unwind table,
# what the unwinder reads, is checked by DlFindObjectFindsThisProgramsUnwindTable).
conformance='^always[.].*/v12( |$)|^always[.]ConformanceV11[.]|^auto6[.].*/v9( |$)|^never[.].*/v7( |$)'
ctest --test-dir build-arm64 --output-on-failure -j"$JOBS" --timeout 300 \
  -R "^(Kernels|RoundTrip|Frame|Malformed|Huffman|Detect)|$conformance|^glibc_baseline\$|^GlibcCompat[.]|^arm64[.]|^plugin[.]exit_destructors\$" \
  -E 'DataStreamsAllCarryTheTraffic|^GlibcCompat[.]DlFindObjectAgreesWithGlibc$' "$@"
if [[ ${ZIPCCL_ARM64_WHEEL:-1} != 0 ]]; then
  tools/arm64_wheel.sh "$root"
fi
