#!/usr/bin/env bash
# tools/oldlibc_check.sh [BUILD_DIR]: the shipped binaries of a Release build (default build/, built
# before) on a real old userland, not only by their symbol lists (test glibc_baseline): a Debian
# bullseye root (glibc 2.31, as old as Ubuntu 20.04's) made with debootstrap, in which, under chroot,
#   - the zipccl tool starts, round-trips a file (compress, decompress, cmp) and catches its own
#     exception (a usage error);
#   - `zipccl doctor` dlopens the plugin, as NCCL does, and drives init/devices/getProperties;
#   - `zipccl perf` runs two processes through the plugin, raw and compressed, bit-checked;
#   - the .deb (cpack in BUILD_DIR) installs with dpkg, its Depends satisfied by bullseye's
#     packages, and the installed tool finds the installed plugin through the loader path.
# Ends in a ctest-like summary line (tools/test.sh count_passed). Root (chroot, mounts, dpkg).
# The root is made once and kept: ZIPCCL_OLDLIBC_ROOT (default /var/cache/zipccl/bullseye, outside
# the clone, so CI's fresh clones reuse it); making it took 40-90 s here (Debian's mirror, busy cores).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
root=${ZIPCCL_OLDLIBC_ROOT:-/var/cache/zipccl/bullseye}
suite=bullseye
mirror=${ZIPCCL_OLDLIBC_MIRROR:-http://deb.debian.org/debian}

[[ $(id -u) -eq 0 ]] || { echo "oldlibc_check: needs root (chroot, mount, dpkg)" >&2; exit 1; }
zipccl=$build/tools/zipccl
plugin=$build/plugin/libnccl-net-zipccl.so
for f in "$zipccl" "$plugin" "$build/CPackConfig.cmake"; do
  [[ -e $f ]] || { echo "oldlibc_check: $f missing (build $build first)" >&2; exit 1; }
done

# One run at a time per root: the mounts and the dpkg database are shared.
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9

if [[ ! -x $root/usr/bin/dpkg ]]; then
  if ! command -v debootstrap >/dev/null; then
    echo "oldlibc_check: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  echo "oldlibc_check: making the $suite root in $root (once; kept for later runs)"
  t0=$SECONDS
  rm -rf "$root.tmp"
  if ! debootstrap --variant=minbase "$suite" "$root.tmp" "$mirror" >"$root.log" 2>&1; then
    tail -n 20 "$root.log" >&2
    echo "oldlibc_check: debootstrap failed (log: $root.log)" >&2
    exit 1
  fi
  mv "$root.tmp" "$root"
  echo "oldlibc_check: $suite root made in $((SECONDS - t0)) s"
fi

work=/tmp/zipccl-oldlibc.$$  # inside the root
mounted=()
cleanup() {
  chroot "$root" dpkg --purge zipccl >/dev/null 2>&1 || true
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount "${mounted[i]}" 2>/dev/null || umount -l "${mounted[i]}" || true; done
  rm -rf "$root$work" "$tmp"
}
tmp=$(mktemp -d)
trap cleanup EXIT
# perf's processes and doctor read /proc; the plugin's shared memory and semaphores use /dev/shm.
for m in proc dev/shm; do
  mkdir -p "$root/$m"
  if [[ $m == proc ]]; then mount -t proc proc "$root/proc"; else mount -t tmpfs tmpfs "$root/$m"; fi
  mounted+=("$root/$m")
done
mkdir -p "$root$work"
cp "$zipccl" "$plugin" "$root$work/"
# LD_BIND_NOW: every symbol of the tool, the plugin and their libraries (bullseye's libzstd, liblz4)
# is bound at load, so a missing one fails the check at once, not at its first call.
in_root() { chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root NCCL_SOCKET_IFNAME=lo LD_BIND_NOW=1 "$@"; }

passed=0
failed=0
rows=()
# check NAME CMD...: one row; the command's output goes to $tmp/NAME.log, shown when it fails. The
# command runs in a subshell with errexit on: any step that fails fails the check (errexit is off
# inside an `if` condition, so the status is taken after).
check() {
  local name=$1 t0=$SECONDS rc
  shift
  set +e
  (
    set -e
    "$@"
  ) >"$tmp/$name.log" 2>&1
  rc=$?
  set -e
  if ((rc == 0)); then
    passed=$((passed + 1))
    rows+=("$(printf '%-14s %-5s %4ss  %s' "$name" ok $((SECONDS - t0)) "$(tail -n 1 "$tmp/$name.log")")")
  else
    failed=$((failed + 1))
    rows+=("$(printf '%-14s %-5s %4ss  %s' "$name" FAIL $((SECONDS - t0)) "$(tail -n 1 "$tmp/$name.log")")")
    echo "---- $name (last lines)" >&2
    tail -n 20 "$tmp/$name.log" >&2
  fi
}

glibc_is_old() {
  local v
  v=$(in_root ldd --version)
  v=${v%%$'\n'*}
  echo "$v"
  [[ $v == *" 2.31" ]]
}
tool_starts() { in_root "$work/zipccl" --version; }
round_trip() {
  # 1 Mi bf16 elements with few exponents: coded frames, not raw ones.
  perl -e 'srand(7); print pack("v*", map { (int(rand(2)) << 15) | ((118 + int(rand(4))) << 7) | int(rand(128)) } 1 .. (1 << 20))' \
    >"$root$work/in.bf16"
  in_root "$work/zipccl" compress -t bf16 "$work/in.bf16" "$work/in.zc"
  in_root "$work/zipccl" decompress "$work/in.zc" "$work/out.bf16"
  cmp "$root$work/in.bf16" "$root$work/out.bf16"
  echo "2 MiB -> $(stat -c %s "$root$work/in.zc") bytes -> identical"
}
tool_exception() {
  # cmd_plan throws its usage errors and catches them: exit status 2 and the message, not an abort.
  local rc=0 out
  out=$(in_root "$work/zipccl" plan --no-such-option 2>&1) || rc=$?
  echo "$out"
  [[ $rc -eq 2 ]] || { echo "exit status $rc, not 2"; return 1; }
  grep -q "unknown option '--no-such-option'" <<<"$out"
  echo "usage error thrown and caught: exit status 2"
}
doctor() {
  local out
  out=$(in_root "$work/zipccl" doctor --plugin "$work/libnccl-net-zipccl.so" --nccl-version 2.27)
  echo "$out"
  grep '^verdict: OK' <<<"$out" | cut -c1-100
}
perf() {
  in_root "$work/zipccl" perf --plugin "$work/libnccl-net-zipccl.so" --seconds 1 --size 1M \
    --modes never,always --no-baseline >"$tmp/perf.out"
  cat "$tmp/perf.out"
  # Both runs listed and bit-exact.
  [[ $(grep -cE '^  ZIPCCL_COMPRESS=(never|always) .* yes$' "$tmp/perf.out") -eq 2 ]]
  echo "never and always: bit-exact"
}
deb_installs() {
  rm -rf "$tmp/deb"
  (cd "$build" && cpack -G DEB -B "$tmp/deb" >/dev/null)
  local deb
  deb=$(ls "$tmp"/deb/*.deb)
  echo "Depends: $(dpkg-deb -f "$deb" Depends)"
  cp "$deb" "$root$work/zipccl.deb"
  in_root dpkg -i "$work/zipccl.deb"
  in_root dpkg -s zipccl | grep -q '^Status: install ok installed'
  # The installed tool finds the installed plugin by name through the loader path, as NCCL does.
  local out
  out=$(in_root zipccl doctor --nccl-version 2.27)
  echo "$out"
  grep -q '^verdict: OK' <<<"$out"
  echo "dpkg -i ok; Depends: $(dpkg-deb -f "$deb" Depends)"
}

check userland glibc_is_old
check tool tool_starts
check round-trip round_trip
check tool-throw tool_exception
check doctor doctor
check perf perf
check deb deb_installs

echo
printf '%-14s %-5s %5s  %s\n' "check ($suite)" result time detail
for r in "${rows[@]}"; do echo "$r"; done
if ((failed)); then
  echo "oldlibc_check: $failed of $((passed + failed)) checks failed"
  exit 1
fi
echo "100% tests passed, 0 tests failed out of $passed"
