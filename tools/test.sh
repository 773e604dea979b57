#!/usr/bin/env bash
# The tests: the Release build's test suite, then an ASan+UBSan build's, then a short libFuzzer
# run of the frame decoder. ZIPCCL_QUICK=1 runs only the first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# What the stages need beyond the build, installed by tools/setup.sh when missing (as root): the inner
# plugins' builds (ofi_build.sh, sharp_build.sh), the AArch64 and qemu stages, ccache (the wheels are
# built from the Release and AArch64 builds' objects: tools/pip_wheel_like.sh), and the Python stage's
# Debian packages (CPU torch for the gloo jobs, numpy, pytest, venv). With CI set, tests/python fails
# rather than skip a test for want of one of them (its conftest.py). ZIPCCL_QUICK=1 needs none.
ZIPCCL_TEST_PACKAGES=()
ZIPCCL_TEST_PY_PACKAGES=()
if [[ "${ZIPCCL_QUICK:-0}" != 1 ]]; then
  ZIPCCL_TEST_PACKAGES=(g++-aarch64-linux-gnu qemu-user file libfabric-dev libfabric-bin libhwloc-dev autoconf automake
                        libtool ccache)
  ZIPCCL_TEST_PY_PACKAGES=(python3-venv python3-numpy python3-pytest python3-torch)
fi
source tools/setup.sh

