#!/usr/bin/env bash
# usage: python_check.sh ROOT LIBZIPCCL ZIPCCL_TOOL CAPI_PYTHON_PY
# Writes a bf16 file, compresses it with the aarch64 tool, and runs capi_python.py on the arm64
# CPython of ROOT (tools/arm64_root.sh) under qemu-aarch64 -L ROOT: no chroot, no binfmt.
set -euo pipefail
root=$1 lib=$2 tool=$3 script=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
perl -e 'srand(11); print pack("v*", map { (int(rand(2)) << 15) | ((120 + int(rand(5))) << 7) | int(rand(128)) } 1 .. (1 << 19))' \
  >"$tmp/in.bf16"
qemu-aarch64 -L "$root" "$tool" compress -t bf16 "$tmp/in.bf16" "$tmp/in.zc"
qemu-aarch64 -L "$root" "$root/usr/bin/python3" "$script" "$lib" "$tmp/in.zc" "$tmp/in.bf16"
