#!/usr/bin/env bash
# `zipccl doctor` on each fabric of README "Which fabric?", laid out in a scratch folder that stands for /
# (ZIPCCL_FABRIC_ROOT): what the plugin finds, decides and why, and the verdict. The laid-out net
# plugins are the tests' stand-ins (a working loopback plugin as aws-ofi-nccl / the node's
# libnccl-net.so, a name-only GPUDirectTCPX) and, where tools/sharp_build.sh has run, the real
# nccl-rdma-sharp-plugins. Tests/tools/fabric_test.cpp asserts the same cases.
#
#   tools/fabric_examples.sh [BUILD_DIR]     (default: build)
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=$(cd "${1:-$repo/build}" && pwd)
zipccl=$build/tools/zipccl
plugin=$build/plugin/libnccl-net-zipccl.so
fake=$build/tests/plugin/inner/libnccl-net-fake-inner-0.so
tcpx=$build/tests/tools/libnccl-net-fake-tcpx.so
sharp=${ZIPCCL_SHARP_DIR:-/var/cache/zipccl/sharp}/default/libnccl-net.so
for f in "$zipccl" "$plugin" "$fake" "$tcpx"; do
  [[ -e $f ]] || { echo "fabric_examples.sh: $f is missing (cmake --build $build)" >&2; exit 2; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# node NAME: a fresh root; port DEV LINK RATE DRIVER; lib FILE FROM: FILE on the root's loader path.
node() { root=$work/$1; mkdir -p "$root/sys/class/net/lo" "$root/lib" "$root/etc"; }
port() {
  local d=$root/sys/class/infiniband/$1
  mkdir -p "$d/ports/1" "$d/device" "$root/sys/bus/pci/drivers/$4"
  echo "4: ACTIVE" >"$d/ports/1/state"
  echo "$2" >"$d/ports/1/link_layer"
  echo "$3" >"$d/ports/1/rate"
  ln -s "../../../../bus/pci/drivers/$4" "$d/device/driver"
}
iface() {
  mkdir -p "$root/sys/class/net/$1"
  echo "$2" >"$root/sys/class/net/$1/speed"
  echo up >"$root/sys/class/net/$1/operstate"
}
lib() { cp "$2" "$root/lib/$1"; }
# doctor TITLE ENV...: the run, its fabric/decision lines and verdict.
doctor() {
  local title=$1 rc=0
  shift
  echo "== $title"
  echo "\$ $* zipccl doctor"
  env -i PATH=/usr/bin:/bin HOME="$work" NCCL_SOCKET_IFNAME=lo ZIPCCL_FABRIC_ROOT="$root" LD_LIBRARY_PATH="$root/lib" \
    "$@" "$zipccl" doctor --plugin "$plugin" --nccl-version 2.28 >"$work/out" 2>&1 || rc=$?
  sed -n '/^fabric/,/^devices/p' "$work/out" | grep -v '^devices' | sed "s|$work|<root>|g"
  grep -E '^  init |WARN NET/zipccl : zipccl steps aside|^note: fabric|^verdict' "$work/out" | sed "s|$work|<root>|g"
  echo "(exit $rc)"
  echo
}

node ib && port mlx5_0 InfiniBand "400 Gb/sec (4X NDR)" mlx5_core
doctor "IB, nothing to wrap" NCCL_NET_PLUGIN=zipccl
node ibsharp && port mlx5_0 InfiniBand "400 Gb/sec (4X NDR)" mlx5_core
if [[ -e $sharp ]]; then
  cp "$sharp" "$root/lib/libnccl-net.so"
  doctor "IB with nccl-rdma-sharp-plugins as libnccl-net.so (the real one; no HCA here)" NCCL_NET_PLUGIN=zipccl
else
  echo "== IB with nccl-rdma-sharp-plugins: $sharp absent (tools/sharp_build.sh builds it)"
fi
node ibplug && port mlx5_0 InfiniBand "400 Gb/sec (4X NDR)" mlx5_core && lib libnccl-net.so "$fake"
doctor "IB with a working net plugin as libnccl-net.so (stand-in)" NCCL_NET_PLUGIN=zipccl
node roce && port mlx5_0 Ethernet "200 Gb/sec (4X HDR)" mlx5_core
doctor "RoCE, nothing to wrap" NCCL_NET_PLUGIN=zipccl
node efaofi && port rdmap16s27 Unspecified "100 Gb/sec (4X EDR)" efa && lib libnccl-net-ofi.so "$fake"
echo "NCCL_NET_PLUGIN=ofi" >"$root/etc/nccl.conf"
doctor "EFA with aws-ofi-nccl (stand-in; /etc/nccl.conf says ofi)" NCCL_NET_PLUGIN=zipccl
doctor "EFA with aws-ofi-nccl taking GPU memory, zipccl's GPU path off" NCCL_NET_PLUGIN=zipccl,ofi ZIPCCL_TEST_FAKE_CUDA=1
node efa && port rdmap16s27 Unspecified "100 Gb/sec (4X EDR)" efa
doctor "EFA without aws-ofi-nccl" NCCL_NET_PLUGIN=zipccl
node tcpx && lib libnccl-net.so "$tcpx"
doctor "TCPX plugin present, NCCL_NET_PLUGIN=zipccl" NCCL_NET_PLUGIN=zipccl
doctor "TCPX plugin present, listed after zipccl" NCCL_NET_PLUGIN=zipccl,libnccl-net.so
node tcp && iface eth0 25000
doctor "plain TCP" NCCL_NET_PLUGIN=zipccl
node ibsock && port mlx5_0 InfiniBand "400 Gb/sec (4X NDR)" mlx5_core
doctor "socket forced on IB" NCCL_NET_PLUGIN=zipccl ZIPCCL_TRANSPORT=socket
