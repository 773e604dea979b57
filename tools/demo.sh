#!/usr/bin/env bash
# The demo: builds zipccl, then runs the NCCL net plugin end to end between two processes on this
# machine with built-in bf16 gradient-like data, raw vs compressed, bit-exactness checked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tools/setup.sh
# perf names its children's crashes; this names perf's own (exit status 128+N: signal N), where the
# shell would say only "Illegal instruction" and not which program.
rc=0
./build/tools/zipccl perf "$@" || rc=$?
if ((rc > 128)); then
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
fi
exit "$rc"
