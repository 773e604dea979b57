# Cross-compiling for AArch64 (Debian's g++-aarch64-linux-gnu); the tests run under qemu-user
# (tools/arm64_check.sh). Libraries and packages come only from the target's roots, so GoogleTest is
# built from Debian's sources (/usr/src/googletest).
#
# ZIPCCL_ARM64_ROOT (a cache variable, or the environment's): an arm64 Debian userland unpacked into a
# folder (tools/arm64_root.sh). Its libzstd/liblz4 serve the zipccl tool's bench baselines, and the
# programs run with it as qemu's -L prefix: its glibc, libstdc++ and libraries, not the cross
# compiler's. Without it, only the cross compiler's own libraries (/usr/aarch64-linux-gnu).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
if(NOT ZIPCCL_ARM64_ROOT AND DEFINED ENV{ZIPCCL_ARM64_ROOT})
  set(ZIPCCL_ARM64_ROOT "$ENV{ZIPCCL_ARM64_ROOT}" CACHE PATH "arm64 userland (tools/arm64_root.sh)")
endif()
# try_compile projects read this file again: pass the root on to them.
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES ZIPCCL_ARM64_ROOT)
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
if(ZIPCCL_ARM64_ROOT)
  list(APPEND CMAKE_FIND_ROOT_PATH ${ZIPCCL_ARM64_ROOT})
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L ${ZIPCCL_ARM64_ROOT})
else()
  set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
endif()
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)
