#!/usr/bin/env bash
# tools/arm64_wheel.sh ROOT: the aarch64 wheel, zipccl-<v>-py3-none-manylinux_2_28_aarch64.whl, and its
# pytest suite on an arm64 CPython under qemu-aarch64 (tools/arm64_check.sh calls it; ROOT is the arm64
# userland of tools/arm64_root.sh).
#   - built by pip from the sdist, as `pip install zipccl-<v>.tar.gz` would, with the cross
#     toolchain of the AArch64 stage (tests/arm64/toolchain.cmake, passed to scikit-build-core as a
#     CMake define) and the same Zig link for glibc 2.28. The platform tag is set at the build
#     (wheel.tags): auditwheel's repair offers only this machine's architecture, but its `show`
#     reads aarch64 ELF files, and must find the wheel consistent with manylinux_2_28 or older;
#   - tests/python/check_abi.sh: no CPython module, no Py*/_Py* among the libraries' undefined symbols;
#   - a venv made by the arm64 interpreter (its own numpy, pytest and torch through --system-site-packages),
#     the wheel installed into it by pip run on that interpreter (so pip's tag check is arm64's), and
#     ml_dtypes' aarch64 wheel from PyPI; then tests/python under qemu, every child process (the
#     interpreter, the wheel's tool) started through the emulator (tests/python/spawn.py).
# The sdist and the build-side tools venv are the Python stage's (tests/python/run.sh, build-python)
# when there, else made here. The CMake build is kept in build-arm64-wheel/sdist between runs.
# Extra arguments go to pytest. Ends with pytest's summary line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo=$PWD
root=${1:?usage: tools/arm64_wheel.sh ARM64_ROOT [PYTEST_ARGS...]}
shift
work=${ZIPCCL_ARM64_WHEEL_BUILD:-$PWD/build-arm64-wheel}
py_work=${ZIPCCL_PY_BUILD:-$PWD/build-python}
step() { echo "-- arm64 wheel: $1 (at ${SECONDS} s)"; }
mkdir -p "$work"
work=$(cd "$work" && pwd)
emu=(qemu-aarch64 -L "$root")

tools=$py_work/tools
if [[ ! -x $tools/bin/auditwheel || ! -d $(echo "$tools"/lib/python3*/site-packages/scikit_build_core) ]]; then
  tools=$work/tools
  if [[ ! -x $tools/bin/auditwheel || ! -d $(echo "$tools"/lib/python3*/site-packages/scikit_build_core) ]]; then
    step "tools venv (auditwheel, scikit-build-core)"
    rm -rf "$tools"
    /usr/bin/python3 -m venv "$tools"
    "$tools/bin/pip" install -q auditwheel "scikit-build-core>=0.10"
  fi
fi

rm -rf "$work/dist" "$work/wheelhouse"
mkdir -p "$work/dist" "$work/wheelhouse"
sdist=$(ls "$py_work"/dist/zipccl-*.tar.gz 2>/dev/null | head -n 1 || true)
if [[ -z $sdist ]]; then
  step "sdist"
  sdist=$(tools/sdist.sh "$tools/bin/python" "$work/dist")
fi
echo "sdist: $sdist"

step "wheel (pip wheel of the unpacked sdist, cross-compiled for aarch64, configured as build-arm64)"
# tools/pip_wheel_like.sh: with ccache, the compiles are those of tools/arm64_check.sh's build-arm64.
ZIPCCL_ARM64_ROOT=$root "$repo/tools/pip_wheel_like.sh" "$tools/bin/pip" "$sdist" "$work/sdist" "$repo/build-arm64" \
  "$work/wheelhouse" \
  --config-settings=cmake.define.ZIPCCL_CUDA=OFF \
  --config-settings=cmake.define.CMAKE_TOOLCHAIN_FILE="$repo/tests/arm64/toolchain.cmake" \
  --config-settings=wheel.tags=py3-none-manylinux_2_28_aarch64
wheel=$(ls "$work"/wheelhouse/zipccl-*-py3-none-manylinux_2_28_aarch64.whl)
echo "wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"

step "auditwheel show, check_abi"
show=$("$tools/bin/auditwheel" show "$wheel")
echo "$show"
consistent=$(tr -s ' \n' ' ' <<<"$show" | grep -o 'consistent with the following platform tag: "manylinux_2_[0-9]*_aarch64"' |
  grep -o '2_[0-9]*' | cut -d_ -f2 || true)
if [[ -z $consistent ]] || ((consistent > 28)); then
  echo "arm64_wheel: auditwheel does not find the wheel consistent with manylinux_2_28_aarch64 or older" >&2
  exit 1
fi
tests/python/check_abi.sh --strict "$wheel"

step "venv of the arm64 CPython, pip install the wheel (under qemu)"
rm -rf "$work/venv"
"${emu[@]}" "$root/usr/bin/python3" -m venv --without-pip --system-site-packages "$work/venv"
py=$work/venv/bin/python3
np=$("${emu[@]}" "$py" -c 'import numpy; print(numpy.__version__)')
# pip itself is pure Python: the tools venv's copy, run by the arm64 interpreter. ml_dtypes' aarch64
# wheel, held to the root's numpy, is fetched by pip on this machine (fast) and installed with the wheel.
pip_dir=$(echo "$tools"/lib/python3*/site-packages/pip)
rm -rf "$work/deps"
"$tools/bin/pip" download -q --only-binary=:all: --platform manylinux2014_aarch64 \
  --python-version "$("${emu[@]}" "$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
  -d "$work/deps" ml_dtypes "numpy==$np"
"${emu[@]}" "$py" "$pip_dir" install -q --no-index --no-deps --disable-pip-version-check --no-compile \
  "$wheel" "$work"/deps/ml_dtypes-*.whl

step "pytest tests/python (qemu-aarch64)"
# From outside the source tree, so that `import zipccl` can only be the installed wheel.
cd "$work"
CI=${CI:-} ZIPCCL_WHEEL="$wheel" ZIPCCL_SDIST="$sdist" ZIPCCL_TEST_EMULATOR="${emu[*]}" \
  ZIPCCL_TEST_CC=aarch64-linux-gnu-gcc "${emu[@]}" "$py" -m pytest -p no:cacheprovider -q -rs \
  "$repo/tests/python" "$@"
step "done"
