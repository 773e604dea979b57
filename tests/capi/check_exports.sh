#!/usr/bin/env bash
# usage: check_exports.sh <libzipccl.so> <zipccl_c.h> [--sanitized]
# --sanitized: a sanitizer build, which links the C++ runtime dynamically (as the plugin's do): the
# C++ runtime checks are skipped, the Python and export checks stay.
# libzipccl.so is loaded by ctypes from any CPython, next to any C++ runtime (torch's): it must import
# no Python symbol and no C++ runtime (static), and export exactly the functions its header declares.
set -euo pipefail
lib=$1
header=$2
sanitized=${3:-}
command -v nm >/dev/null || { echo "nm not found (Debian: binutils)" >&2; exit 1; }
status=0

undefined=$(nm -D --undefined-only "$lib")
python=$(awk '{ print $NF }' <<<"$undefined" | grep -E '^_?Py' || true)
if [[ -n $python ]]; then
  echo "$lib imports Python symbols (it must load without an interpreter's ABI):" >&2
  echo "$python" >&2
  status=1
fi
# Strong references only: a weak one (w __cxa_pure_virtual, from a vtable) binds to nothing when absent.
cxx=$(awk '$1 == "U" { print $NF }' <<<"$undefined" | grep -E '^(_ZN?St|_ZSt|__cxa_|__gxx_|_Unwind_)' | grep -v '^__cxa_\(finalize\|atexit\|thread_atexit_impl\)' || true)
if [[ -n $cxx && $sanitized != --sanitized ]]; then
  echo "$lib imports C++ runtime symbols (link libstdc++ and libgcc statically):" >&2
  echo "$cxx" >&2
  status=1
fi
needed=$(LC_ALL=C readelf -d "$lib" | awk '/\(NEEDED\)/ { print $NF }' | tr -d '[]')
runtime='^lib(stdc\+\+|gcc_s|python)'
[[ $sanitized == --sanitized ]] && runtime='^libpython'
if grep -qE "$runtime" <<<"$needed"; then
  echo "$lib needs $(grep -E "$runtime" <<<"$needed" | tr '\n' ' ')" >&2
  status=1
fi

# Defined dynamic symbols: names only (nm may append @VERSION).
exported=$(nm -D --defined-only "$lib" | awk '{ print $NF }' | sed 's/@.*//' | sort -u)
stray=$(grep -v '^zipccl_' <<<"$exported" || true)
if [[ -n $stray ]]; then
  echo "$lib exports symbols outside the C API (zipccl_*):" >&2
  echo "$stray" >&2
  status=1
fi
declared=$(grep -oE 'ZIPCCL_C_API [^(]*\bzipccl_[a-z0-9_]+\(' "$header" | grep -oE 'zipccl_[a-z0-9_]+' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
if [[ -n $missing ]]; then
  echo "$lib lacks functions $header declares:" >&2
  echo "$missing" >&2
  status=1
fi
if [[ -n $extra ]]; then
  echo "$lib exports zipccl_ symbols $header does not declare:" >&2
  echo "$extra" >&2
  status=1
fi
if [[ $status -eq 0 ]]; then
  if [[ $sanitized == --sanitized ]]; then what="no Python symbol (sanitizer build: C++ runtime not checked)"; else what="no Python or C++ runtime symbol"; fi
echo "$lib: exports the $(wc -l <<<"$exported") functions of $(basename "$header"), imports $what; needs: $(echo $needed)"
fi
exit $status
