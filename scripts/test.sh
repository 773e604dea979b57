#!/usr/bin/env bash
# The tests: the Release build's test suite, then an ASan+UBSan build's, then a short libFuzzer
# run of the frame decoder. ZIPCCL_QUICK=1 runs only the first.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/setup.sh

echo "== tests (Release)"
ctest --test-dir build --output-on-failure -j"$JOBS"
[[ "${ZIPCCL_QUICK:-0}" == 1 ]] && exit 0

echo "== tests (ASan + UBSan)"
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZIPCCL_SANITIZE=address,undefined -DZIPCCL_CUDA=OFF >/dev/null
cmake --build build-asan -j"$JOBS"
ASAN_OPTIONS=detect_leaks=1 ctest --test-dir build-asan --output-on-failure -j"$JOBS" -LE slow

echo "== fuzz the frame decoder (libFuzzer, ${ZIPCCL_FUZZ_SECONDS:-60} s)"
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZIPCCL_FUZZ=ON \
  -DZIPCCL_SANITIZE=address,undefined -DZIPCCL_CUDA=OFF -DZIPCCL_BUILD_PLUGIN=OFF -DZIPCCL_BUILD_TOOLS=OFF \
  -DZIPCCL_BUILD_TESTS=ON -DZIPCCL_TEST_MODULES= >/dev/null
cmake --build build-fuzz -j"$JOBS" --target fuzz_decode fuzz_seeds
corpus=build-fuzz/corpus
mkdir -p "$corpus"
./build-fuzz/tests/fuzz/fuzz_seeds "$corpus"
./build-fuzz/tests/fuzz/fuzz_decode -max_total_time="${ZIPCCL_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 \
  -print_final_stats=1 "$corpus" 2>&1 | tail -n 12
echo "fuzz: no crash"
