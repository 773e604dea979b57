#!/usr/bin/env bash
# The device checks, run on a machine with a GPU from binaries built elsewhere
# (tests/gpu/stage_device_build.sh stages them into build-device/carry). Steps run in priority order
# under one deadline; each gets its own limit or what is left, whichever is less, and a step that
# cannot start in time is recorded as "no time". Every step's log and a summary table go to the
# output folder ($OUT where the device tool sets it).
#   tests/gpu/run_device_checks.sh [--dry-run] [--deadline S] [--out DIR] [CARRY]
#     CARRY     staged folder (default build-device/carry): bin/ and data/
#     --dry-run plan only: checks that every binary is there, runs nothing on a GPU
# The GPU path is opt-in (ZIPCCL_GPU=on) until these checks pass; the steps that need it set it.
# Exit status: 0 when every step passed.
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
carry="$root/build-device/carry"
deadline_s=480
dry=0
out="${OUT:-$root/build-device/device-logs}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --deadline) deadline_s="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) carry="$(cd "$1" && pwd)" ;;
  esac
  shift
done
bin="$carry/bin"
data="$carry/data"
mkdir -p "$out"
summary="$out/summary.md"
start=$SECONDS
status=0
printf '| step | result | seconds | limit |\n|---|---|---|---|\n' >"$summary"
export PATH="/usr/local/cuda/bin:$PATH"

# step NAME LIMIT_S CMD...: runs CMD with the smaller of LIMIT_S and the time left, log in $out/NAME.log.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((deadline_s - (SECONDS - start)))
  local t0=$SECONDS rc verdict
  if [ "$left" -lt 10 ]; then
    verdict="no time"; rc=124
  elif [ "$dry" = 1 ]; then
    verdict="dry run"; rc=0
    echo "+ $*" >"$out/$name.log"
  else
    [ "$left" -lt "$limit" ] && limit=$left
    echo "=== $name (limit ${limit}s)"
    timeout --kill-after=5 "$limit" "$@" >"$out/$name.log" 2>&1
    rc=$?
    tail -n 5 "$out/$name.log"
    case $rc in
      0) verdict="passed" ;;
      124|137) verdict="TIMED OUT" ;;
      *) verdict="FAILED (rc $rc)" ;;
    esac
  fi
  [ "$rc" -eq 0 ] || status=1
  printf '| %s | %s | %d | %d |\n' "$name" "$verdict" $((SECONDS - t0)) "$limit" >>"$summary"
  echo "=== $name: $verdict"
  return $rc
}

need() {  # every binary the steps use, so a dry run proves the staging
  local missing=0 f
  for f in gpu_codec_device_tests gpu_codec_host_tests zipccl_gpu_bench zipccl libnccl-net-zipccl.so \
    test_gpu_path_cuda ddp_check.py; do
    [ -e "$bin/$f" ] || { echo "missing $bin/$f (run tests/gpu/stage_device_build.sh)"; missing=1; }
  done
  return $missing
}
need || { echo "| staging | MISSING binaries | 0 | 0 |" >>"$summary"; cat "$summary"; exit 1; }

{
  date -u +"date: %Y-%m-%d %H:%M UTC"
  nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader 2>/dev/null ||
    echo "nvidia-smi unavailable"
} | tee "$out/machine.txt"

plugin="$bin/libnccl-net-zipccl.so"
z="$bin/zipccl"
nccl_lib="${NCCL_LIB:-$(python3 -c '
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so*"))]
print(hits[0] if hits else "libnccl.so.2")' 2>/dev/null || echo libnccl.so.2)}"
echo "NCCL library: $nccl_lib" | tee -a "$out/machine.txt"
# NCCL hands the plugin device buffers (NCCL_PTR_CUDA) for a socket NIC only at GDR level SYS.
gdr=(env ZIPCCL_GPU=on NCCL_NET_GDR_LEVEL=SYS NCCL_NET_GDR_READ=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
  "NCCL_DEBUG_FILE=$out/nccl.%h.%p.txt")
small='Device.SmallCorpusForSanitizers:Device.MalformedFramesGetCpuStatus:Device.MappedResultsCanBePolled'
san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

