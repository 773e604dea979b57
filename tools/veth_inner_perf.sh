#!/usr/bin/env bash
# Goodput through an inner NCCL net plugin over the tc-shaped veth pair of tools/veth_perf.sh: the inner
# plugin alone (driven directly, as NCCL would) against zipccl over it (ZIPCCL_NET_INNER; never, always,
# auto), on bf16 gradient-like data and on random bytes. The inner plugin is aws-ofi-nccl over
# libfabric's tcp;ofi_rxm provider (tools/ofi_build.sh). Needs root (ip netns, tc).
#
#   tools/veth_inner_perf.sh [RATES] [ROUNDS] [SECONDS]
#     RATES: comma list of tc rates (default 1gbit,2gbit); ROUNDS: alternations of the two (default 3);
#     SECONDS: length of each run (default 3)
#   env: ZIPCCL_BIN (default build/tools/zipccl), ZIPCCL_PLUGIN (default build/plugin/...so),
#        ZIPCCL_OFI_LIB (default: tools/ofi_build.sh's output), ZIPCCL_JSON (default /tmp/veth_inner.jsonl)
#
# Prints each run's table, then the medians per rate and data (goodput in Gbit/s of uncompressed data).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
RATES=${1:-1gbit,2gbit}
ROUNDS=${2:-3}
SECS=${3:-3}
PLUGIN=${ZIPCCL_PLUGIN:-$ROOT/build/plugin/libnccl-net-zipccl.so}
OFI=${ZIPCCL_OFI_LIB:-$("$ROOT/tools/ofi_build.sh")}
JSON=${ZIPCCL_JSON:-/tmp/veth_inner.jsonl}
INNER=$OFI/libnccl-net-ofi.so
[ -f "$INNER" ] || { echo "veth_inner_perf.sh: $INNER missing (tools/ofi_build.sh)" >&2; exit 2; }

export LD_LIBRARY_PATH=$OFI${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export FI_PROVIDER=tcp OFI_NCCL_PROTOCOL=SENDRECV
# In each namespace the veth end is the only interface besides lo, which aws-ofi-nccl excludes itself.
unset FI_TCP_IFACE OFI_NCCL_EXCLUDE_TCP_IF ZIPCCL_NET_INNER
export ZC_PREFIX=${ZC_PREFIX:-zci}  # not veth_perf.sh's default: other runs may use that
rm -f "$JSON"

for rate in ${RATES//,/ }; do
  for ((round = 0; round < ROUNDS; ++round)); do
    for data in bf16 random; do
      # Alternate which goes first, so drift in the machine's load falls on both alike.
      for who in $( ((round % 2)) && echo "zipccl inner" || echo "inner zipccl"); do
        if [ "$who" = inner ]; then
          "$ROOT/tools/veth_perf.sh" "$rate" --plugin "$INNER" --modes never --data "$data" --no-baseline \
            --seconds "$SECS" --json "$JSON.part"
          sed "s/^{/{\"rate\":\"$rate\",\"stack\":\"inner alone\",/" "$JSON.part" >>"$JSON"
        else
          ZIPCCL_NET_INNER=$INNER "$ROOT/tools/veth_perf.sh" "$rate" --plugin "$PLUGIN" --modes never,always,auto \
            --data "$data" --no-baseline --seconds "$SECS" --json "$JSON.part"
          sed "s/^{/{\"rate\":\"$rate\",\"stack\":\"zipccl over inner\",/" "$JSON.part" >>"$JSON"
        fi
        rm -f "$JSON.part"
      done
    done
  done
done

python3 - "$JSON" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
groups = {}
for r in rows:
    groups.setdefault((r["rate"], r["data"], r["stack"], r["run"]), []).append(r)
print("\nmedians (Gbit/s of uncompressed data delivered; ratio = bytes in / bytes on the wire)")
print(f"{'rate':7} {'data':28} {'stack':18} {'mode':7} {'goodput':>8} {'vs inner':>9} {'ratio':>6} runs")
for (rate, data, stack, run), rs in sorted(groups.items()):
    g = statistics.median(r["gbps"] for r in rs)
    base = groups.get((rate, data, "inner alone", "never"))
    b = statistics.median(r["gbps"] for r in base) if base else 0
    ratio = statistics.median(r.get("ratio", 1) for r in rs)
    print(f"{rate:7} {data[:28]:28} {stack:18} {run:7} {g:8.3f} {g / b if b else 0:8.2f}x {ratio:6.3f} {len(rs)}")
PY
