#!/usr/bin/env bash
# zipccl's socket transport against NCCL's stream count under per-flow caps (issue 37 item 6): two
# network namespaces joined by a veth pair whose aggregate is capped with tc tbf (LINK), every TCP
# flow capped at FLOW by tools/flowcap_shim.c (SO_MAX_PACING_RATE, honoured by TCP's own pacing
# without fq), as on clouds that cap each flow. Measured in one run, paired round by round:
#   ref     plain TCP, a blocking thread per stream, with as many data streams as NCCL's socket
#           transport would open for the chosen NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD (NCCL's
#           rules; on a veth "auto" is 0 x 1: NCCL sends on its one control socket, so one stream)
#   ref-nccl  where NCCL_NSOCKS_PERTHREAD > 1: the same streams in NCCL's shape, NCCL_SOCKET_NTHREADS
#           threads each polling its sockets (as NCCL's and zipccl's helper threads do)
#   tcp     where that is one stream: also `zipccl perf`'s own plain TCP stream (C++, same processes)
#   never, always, auto   `zipccl perf` through the plugin with the same two variables
# Needs root (ip netns, tc) and a C compiler (the shim is built into a temporary folder).
#
#   tools/flowcap_bench.sh [options]
#     --nthreads N|auto   NCCL_SOCKET_NTHREADS for NCCL's count and zipccl (default auto)
#     --nsocks N|auto     NCCL_NSOCKS_PERTHREAD (default auto)
#     --flow RATE[,RATE]  per-flow cap, kbit/mbit/gbit (default 1gbit); a list: the sockets of each
#                         process take the rates in turn (unequal flows, as on a multipath fabric)
#     --link RATE         aggregate tbf rate (default 8gbit)
#     --seconds S         length of every run (default 4)
#     --repeat R          rounds; medians are reported (default 3)
#     --data FILE         raw bf16 tensor (default /work/shared/data/gpt19m_grads_step1_layers2-3.bf16)
#     --modes LIST        zipccl modes (default never,always,auto; none: the references only)
#     --json FILE         append every run as JSON lines
#   env: ZIPCCL_BIN (default build/tools/zipccl), ZC_PREFIX (names, default zfc), CC (default cc),
#        FLOWCAP_PERF_ARGS (more `zipccl perf` options, e.g. "--idle-sleep-us 20")
#
# Only the namespaces, veth pair and addresses (10.78.0.1/24, 10.78.0.2/24) this script creates are
# touched; they are removed on exit. Traffic stays between those two namespaces.
set -euo pipefail

NTHREADS=auto NSOCKS=auto FLOW=1gbit LINK=8gbit SECONDS_=4 REPEAT=3 MODES=never,always,auto JSON=""
DATA=/work/shared/data/gpt19m_grads_step1_layers2-3.bf16
while [ $# -gt 0 ]; do
  case $1 in
    --nthreads) NTHREADS=$2; shift 2 ;;
    --nsocks) NSOCKS=$2; shift 2 ;;
    --flow) FLOW=$2; shift 2 ;;
    --link) LINK=$2; shift 2 ;;
    --seconds) SECONDS_=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --data) DATA=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    --json) JSON=$2; shift 2 ;;
    *) sed -n '2,32p' "$0"; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${ZIPCCL_BIN:-$ROOT/build/tools/zipccl}
P=${ZC_PREFIX:-zfc}
NS_R=${P}_recv NS_S=${P}_send
ADDR_R=10.78.0.1 PORT=47311
if [ "$(id -u)" != 0 ]; then echo "flowcap_bench.sh: needs root (ip netns, tc)" >&2; exit 2; fi
if [ "$MODES" != none ] && [ ! -x "$BIN" ]; then echo "flowcap_bench.sh: $BIN not built (set ZIPCCL_BIN)" >&2; exit 2; fi
if [ ! -f "$DATA" ]; then echo "flowcap_bench.sh: no data file $DATA" >&2; exit 2; fi

