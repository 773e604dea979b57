# The shipped binaries - the plugin and the zipccl tool - must load on the clusters people run:
# Ubuntu 20.04 (glibc 2.31), RHEL 8 (2.28) and newer. Compiled and linked here as usual they need
# this machine's glibc (2.36 on Debian 12): symbol versions are bound at link time, and GCC's static
# libstdc++ and unwinder and the static CUDA runtime name the newest ones. So they are compiled by
# GCC/nvcc as usual but linked by Zig (tools/cmake/zig_link.sh) against glibc 2.28's symbols, with
# plugin/src/common/glibc_compat.c supplying the few newer symbols that this machine's headers and GCC's
# runtime still reference. The test glibc_baseline (tests/glibc_baseline) checks the result.
#
# zipccl_glibc_baseline(<target>) applies this to one target where it can work: Linux x86_64 or
# aarch64 (natively or cross-compiled: tools/arm64_check.sh, Zig links for the compiler's target),
# GCC, no sanitizers or fuzzing (their runtimes are dynamic and need this machine's glibc anyway).
# Zig comes from PyPI (`pip install ziglang`, tools/setup.sh) or a `zig` on the PATH.

set(ZIPCCL_GLIBC_BASELINE "2.28" CACHE STRING
    "Oldest glibc the plugin and the zipccl tool must load on (linked with Zig); empty: plain link")

# WANTED: this build should meet the baseline (tests/glibc_baseline checks it); ACTIVE: Zig is here.
set(ZIPCCL_GLIBC_BASELINE_WANTED OFF)
if(ZIPCCL_GLIBC_BASELINE AND CMAKE_SYSTEM_NAME STREQUAL "Linux" AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|aarch64|arm64)$"
   AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND NOT ZIPCCL_SANITIZE AND NOT ZIPCCL_FUZZ)
  set(ZIPCCL_GLIBC_BASELINE_WANTED ON)
endif()
set(ZIPCCL_GLIBC_BASELINE_ACTIVE ${ZIPCCL_GLIBC_BASELINE_WANTED})

if(ZIPCCL_GLIBC_BASELINE_ACTIVE AND NOT ZIPCCL_ZIG_COMMAND)
  find_program(ZIPCCL_ZIG zig)
  find_program(ZIPCCL_PYTHON3 python3)
  if(ZIPCCL_ZIG)
    set(_zipccl_zig ${ZIPCCL_ZIG})
  elseif(ZIPCCL_PYTHON3)
    # The interpreter itself, not a shim (pyenv) that may choose another one in another directory.
    execute_process(COMMAND ${ZIPCCL_PYTHON3} -c "import sys, ziglang; print(sys.executable)"
                    RESULT_VARIABLE _zipccl_rc OUTPUT_VARIABLE _zipccl_python OUTPUT_STRIP_TRAILING_WHITESPACE
                    ERROR_QUIET)
    if(_zipccl_rc EQUAL 0)
      set(_zipccl_zig ${_zipccl_python} -m ziglang)
    endif()
  endif()
  if(_zipccl_zig)
    set(ZIPCCL_ZIG_COMMAND "${_zipccl_zig}" CACHE STRING "Zig, as a command (links the shipped binaries)")
  endif()
endif()

if(ZIPCCL_GLIBC_BASELINE_ACTIVE AND NOT ZIPCCL_ZIG_COMMAND)
  message(WARNING "zipccl: Zig not found (pip install ziglang): the plugin and the tool are linked "
                  "against this machine's glibc and will not load where an older one is installed; the "
                  "test glibc_baseline fails and names what they need")
  set(ZIPCCL_GLIBC_BASELINE_ACTIVE OFF)
elseif(ZIPCCL_GLIBC_BASELINE_ACTIVE)
  message(STATUS "zipccl: plugin and tool linked for glibc ${ZIPCCL_GLIBC_BASELINE} with ${ZIPCCL_ZIG_COMMAND}")
endif()

function(zipccl_glibc_baseline target)
  if(NOT ZIPCCL_GLIBC_BASELINE_ACTIVE)
    return()
  endif()
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/plugin/src/common/glibc_compat.c)
  set_target_properties(${target} PROPERTIES CXX_LINKER_LAUNCHER
    "${PROJECT_SOURCE_DIR}/tools/cmake/zig_link.sh;${ZIPCCL_GLIBC_BASELINE};${ZIPCCL_ZIG_COMMAND};--")
  set_property(TARGET ${target} APPEND PROPERTY LINK_DEPENDS
    ${PROJECT_SOURCE_DIR}/tools/cmake/zig_link.sh)
endfunction()
