#!/usr/bin/env bash
# Installs what the build needs (Debian, as root; skipped when already present) and builds zipccl
# into build/ (Release): everything, or only the targets a caller names in ZIPCCL_BUILD_TARGETS
# (demo.sh: the tool and the plugin). Sourced by demo.sh and test.sh; safe to run again.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PACKAGES=(cmake g++ make clang pkg-config libgtest-dev libzstd-dev liblz4-dev libibverbs-dev iproute2)
# install_missing [APT_OPTION...] -- PACKAGE...: installs those not installed, as root; otherwise exits
# with the apt-get command to run.
install_missing() {
  local options=() missing=() p
  while [[ $1 != -- ]]; do options+=("$1"); shift; done
  shift
  for p in "$@"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) -ne 0 ]]; then
    echo "zipccl setup: missing packages: ${missing[*]} (run as root, or: sudo apt-get install ${options[*]:+${options[*]} }${missing[*]})" >&2
    exit 1
  fi
  echo "zipccl setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${options[@]}" "${missing[@]}" >/dev/null
}
install_missing -- "${PACKAGES[@]}"
# What tools/test.sh's stages need beyond the build (it sets ZIPCCL_TEST_PACKAGES and
# ZIPCCL_TEST_PY_PACKAGES before sourcing this); the Python ones without their recommends:
# python3-torch's add ~150 MB of unrelated media and GIS libraries.
if [[ -n ${ZIPCCL_TEST_PACKAGES[*]:-} ]]; then
  install_missing -- "${ZIPCCL_TEST_PACKAGES[@]}"
fi
if [[ -n ${ZIPCCL_TEST_PY_PACKAGES[*]:-} ]]; then
  install_missing --no-install-recommends -- "${ZIPCCL_TEST_PY_PACKAGES[@]}"
fi

# Zig links the plugin and the tool against glibc 2.28's symbols, so that they load on older
# clusters than this machine (tools/cmake/glibc_baseline.cmake); without it they need this glibc.
if ! command -v zig >/dev/null && ! python3 -m ziglang version >/dev/null 2>&1; then
  echo "zipccl setup: installing ziglang (PyPI)"
  # A distribution's own Python refuses pip installs (PEP 668); ziglang is one self-contained binary
  # wheel with no dependencies, so installing it past that guard touches nothing of the system's.
  python3 -m pip install -q ziglang==0.17.1 2>/dev/null ||
    python3 -m pip install -q --break-system-packages ziglang==0.17.1 ||
    echo "zipccl setup: could not install ziglang; the binaries will need this machine's glibc" >&2
fi

# CUDA is optional: nvcc is used when found (compiles here, runs on a GPU machine).
if [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
# With ccache installed (tools/test.sh installs it), builds configured from here on compile through it,
# with the repository as its base folder: the tests' wheel builds then take build/'s objects from the
# cache (tools/pip_wheel_like.sh). A launcher the caller set is kept.
if command -v ccache >/dev/null && [[ -z ${CMAKE_CXX_COMPILER_LAUNCHER:-} ]]; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache \
    CMAKE_CUDA_COMPILER_LAUNCHER=ccache
fi
JOBS=${JOBS:-$(nproc)}
log=$(mktemp)
if ! cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1; then
  cat "$log" >&2
  exit 1
fi
rm -f "$log"
cmake --build build -j"$JOBS" ${ZIPCCL_BUILD_TARGETS[*]:+--target ${ZIPCCL_BUILD_TARGETS[*]}}
