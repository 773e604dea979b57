#!/usr/bin/env bash
# Device checks, for a machine with a GPU: build from this tree with the machine's nvcc and cmake (no
# network), run the CUDA codec's GPU and host tests, compute-sanitizer memcheck and racecheck on the
# GPU tests, hetero's NCCL executor, the plugin under real NCCL (`zipccl nccl-check`: every
# collective, type and protocol bit-exact, compressed vs not; 100 iterations) and an unmodified
# PyTorch DDP job (tests/gpu/ddp_check.py), the tool's --gpu (compress/decompress equal to the CPU's
# stream, bench --gpu), then the codec throughput benchmark, printed last.
# The nccl-check runs use the plugin's GPU path (NCCL_PTR_CUDA; NCCL_NET_GDR_LEVEL=SYS so NCCL puts
# LL128/Simple buffers in device memory for a socket NIC) and the 100-iteration run does so under
# CUDA_DEVICE_MAX_CONNECTIONS=1; their NCCL logs must show the GPU path on, GDRDMA channels and
# device-encoded messages. The DDP job keeps NCCL's default GDR level (host buffers: the CPU path).
# Budget: under 8 minutes on an H200 (each step has its own timeout). Usage, from the repo root:
#   tests/gpu/run_device_checks.sh [build-dir]        (default build-device)
# Exit status: 0 when every step passed.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="${1:-$root/build-device}"
export PATH="/usr/local/cuda/bin:$PATH"
status=0
step() {  # step NAME TIMEOUT_S CMD...
  local name="$1" limit="$2"
  shift 2
  local t0=$SECONDS
  echo "=== $name (limit ${limit}s)"
  timeout --kill-after=10 "$limit" "$@"
  local rc=$?
  echo "=== $name: rc=$rc, $((SECONDS - t0))s"
  [ $rc -eq 0 ] || status=1
  return $rc
}

nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader 2>/dev/null || echo "nvidia-smi unavailable"
cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d '.')"
# Build for the architectures of record plus this GPU's, so the tests run native code.
archs="80-real;90-real;90-virtual"
[ -n "$cap" ] && [ "$cap" != "80" ] && [ "$cap" != "90" ] && archs="$archs;${cap}-real"

step configure 120 cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DZIPCCL_CUDA=ON \
  -DZIPCCL_BUILD_PLUGIN=ON -DZIPCCL_BUILD_TOOLS=ON "-DZIPCCL_TEST_MODULES=gpu;hetero" \
  "-DCMAKE_CUDA_ARCHITECTURES=$archs" || exit 1
step build 240 cmake --build "$build" -j"$(nproc)" \
  --target gpu_codec_device_tests gpu_codec_host_tests zipccl_gpu_bench codec_tests zipccl nccl-net-zipccl \
  test_gpu_path_cuda || exit 1

tests="$build/tests/gpu/gpu_codec_device_tests"
step device-tests 90 "$tests" --gtest_brief=1
step host-tests 90 "$build/tests/gpu/gpu_codec_host_tests" --gtest_brief=1
step cpu-codec-tests 60 "$build/tests/codec/codec_tests" --gtest_brief=1
# The plugin's send/receive pipeline on the CUDA device operations (in-process transport, device buffers).
step gpu-path-tests 60 "$build/tests/plugin/test_gpu_path_cuda" --gtest_brief=1 --setenv=ZIPCCL_GPU=auto \
  --setenv=ZIPCCL_COMPRESS=always --setenv=ZIPCCL_MIN_BYTES=0

# Sanitizers on the small cases (the large ones would take minutes under instrumentation).
san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
small='Device.SmallCorpusForSanitizers:Device.MalformedFramesGetCpuStatus:Device.MappedResultsCanBePolled'
if [ -x "$san" ]; then
  step memcheck 80 "$san" --tool memcheck --error-exitcode 3 "$tests" --gtest_brief=1 "--gtest_filter=$small"
  step racecheck 80 "$san" --tool racecheck --racecheck-report hazard --error-exitcode 3 "$tests" --gtest_brief=1 \
    "--gtest_filter=Device.SmallCorpusForSanitizers"
  step synccheck 40 "$san" --tool synccheck --error-exitcode 3 "$tests" --gtest_brief=1 \
    "--gtest_filter=Device.SmallCorpusForSanitizers"
else
  echo "compute-sanitizer not found: sanitizer steps skipped"; status=1
fi

# hetero's NCCL executor (issue 6): 8 processes sharing the GPU (distinct NCCL_HOSTID), every byte
# against the CPU executor. Built only where CMake found NCCL's header and library.
if cmake --build "$build" -j"$(nproc)" --target hetero_nccl_test >/dev/null 2>&1; then
  step hetero-nccl 120 "$build/tests/hetero/hetero_nccl_test" --gtest_brief=1
else
  echo "hetero_nccl_test not built (NCCL not found by CMake): step skipped"; status=1
fi

