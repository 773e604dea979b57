#!/usr/bin/env bash
# The demo: builds zipccl, then runs the NCCL net plugin end to end between two processes with
# built-in bf16 gradient-like data, raw vs compressed, every byte checked (`zipccl perf`), twice:
#   1. over a link slower than the codec - two network namespaces joined by a veth pair shaped to
#      2 Gbit/s with tc, as tools/veth_perf.sh measures it - where compression pays its ratio;
#      needs root, ip and tc; skipped, saying why, where they are missing;
#   2. over loopback, where there is no link to save and only the codec's cost shows.
# Arguments go to both `zipccl perf` runs (e.g. --seconds 4).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ZIPCCL_BUILD_TARGETS=(zipccl nccl-net-zipccl)  # the demo's two binaries, not the tests
source tools/setup.sh

# perf names its children's crashes; this names perf's own (exit status 128+N: signal N), where the
# shell would say only "Illegal instruction" and not which program.
report_crash() {
  local rc=$1 sig name what
  ((rc > 128)) || return 0
  sig=$(kill -l $((rc - 128)) 2>/dev/null) || sig=""
  name=${sig:+SIG$sig}
  case $sig in
    ILL) what=" (illegal instruction)" ;;
    SEGV) what=" (segmentation fault)" ;;
    BUS) what=" (bus error)" ;;
    FPE) what=" (floating-point exception)" ;;
    ABRT) what=" (aborted)" ;;
    KILL) what=" (killed)" ;;
    *) what="" ;;
  esac
  echo "demo: zipccl perf crashed: ${name:-signal $((rc - 128))}$what" >&2
}

# Prints why the shaped link cannot run here, nothing when it can: it tries what veth_perf.sh does
# (a namespace, a veth pair, a tbf qdisc) in a namespace of its own, since a container may refuse
# any of them even to root.
shaped_link_blocker() {
  local ns=zcdemo_probe
  if [[ $(id -u) != 0 ]]; then echo "not root (network namespaces and tc need root)"; return; fi
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then echo "ip or tc missing (iproute2)"; return; fi
  ip netns del "$ns" 2>/dev/null || true
  if ! ip netns add "$ns" 2>/dev/null; then echo "cannot create a network namespace here"; return; fi
  if ! ip -n "$ns" link add zcdemo_a type veth peer name zcdemo_b 2>/dev/null; then
    echo "cannot create a veth pair here"
  elif ! tc -n "$ns" qdisc add dev zcdemo_a root tbf rate 2gbit burst 256kb latency 20ms 2>/dev/null; then
    echo "tc cannot shape a link here (no tbf qdisc)"
  fi
  ip netns del "$ns" 2>/dev/null || true
}

rc=0
blocker=$(shaped_link_blocker)
if [[ -z $blocker ]]; then
  echo "== 1. A 2 Gbit/s link: two network namespaces joined by a veth pair shaped with tc tbf"
  echo "   (a stand-in for a link between two nodes; compression pays where the codec outruns the link:"
  echo "   ~1.45-1.5x of raw on an idle 2-core machine, BENCHMARKS.md section 2; it needs ~350 MB/s of"
  echo "   codec on each side, so a loaded machine shows less, and auto then sends raw)"
  ZIPCCL_BIN=build/tools/zipccl tools/veth_perf.sh 2gbit "$@" || rc=$?
  report_crash "$rc"
  ((rc == 0)) || exit "$rc"
  echo
  echo "== 2. Loopback: two processes on 127.0.0.1 (no link to save, so compression only costs CPU)"
else
  echo "demo: skipped the 2 Gbit/s shaped link: $blocker; run as root for it (tools/veth_perf.sh)"
  echo "== Loopback: two processes on 127.0.0.1 (no link to save, so compression only costs CPU)"
fi
./build/tools/zipccl perf "$@" || rc=$?
report_crash "$rc"
exit "$rc"
