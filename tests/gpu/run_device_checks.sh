#!/usr/bin/env bash
# The device checks, run on a machine with a GPU from binaries built elsewhere
# (tests/gpu/stage_device_build.sh stages them into build-device/carry).
#   tests/gpu/run_device_checks.sh [--dry-run] [--deadline S] [--steps LIST] [--out DIR] [CARRY]
#     CARRY      staged folder (default build-device/carry): bin/ and data/
#     --dry-run  print the plan (step order, limits, their sum against the deadline, the files left in
#                the output folder) and whether the staging is complete; runs nothing, needs no GPU.
#                Exit status 1 when the plan does not fit the deadline.
#     --steps    'default' (the correctness steps), 'all', or a comma-separated list of step names
#                (run in the catalogue's priority order; see --dry-run --steps all)
#     --out      output folder (default $OUT, else build-device/device-logs)
# Only 8 files of the output folder come back from the GPU machine (each at most 16 MiB), so it gets
# two: summary.md (the machine line and a table of the steps) and logs.tgz (every log, the machine's
# details, NCCL's debug files and the MPS logs), re-packed after every step, atomically, so a run
# killed at any point still returns the previous archive.
# The steps run in priority order and every step's limit fits the deadline; the GPU path is opt-in
# (ZIPCCL_GPU=on) until these checks pass, and the steps that need it set it.
# Exit status: 0 when no step failed or timed out (steps unsupported on this machine, or skipped for
# want of a staged file, are listed as such and do not count).
set -u
root="$(cd "$(dirname "$0")/../.." && pwd)"
carry="$root/build-device/carry"
deadline_s=480
dry=0
steps=default
out="${OUT:-$root/build-device/device-logs}"
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --deadline) deadline_s="$2"; shift ;;
    --steps) steps="$2"; shift ;;
    --out) out="$2"; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) carry="$(cd "$1" 2>/dev/null && pwd || echo "$1")" ;;
  esac
  shift
done
bin="$carry/bin"
data="$carry/data"

# ---- The plan -----------------------------------------------------------------------------------
# The catalogue in priority order: name, limit (s), kind, in the default set.
#   solo: one process; ranks: several processes on the one GPU, under MPS where it works (ranks that
#   share a GPU without MPS are time-sliced: a slow run, not a hang); san: compute-sanitizer.
# A step's limit covers its command, the 5 s its kill may take and re-packing the archive (2 s). The multi-rank steps size their
# inner timeouts from it: nccl-check runs every protocol twice (never, then compressed), ddp_check
# runs the job twice, so runs x --timeout + 10 s fits the limit.
catalogue=(
  "device-tests      40 solo  on"
  "gpu-path-tests    25 solo  on"
  "compress-gpu-real 15 solo  on"
  "nccl-check-2      80 ranks on"
  "ddp-gdr           90 ranks on"
  "nccl-check-3      80 ranks on"
  "sanitizer-probe   20 san   on"
  "memcheck          30 san   on"
  "racecheck         30 san   on"
  "synccheck         15 san   on"
  "initcheck         15 san   on"
  "nccl-check-1conn  30 ranks off"
  "ddp-enable        90 ranks off"
  "bench             90 solo  off"
  "slow-link        150 ranks off"
)
setup_s=5      # machine line, staging check, first archive
mps_start_s=20 # daemon (3 s), a one-test client (7 s), or giving up (quit, 10 s)
mps_stop_s=10  # `echo quit | nvidia-cuda-mps-control` under `timeout 10`

# plan_rows: "name limit" in run order, with MPS started before a run of multi-rank steps and stopped
# after it (the sanitizers do not run under MPS).
plan_rows=()
build_plan() {
  local e name limit kind dflt in_mps=0 known=","
  for e in "${catalogue[@]}"; do read -r name _ <<<"$e"; known+="$name,"; done
  if [ "$steps" != default ] && [ "$steps" != all ]; then
    local s
    for s in ${steps//,/ }; do
      [[ "$known" == *",$s,"* ]] || { echo "run_device_checks.sh: no step '$s' (steps: ${known:1:-1})" >&2; exit 2; }
    done
  fi
  plan_rows=("setup $setup_s")
  for e in "${catalogue[@]}"; do
    read -r name limit kind dflt <<<"$e"
    case "$steps" in
      default) [ "$dflt" = on ] || continue ;;
      all) ;;
      *) [[ ",$steps," == *",$name,"* ]] || continue ;;
    esac
    if [ "$kind" = ranks ] && [ $in_mps = 0 ]; then plan_rows+=("mps-start $mps_start_s"); in_mps=1; fi
    if [ "$kind" != ranks ] && [ $in_mps = 1 ]; then plan_rows+=("mps-stop $mps_stop_s"); in_mps=0; fi
    plan_rows+=("$name $limit")
  done
  if [ $in_mps = 1 ]; then plan_rows+=("mps-stop $mps_stop_s"); fi
}
build_plan
limit_of() {  # limit_of NAME: the step's limit in the plan
  local r n l
  for r in "${plan_rows[@]}"; do read -r n l <<<"$r"; [ "$n" = "$1" ] && { echo "$l"; return; }; done
  echo 0
}

