#!/usr/bin/env bash
# Builds what the device checks run, on this machine (no GPU needed), and stages the binaries and a
# real tensor into one small folder that a device call carries (the device gets the checkout only,
# not ../shared, and has no time to build):
#   tests/gpu/stage_device_build.sh [ARCHS]     (default 90-real: an H100/H200)
# Result: build-device/carry/{bin/*, data/*}, about 30-50 MiB. Then, on the device, from the repo root:
#   tests/gpu/run_device_checks.sh build-device/carry
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
archs="${1:-90-real}"
build="$root/build-device"
carry="$build/carry"
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DZIPCCL_CUDA=ON "-DCMAKE_CUDA_ARCHITECTURES=$archs" \
  "-DZIPCCL_TEST_MODULES=gpu;hetero" >/dev/null
targets=(gpu_codec_device_tests gpu_codec_host_tests zipccl_gpu_bench zipccl nccl-net-zipccl test_gpu_path_cuda)
# hetero's NCCL executor exists only where CMake found NCCL's header and library.
if cmake --build "$build" --target help | grep -q hetero_nccl_test; then targets+=(hetero_nccl_test); fi
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}"
rm -rf "$carry"
mkdir -p "$carry/bin" "$carry/data"
for t in "${targets[@]}"; do
  f=$(find "$build" -path "$carry" -prune -o \( -name "$t" -o -name "lib$t.so" \) -type f -perm -u+x -print | head -n 1)
  [ -n "$f" ] || { echo "stage: $t not built" >&2; exit 1; }
  cp "$f" "$carry/bin/"
done
cp "$root/tests/gpu/ddp_check.py" "$carry/bin/"
# The Python package, for the zipccl.enable() DDP step, when tests/python/run.sh has built its wheel.
wheel=$(ls "$root"/build-python/wheelhouse/zipccl-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
  python3 -m zipfile -e "$wheel" "$carry/python"
else
  echo "stage: no wheel in build-python/wheelhouse (tests/python/run.sh): the ddp-enable step will be skipped"
fi
data="$root/../shared/data/gpt19m_weights_step30_layer0.bf16"
if [ -f "$data" ]; then cp "$data" "$carry/data/"; else echo "stage: no $data: the real-tensor step will be skipped"; fi
du -sh "$carry"
