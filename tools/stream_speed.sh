#!/usr/bin/env bash
# The streaming tool's speed against `zipccl bench` on one file (issue 20 item 4's target: compress and
# decompress to /dev/null at >= 80% of bench's in-process 1-thread speed), with the tool's peak RSS.
#
#   tools/stream_speed.sh [-n ROUNDS] [-t TYPE] [-f FRAME_MIB] [-p PREFIX] [-o OTHER_ZIPCCL] ZIPCCL FILE
#
# FILE should sit in the page cache (tmpfs, or read once). Each round runs bench, then each binary's
# compress and decompress (`-c > /dev/null`), so that load from other processes falls on all of them
# alike; medians are over the rounds. PREFIX runs before every command, e.g. -p 'chrt -f 10' to see
# the machine rather than its run queue on a shared host. -o adds a second binary (say, an older build)
# to the same rounds. -f sets compress's --frame-mib, for its runs and for the stream that decompress
# reads. GB/s are FILE's bytes (decimal GB, as bench) over the command's wall time.
set -euo pipefail

rounds=5 type=bf16 prefix="" other="" frame=()
while getopts "n:t:f:p:o:" opt; do
  case $opt in
    n) rounds=$OPTARG ;;
    t) type=$OPTARG ;;
    f) frame=(--frame-mib "$OPTARG") ;;
    p) prefix=$OPTARG ;;
    o) other=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { sed -n '2,12p' "$0"; exit 2; }
zipccl=$1 file=$2
if [ ! -x "$zipccl" ] || [ ! -f "$file" ]; then echo "stream_speed: need an executable and a file" >&2; exit 2; fi
if [ -n "$other" ] && [ ! -x "$other" ]; then echo "stream_speed: $other is not executable" >&2; exit 2; fi
bytes=$(stat -c %s "$file")
# The stream that decompress reads goes to tmpfs where there is one, so that it too is in memory.
work=$(mktemp -d "$([ -d /dev/shm ] && [ -w /dev/shm ] && echo /dev/shm || echo "${TMPDIR:-/tmp}")/stream_speed.XXXXXX")
trap 'rm -rf "$work"' EXIT
ref=$work/ref.zcc
"$zipccl" compress -t "$type" "${frame[@]}" "$file" -o "$ref"

# Appends "GB/s RSS_KiB CPU_s" of one command to $work/$1.
timed() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s%N)
  $prefix /usr/bin/time -f '%M %U %S' -o "$work/time" "$@" > /dev/null
  t1=$(date +%s%N)
  read -r rss user sys < "$work/time"
  awk -v b="$bytes" -v ns=$((t1 - t0)) -v rss="$rss" -v u="$user" -v s="$sys" \
    'BEGIN { printf "%.3f %d %.2f\n", b / ns, rss, u + s }' >> "$work/$name"
}

for ((r = 1; r <= rounds; ++r)); do
  $prefix "$zipccl" bench -t "$type" --threads 1 --reps 3 --no-baselines --json "$file" > "$work/bench.json"
  for k in encode decode; do
    sed -n "s/.*\"${k}_gbps_1t\": \([0-9.]*\).*/\1/p" "$work/bench.json" | awk '{ printf "%.3f 0 0\n", $1 }' >> "$work/bench_$k"
  done
  for bin in "$zipccl" $other; do
    tag=$([ "$bin" = "$zipccl" ] && echo tool || echo other)
    timed "${tag}_compress" "$bin" compress -t "$type" "${frame[@]}" -c "$file"
    timed "${tag}_decompress" "$bin" decompress -c "$ref"
  done
  echo "round $r of $rounds done" >&2
done

median() { sort -g | awk '{ v[NR] = $1 } END { print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
printf '%s, %d bytes, %d rounds%s%s\n' "$file" "$bytes" "$rounds" "${frame:+, ${frame[*]}}" \
  "${prefix:+, under '$prefix'}"
printf '%-17s %-44s %7s %8s %9s %7s\n' "" "GB/s, rounds sorted" median "vs bench" "peak RSS" "CPU s"
for m in bench_encode bench_decode tool_compress tool_decompress other_compress other_decompress; do
  [ -s "$work/$m" ] || continue
  med=$(cut -d' ' -f1 "$work/$m" | median)
  ratio=""  # the tool's and the other tool's rows against bench's encode or decode
  case ${m#*_} in
    compress) base=$work/bench_encode ;;
    decompress) base=$work/bench_decode ;;
    *) base="" ;;
  esac
  [ -n "$base" ] && ratio=$(awk -v a="$med" -v b="$(cut -d' ' -f1 "$base" | median)" 'BEGIN { printf "%.0f%%", 100 * a / b }')
  rss=$(cut -d' ' -f2 "$work/$m" | sort -g | tail -1)
  cpu=$(cut -d' ' -f3 "$work/$m" | median)
  printf '%-17s %-44s %7s %8s %9s %7s\n' "$m" "$(cut -d' ' -f1 "$work/$m" | sort -g | tr '\n' ' ')" "$med" \
    "$ratio" "$([ "$rss" = 0 ] && echo "" || echo "$((rss / 1024)) MiB")" "$([ "$rss" = 0 ] && echo "" || echo "$cpu")"
done
