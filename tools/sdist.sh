#!/usr/bin/env bash
# tools/sdist.sh PYTHON OUTDIR: the sdist of the repository, made by scikit-build-core's build_sdist
# (PYTHON has it installed) into OUTDIR; prints the tarball's path. The files keep their own times rather
# than the reproducible sdist's fixed one, so that the CMake build kept beside the unpacked sdist
# (tools/pip_wheel_like.sh) sees which sources changed since the last run.
set -euo pipefail
py=$1 out=$2
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "${BASH_SOURCE[0]}")/.."
name=$("$py" -c 'import sys
from scikit_build_core.build import build_sdist
print(build_sdist(sys.argv[1], {"sdist.reproducible": "false"}))' "$out" | tail -n 1)
echo "$out/$name"