# Files left in the output folder (at most 8 come back); logs.tgz.tmp exists only while packing.
out_files="summary.md logs.tgz logs.tgz.tmp"

need_missing() {  # every binary the steps use, so a dry run proves the staging
  local f missing=""
  for f in gpu_codec_device_tests gpu_codec_host_tests zipccl_gpu_bench zipccl libnccl-net-zipccl.so \
    test_gpu_path_cuda ddp_check.py flowcap_shim.so; do
    [ -e "$bin/$f" ] || missing+=" $f"
  done
  echo "$missing"
}

if [ "$dry" = 1 ]; then
  t=0
  echo "plan: ${#plan_rows[@]} steps in priority order, deadline ${deadline_s} s (steps: $steps)"
  printf '%3s  %-18s %5s %6s %6s\n' "#" step limit start end
  i=0
  for r in "${plan_rows[@]}"; do
    read -r n l <<<"$r"
    i=$((i + 1))
    printf '%3d  %-18s %5d %6d %6d\n' "$i" "$n" "$l" "$t" $((t + l))
    t=$((t + l))
  done
  fits="fits"
  [ "$t" -le "$deadline_s" ] || fits="DOES NOT FIT"
  echo "sum of limits: $t s of a ${deadline_s}-s deadline: $fits"
  echo "output files: $out_files"
  echo "  (logs.tgz.tmp only while a pack is under way: a run killed then still leaves the previous logs.tgz)"
  m=$(need_missing)
  if [ -z "$m" ]; then echo "staging: $carry complete"; else echo "staging: missing in $bin:$m (run tests/gpu/stage_device_build.sh)"; fi
  [ "$fits" = fits ]
  exit
fi

# ---- The run ------------------------------------------------------------------------------------
mkdir -p "$out"
summary="$out/summary.md"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/zipccl-device.XXXXXX")"
mkdir -p "$scratch/logs"
start=$SECONDS
status=0
export PATH="/usr/local/cuda/bin:$PATH"

# pack: the scratch folder into $out/logs.tgz (logs/...), written as logs.tgz.tmp and renamed, so a
# run killed while packing still leaves the previous archive. A file over `cap` goes in as its head
# and tail; cap shrinks until the archive is under 12 MiB (what comes back is at most 16 MiB a file).
pack() {
  local cap=$((1 << 20)) stage f size tmp="$out/logs.tgz.tmp"
  cp "$summary" "$scratch/logs/summary.md" 2>/dev/null
  while :; do
    stage="$(mktemp -d "${TMPDIR:-/tmp}/zipccl-pack.XXXXXX")"
    (cd "$scratch" && find logs -type f) | while IFS= read -r f; do
      mkdir -p "$stage/$(dirname "$f")"
      size=$(stat -c %s "$scratch/$f" 2>/dev/null || echo 0)
      if [ "$size" -gt "$cap" ]; then
        { head -c $((cap / 2)) "$scratch/$f"
          printf '\n[... run_device_checks.sh cut %d bytes here ...]\n' $((size - cap))
          tail -c $((cap / 2)) "$scratch/$f"; } >"$stage/$f"
      else
        cp "$scratch/$f" "$stage/$f"
      fi
    done
    tar -C "$stage" -cf - logs 2>/dev/null | gzip -1 >"$tmp"
    rm -rf "$stage"
    if [ "$(stat -c %s "$tmp" 2>/dev/null || echo 0)" -le $((12 << 20)) ] || [ "$cap" -le 16384 ]; then break; fi
    cap=$((cap / 4))
  done
  mv -f "$tmp" "$out/logs.tgz"
}

