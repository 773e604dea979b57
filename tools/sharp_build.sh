#!/usr/bin/env bash
# Builds nccl-rdma-sharp-plugins (NVIDIA's IB verbs net plugin, net table "IBext", HPC-X's
# libnccl-net.so) from ../shared/third_party against the distribution's libibverbs, for the
# inner-plugin tests (docs/notes/inner.md). Installs nothing: the packages (libibverbs-dev autoconf
# automake libtool make) come from .ci/run or tools/setup.sh.
#
#   tools/sharp_build.sh [OUT]   OUT: /var/cache/zipccl/sharp as root, else build-sharp-plugin (in the repo)
#
# The library goes to OUT/lib/libnccl-net-sharp.so (its own name, libnccl-net.so, is NCCL's default
# plugin name: on LD_LIBRARY_PATH it would be picked up by any NCCL) and, for tests that want that
# default name, to OUT/default/libnccl-net.so (a link to the first; keep that folder off
# LD_LIBRARY_PATH unless that is the point).
#
# Its configure wants CUDA's runtime header and cudart (it links cudart statically but calls none of
# it): CUDA in $ZIPCCL_SHARP_CUDA, else ${CUDA_HOME:-/usr/local/cuda} when it has them, else a
# stand-in (a header and an empty libcudart written here; ZIPCCL_SHARP_CUDA=standin forces it).
#
# Reuses OUT when it holds a build of the same tarball, script, CUDA and libibverbs (~1 min on 2 cores
# otherwise). Prints OUT's lib folder last. Exit 2 (with a message) when the tarball or a tool is
# missing, so callers can skip.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tarball=${ZIPCCL_SHARP_TARBALL:-$(ls "$repo"/../shared/third_party/nccl-rdma-sharp-plugins-*.tar.gz 2>/dev/null | head -n 1 || true)}
if [[ $(id -u) == 0 ]]; then default_out=/var/cache/zipccl/sharp; else default_out=$repo/build-sharp-plugin; fi
out=${1:-$default_out}

if [[ -z "$tarball" || ! -f "$tarball" ]]; then
  echo "sharp_build.sh: no nccl-rdma-sharp-plugins tarball in ../shared/third_party (set ZIPCCL_SHARP_TARBALL)" >&2
  exit 2
fi
for tool in autoreconf libtoolize aclocal automake make cc ar pkg-config; do
  command -v "$tool" >/dev/null ||
    { echo "sharp_build.sh: $tool not found (apt-get install autoconf automake libtool make pkg-config, as .ci/run does)" >&2; exit 2; }
done
pkg-config --exists libibverbs || { echo "sharp_build.sh: libibverbs-dev not installed (tools/setup.sh installs it)" >&2; exit 2; }

# CUDA: a folder with include/cuda_runtime.h and lib64/ or lib/ holding libcudart_static.a.
cuda_ok() { [[ -f "$1/include/cuda_runtime.h" ]] && ls "$1"/lib64/libcudart_static.a "$1"/lib/libcudart_static.a >/dev/null 2>&1; }
cuda=${ZIPCCL_SHARP_CUDA:-}
if [[ -n "$cuda" && "$cuda" != standin ]] && ! cuda_ok "$cuda"; then
  echo "sharp_build.sh: ZIPCCL_SHARP_CUDA=$cuda has no include/cuda_runtime.h and lib64/libcudart_static.a (or lib/); unset it for the stand-in" >&2
  exit 2
fi
if [[ -z "$cuda" ]]; then
  if cuda_ok "${CUDA_HOME:-/usr/local/cuda}"; then cuda=${CUDA_HOME:-/usr/local/cuda}; else cuda=standin; fi
fi
if [[ "$cuda" == standin ]]; then
  cuda_id=standin
else
  cuda_id="$cuda $(sed -n 's/^#define CUDART_VERSION *\([0-9]*\).*/\1/p' "$cuda/include/cuda_runtime_api.h" 2>/dev/null)"
