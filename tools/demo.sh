#!/usr/bin/env bash
# The demo: builds zipccl, then runs the NCCL net plugin end to end between two processes on this
# machine with built-in bf16 gradient-like data, raw vs compressed, bit-exactness checked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/setup.sh
exec ./build/tools/zipccl perf "$@"