mps=off          # on while an MPS daemon this script started runs
san_state=""     # set by sanitizer-probe when the sanitizer cannot run here
export CUDA_MPS_PIPE_DIRECTORY="$scratch/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$scratch/logs/mps"
mps_quit() {
  [ "$mps" = on ] || return 0
  echo quit | timeout 10 nvidia-cuda-mps-control
  mps=off
}
finish() {
  mps_quit >/dev/null 2>&1
  printf '\ntotal %d s of a %d-s deadline\n' $((SECONDS - start)) "$deadline_s" >>"$summary"
  pack
  rm -rf "$scratch"
}
trap finish EXIT
trap 'echo "killed (signal) after $((SECONDS - start)) s" >>"$summary"; exit 1' TERM INT

# The machine line: GPU, driver, CUDA, the sandbox (gVisor or Firecracker, by chance: the sanitizer
# works only on Firecracker), the date. Details in logs/machine.txt.
runtime_guess() {
  if dmesg 2>/dev/null | grep -qi gvisor; then echo "gVisor (dmesg)"
  elif [ "$(uname -r)" = 4.4.0 ]; then echo "gVisor (kernel 4.4.0)"
  elif dmesg 2>/dev/null | grep -qi firecracker; then echo "Firecracker (dmesg)"
  elif grep -q virtio_mmio /proc/cmdline 2>/dev/null; then echo "Firecracker (virtio_mmio in /proc/cmdline)"
  else echo "unknown (kernel $(uname -r))"
  fi
}
gpu_line="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1)"
gpu_line="${gpu_line:-nvidia-smi unavailable, ?}"
cuda_line="$(nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | head -n 1)"
{
  printf 'machine: %s, driver %s, %s, runtime %s, %s\n\n' "${gpu_line%%,*}" "${gpu_line#*, }" \
    "${cuda_line:-CUDA Version: ?}" "$(runtime_guess)" "$(date -u +'%Y-%m-%d %H:%M UTC')"
  printf '| step | result | seconds | limit |\n|---|---|---|---|\n'
} >"$summary"

plugin="$bin/libnccl-net-zipccl.so"
z="$bin/zipccl"
nccl_lib="${NCCL_LIB:-$(python3 -c '
import glob, os, site
dirs = site.getsitepackages() + [site.getusersitepackages()]
hits = [p for d in dirs for p in glob.glob(os.path.join(d, "nvidia", "nccl", "lib", "libnccl.so*"))]
print(hits[0] if hits else "libnccl.so.2")' 2>/dev/null || echo libnccl.so.2)}"
small='Device.SmallCorpusForSanitizers:Device.MalformedFramesGetCpuStatus:Device.MappedResultsCanBePolled'
san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"

# NCCL hands the plugin device buffers (NCCL_PTR_CUDA) for a socket NIC only at GDR level SYS. Each
# NCCL process writes its debug file into the archive, named after the step.
gdr_env() {
  gdr=(env ZIPCCL_GPU=on NCCL_NET_GDR_LEVEL=SYS NCCL_NET_GDR_READ=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
    "NCCL_DEBUG_FILE=$scratch/logs/nccl/$1.%h.%p.txt")
}
mkdir -p "$scratch/logs/nccl"