passed=0
skipped=0
timed_out=()  # tests that passed only on a rerun after a --timeout: named again at the end
# stage NAME: prints a stage heading with the seconds spent so far (CI must stay under 35 minutes).
stage() { echo "== $1 (at ${SECONDS} s)"; }
# count_passed CMD...: runs a test command that ends in ctest's summary, adds its passed and skipped
# counts to the totals (CTest counts a skipped test among the passed ones: those that need an RDMA
# device or a GPU).
count_passed() {
  local log n s
  log=$(mktemp)
  "$@" 2>&1 | tee "$log"
  n=$(sed -n 's/.*tests passed, 0 tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -n 1)
  mapfile -t -O "${#timed_out[@]}" timed_out < <(sed -n 's/.*Test *#[0-9]*: \([^ ]*\) .*\*\*\*Timeout.*/\1/p' "$log")
  s=$(grep -c '(Skipped)$' "$log" || true)
  rm -f "$log"
  [[ -n "$n" ]] || { echo "test.sh: $*: tests failed" >&2; exit 1; }
  passed=$((passed + n - s))
  skipped=$((skipped + s))
}
# count_pytest LOG WHAT: adds the counts of pytest's summary line in LOG ("N passed, M skipped in ...");
# without one, WHAT failed.
count_pytest() {
  local pn ps
  pn=$(sed -n 's/^=* *\([0-9]*\) passed.* in [0-9.]*s.*/\1/p' "$1" | tail -n 1)
  ps=$(sed -n 's/^=* *[0-9]* passed, \([0-9]*\) skipped.* in [0-9.]*s.*/\1/p' "$1" | tail -n 1)
  [[ -n "$pn" ]] || { echo "test.sh: $2 failed" >&2; exit 1; }
  passed=$((passed + pn))
  skipped=$((skipped + ${ps:-0}))
}
# run_ctest DIR [ctest args]: the suite in build directory DIR. A test past --timeout (the longest
# takes ~40 s under a sanitizer) is killed, with whatever it started that holds its output, and run
# again once; one that times out twice fails. Either way it is named at the end of the run: a hang
# must neither eat CI's whole limit nor pass unseen.
run_ctest() {
  local dir=$1
  shift
  count_passed ctest --test-dir "$dir" --output-on-failure -j"$JOBS" --timeout "${ZIPCCL_TEST_TIMEOUT:-240}" \
    --repeat after-timeout:2 "$@"
}
# report_timeouts: the tests that timed out once, if any (called at every exit).
report_timeouts() {
  ((${#timed_out[@]})) || return 0
  echo "test.sh: timed out and were run again (a hang to look into): ${timed_out[*]}" >&2
}
# at_exit: that, and what runs in the background stopped if test.sh ends early (a failed stage): the
# fuzzer, and the process groups (setsid) of the arm64 root's making and of the aarch64 wheel's tests.
fuzz_pid=
root_pid=
wheel_pid=
at_exit() {
  report_timeouts
  if [[ -n $fuzz_pid ]]; then kill "$fuzz_pid" 2>/dev/null || true; fi
  local g
  for g in $root_pid $wheel_pid; do kill -KILL -- "-$g" 2>/dev/null || true; done
}
trap at_exit EXIT

stage "inner plugin for the inner-transport tests (aws-ofi-nccl, tools/ofi_build.sh; cached)"
# Exit 2: a prerequisite is missing; the inner.ofi.* tests then skip, saying so. A failed build fails CI.
ofi_rc=0
tools/ofi_build.sh >/dev/null || ofi_rc=$?
if [[ $ofi_rc == 2 ]]; then echo "test.sh: aws-ofi-nccl not built; the inner.ofi.* tests skip"; elif [[ $ofi_rc != 0 ]]; then exit 1; fi

stage "inner plugin nccl-rdma-sharp-plugins (tools/sharp_build.sh; cached)"
# Same rules: exit 2 skips the inner.sharp.* tests (they say so), a failed build fails CI. ~1 min uncached.
sharp_rc=0
tools/sharp_build.sh >/dev/null || sharp_rc=$?
if [[ $sharp_rc == 2 ]]; then echo "test.sh: nccl-rdma-sharp-plugins not built; the inner.sharp.* tests skip"; elif [[ $sharp_rc != 0 ]]; then exit 1; fi

stage "tests (Release)"
run_ctest build
if [[ "${ZIPCCL_QUICK:-0}" == 1 ]]; then
  echo "$passed passed, 0 failed, $skipped skipped (no GPU / RDMA device here)"
  exit 0
fi

# The AArch64 stage's arm64 userland (tools/arm64_root.sh: ~400 Debian packages, most of them torch's)
# is made in the background beside the Python stage: its download leaves the CPU idle. The AArch64
# stage's own call waits for it (a lock), and makes it again, saying why, if this one failed.
root_log=$(mktemp)
setsid tools/arm64_root.sh >"$root_log" 2>&1 &
root_pid=$!

stage "Python package (wheel, auditwheel, fresh venv, pytest: tests/python/run.sh)"
py_log=$(mktemp)
tests/python/run.sh 2>&1 | tee "$py_log"
count_pytest "$py_log" tests/python/run.sh
rm -f "$py_log"

stage "AArch64 (cross-built for glibc 2.28; under qemu-aarch64: codec with NEON, plugin conformance, tool, .deb, C API from arm64 CPython)"
wait "$root_pid" || true
root_pid=
cat "$root_log"
count_passed env ZIPCCL_ARM64_WHEEL=0 tools/arm64_check.sh

stage "the aarch64 wheel and its pytest under qemu-aarch64 (tools/arm64_wheel.sh), beside the ASan build"
# Its tests mostly wait on one emulated interpreter at a time (~20 s to import torch under qemu): beside
# a compile they leave no core idle. Waited for before the ASan tests, which then run alone.
wheel_log=$(mktemp)
setsid tools/arm64_wheel.sh "$(tools/arm64_root.sh)" >"$wheel_log" 2>&1 &
wheel_pid=$!

# The instrumented builds below share no object with another build: ccache would only add its lookups.
no_ccache=(env -u CMAKE_C_COMPILER_LAUNCHER -u CMAKE_CXX_COMPILER_LAUNCHER -u CMAKE_CUDA_COMPILER_LAUNCHER)

stage "tests (ASan + UBSan)"
# Clang, -O1 -g1 (ASan's recommended level; line tables for the reports): the build is CI's longest
# step, and Clang compiles it in 483 s where GCC takes 650 (the hetero tests' templates most); the
# Release build, the one shipped, stays GCC's.
"${no_ccache[@]}" CC=clang CXX=clang++ cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZIPCCL_SANITIZE=address,undefined -DZIPCCL_CUDA=OFF \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
cmake --build build-asan -j"$JOBS"

stage "the aarch64 wheel's pytest: the result"
wheel_rc=0
wait "$wheel_pid" || wheel_rc=$?
wheel_pid=
cat "$wheel_log"
((wheel_rc == 0)) || { echo "test.sh: tools/arm64_wheel.sh failed (exit $wheel_rc)" >&2; exit 1; }
count_pytest "$wheel_log" tools/arm64_wheel.sh
rm -f "$wheel_log" "$root_log"

stage "tests (ASan + UBSan): the suite"
# Left to the Release stage, for CI time: the install test (a second project's build) and the
# never/auto device-buffer conformance runs (always.gpuemu keeps the GPU path's staging under ASan), and
# the runs over aws-ofi-nccl (not instrumented, and it leaks at close; inner.zipccl.* run here).
ASAN_OPTIONS=detect_leaks=1 run_ctest build-asan -LE slow -E '^install_find_package$|^(never|auto6)[.]gpuemu[.]|^inner[.]ofi[.]'

stage "plugin tests (TSan)"
# -O1 -g1 (line tables, all TSan's reports need), as the ASan build.
"${no_ccache[@]}" cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZIPCCL_SANITIZE=thread -DZIPCCL_CUDA=OFF \
  -DZIPCCL_BUILD_TOOLS=OFF -DZIPCCL_TEST_MODULES=gpu -DZIPCCL_EMULATED_GPU_TESTS=ON \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" >/dev/null
cmake --build build-tsan -j"$JOBS" --target nccl-net-zipccl test_plugin_abi test_plugin_units \
  test_plugin_conformance test_plugin_faults plugin_peer test_rdma_proto test_rdma_stack test_rdma_plugin \
  test_rdma_setup test_gpu_path gpu_codec_emulated_tests test_inner_optional test_inner_optional_emu
# The GPU path's own tests (gpu.*: the pipeline over the host emulation's stream threads) run here; its
# conformance runs with device buffers (*.gpuemu.*) take ~4 min under TSan and run in the other stages.
# inner.fake.with.InnerRegistration: regMr/deregMr on one thread while another sends over the inner
# transport (a stand-in inner plugin), for the inner's registration map; InnerStaging: device regMr that
# grow the GPU path's staging while device messages flow over it.
# The conformance suite runs once per ABI version in the other stages; here only v12's: the versions
# differ in their tables' adapters, not in the threads below them, and the six took ~1080 s of 1314.
run_ctest build-tsan -R '^(never|always|auto6)[.]|Faults|Garbage|PluginAbi|SocketIfname|Settings[.]|Frame[.]|Policy[.]|^Rdma|^gpu[.]|^inner[.]fake[.]with[.]InnerRegistration[.]|^inner[.]fake[.]cuda[.]gpuemu[.]always[.]InnerStaging[.]' \
  -E '^(never|always|auto6)[.](gpuemu[.]|Versions/Conformance[.].*/v([7-9]|1[01])( |$))'
# The CUDA codec's kernel bodies on the emulated CTA (free-running warps): a shared-memory race between
# a CTA's threads is a TSan report, as racecheck's hazard is on a GPU.
run_ctest build-tsan -R '^HostCta[.]|^Emulated[.]FramesMatchCpuPerType$|^Emulated/EmulatedSchedule[.].*/Free$'

stage "fuzz the frame decoder: build, then ${ZIPCCL_FUZZ_SECONDS:-60} s of libFuzzer beside the next two stages"
# libFuzzer runs on one core, for a fixed time, beside the qemu-x86_64 and old-userland stages, and is
# checked after them.
"${no_ccache[@]}" CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZIPCCL_FUZZ=ON \
  -DZIPCCL_SANITIZE=address,undefined -DZIPCCL_CUDA=OFF -DZIPCCL_BUILD_PLUGIN=OFF -DZIPCCL_BUILD_TOOLS=OFF \
  -DZIPCCL_BUILD_TESTS=ON -DZIPCCL_TEST_MODULES= >/dev/null
cmake --build build-fuzz -j"$JOBS" --target fuzz_decode fuzz_seeds
# Seeds (valid frames, real tensors where ../shared/data has them) are rewritten each run; the corpus
# the fuzzer grows from them stays in build-fuzz/corpus for the next run.
corpus=build-fuzz/corpus
seeds=build-fuzz/seeds
rm -rf "$seeds"
mkdir -p "$corpus" "$seeds"
./build-fuzz/tests/fuzz/fuzz_seeds "$seeds" ../shared/data
fuzz_log=build-fuzz/fuzz.log
./build-fuzz/tests/fuzz/fuzz_decode -max_total_time="${ZIPCCL_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix=build-fuzz/ "$corpus" "$seeds" >"$fuzz_log" 2>&1 &
fuzz_pid=$!

stage "x86-64 CPUs without AVX-512 / AVX2 (the Release build under qemu-x86_64 -cpu Nehalem, Haswell)"
count_passed tools/qemu_check.sh build

stage "old userland (Debian bullseye, glibc 2.31): tool round trip, plugin through doctor and perf, .deb install"
count_passed tools/oldlibc_check.sh build

stage "fuzz the frame decoder: the result"
fuzz_rc=0
wait "$fuzz_pid" || fuzz_rc=$?
fuzz_pid=
if ((fuzz_rc)); then
  tail -n 80 "$fuzz_log"
  echo "test.sh: fuzz_decode failed; the input is the crash-*/leak-*/timeout-* file in build-fuzz/" >&2
  exit 1
fi
# Coverage (counters instrumented, edges and features reached, corpus) at the start and the end, and
# the executions.
grep -E '^fuzz_decode: |^INFO: Loaded [0-9]+ modules|INFO: seed corpus|[0-9]+\s+(INITED|DONE) |^Done [0-9]+ runs|^stat::' "$fuzz_log"
echo "fuzz: no crash"

stage "done"
echo "$passed passed, 0 failed, $skipped skipped (no GPU / RDMA device here)"