# The data streams NCCL's socket transport opens (net_socket.cc, ncclNetSocketGetNsockNthread): auto
# reads the veth's PCI vendor, which it has none of: 0 threads x 1 socket. More than 16 threads: 16;
# more than 64 sockets: 64 / threads per thread. 0 sockets: the data goes on the control socket.
nt=$NTHREADS ns=$NSOCKS
[ "$nt" = auto ] && nt=0
[ "$ns" = auto ] && ns=1
[ "$nt" -gt 16 ] && nt=16
[ $((nt * ns)) -gt 64 ] && ns=$((64 / nt))
REF_STREAMS=$((nt * ns))
[ "$REF_STREAMS" -eq 0 ] && REF_STREAMS=1

WORK=$(mktemp -d /tmp/flowcap.XXXXXX)
cleanup() {
  ip netns del "$NS_R" 2>/dev/null || true
  ip netns del "$NS_S" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
ip netns del "$NS_R" 2>/dev/null || true
ip netns del "$NS_S" 2>/dev/null || true

${CC:-cc} -O2 -shared -fPIC -o "$WORK/flowcap_shim.so" "$ROOT/tools/flowcap_shim.c" -ldl

# Reference: N plain TCP streams from the same file, the receiver's goodput from its first byte to
# its last (the plugin runs report the same: uncompressed bytes delivered per second).
cat > "$WORK/ref.py" <<'PY'
import os, select, socket, sys, threading, time
mode, addr, port, n, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
per_thread = int(os.environ.get("REF_PER_THREAD", "1"))
if mode == "recv":
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind((addr, port)); ls.listen(n)
    conns = [ls.accept()[0] for _ in range(n)]
    got, first, last = [0] * n, [None] * n, [0.0] * n
    def rd(i):
        buf = bytearray(4 << 20); mv = memoryview(buf)
        while True:
            k = conns[i].recv_into(mv)
            if k <= 0: break
            t = time.monotonic()
            if first[i] is None: first[i] = t
            got[i] += k; last[i] = t
    def rd_group(idx):
        # NCCL's shape: one thread polls several non-blocking sockets.
        bufs = {i: memoryview(bytearray(4 << 20)) for i in idx}
        live = set(idx)
        for i in idx: conns[i].setblocking(False)
        while live:
            ready = select.select([conns[i] for i in live], [], [], 1.0)[0]
            for i in [i for i in live if conns[i] in ready]:
                try:
                    k = conns[i].recv_into(bufs[i])
                except BlockingIOError:
                    continue
                if k <= 0:
                    live.discard(i); continue
                t = time.monotonic()
                if first[i] is None: first[i] = t
                got[i] += k; last[i] = t
    if per_thread > 1:
        ts = [threading.Thread(target=rd_group, args=(list(range(g, min(n, g + per_thread))),))
              for g in range(0, n, per_thread)]
    else:
        ts = [threading.Thread(target=rd, args=(i,)) for i in range(n)]
    [t.start() for t in ts]; [t.join() for t in ts]
    t0 = min(f for f in first if f is not None); t1 = max(last)
    print("%.4f %d %s" % (sum(got) * 8 / (t1 - t0) / 1e9, sum(got), ",".join(str(g) for g in got)))
else:
    data = open(sys.argv[6], "rb").read()
    piece = 4 << 20
    views = [memoryview(data)[o:o + piece] for o in range(0, len(data) - piece + 1, piece)]
    socks = []
    for _ in range(n):
        deadline = time.monotonic() + 10
        while True:
            s = socket.socket()
            try:
                s.connect((addr, port)); break
            except OSError:
                s.close()
                if time.monotonic() > deadline: raise
                time.sleep(0.02)
        socks.append(s)
    end = time.monotonic() + secs
    def wr(s):
        i = 0
        while time.monotonic() < end:
            s.sendall(views[i % len(views)]); i += 1
        s.close()
    def wr_group(group):
        pos = {s: [0, 0] for s in group}  # view index, offset in it
        for s in group: s.setblocking(False)
        while time.monotonic() < end:
            moved = False
            for s in group:
                v = views[pos[s][0] % len(views)]
                try:
                    k = s.send(v[pos[s][1]:])
                except BlockingIOError:
                    continue
                moved = True
                pos[s][1] += k
                if pos[s][1] == len(v): pos[s] = [pos[s][0] + 1, 0]
            if not moved:
                select.select([], group, [], 0.1)
        for s in group: s.close()
    if per_thread > 1:
        ts = [threading.Thread(target=wr_group, args=(socks[g:g + per_thread],)) for g in range(0, n, per_thread)]
    else:
        ts = [threading.Thread(target=wr, args=(s,)) for s in socks]
    [t.start() for t in ts]; [t.join() for t in ts]
PY

ip netns add "$NS_R"
ip netns add "$NS_S"
ip link add "${P}_r" type veth peer name "${P}_s"
ip link set "${P}_r" netns "$NS_R"
ip link set "${P}_s" netns "$NS_S"
ip -n "$NS_R" addr add $ADDR_R/24 dev "${P}_r"
ip -n "$NS_S" addr add 10.78.0.2/24 dev "${P}_s"
for n in "$NS_R" "$NS_S"; do ip -n "$n" link set lo up; done
ip -n "$NS_R" link set "${P}_r" up
ip -n "$NS_S" link set "${P}_s" up
# burst: 4 ms of traffic, at least 256 KiB (veth hands tbf 64 KiB GSO segments), as tools/veth_perf.sh.
bits=$(echo "$LINK" | awk '{r=tolower($0); m=1; if (r ~ /gbit$/) m=1e9; else if (r ~ /mbit$/) m=1e6; else if (r ~ /kbit$/) m=1e3; sub(/[a-z]+$/,"",r); print r*m}')
burst=$(awk -v b="$bits" 'BEGIN{x=b/8*0.004; if (x<262144) x=262144; printf "%d", x}')
tc -n "$NS_S" qdisc add dev "${P}_s" root tbf rate "$LINK" burst "$burst" latency 20ms
tc -n "$NS_R" qdisc add dev "${P}_r" root tbf rate "$LINK" burst "$burst" latency 20ms

echo "flowcap: veth ${P}_s -> ${P}_r, aggregate tbf $LINK, every TCP flow paced at $FLOW (SO_MAX_PACING_RATE)"
echo "  NCCL_SOCKET_NTHREADS=$NTHREADS NCCL_NSOCKS_PERTHREAD=$NSOCKS: NCCL would move data on $REF_STREAMS stream(s)"
echo "  data $DATA, $SECONDS_ s per run, $REPEAT rounds (reference and zipccl alternate first)"
export FLOWCAP_RATE=$FLOW
export NCCL_SOCKET_NTHREADS=$NTHREADS NCCL_NSOCKS_PERTHREAD=$NSOCKS
unset ZIPCCL_SOCKET_NTHREADS ZIPCCL_NSOCKS_PERTHREAD
PRE="$WORK/flowcap_shim.so"
PY=$(python3 -c "import sys; print(sys.executable)")  # the interpreter itself, not a pyenv shim

# run_ref ROUND NAME PER_THREAD: PER_THREAD 1 gives every stream a blocking thread of its own; more
# gives NCCL's shape, NCCL_SOCKET_NTHREADS threads each polling its NCCL_NSOCKS_PERTHREAD sockets, which
# is what zipccl's helper threads do. The two differ only where CPU is short: there, a thread per stream
# takes a larger share of a loaded machine.
run_ref() {
  ip netns exec "$NS_R" env LD_PRELOAD="$PRE" REF_PER_THREAD="$3" "$PY" "$WORK/ref.py" recv $ADDR_R $PORT \
    "$REF_STREAMS" "$SECONDS_" > "$WORK/ref.out" &
  local rpid=$!
  ip netns exec "$NS_S" env LD_PRELOAD="$PRE" REF_PER_THREAD="$3" "$PY" "$WORK/ref.py" send $ADDR_R $PORT \
    "$REF_STREAMS" "$SECONDS_" "$DATA"
  wait $rpid
  read -r gbps _ per < "$WORK/ref.out"
  echo "  round $1 $2: $gbps Gbit/s ($REF_STREAMS streams, $3 per thread, bytes per stream $per)"
  echo "{\"round\":$1,\"run\":\"$2\",\"gbps\":$gbps,\"streams\":$REF_STREAMS}" >> "$WORK/runs.jsonl"
}
run_refs() {
  run_ref "$1" ref 1
  if [ "$ns" -gt 1 ]; then run_ref "$1" ref-nccl "$ns"; fi
}
# Where NCCL would use one stream, `zipccl perf`'s own plain TCP stream (C++, the same two processes,
# every byte checked) is a second reference ("tcp"); with more streams it has too few.
BASELINE=--no-baseline
[ "$REF_STREAMS" -eq 1 ] && BASELINE=""
run_zipccl() {
  [ "$MODES" = none ] && return 0
  LD_PRELOAD="$PRE" "$BIN" perf --netns "$NS_R,$NS_S" --addr $ADDR_R --ifname "${P}_" $BASELINE \
    --modes "$MODES" --data "$DATA" --seconds "$SECONDS_" --repeat 1 --json "$WORK/z.jsonl" ${FLOWCAP_PERF_ARGS:-} \
    > "$WORK/z.out"
  python3 - "$1" "$WORK/z.jsonl" >> "$WORK/runs.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[2]):
    r = json.loads(line)
    if r["run"] == "tcp":
        print(json.dumps({"round": int(sys.argv[1]), "run": "tcp", "gbps": r["gbps"]}))
        continue
    print(json.dumps({"round": int(sys.argv[1]), "run": r["run"], "gbps": r["gbps"], "ratio": r["ratio"],
                      "compressed": r["compressed"], "messages": r["messages"], "exact": r["exact"],
                      "send_cpu": r["send_cpu"], "recv_cpu": r["recv_cpu"]}))
PY
  python3 - "$1" "$WORK/z.jsonl" <<'PY'
import json, sys
print("  round %s zipccl: " % sys.argv[1] + ", ".join(
    "%s %.3f Gbit/s (%d/%d compressed, CPU %.0f%%/%.0f%%)" % (
        r["run"], r["gbps"], r["compressed"], r["messages"], 100 * r["send_cpu"], 100 * r["recv_cpu"])
    if r["run"] != "tcp"
    else "perf's plain TCP stream %.3f Gbit/s" % r["gbps"] for r in map(json.loads, open(sys.argv[2]))))
PY
  rm -f "$WORK/z.jsonl"
}

for ((round = 1; round <= REPEAT; round++)); do
  if ((round % 2)); then run_refs "$round"; run_zipccl "$round"; else run_zipccl "$round"; run_refs "$round"; fi
done
[ -n "$JSON" ] && cat "$WORK/runs.jsonl" >> "$JSON"

python3 - "$WORK/runs.jsonl" "$REF_STREAMS" "$FLOW" "$LINK" "$NTHREADS" "$NSOCKS" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
by = {}
for r in runs: by.setdefault(r["run"], []).append(r)
med = {k: statistics.median(x["gbps"] for x in v) for k, v in by.items()}
ref = med.get("ref", 0)
print("\nmedians (Gbit/s of uncompressed data; per round: %s)" % "; ".join(
    "%s %s" % (k, "/".join("%.3f" % x["gbps"] for x in v)) for k, v in by.items()))
print("| NTHREADS x NSOCKS | flow cap | link | ref streams | ref | ref, NCCL's threads | perf TCP | never | always | auto | never/ref | always/ref | auto/never | never/ref NCCL's threads | ratio | auto compressed |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
def g(k): return med.get(k, float("nan"))
ratio = statistics.median(x["ratio"] for x in by["always"]) if "always" in by else float("nan")
if "never" not in by: sys.exit(0)
print("| %s x %s | %s | %s | %s | %.3f | %s | %s | %.3f | %.3f | %.3f | %.3f | %.2fx | %.3f | %s | %.3f | %s |" % (
    sys.argv[5], sys.argv[6], sys.argv[3], sys.argv[4], sys.argv[2], ref,
    "%.3f" % med["ref-nccl"] if "ref-nccl" in med else "-",
    "%.3f" % med["tcp"] if "tcp" in med else "-", g("never"), g("always"), g("auto"),
    g("never") / ref if ref else float("nan"), g("always") / ref if ref else float("nan"),
    g("auto") / g("never"), "%.3f" % (g("never") / med["ref-nccl"]) if "ref-nccl" in med else "-", ratio, ", ".join("%d/%d" % (x["compressed"], x["messages"]) for x in by.get("auto", []))))
bad = [r for r in runs if r.get("exact") is False]
if bad: print("NOT BIT-EXACT:", bad); sys.exit(1)
PY