# The plugin under real NCCL: PyTorch's libnccl.so.2 (pip's nvidia-nccl) unless NCCL_LIB says otherwise.
nccl_lib="${NCCL_LIB:-$(python3 -c '
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so*"))]
print(hits[0] if hits else "libnccl.so.2")' 2>/dev/null || echo libnccl.so.2)}"
plugin="$build/plugin/libnccl-net-zipccl.so"
echo "NCCL library: $nccl_lib"
logs="$build/nccl-logs"
rm -rf "$logs" && mkdir -p "$logs"
gdr=(env NCCL_NET_GDR_LEVEL=SYS NCCL_NET_GDR_READ=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
     "NCCL_DEBUG_FILE=$logs/nccl.%h.%p.log")
step nccl-check 150 "${gdr[@]}" "$build/tools/zipccl" nccl-check --np 2 --iters 20 --bytes 4M \
  --plugin "$plugin" --nccl "$nccl_lib"
step nccl-check-100-iters 60 "${gdr[@]}" CUDA_DEVICE_MAX_CONNECTIONS=1 "$build/tools/zipccl" nccl-check --np 3 \
  --iters 100 --bytes 1M --types bf16 --colls allreduce --plugin "$plugin" --nccl "$nccl_lib"
# Segments under real NCCL: its Simple steps (buffer/8, 512 KiB by default) stay below the 1 MiB
# default, so 64 KiB segments make every large step travel as several frames (D2H on the copy stream).
step nccl-check-segments 90 "${gdr[@]}" ZIPCCL_SEGMENT_BYTES=64KiB "$build/tools/zipccl" nccl-check --np 2 \
  --iters 5 --bytes 4M --types bf16,fp32 --colls allreduce,alltoall --plugin "$plugin" --nccl "$nccl_lib"
# The GPU path was used: CUDA device operations on, NCCL_PTR_CUDA taken (GDRDMA channels), and frames
# encoded on the device (the plugin's per-comm INFO line at close).
on=$(cat "$logs"/*.log 2>/dev/null | grep -c "GPU path: CUDA")
gdrdma=$(cat "$logs"/*.log 2>/dev/null | grep -c "via NET/zipccl/[0-9]*/GDRDMA")
encoded=$(cat "$logs"/*.log 2>/dev/null | sed -n 's/.*GPU path (send): \([0-9]*\) device messages, \([0-9]*\) sent as device-encoded frames.*/\2/p' \
  | awk '{s += $1} END {print s + 0}')
decoded=$(cat "$logs"/*.log 2>/dev/null | sed -n 's/.*GPU path (recv): [0-9]* device messages, \([0-9]*\) decoded on the device.*/\1/p' \
  | awk '{s += $1} END {print s + 0}')
echo "=== gpu-path: 'GPU path: CUDA' in $on logs, $gdrdma GDRDMA channels, $encoded frames encoded and $decoded decoded on the device"
if [ "$on" -eq 0 ] || [ "$gdrdma" -eq 0 ] || [ "$encoded" -eq 0 ] || [ "$decoded" -eq 0 ]; then
  echo "=== gpu-path: FAILED (the GPU path was not exercised; see $logs)"; status=1
fi
step pytorch-ddp 150 python3 "$root/tests/gpu/ddp_check.py" --plugin "$plugin" --np 2 --steps 30

# The tool's --gpu: a 96 MiB file (two frames) compressed on the GPU equals the CPU's stream at the GPU's
# default block size (--block-log2 13; the CPU's default is 14), and
# each side restores the other's; then `zipccl bench --gpu` on two of the built-in sets.
tool_gpu() {
  local d z="$build/tools/zipccl"
  d=$(mktemp -d)
  "$z" bench --list >/dev/null || return 1
  python3 -c "import numpy as np; x = np.random.default_rng(7).normal(0, 1e-2, 48 << 20).astype(np.float32); (x.view(np.uint32) >> 16).astype('<u2').tofile('$d/in.bin')" &&
    "$z" compress -t bf16 --block-log2 13 "$d/in.bin" "$d/cpu.zc" && "$z" compress --gpu -v -t bf16 "$d/in.bin" "$d/gpu.zc" &&
    cmp "$d/cpu.zc" "$d/gpu.zc" && "$z" decompress --gpu "$d/cpu.zc" "$d/a.bin" && cmp "$d/in.bin" "$d/a.bin" &&
    "$z" decompress "$d/gpu.zc" "$d/b.bin" && cmp "$d/in.bin" "$d/b.bin" &&
    "$z" bench --gpu --reps 5 --sets gauss-bf16-s1e-3,bucket-bf16
  local rc=$?
  rm -rf "$d"
  return $rc
}
export build
export -f tool_gpu
step tool-gpu 120 bash -c tool_gpu

step bench 180 "$build/tests/gpu/zipccl_gpu_bench"
echo "=== device checks: $([ $status -eq 0 ] && echo PASSED || echo FAILED)"
exit $status
