#!/usr/bin/env bash
# Builds aws-ofi-nccl (libnccl-net-ofi.so, a real NCCL net plugin) from ../shared/third_party against
# the distribution's libfabric, for the inner-plugin tests (docs/notes/inner.md), plus the stand-in
# libcudart.so it needs on a machine without a CUDA driver (tests/inner/cudart_standin.c). Installs
# nothing: the packages (libfabric-dev libhwloc-dev autoconf automake libtool make pkg-config) come
# from .ci/run or tools/setup.sh.
#
#   tools/ofi_build.sh [OUT]     OUT: /var/cache/zipccl/ofi as root, else build-ofi (in the repo)
#
# Reuses OUT when it already holds a build of the same tarball and stand-in source (~1.5 min on 2
# cores otherwise). Prints OUT's lib folder last: put it first on LD_LIBRARY_PATH and point
# ZIPCCL_NET_INNER at lib/libnccl-net-ofi.so there. Exit 2 (with a message) when the tarball or a
# tool is missing, so callers can skip.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tarball=${ZIPCCL_OFI_TARBALL:-$(ls "$repo"/../shared/third_party/aws-ofi-nccl-*.tar.gz 2>/dev/null | head -n 1 || true)}
if [[ $(id -u) == 0 ]]; then default_out=/var/cache/zipccl/ofi; else default_out=$repo/build-ofi; fi
out=${1:-$default_out}
standin=$repo/tests/inner/cudart_standin.c

if [[ -z "$tarball" || ! -f "$tarball" ]]; then
  echo "ofi_build.sh: no aws-ofi-nccl tarball in ../shared/third_party (set ZIPCCL_OFI_TARBALL)" >&2
  exit 2
fi
for tool in autoreconf libtoolize make cc c++ pkg-config; do
  command -v "$tool" >/dev/null || { echo "ofi_build.sh: $tool not found (tools/setup.sh installs it)" >&2; exit 2; }
done
pkg-config --exists libfabric || { echo "ofi_build.sh: libfabric-dev not installed" >&2; exit 2; }

# The cache key: the tarball, the stand-in's source and libfabric's version.
key=$( (sha256sum "$tarball" "$standin" | cut -d' ' -f1; pkg-config --modversion libfabric) | sha256sum | cut -c1-16)
if [[ -f "$out/lib/libnccl-net-ofi.so" && -f "$out/lib/libcudart.so" && "$(cat "$out/key" 2>/dev/null)" == "$key" ]]; then
  echo "ofi_build.sh: cached build in $out" >&2
  echo "$out/lib"
  exit 0
fi

jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
src=$(echo "$work"/*/)
log=$work/build.log
echo "ofi_build.sh: building $(basename "$tarball") into $out (log: $out/build.log)" >&2
(
  cd "$src"
  ./autogen.sh
  mkdir b && cd b
  # --disable-platform-aws: that platform needs libfabric >= 1.22. No --with-libfabric=/usr: its
  # -isystem /usr/include breaks libstdc++'s #include_next <stdlib.h>; configure finds it unaided.
  # --enable-cudart-dynamic: cudart is dlopen'ed by name, so the stand-in can answer.
  ../configure --with-cuda="${CUDA_HOME:-/usr/local/cuda}" --disable-platform-aws --disable-tests \
    --enable-cudart-dynamic
  make -j"$jobs"
) >"$log" 2>&1 || { mkdir -p "$out"; cp "$log" "$out/build.log"; tail -n 40 "$log" >&2; echo "ofi_build.sh: build failed" >&2; exit 1; }
mkdir -p "$out/lib"
cp "$src/b/src/.libs/libnccl-net-ofi.so" "$out/lib/"
cp "$src/LICENSE" "$out/LICENSE.aws-ofi-nccl" 2>/dev/null || true
cc -shared -fPIC -O2 -fvisibility=hidden -o "$out/lib/libcudart.so" "$standin"
cp "$log" "$out/build.log"
echo "$key" >"$out/key"
echo "$out/lib"