# A real tensor: frames from the GPU equal the CPU's at the GPU's block size, each side decodes the other's.
real_tensor() {
  local f="$data/gpt19m_weights_step30_layer0.bf16" d rc
  d=$(mktemp -d)
  "$z" compress -t bf16 --block-log2 13 "$f" "$d/cpu.zc" && "$z" compress --gpu -v -t bf16 "$f" "$d/gpu.zc" &&
    cmp "$d/cpu.zc" "$d/gpu.zc" && "$z" decompress --gpu "$d/cpu.zc" "$d/a" && cmp "$f" "$d/a" &&
    "$z" decompress "$d/gpu.zc" "$d/b" && cmp "$f" "$d/b" && ls -l "$f" "$d/gpu.zc"
  rc=$?
  rm -rf "$d"
  return $rc
}
# nccl_check NP [nccl-check args]: bit-exact, and every protocol's compressed run shows device-encoded
# and device-decoded frames (counted by the tool from the plugin's statistics).
nccl_check() {
  local np="$1" log rc
  shift
  log=$(mktemp)
  "$z" nccl-check --np "$np" --plugin "$plugin" --nccl "$nccl_lib" "$@" | tee "$log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || { rm -f "$log"; return "$rc"; }
  ! grep "GPU path:" "$log" | grep -q -E " 0 device-(en|de)coded" && grep -q "GPU path:" "$log"
  rc=$?
  rm -f "$log"
  return $rc
}
# slow_link TIMEOUT: issue 35's slow link. Two ranks, allreduce of gradient-like bf16 (16, 64 and 256
# MiB; device buffers), every TCP flow paced at 10 Gbit/s by tools/flowcap_shim.c (SO_MAX_PACING_RATE:
# TCP's own pacing, no tc and no root needed), with one channel and one socket per connection, so each
# direction between the ranks is one 10 Gbit/s flow, as a 10 Gbit/s full-duplex link carries it.
# nccl-check runs each size uncompressed, then with `auto`; 64 MiB once more with `always`. It prints
# both bus bandwidths; the speedup lines are computed from them. Whether the cap held is checked, not
# assumed: an uncompressed bus bandwidth above 1.5 GB/s (10 Gbit/s is 1.25) means this machine's
# network stack ignored the pacing (gVisor may), and the step says so instead of reporting a speedup.
slow_link() {
  local t="$1" size mode log rc=0 bad=0
  [ -f "$bin/flowcap_shim.so" ] || { echo "slow-link: no flowcap_shim.so staged"; return 1; }
  log=$(mktemp)
  for run in "16M auto" "64M auto" "256M auto" "64M always"; do
    read -r size mode <<<"$run"
    echo "== allreduce bf16 $size, never then $mode, every flow paced at 10 Gbit/s"
    env LD_PRELOAD="$bin/flowcap_shim.so" FLOWCAP_RATE=10gbit NCCL_MIN_NCHANNELS=1 NCCL_MAX_NCHANNELS=1 \
      NCCL_SOCKET_NTHREADS=1 NCCL_NSOCKS_PERTHREAD=1 \
      "$z" nccl-check --np 2 --plugin "$plugin" --nccl "$nccl_lib" --iters 5 --bytes "$size" --types bf16 \
      --colls allreduce --protos Simple --compress "$mode" --timeout "$t" | tee "$log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
    # nccl-check's row: PROTO COLL TYPE BIT-EXACT NEVER GB/s COMPRESSED GB/s.
    awk -v run="$run" '$2 == "allreduce" && $3 == "bf16" && $(NF) == "GB/s" && $(NF-2) == "GB/s" {
           never = $(NF-3); comp = $(NF-1); seen = 1
           if (never > 0 && comp > 0)
             printf "slow-link: %s: never %.2f GB/s, compressed %.2f GB/s: %.2fx\n", run, never, comp, comp / never
           else
             printf "slow-link: %s: no result\n", run
           if (never > 1.5) exit 3 }
         END { if (!seen) printf "slow-link: %s: no result\n", run }' "$log" || bad=1
  done
  rm -f "$log"
  [ "$bad" -eq 0 ] || echo "slow-link: an uncompressed run passed 1.5 GB/s: the 10 Gbit/s pacing did not hold here"
  [ "$rc" -eq 0 ] && [ "$bad" -eq 0 ]
}
export -f real_tensor nccl_check slow_link
export z data plugin nccl_lib bin

