#!/usr/bin/env bash
# usage: check_glibc_versions.sh <glibc version> <binary>...
# Fails, naming each symbol, when a binary needs a glibc symbol version newer than <glibc version>:
# the dynamic loader refuses to load such a binary on that glibc ("version `GLIBC_2.34' not found").
set -euo pipefail
max=$1
shift
command -v objdump >/dev/null || { echo "objdump not found (Debian: binutils)" >&2; exit 1; }
status=0
for bin in "$@"; do
  if ! table=$(objdump -T "$bin" 2>&1); then
    echo "$bin: objdump -T failed: $table" >&2
    status=1
    continue
  fi
  # objdump -T prints the version as GLIBC_2.34 (default) or (GLIBC_2.2.5) (hidden/compat), the
  # symbol name last.
  report=$(awk -v max="$max" '
    function newer(v, m,   a, b, i, n) {
      n = split(v, a, "."); split(m, b, ".")
      for (i = 1; i <= (n > 3 ? n : 3); i++) {
        if (a[i] + 0 != b[i] + 0) return a[i] + 0 > b[i] + 0
      }
      return 0
    }
    {
      for (f = 1; f <= NF; f++) {
        if ($f ~ /^\(?GLIBC_[0-9.]+\)?$/) {
          v = $f; gsub(/[()]/, "", v); sub(/^GLIBC_/, "", v)
          seen++
          if (highest == "" || newer(v, highest)) highest = v
          if (newer(v, max)) bad[$NF "@GLIBC_" v] = 1
        }
      }
    }
    END {
      if (!seen) { print "none"; exit }
      print "highest " highest
      for (s in bad) print s
    }' <<<"$table")
  if [[ $report == none ]]; then
    echo "$bin: no GLIBC symbol versions at all; not a dynamically linked glibc binary?" >&2
    status=1
    continue
  fi
  highest=$(head -n1 <<<"$report" | cut -d' ' -f2)
  above=$(tail -n +2 <<<"$report" | sort)
  if [[ -n $above ]]; then
    echo "FAIL $bin needs GLIBC_$highest; above GLIBC_$max:"
    sed 's/^/  /' <<<"$above"
    status=1
  else
    echo "ok   $bin needs at most GLIBC_$highest (<= $max)"
  fi
done
exit $status
