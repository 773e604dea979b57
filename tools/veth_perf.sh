#!/usr/bin/env bash
# Runs `zipccl perf` across two network namespaces joined by a veth pair, both directions shaped
# with `tc tbf` to RATE - a stand-in for a real inter-node link. Needs root (ip netns, tc).
#
#   tools/veth_perf.sh RATE [zipccl perf options...]
#     RATE: a tc rate (1gbit, 2gbit, 10gbit) or "none" for an unshaped veth
#   env: ZIPCCL_BIN (default build/tools/zipccl), ZC_PREFIX (name prefix, default zcp)
#
# Only the namespaces, veth pair and addresses (10.77.0.1/24, 10.77.0.2/24) this script creates are
# touched; they are removed on exit.
set -euo pipefail

RATE=${1:-2gbit}
shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${ZIPCCL_BIN:-$ROOT/build/tools/zipccl}
P=${ZC_PREFIX:-zcp}
NS_R=${P}_recv
NS_S=${P}_send

if [ "$(id -u)" != 0 ]; then echo "veth_perf.sh: needs root (ip netns, tc)" >&2; exit 2; fi
if [ ! -x "$BIN" ]; then echo "veth_perf.sh: $BIN not built (set ZIPCCL_BIN)" >&2; exit 2; fi

cleanup() {
  ip netns del "$NS_R" 2>/dev/null || true
  ip netns del "$NS_S" 2>/dev/null || true
}
trap cleanup EXIT
cleanup

ip netns add "$NS_R"
ip netns add "$NS_S"
ip link add "${P}_r" type veth peer name "${P}_s"
ip link set "${P}_r" netns "$NS_R"
ip link set "${P}_s" netns "$NS_S"
ip -n "$NS_R" addr add 10.77.0.1/24 dev "${P}_r"
ip -n "$NS_S" addr add 10.77.0.2/24 dev "${P}_s"
for ns in "$NS_R" "$NS_S"; do ip -n "$ns" link set lo up; done
ip -n "$NS_R" link set "${P}_r" up
ip -n "$NS_S" link set "${P}_s" up

if [ "$RATE" != none ]; then
  # burst: 4 ms of traffic, at least 256 KiB (veth hands tbf 64 KiB GSO segments).
  bits=$(echo "$RATE" | awk '{r=tolower($0); m=1; if (r ~ /gbit$/) m=1e9; else if (r ~ /mbit$/) m=1e6; else if (r ~ /kbit$/) m=1e3; sub(/[a-z]+$/,"",r); print r*m}')
  burst=$(awk -v b="$bits" 'BEGIN{x=b/8*0.004; if (x<262144) x=262144; printf "%d", x}')
  tc -n "$NS_S" qdisc add dev "${P}_s" root tbf rate "$RATE" burst "$burst" latency 20ms
  tc -n "$NS_R" qdisc add dev "${P}_r" root tbf rate "$RATE" burst "$burst" latency 20ms
fi
echo "veth ${P}_s -> ${P}_r (10.77.0.2 -> 10.77.0.1), tbf rate $RATE"
"$BIN" perf --netns "$NS_R,$NS_S" --addr 10.77.0.1 --ifname "${P}_" "$@"
