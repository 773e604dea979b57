#!/usr/bin/env bash
# usage: shipped_check.sh CHECK BUILD_DIR ROOT
# The aarch64 build's shipped binaries, run under qemu-aarch64 with ROOT (an arm64 userland,
# tools/arm64_root.sh) as the -L prefix: the programs see its glibc and libraries, not this machine's.
#   tool  the zipccl tool round-trips a file (compress, decompress, cmp; coded frames, not raw ones),
#         its output is the same bytes whatever the thread count, and a truncated stream is an error
#         (exit status 1 and a message), not a crash; an exception thrown in the tool is caught there;
#   doctor  `zipccl doctor` dlopens the plugin as NCCL does and drives init/devices/getProperties;
#   deb   the .deb (cpack in BUILD_DIR) is arm64, holds aarch64 binaries, asks for libc6 (>= 2.28),
#         and its tool finds its plugin by name through the loader path.
set -euo pipefail
check=$1
build=$2
root=$3
qemu=(qemu-aarch64 -L "$root")
zipccl=$build/tools/zipccl
plugin=$build/plugin/libnccl-net-zipccl.so
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export NCCL_SOCKET_IFNAME=lo

case $check in
  tool)
    # 1 Mi bf16 elements with few exponents (as oldlibc_check.sh's): coded frames.
    perl -e 'srand(7); print pack("v*", map { (int(rand(2)) << 15) | ((118 + int(rand(4))) << 7) | int(rand(128)) } 1 .. (1 << 20))' \
      >"$tmp/in.bf16"
    "${qemu[@]}" "$zipccl" compress -t bf16 "$tmp/in.bf16" "$tmp/in.zc"
    "${qemu[@]}" "$zipccl" compress -t bf16 --threads 4 "$tmp/in.bf16" "$tmp/in4.zc"
    "${qemu[@]}" "$zipccl" decompress "$tmp/in.zc" "$tmp/out.bf16"
    cmp "$tmp/in.bf16" "$tmp/out.bf16"
    cmp "$tmp/in.zc" "$tmp/in4.zc"
    in=$(stat -c %s "$tmp/in.bf16")
    out=$(stat -c %s "$tmp/in.zc")
    ((out < in * 9 / 10)) || { echo "compressed to $out of $in bytes: not coded"; exit 1; }
    # A truncated stream (the format has no checksum, so a cut, not a flipped bit, is what is always
    # detected): an error with a message, never a signal.
    head -c $((out - 100)) "$tmp/in.zc" >"$tmp/bad.zc"
    rc=0
    "${qemu[@]}" "$zipccl" decompress "$tmp/bad.zc" "$tmp/bad.bf16" 2>"$tmp/bad.err" || rc=$?
    cat "$tmp/bad.err"
    [[ $rc -eq 1 && -s $tmp/bad.err ]] || { echo "truncated stream: exit status $rc, not 1 with a message"; exit 1; }
    # A usage error is thrown and caught inside the tool (cmd_plan): its static C++ runtime finds the
    # unwind tables through glibc_compat.c's _dl_find_object on aarch64 too - exit 2, not an abort.
    rc=0
    "${qemu[@]}" "$zipccl" plan --no-such-option 2>"$tmp/plan.err" || rc=$?
    [[ $rc -eq 2 ]] && grep -q "unknown option '--no-such-option'" "$tmp/plan.err" ||
      { cat "$tmp/plan.err"; echo "usage error: exit status $rc, not 2"; exit 1; }
    echo "aarch64 tool: $in bytes -> $out bytes -> identical; 4 threads: same frames; truncated stream: exit 1; thrown usage error caught: exit 2"
    ;;
  doctor)
    out=$("${qemu[@]}" "$zipccl" doctor --plugin "$plugin" --nccl-version 2.27)
    echo "$out"
    grep '^verdict: OK' <<<"$out" | cut -c1-100
    ;;
  deb)
    (cd "$build" && cpack -G DEB -B "$tmp/deb" >/dev/null)
    deb=$(ls "$tmp"/deb/*.deb)
    dpkg-deb -I "$deb"
    [[ $(dpkg-deb -f "$deb" Architecture) == arm64 ]] || { echo "Architecture is not arm64"; exit 1; }
    [[ $(dpkg-deb -f "$deb" Depends) == "libc6 (>= 2.28)"* ]] || { echo "Depends does not ask for libc6 (>= 2.28)"; exit 1; }
    dpkg-deb -x "$deb" "$tmp/inst"
    for f in usr/bin/zipccl usr/lib/libnccl-net-zipccl.so usr/lib/libzipccl.so; do
      file -b "$tmp/inst/$f" | grep -q 'ARM aarch64' || { echo "$f: $(file -b "$tmp/inst/$f")"; exit 1; }
    done
    # The installed tool loads the installed plugin by name (NCCL_NET_PLUGIN=zipccl's way).
    out=$("${qemu[@]}" -E LD_LIBRARY_PATH="$tmp/inst/usr/lib" "$tmp/inst/usr/bin/zipccl" doctor --nccl-version 2.27)
    grep -q '^verdict: OK' <<<"$out" || { echo "$out"; exit 1; }
    echo "$(basename "$deb"): arm64, Depends: $(dpkg-deb -f "$deb" Depends); installed tool loads the plugin by name"
    ;;
  *)
    echo "shipped_check.sh: unknown check $check" >&2
    exit 2
    ;;
esac
