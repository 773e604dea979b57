#!/usr/bin/env bash
# tools/pip_wheel_like.sh PIP SDIST WORK REFBUILD OUTDIR [PIP_WHEEL_ARGS...]
# The wheel of the sdist tarball SDIST, built by `PIP wheel` (scikit-build-core drives the CMake build,
# as for `pip install SDIST`) into OUTDIR, from the sdist unpacked into WORK/<name>, with the CMake
# build folder WORK/<name>/build kept between runs (a rerun rebuilds what changed).
#
# Configured as the build folder REFBUILD was (tools/setup.sh's build/, tools/arm64_check.sh's
# build-arm64): the same generator and compilers. With ccache, whose base folder is the repository,
# the wheel's compiles are then REFBUILD's own - the same sources, flags and paths relative to the
# compiling folder, as WORK/<name>/build stands beside the sdist's sources as REFBUILD beside the
# repository's - so the tests' wheel builds take seconds instead of compiling the plugin, the tool and
# the C API again. Without ccache, or with another configuration, they compile as usual.
set -euo pipefail
pip=$1 sdist=$2 work=$3 ref=$4 out=$5
shift 5
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

name=$(basename "$sdist" .tar.gz)
src=$work/$name
mkdir -p "$src" "$out"
# Everything but the kept build folder is replaced: a source removed since the last run must go.
find "$src" -mindepth 1 -maxdepth 1 ! -name build -exec rm -rf {} +
tar -xzf "$sdist" -C "$work"

cache=$ref/CMakeCache.txt
if [[ -f $cache ]]; then
  cached() { sed -n "s/^$1:[A-Z]*=//p" "$cache" | head -n 1; }
  generator=$(cached CMAKE_GENERATOR)
  [[ -z $generator ]] || export CMAKE_GENERATOR=$generator
  # A toolchain file (cross builds) names the compilers itself.
  if [[ -z $(cached CMAKE_TOOLCHAIN_FILE) ]]; then
    for v in CC:CMAKE_C_COMPILER CXX:CMAKE_CXX_COMPILER CUDACXX:CMAKE_CUDA_COMPILER; do
      c=$(cached "${v#*:}")
      [[ -z $c || $c == *NOTFOUND* ]] || export "${v%%:*}=$c"
    done
  fi
fi
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$repo}
  for l in C CXX CUDA; do export "CMAKE_${l}_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}"; done
fi
CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} "$pip" wheel -q "$src" -w "$out" --no-deps \
  --config-settings=build-dir="$src/build" "$@"
