#!/usr/bin/env bash
# Builds what the device checks run, on this machine (no GPU needed), and stages the binaries, real
# tensors and nvCOMP's library into one small folder that a device call carries (the device gets the
# checkout only, not ../shared, and has no time to build):
#   tests/gpu/stage_device_build.sh [ARCHS]     (default 90-real: an H100/H200)
# Result: build-device/carry/{bin/*, data/*, lib/libnvcomp.so.6.xz}, about 45-55 MiB (a device call
# carries 64 MiB at most). Then, on the device, from the repo root:
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
# The slow-link step's per-flow pacing (tools/flowcap_shim.c), linked by Zig against glibc 2.28's symbols
# as the plugin is (the GPU machine's glibc may be older than this one's); the plain compiler otherwise.
zig=$(sed -n 's/^ZIPCCL_ZIG_COMMAND:STRING=//p' "$build/CMakeCache.txt" | tr ';' ' ')
if [ -n "$zig" ] && $zig cc -target x86_64-linux-gnu.2.28 -O2 -shared -fPIC -o "$carry/bin/flowcap_shim.so" \
  "$root/tools/flowcap_shim.c" 2>/dev/null; then
  echo "stage: flowcap_shim.so linked for glibc 2.28 (Zig)"
else
  cc -O2 -shared -fPIC -o "$carry/bin/flowcap_shim.so" "$root/tools/flowcap_shim.c" -ldl
  echo "stage: flowcap_shim.so built with this machine's glibc (no Zig): it may not load on an older one"
fi
# The Python package, for the zipccl.enable() DDP step, when tests/python/run.sh has built its wheel
# (carried packed: the device step unpacks it).
wheel=$(ls "$root"/build-python/wheelhouse/zipccl-*.whl 2>/dev/null | head -n 1 || true)
if [ -n "$wheel" ]; then
  mkdir -p "$carry/python"
  cp "$wheel" "$carry/python/"
else
  echo "stage: no wheel in build-python/wheelhouse (tests/python/run.sh): the ddp-enable step will be skipped"
fi
# Real tensors: weights (the real-tensor step) and gradients (the bench's real rows).
for f in gpt19m_weights_step30_layer0.bf16 gpt19m_grads_step1_layers2-3.bf16; do
  data="$root/../shared/data/$f"
  if [ -f "$data" ]; then cp "$data" "$carry/data/"; else echo "stage: no $data: steps that read it skip it"; fi
done
# nvCOMP, for the bench's side-by-side rows: the library of PyPI's nvidia-libnvcomp-cu13 (self-contained:
# libc, libstdc++ and its own CUDA runtime), xz-packed (25.4 MB -> 21.7 MB: the carry is limited to 64 MiB).
# The wheel is kept in /var/cache/zipccl/nvcomp; without PyPI the bench runs without nvCOMP.
nvcomp_cache=/var/cache/zipccl/nvcomp
mkdir -p "$nvcomp_cache" "$carry/lib"
whl=$(ls "$nvcomp_cache"/nvidia_libnvcomp_cu13-*.whl 2>/dev/null | head -n 1 || true)
if [ -z "$whl" ] && python3 -m pip download -q --no-deps --only-binary=:all: --platform manylinux_2_28_x86_64 \
  -d "$nvcomp_cache" nvidia-libnvcomp-cu13 >/dev/null 2>&1; then
  whl=$(ls "$nvcomp_cache"/nvidia_libnvcomp_cu13-*.whl 2>/dev/null | head -n 1 || true)
fi
if [ -n "$whl" ]; then
  python3 -c 'import sys, zipfile; sys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read("nvidia/libnvcomp/lib64/libnvcomp.so.6"))' \
    "$whl" | xz -T0 -6 >"$carry/lib/libnvcomp.so.6.xz"
  echo "stage: nvCOMP from $(basename "$whl")"
else
  echo "stage: no nvidia-libnvcomp-cu13 wheel (PyPI unreachable?): the bench runs without nvCOMP"
fi
# A device call carries 64 MiB in all.
size=$(du -sb "$carry" | cut -f1)
echo "stage: $carry: $((size >> 20)) MiB of the 64 MiB a device call carries"
if ((size > 64 << 20)); then echo "stage: too large for a device call" >&2; exit 1; fi
