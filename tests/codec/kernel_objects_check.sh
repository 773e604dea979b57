#!/usr/bin/env bash
# kernel_objects_check.sh LIB: the codec's target-flag objects (simd_*.cpp.o in the static library
# LIB) hold nothing that could run their instructions before cpuid has confirmed the target
# (docs/ARCHITECTURE.md "Kernel sets and where their instructions run"): each defines exactly one
# global symbol, its <set>_kernel_set builder; no dynamic initialiser (.init_array,
# _GLOBAL__sub_I_); no guard variable (_ZGV: a function-local static, initialised by target code);
# no weak definition (an inline or template function the linker may pick for every file) but the
# personality routine's reference.
set -euo pipefail
lib=$(realpath "$1")
nm=${NM:-nm}
objdump=${OBJDUMP:-objdump}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
ar x "$lib"
shopt -s nullglob
objs=(simd_*.o)
((${#objs[@]} >= 3)) || { echo "kernel_objects_check: no simd_*.o members in $lib" >&2; exit 1; }
fail=0
for o in "${objs[@]}"; do
  bad=()
  globals=$($nm -C --defined-only -g "$o" | awk '$2 != "V" || $3 != "DW.ref.__gxx_personality_v0"' | cut -d' ' -f2-)
  if [[ $(grep -c . <<<"$globals") -ne 1 ]] || ! grep -Eq '^T zipccl::codec::[a-z0-9]+_kernel_set\(' <<<"$globals"; then
    bad+=("global definitions other than one <set>_kernel_set builder: $(tr '\n' ';' <<<"$globals")")
  fi
  all=$($nm "$o")
  grep -q '_GLOBAL__sub_I' <<<"$all" && bad+=("a dynamic initialiser (_GLOBAL__sub_I_)")
  grep -q '_ZGV' <<<"$all" && bad+=("a guard variable (function-local static): $(grep '_ZGV' <<<"$all" | head -n 3 | tr '\n' ';')")
  $objdump -h "$o" | grep -Eq '\.(init_array|ctors)' && bad+=("an .init_array/.ctors section")
  if ((${#bad[@]})); then
    fail=1
    for b in "${bad[@]}"; do echo "kernel_objects_check: $o: $b" >&2; done
  else
    echo "kernel_objects_check: $o: only $(cut -d' ' -f2- <<<"$globals")"
  fi
done
exit "$fail"