# step_command NAME LIMIT: sets cmd=(...) for the step, or skip="why" when it cannot run here.
step_command() {
  local name="$1" limit="$2"
  cmd=()
  skip=""
  # nccl-check: 2 runs per protocol; ddp_check: 2 runs. Each gets an equal share of limit - 10 s.
  runs_t() { echo $(((limit - 10) / $1)); }
  case "$name" in
    # The codec on the device: every kernel configured within the opt-in, frames equal the CPU's.
    device-tests) cmd=("$bin/gpu_codec_device_tests" --gtest_brief=1) ;;
    # The plugin's pipeline on the CUDA device operations (no NCCL): an error, never a hang.
    gpu-path-tests)
      cmd=(env ZIPCCL_GPU=on ZIPCCL_COMPRESS=always ZIPCCL_MIN_BYTES=0 "$bin/test_gpu_path_cuda" --gtest_brief=1) ;;
    compress-gpu-real)
      [ -f "$data/gpt19m_weights_step30_layer0.bf16" ] || skip="skipped (no real tensor staged)"
      cmd=(bash -c real_tensor) ;;
    # Device buffers under real NCCL: every collective, type and protocol, bit-exact, with frames
    # encoded and decoded on the device.
    nccl-check-2)
      gdr_env "$name"
      cmd=("${gdr[@]}" bash -c "nccl_check 2 --iters 10 --bytes 4M --timeout $(runs_t 6)") ;;
    nccl-check-3)
      gdr_env "$name"
      cmd=("${gdr[@]}" bash -c "nccl_check 3 --iters 5 --bytes 1M --timeout $(runs_t 6)") ;;
    # An unmodified PyTorch DDP job with device buffers: bit-identical to the uncompressed run (the
    # most realistic reproducer of issue 26's hang).
    ddp-gdr)
      gdr_env "$name"
      cmd=("${gdr[@]}" python3 "$bin/ddp_check.py" --plugin "$plugin" --np 2 --steps 30 --timeout "$(runs_t 2)") ;;
    # The sanitizers on the small corpus: zero errors.
    memcheck) cmd=("$san" --tool memcheck --error-exitcode 3 "$bin/gpu_codec_device_tests" --gtest_brief=1
      "--gtest_filter=$small") ;;
    racecheck) cmd=("$san" --tool racecheck --racecheck-report hazard --error-exitcode 3
      "$bin/gpu_codec_device_tests" --gtest_brief=1 --gtest_filter=Device.SmallCorpusForSanitizers) ;;
    synccheck|initcheck) cmd=("$san" --tool "$name" --error-exitcode 3 "$bin/gpu_codec_device_tests" --gtest_brief=1
      --gtest_filter=Device.SmallCorpusForSanitizers) ;;
    # 100 iterations under CUDA_DEVICE_MAX_CONNECTIONS=1 (the plugin turns its GPU path off there and
    # says so; the run must still be bit-exact and finish).
    nccl-check-1conn)
      gdr_env "$name"
      cmd=("${gdr[@]}" CUDA_DEVICE_MAX_CONNECTIONS=1 "$z" nccl-check --np 3 --iters 100 --bytes 1M --types bf16
        --colls allreduce --protos Simple --timeout "$(runs_t 2)" --plugin "$plugin" --nccl "$nccl_lib") ;;
    # The same job through the Python package's zipccl.enable() (issue 23), when a wheel was staged
    # (stage_device_build.sh copies build-python/wheelhouse/*.whl; unpacked here, as the carry is
    # limited). The wheel serves every CPython 3.x (py3-none); without one the step says so.
    ddp-enable)
      local whl
      whl=$(ls "$carry"/python/zipccl-*.whl 2>/dev/null | head -n 1)
      if [ -z "$whl" ]; then
        skip="skipped (no wheel staged)"
      else
        python3 -m zipfile -e "$whl" "$scratch/python"
      fi
      cmd=(python3 "$bin/ddp_check.py" --enable "$scratch/python" --np 2 --steps 30 --timeout "$(runs_t 2)") ;;
    # Worth it on a slow link (issue 35): see slow_link. 4 nccl-check runs of 2 modes each.
    slow-link)
      gdr_env "$name"
      cmd=("${gdr[@]}" bash -c "slow_link $(runs_t 8)") ;;
    # Speed: the codec bench's quick set (20 reps, buffers rotated past the L2, the copy bound beside
    # each figure), on every staged real tensor too, and nvCOMP's ANS and Bitcomp on the same inputs
    # when stage_device_build.sh staged its library (xz-packed: the carry is limited to 64 MiB).
    bench)
      cmd=("$bin/zipccl_gpu_bench" --quick)
      for f in "$data"/*.bf16; do [ -f "$f" ] && cmd+=(--data "$f"); done
      if [ -f "$carry/lib/libnvcomp.so.6.xz" ]; then
        mkdir -p "$scratch/lib"
        # Python's lzma, as the machine may have no xz.
        python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
          "$carry/lib/libnvcomp.so.6.xz" "$scratch/lib/libnvcomp.so.6" && cmd+=(--nvcomp "$scratch/lib/libnvcomp.so.6")
      fi ;;
  esac
  case "$name" in
    memcheck|racecheck|synccheck|initcheck) [ -z "$san_state" ] || skip="${san_state%% (*} (see sanitizer-probe)" ;;
  esac
}

# The steps that are not a command: they change what later steps run under.
mps_start() {  # an MPS daemon, kept only when a client can use the GPU through it
  command -v nvidia-cuda-mps-control >/dev/null || { echo "no nvidia-cuda-mps-control"; return 1; }
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  timeout 3 nvidia-cuda-mps-control -d || { echo "nvidia-cuda-mps-control -d failed"; return 1; }
  mps=on
  local log="$scratch/logs/mps-client.log"
  timeout --kill-after=1 6 "$bin/gpu_codec_device_tests" --gtest_filter=Device.ArgumentErrorsAreReturnedNotRaised \
    >"$log" 2>&1 && grep -q "PASSED.*1 test" "$log" && ! grep -q SKIPPED "$log" && return 0
  echo "a client could not use the GPU under MPS:"
  tail -n 3 "$log"
  mps_quit
  return 1
}
sanitizer_probe() {  # one small run: does compute-sanitizer accept this device?
  local limit="$1" log="$scratch/logs/sanitizer-probe.log" rc why
  [ -x "$san" ] || { san_state="unsupported here (no compute-sanitizer)"; return 0; }
  timeout --kill-after=5 $((limit - 7)) "$san" --tool memcheck --error-exitcode 3 "$bin/gpu_codec_device_tests" \
    --gtest_brief=1 --gtest_filter=Device.MappedResultsCanBePolled >"$log" 2>&1
  rc=$?
  why="$(grep -m 1 -i -E 'device not supported|not supported on|error 999|unknown error' "$log" | sed 's/^[= ]*//')"
  if [ -n "$why" ] && [ "$rc" -ne 0 ]; then
    san_state="unsupported here (probe: ${why//|/\\|})"
    return 0
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then san_state="skipped (the sanitizer probe timed out)"; fi
  return $rc
}