# 1. The codec on the device: every kernel configured within the opt-in, frames equal the CPU's.
step device-tests 90 "$bin/gpu_codec_device_tests" --gtest_brief=1
# 2. The plugin's pipeline on the CUDA device operations (no NCCL): an error, never a hang.
step gpu-path-tests 60 env ZIPCCL_GPU=on ZIPCCL_COMPRESS=always ZIPCCL_MIN_BYTES=0 "$bin/test_gpu_path_cuda" --gtest_brief=1
# 3. A real tensor: frames from the GPU equal the CPU's at the GPU's block size, each side decodes the other's.
real_tensor() {
  local f="$data/gpt19m_weights_step30_layer0.bf16" d
  [ -f "$f" ] || { echo "no real tensor staged"; return 1; }
  d=$(mktemp -d)
  "$z" compress -t bf16 --block-log2 13 "$f" "$d/cpu.zc" && "$z" compress --gpu -v -t bf16 "$f" "$d/gpu.zc" &&
    cmp "$d/cpu.zc" "$d/gpu.zc" && "$z" decompress --gpu "$d/cpu.zc" "$d/a" && cmp "$f" "$d/a" &&
    "$z" decompress "$d/gpu.zc" "$d/b" && cmp "$f" "$d/b" && ls -l "$f" "$d/gpu.zc"
}
export -f real_tensor
export z data
step compress-gpu-real 40 bash -c real_tensor
# 4. Device buffers under real NCCL: 2 ranks, every collective, type and protocol, bit-exact, with
# frames encoded and decoded on the device (counted by the tool from the plugin's statistics).
nccl_check() {  # nccl_check NP [extra nccl-check args]: bit-exact and the GPU path used both ways
  local np="$1" log
  shift
  log=$(mktemp)
  "$z" nccl-check --np "$np" --timeout 60 --plugin "$plugin" --nccl "$nccl_lib" "$@" | tee "$log"
  local rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || return "$rc"
  # Every protocol's compressed run must show device-encoded and device-decoded frames.
  ! grep "GPU path:" "$log" | grep -q -E " 0 device-(en|de)coded" && grep -q "GPU path:" "$log"
}
export -f nccl_check
export plugin nccl_lib
step nccl-check-2 150 "${gdr[@]}" bash -c 'nccl_check 2 --iters 10 --bytes 4M'
# 5. The sanitizers on the small corpus: zero errors.
if [ -x "$san" ] || [ "$dry" = 1 ]; then
  step memcheck 60 "$san" --tool memcheck --error-exitcode 3 "$bin/gpu_codec_device_tests" --gtest_brief=1 "--gtest_filter=$small"
  step racecheck 60 "$san" --tool racecheck --racecheck-report hazard --error-exitcode 3 "$bin/gpu_codec_device_tests" \
    --gtest_brief=1 "--gtest_filter=Device.SmallCorpusForSanitizers"
  step synccheck 40 "$san" --tool synccheck --error-exitcode 3 "$bin/gpu_codec_device_tests" --gtest_brief=1 \
    "--gtest_filter=Device.SmallCorpusForSanitizers"
  step initcheck 40 "$san" --tool initcheck --error-exitcode 3 "$bin/gpu_codec_device_tests" --gtest_brief=1 \
    "--gtest_filter=Device.SmallCorpusForSanitizers"
else
  step sanitizers 1 false
fi
# 6. 3 ranks; then 100 iterations under CUDA_DEVICE_MAX_CONNECTIONS=1 (the plugin turns its GPU path
# off there and says so; the run must still be bit-exact and finish).
step nccl-check-3 150 "${gdr[@]}" bash -c 'nccl_check 3 --iters 5 --bytes 1M'
step nccl-check-1conn 60 "${gdr[@]}" CUDA_DEVICE_MAX_CONNECTIONS=1 "$z" nccl-check --np 3 --iters 100 --bytes 1M \
  --types bf16 --colls allreduce --timeout 50 --plugin "$plugin" --nccl "$nccl_lib"
# 7. An unmodified PyTorch DDP job with device buffers: bit-identical to the uncompressed run.
step ddp-gdr 150 "${gdr[@]}" python3 "$bin/ddp_check.py" --plugin "$plugin" --np 2 --steps 30 --timeout 140
# 7b. The same job through the Python package's zipccl.enable() (issue 23), when a wheel was staged
# (stage_device_build.sh unpacks build-python/wheelhouse/*.whl: tests/python/run.sh builds it). The
# wheel is for the Python it was built with; on another Python the import fails and the step says so.
if [ -d "$carry/python/zipccl" ]; then
  step ddp-enable 150 python3 "$bin/ddp_check.py" --enable "$carry/python" --np 2 --steps 30 --timeout 140
else
  printf '| ddp-enable | skipped (no wheel staged) | 0 | 0 |\n' >>"$summary"
fi
# 8. If device buffers hung above: the same 2-rank run under MPS tells the plugin apart from two
# time-sliced contexts on one GPU (issue 26, item 4).
if grep -q "TIMED OUT" "$summary" && command -v nvidia-cuda-mps-control >/dev/null; then
  nvidia-cuda-mps-control -d && step nccl-check-2-mps 120 "${gdr[@]}" bash -c 'nccl_check 2 --iters 5 --bytes 4M'
  echo quit | nvidia-cuda-mps-control
fi
# 9. Speed (issue 27): the codec bench, last.
step bench 120 "$bin/zipccl_gpu_bench"

echo "total $((SECONDS - start)) s of a ${deadline_s}-s deadline" >>"$summary"
cat "$summary"
exit $status
