#!/usr/bin/env bash
# CTest gpu_device_plan (label cpu): the device script's plan, read from its --dry-run, must
#  - fit its deadline: every step's end (cumulative start + limit) within it, and the sum too;
#  - run the DDP job with device buffers (ddp-gdr) before every sanitizer step;
#  - run the sanitizers (a probe first) and the multi-rank steps under MPS (mps-start before them);
#  - leave at most 8 files in the output folder (all that comes back from the GPU machine).
#   tests/gpu/check_device_plan.sh [run_device_checks.sh args...]
set -u
script="$(cd "$(dirname "$0")" && pwd)/run_device_checks.sh"
plan="$("$script" --dry-run "$@" 2>&1)"
echo "$plan"
fail() { echo "check_device_plan: $*" >&2; exit 1; }

deadline=$(sed -n 's/^plan: .* deadline \([0-9]*\) s.*/\1/p' <<<"$plan")
[ -n "$deadline" ] || fail "no 'plan: ... deadline N s' line"
# Rows: index, name, limit, start, end.
rows=$(grep -E '^ *[0-9]+  [a-z0-9-]+ +[0-9]+ +[0-9]+ +[0-9]+$' <<<"$plan")
[ -n "$rows" ] || fail "no step rows"
sum=0 t=0 pos_ddp=0 first_san=0 pos_mps=0 first_ranks=0
while read -r i name limit start end; do
  [ "$start" -eq "$t" ] || fail "$name starts at $start, the steps before it end at $t"
  [ "$end" -eq $((start + limit)) ] || fail "$name: $start + $limit is not $end"
  [ "$end" -le "$deadline" ] || fail "$name ends at $end s, past the ${deadline}-s deadline"
  t=$end
  sum=$((sum + limit))
  case "$name" in
    sanitizer-probe|memcheck|racecheck|synccheck|initcheck) [ "$first_san" -gt 0 ] || first_san=$i ;;
    mps-start) [ "$pos_mps" -gt 0 ] || pos_mps=$i ;;
    nccl-check-*|ddp-*) [ "$first_ranks" -gt 0 ] || first_ranks=$i ;;
  esac
  [ "$name" = ddp-gdr ] && pos_ddp=$i
done <<<"$rows"
[ "$sum" -le "$deadline" ] || fail "the limits sum to $sum s, past the ${deadline}-s deadline"
grep -q "^sum of limits: $sum s of a ${deadline}-s deadline: fits$" <<<"$plan" || fail "the sum line does not say $sum s fits"
[ "$pos_ddp" -gt 0 ] || fail "no ddp-gdr step"
[ "$first_san" -gt 0 ] || fail "no sanitizer step"
[ "$pos_ddp" -lt "$first_san" ] || fail "ddp-gdr (#$pos_ddp) runs after a sanitizer step (#$first_san)"
[ "$pos_mps" -gt 0 ] && [ "$pos_mps" -lt "$first_ranks" ] || fail "no mps-start before the first multi-rank step"
files=$(sed -n 's/^output files: //p' <<<"$plan")
n=$(wc -w <<<"$files")
[ "$n" -ge 1 ] && [ "$n" -le 8 ] || fail "$n output files listed ($files); at most 8 come back"
echo "check_device_plan: $(wc -l <<<"$rows") steps, $sum s of $deadline s, ddp-gdr #$pos_ddp before the sanitizers (#$first_san), $n output files: ok"