# run_step NAME LIMIT: runs the step within the smaller of LIMIT and the time left; its log is
# logs/NAME.log, its row goes to the summary, and the archive is re-packed.
run_step() {
  local name="$1" limit="$2" left t0=$SECONDS rc=0 verdict log="$scratch/logs/$1.log"
  skip=""
  left=$((deadline_s - (SECONDS - start)))
  [ "$left" -lt "$limit" ] && limit=$left
  echo "=== $name (limit ${limit}s)"
  if [ "$limit" -lt 10 ] && [ "$name" != setup ]; then
    verdict="no time"; rc=124
  else
    case "$name" in
      setup)
        { cat "$summary"; echo; nvidia-smi 2>&1; uname -a; cat /proc/cmdline 2>/dev/null; echo "carry: $carry";
          echo "NCCL library: $nccl_lib"; echo "compute-sanitizer: $san"; } >"$scratch/logs/machine.txt"
        local m; m=$(need_missing)
        if [ -n "$m" ]; then echo "missing in $bin:$m (run tests/gpu/stage_device_build.sh)" >"$log"; rc=1; fi ;;
      mps-start) mps_start >"$log" 2>&1 || rc=2 ;;
      mps-stop) [ "$mps" = on ] || skip="skipped (MPS not running)"; mps_quit >"$log" 2>&1 ;;
      sanitizer-probe)
        sanitizer_probe "$limit"
        rc=$?
        [[ "$san_state" == unsupported* ]] && skip="$san_state" ;;
      *)
        step_command "$name" "$(limit_of "$name")"
        if [ -n "$skip" ]; then
          rc=2
        else
          { echo "+ ${cmd[*]}"; echo "MPS: $mps"; } >"$log"
          timeout --kill-after=5 $((limit - 7)) "${cmd[@]}" >>"$log" 2>&1
          rc=$?
        fi ;;
    esac
    case "$name:$rc" in
      *:0) verdict="${skip:-passed}" ;;
      mps-start:2) verdict="unsupported here (multi-rank steps run without MPS)" ;;
      *:2) [ -n "$skip" ] && { verdict="$skip"; rc=0; } || verdict="FAILED (rc 2)" ;;
      *:124|*:137) verdict="TIMED OUT" ;;
      *) verdict="FAILED (rc $rc)" ;;
    esac
    [ "$name" = mps-start ] && [ "$rc" -eq 2 ] && rc=0
  fi
  [ -f "$log" ] && tail -n 5 "$log"
  [ "$rc" -eq 0 ] || status=1
  printf '| %s | %s | %d | %d |\n' "$name" "$verdict" $((SECONDS - t0)) "$limit" >>"$summary"
  echo "=== $name: $verdict"
  pack
}

for r in "${plan_rows[@]}"; do
  read -r n l <<<"$r"
  run_step "$n" "$l"
  if [ "$n" = setup ] && [ "$status" -ne 0 ]; then break; fi  # nothing to run without the binaries
done
cat "$summary"
exit $status
