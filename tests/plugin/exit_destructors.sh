#!/usr/bin/env bash
# Lists the functions of our own code in each library that register a destructor to run at process exit
# (a call of __cxa_atexit, which the compiler emits for a static object with a non-trivial destructor),
# and fails if there is any:   exit_destructors.sh OBJDUMP LIBRARY...
# Why: NCCL's proxy threads, our stream and codec threads keep calling into the plugin while the process
# exits (a job that ends without destroying its communicators, a rank that calls exit() on an error), so an
# object they use must not be destroyed under them. Objects that live as long as the process are made
# with `new` and never deleted. Code that is not ours is left out: the C++ runtime (std::, __gnu_cxx,
# its .cc initialisers), glibc's atexit stub, the CUDA runtime (libcudart_static_*) and nvcc's fatbinary
# registration (_GLOBAL__sub_I_tmpxft_*), all linked in statically. std::atexit calls of our own (the
# live statistics' last write) are not destructors and are not counted.
set -euo pipefail
objdump="$1"
shift
found=0
for lib in "$@"; do
  hits=$("$objdump" -d -C --no-show-raw-insn "$lib" |
    awk '/^[0-9a-f]+ <.*>:$/ { fn = $0; sub(/^[0-9a-f]+ /, "", fn) }
         /(call|bl|jmp|b)[ \t]+[0-9a-f]+ <__cxa_atexit(@plt)?>/ { print fn }' |
    grep -v -E '^<(std::|__gnu_cxx::|__cxxabiv1::|libcudart_static_|_GLOBAL__sub_I_[^>]*\.cc>|atexit>|_GLOBAL__sub_I_tmpxft_)' |
    sort | uniq -c || true)
  n=0
  [ -z "$hits" ] || n=$(printf '%s\n' "$hits" | wc -l)
  echo "exit destructors: $n function(s) in $(basename "$lib")"
  [ -z "$hits" ] || { printf '%s\n' "$hits"; found=1; }
done
exit "$found"
