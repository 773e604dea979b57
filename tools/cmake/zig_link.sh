#!/usr/bin/env bash
# Link launcher (CXX_LINKER_LAUNCHER, set by glibc_baseline.cmake): CMake runs
#   zig_link.sh <glibc version> <zig command...> -- <c++ compiler> <link arguments...>
# and this links the same objects and archives with `zig cc -target <arch>-linux-gnu.<version>`
# (<arch>: the compiler's target, x86_64 or aarch64 when cross-compiling),
# whose stub libraries hold only that glibc's symbols, so every reference binds to a version that
# glibc already had. The C++ runtime stays GCC's (the objects were compiled against its headers):
# its static archives are named explicitly, where g++ would add them itself.
set -euo pipefail

glibc=$1
shift
zig=()
while [[ $# -gt 0 && $1 != -- ]]; do
  zig+=("$1")
  shift
done
if [[ $# -lt 2 ]]; then
  echo "zig_link.sh: usage: zig_link.sh <glibc version> <zig command...> -- <compiler> <arguments...>" >&2
  exit 2
fi
shift
compiler=$1
shift

args=()
shared=0
for a in "$@"; do
  case $a in
    # Named below, as archives: Zig's driver does not know GCC's runtime flags.
    -static-libstdc++ | -static-libgcc) ;;
    # Zig's linker lacks it. The plugin's version script already makes every symbol but the
    # ncclNetPlugin tables local, and an executable exports nothing.
    -Wl,--exclude-libs,*) ;;
    -shared)
      shared=1
      args+=("$a")
      ;;
    *) args+=("$a") ;;
  esac
done

runtime=()
for lib in libstdc++.a libgcc_eh.a libgcc.a; do
  path=$("$compiler" -print-file-name="$lib")
  if [[ ! -f $path ]]; then
    echo "zig_link.sh: $compiler has no $lib (Debian: libstdc++-12-dev); cannot link the C++ runtime statically" >&2
    exit 1
  fi
  runtime+=("$path")
done

extra=(-lm -lpthread -ldl -lrt)
# An executable: position-independent, as the compiler's own link makes it on Debian. Its shared
# libraries (libzstd, liblz4) are this machine's and may need a newer glibc; on the target the
# target's copies are loaded, so their needs are not ours to check.
((shared)) || extra+=(-fPIE -Wl,--allow-shlib-undefined)

case $("$compiler" -dumpmachine) in
  x86_64-*) arch=x86_64 ;;
  aarch64-*) arch=aarch64 ;;
  *)
    echo "zig_link.sh: $compiler targets $("$compiler" -dumpmachine), not x86_64 or aarch64 Linux" >&2
    exit 1
    ;;
esac

exec "${zig[@]}" cc -target "$arch-linux-gnu.$glibc" "${args[@]}" "${runtime[@]}" "${extra[@]}"
