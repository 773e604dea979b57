#!/usr/bin/env bash
# tests/python/check_abi.sh [--strict|--report] WHEEL|DIR|FILE...: what would keep a wheel from being
# py3-none, i.e. from serving every CPython: the compiled CPython modules it holds (*.cpython-*.so,
# *.abi3.so, or any ELF file that defines PyInit_*) and, for each ELF file (shared objects and executables), the CPython symbols
# (Py*, _Py*) among its undefined dynamic symbols (nm -D --undefined-only).
#   --strict  (default) exits 1 when there is any: the package reaches its native code through
#             libzipccl.so, a plain C library, with ctypes, so there must be none
#   --report  prints the same and exits 0 (to look at a foreign wheel)
# Ends in a line "abi: N compiled CPython module(s), M file(s) importing CPython symbols".
set -euo pipefail
mode=strict
case "${1:-}" in
  --strict) mode=strict; shift ;;
  --report) mode=report; shift ;;
esac
(($#)) || { echo "usage: $0 [--strict|--report] WHEEL|DIR|FILE..." >&2; exit 2; }
command -v nm >/dev/null || { echo "check_abi: nm missing (apt-get install binutils)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
files=()
for arg in "$@"; do
  if [[ -f $arg && $arg == *.whl ]]; then
    dir=$tmp/$(basename "$arg")
    python3 -m zipfile -e "$arg" "$dir"
    while IFS= read -r f; do files+=("$f"); done < <(find "$dir" -type f | sort)
  elif [[ -d $arg ]]; then
    while IFS= read -r f; do files+=("$f"); done < <(find "$arg" -type f | sort)
  elif [[ -f $arg ]]; then
    files+=("$arg")
  else
    echo "check_abi: $arg: no such wheel, folder or file" >&2
    exit 2
  fi
done

modules=0
importers=0
for f in "${files[@]}"; do
  name=${f#"$tmp"/}
  case "$(basename "$f")" in
    *.cpython-*.so | *.abi3.so | *.pyd)
      echo "compiled CPython module: $name"
      modules=$((modules + 1)) ;;
  esac
  [[ $(head -c 4 "$f" | od -An -c | tr -d ' ') == 177ELF ]] || continue
  # An extension module by any other name (Python imports a plain foo.so too): it defines PyInit_*.
  case "$(basename "$f")" in
    *.cpython-*.so | *.abi3.so | *.pyd) ;;
    *) # awk reads to the end: grep -q would stop early and fail the pipeline (pipefail, SIGPIPE).
       if nm -D --defined-only "$f" 2>/dev/null | awk '$NF ~ /^PyInit_/ { found = 1 } END { exit !found }'; then
         echo "compiled CPython module: $name (defines PyInit_)"
         modules=$((modules + 1))
       fi ;;
  esac
  syms=$(nm -D --undefined-only "$f" 2>/dev/null | awk '{print $NF}' | grep -E '^_?Py' || true)
  if [[ -n $syms ]]; then
    importers=$((importers + 1))
    echo "$name imports $(wc -l <<<"$syms") CPython symbols, e.g. $(head -n 3 <<<"$syms" | paste -sd' ')"
  fi
done
echo "abi: $modules compiled CPython module(s), $importers file(s) importing CPython symbols ($mode; ${#files[@]} files)"
if [[ $mode == strict ]] && ((modules + importers)); then
  echo "check_abi: the wheel cannot be py3-none: it is tied to one CPython" >&2
  exit 1
fi
if ((modules + importers)); then echo "abi: would block py3-none (--report: informational)"; fi
exit 0
