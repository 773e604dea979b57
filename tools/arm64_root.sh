#!/usr/bin/env bash
# tools/arm64_root.sh: prints the path of an arm64 Debian (bookworm) userland unpacked into a folder,
# making it first when missing: CPython 3.11 with numpy, pytest and torch (Debian's CPU python3-torch,
# for the wheel's torch tests), and libzstd/liblz4 with their headers. tools/arm64_check.sh builds
# against its libraries and runs the aarch64 programs - the zipccl tool, the plugin's tests, that
# Python - with it as qemu-aarch64's -L prefix: no chroot, no binfmt, no arm64 architecture added to
# this machine's dpkg.
#
# apt-get resolves and downloads the packages with a state of its own (arm64 lists, an empty status
# file) inside the root's work folder, and dpkg-deb -x unpacks each; no maintainer script runs, so
# the two alternatives numpy needs (libblas.so.3, liblapack.so.3) are linked here by hand.
# Made once and kept: ZIPCCL_ARM64_ROOT (default /var/cache/zipccl/arm64-bookworm, outside the
# clone, so CI's fresh clones reuse it); remade when the package list below changes. Root (apt's
# download sandbox, /var/cache).
#   tools/arm64_root.sh          # make if needed; print the path
#   tools/arm64_root.sh --python # ... and check the interpreter: numpy imports, the machine is aarch64
set -euo pipefail
root=${ZIPCCL_ARM64_ROOT:-/var/cache/zipccl/arm64-bookworm}
mirror=${ZIPCCL_ARM64_MIRROR:-http://deb.debian.org/debian}
security=${ZIPCCL_ARM64_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
# libstdc++6: the test programs (GoogleTest, linked as usual) load it; the shipped binaries carry theirs.
# python3-torch is ~340 of the ~400 packages (1.1 GB unpacked); made in ~70 s on a 2-core machine.
packages=(python3 python3-numpy python3-pytest python3-torch libzstd-dev liblz4-dev libstdc++6)
# ZIPCCL_ARM64_EXTRA: more packages (a root whose list changed is made again: the stamp below).
read -ra extra <<<"${ZIPCCL_ARM64_EXTRA:-}"
packages+=("${extra[@]}")
stamp="bookworm, compiled, ${packages[*]}"

command -v dpkg-deb >/dev/null || { echo "arm64_root: dpkg-deb missing (Debian: dpkg)" >&2; exit 1; }
command -v qemu-aarch64 >/dev/null || { echo "arm64_root: qemu-aarch64 missing (Debian: qemu-user)" >&2; exit 1; }
mkdir -p "$(dirname "$root")"
exec 9>"$root.lock"
flock 9

if [[ ! -f $root/.zipccl-root || $(cat "$root/.zipccl-root") != "$stamp" ]]; then
  [[ $(id -u) -eq 0 ]] || { echo "arm64_root: making $root needs root (or set ZIPCCL_ARM64_ROOT to a writable path)" >&2; exit 1; }
  t0=$SECONDS
  work=$root.work
  rm -rf "$work" "$root.tmp"
  mkdir -p "$work/lists/partial" "$work/archives/partial" "$root.tmp"
  : >"$work/status"
  keyring=/usr/share/keyrings/debian-archive-keyring.gpg
  cat >"$work/sources.list" <<EOF
deb [arch=arm64 signed-by=$keyring] $mirror bookworm main
deb [arch=arm64 signed-by=$keyring] $mirror bookworm-updates main
deb [arch=arm64 signed-by=$keyring] $security bookworm-security main
EOF
  # Everything apt reads or writes is in $work: this machine's sources, preferences, lists and dpkg
  # database are neither used nor touched. The empty status makes apt fetch every dependency.
  apt=(apt-get -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/nonexistent
       -o Dir::Etc::Preferences=/nonexistent -o Dir::Etc::PreferencesParts=/nonexistent
       -o Dir::State::Lists="$work/lists" -o Dir::State::status="$work/status"
       -o Dir::Cache="$work" -o Dir::Cache::archives="$work/archives"
       -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=
       -o APT::Architecture=arm64 -o APT::Architectures=arm64 -o APT::Install-Recommends=false
       -o Debug::NoLocking=1)
  if ! { "${apt[@]}" update && "${apt[@]}" install --download-only -y "${packages[@]}"; } >"$work/apt.log" 2>&1; then
    tail -n 20 "$work/apt.log" >&2
    echo "arm64_root: apt-get failed (log: $work/apt.log)" >&2
    exit 1
  fi
  n=0
  for deb in "$work"/archives/*.deb; do
    dpkg-deb -x "$deb" "$root.tmp"
    n=$((n + 1))
  done
  # update-alternatives' links (libblas3's and liblapack3's postinst).
  lib=$root.tmp/usr/lib/aarch64-linux-gnu
  ln -sf blas/libblas.so.3 "$lib/libblas.so.3"
  ln -sf lapack/liblapack.so.3 "$lib/liblapack.so.3"
  # Debian compiles the modules to bytecode in postinst, which did not run: compile them now, once,
  # or every interpreter start under qemu compiles what it imports again (and this environment may
  # forbid writing .pyc files: PYTHONDONTWRITEBYTECODE). This machine's Python does it in seconds
  # where its bytecode format (magic number) is the same as the arm64 one's; otherwise the arm64 one.
  py=(qemu-aarch64 -L "$root.tmp" "$root.tmp/usr/bin/python3")
  magic='import importlib.util; print(importlib.util.MAGIC_NUMBER.hex())'
  compile=("${py[@]}")
  if [[ $(python3 -c "$magic" 2>/dev/null) == $("${py[@]}" -c "$magic") ]]; then compile=(python3); fi
  env -u PYTHONDONTWRITEBYTECODE "${compile[@]}" -m compileall -q -j 0 \
    "$root.tmp/usr/lib/python3.11" "$root.tmp/usr/lib/python3/dist-packages" >"$work/compileall.log" 2>&1 || true
  echo "$stamp" >"$root.tmp/.zipccl-root"
  rm -rf "$root"
  mv "$root.tmp" "$root"
  rm -rf "$work"
  echo "arm64_root: $n arm64 packages unpacked into $root in $((SECONDS - t0)) s" >&2
fi

if [[ ${1:-} == --python ]]; then
  qemu-aarch64 -L "$root" "$root/usr/bin/python3" -c \
    'import numpy, platform, sys; print(platform.machine(), "Python", sys.version.split()[0], "numpy", numpy.__version__)' >&2
fi
echo "$root"