fi

# The cache key: the tarball, this script (it holds the build's flags and the stand-in), the CUDA used
# and libibverbs' version.
key=$( (sha256sum "$tarball" "${BASH_SOURCE[0]}" | cut -d' ' -f1; echo "$cuda_id"; pkg-config --modversion libibverbs) \
  | sha256sum | cut -c1-16)
if [[ -f "$out/lib/libnccl-net-sharp.so" && -e "$out/default/libnccl-net.so" && "$(cat "$out/key" 2>/dev/null)" == "$key" ]]; then
  echo "sharp_build.sh: cached build in $out" >&2
  echo "$out/lib"
  exit 0
fi

jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tar -xzf "$tarball" -C "$work"
src=$(echo "$work"/*/)
log=$work/build.log

if [[ "$cuda" == standin ]]; then
  # What the plugin's headers take from cuda_runtime.h (include/nccl.h, include/core.h's CUDACHECK
  # macros, which no built source calls), and a cudart that satisfies configure's check and the
  # -lcudart_static of src/Makefile.am. The plugin references no CUDA symbol: nothing of it is linked.
  cuda=$work/cuda-standin
  mkdir -p "$cuda/include" "$cuda/lib64"
  cat >"$cuda/include/cuda_runtime.h" <<'EOF'
/* Stand-in written by zipccl's tools/sharp_build.sh: only what nccl-rdma-sharp-plugins' headers name. */
#ifndef ZIPCCL_SHARP_CUDA_RUNTIME_STANDIN_H
#define ZIPCCL_SHARP_CUDA_RUNTIME_STANDIN_H
#include <stddef.h>
typedef enum cudaError { cudaSuccess = 0, cudaErrorNoDevice = 100 } cudaError_t;
typedef struct CUstream_st* cudaStream_t;
const char* cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError(void);
cudaError_t cudaMalloc(void** ptr, size_t size);
#endif
EOF
  cat >"$work/cudart_standin.c" <<'EOF'
#include "cuda_runtime.h"
const char* cudaGetErrorString(cudaError_t error) { return error ? "no CUDA device (stand-in)" : "no error"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaMalloc(void** ptr, size_t size) { (void)size; if (ptr) *ptr = 0; return cudaErrorNoDevice; }
EOF
  cc -c -O2 -fPIC -I"$cuda/include" -o "$work/cudart_standin.o" "$work/cudart_standin.c"
  ar rcs "$cuda/lib64/libcudart_static.a" "$work/cudart_standin.o"
  ar rcs "$cuda/lib64/libcudart.a" "$work/cudart_standin.o"
fi

echo "sharp_build.sh: building $(basename "$tarball") into $out (CUDA: $cuda_id; log: $out/build.log)" >&2
(
  cd "$src"
  ./autogen.sh
  mkdir b && cd b
  # No UCX, no SHARP: the IB verbs transport only, whatever HPC-X the build machine may have (the
  # result must not depend on it). --disable-static: only the shared object is used.
  ../configure --with-cuda="$cuda" --without-ucx --without-sharp --disable-static
  make -j"$jobs"
) >"$log" 2>&1 || { mkdir -p "$out"; cp "$log" "$out/build.log"; tail -n 40 "$log" >&2; echo "sharp_build.sh: build failed" >&2; exit 1; }
rm -rf "$out/lib" "$out/default"
mkdir -p "$out/lib" "$out/default"
cp "$src/b/src/.libs/libnccl-net.so.0.0.0" "$out/lib/libnccl-net-sharp.so"
# A link, not a copy: dlopen of either path gives the same object (one plugin instance per process).
ln -s ../lib/libnccl-net-sharp.so "$out/default/libnccl-net.so"
cp "$src/LICENSE" "$out/LICENSE.nccl-rdma-sharp-plugins" 2>/dev/null || true
cp "$log" "$out/build.log"
echo "$key" >"$out/key"
echo "$out/lib"
