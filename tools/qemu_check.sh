#!/usr/bin/env bash
# tools/qemu_check.sh [BUILD_DIR]: runs the Release build's x86-64 binaries (default build/, built
# before) under `qemu-x86_64 -cpu MODEL` for CPUs unlike the build host: each model must pick the
# kernel set it has and pass the codec tests, a CLI round trip (frames byte-identical to the host's)
# and the plugin's host-memory conformance suite (ZIPCCL_COMPRESS=always, ABI v7 and v11). QEMU's
# TCG has no AVX-512, so an AVX-512 (or, on Nehalem, AVX2) instruction run before the CPU check is a
# SIGILL here. Ends in a ctest-like summary line (tools/test.sh count_passed).
# ZIPCCL_QEMU_MODELS="Model:set ...": the models and the set each must pick.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${1:-build}
models=(${ZIPCCL_QEMU_MODELS:-Nehalem:scalar Haswell:avx2})
command -v qemu-x86_64 >/dev/null || { echo "qemu_check: qemu-x86_64 missing (apt-get install qemu-user)" >&2; exit 1; }
[[ $(uname -m) == x86_64 ]] || { echo "qemu_check: needs an x86-64 host" >&2; exit 1; }
codec_tests=$build/tests/codec/codec_tests
conformance=$build/tests/plugin/test_plugin_conformance
zipccl=$build/tools/zipccl
plugin=$build/plugin/libnccl-net-zipccl.so
for f in "$codec_tests" "$conformance" "$zipccl" "$plugin"; do
  [[ -e $f ]] || { echo "qemu_check: $f missing (build $build first)" >&2; exit 1; }
done

ulimit -c 0  # a SIGILL under qemu would leave a core file in the tree
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# 1 Mi bf16 elements: random signs and mantissas, exponents over a few values (coded, not raw,
# frames: the Huffman kernels run). perl: present wherever Debian is.
perl -e 'srand(7); print pack("v*", map { (int(rand(2)) << 15) | ((118 + int(rand(4)) + int(rand(4))) << 7) | int(rand(128)) } 1 .. (1 << 20))' >"$tmp/in.bf16"
"$zipccl" compress -t bf16 "$tmp/in.bf16" "$tmp/host.zc"

# emu MODEL CMD...: CMD under the model, killed after 300 s (a hang fails the model, not CI's whole
# limit); QEMU's notes about features TCG lacks are dropped. The filter is a pipeline, not a process
# substitution, so that it has written everything before emu returns (a caller greps it at once).
emu() {
  local model=$1 rc
  shift
  { timeout -k 5 300 qemu-x86_64 -cpu "$model" "$@" 2>&1 1>&3 3>&- |
      { grep -v "TCG doesn't support requested feature" >&2 || true; }
    rc=${PIPESTATUS[0]}; } 3>&1
  return "$rc"
}
# gtest_passed LOG: tests a gtest run passed (0 when it did not finish or any failed).
gtest_passed() {
  grep -q '^\[  FAILED  \]' "$1" && { echo 0; return; }
  sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$1" | tail -n 1 | grep . || echo 0
}

# check_model MODEL:SET: one model's checks; writes its table row (with its passed count last) to
# $tmp/row.MODEL and what failed, with the logs' last lines, to $tmp/problems.MODEL.
check_model() {
  local entry=$1 model want t0 log problems codec_n got cli plugin_set plugin_n passed f
  model=${entry%%:*}
  want=${entry#*:}
  t0=$SECONDS
  mkdir -p "$tmp/logs"
  log=$tmp/logs/$model
  problems=()

  # Codec tests; Kernels.SimdPathMatchesThePlatform prints the set the codec picked.
  emu "$model" "$codec_tests" >"$log.codec" 2>&1 || true
  codec_n=$(gtest_passed "$log.codec")
  got=$(sed -n 's/^kernel set: \([a-z0-9]*\) .*/\1/p' "$log.codec" | head -n 1)
  [[ $codec_n -gt 0 ]] || problems+=("codec tests failed")
  [[ $got == "$want" ]] || problems+=("codec picked '${got:-nothing}', not $want")

  # CLI round trip; the frames must be the host's bytes.
  cli=0
  if emu "$model" "$zipccl" compress -v -t bf16 "$tmp/in.bf16" "$tmp/$model.zc" 2>"$log.cli" &&
    emu "$model" "$zipccl" decompress "$tmp/$model.zc" "$tmp/$model.out" 2>>"$log.cli" &&
    cmp -s "$tmp/in.bf16" "$tmp/$model.out" && cmp -s "$tmp/host.zc" "$tmp/$model.zc" &&
    grep -q ", $want kernels$" "$log.cli"; then
    cli=1
  else
    problems+=("CLI round trip")
  fi
  # Asking for more than the CPU has is a usage error that says what is missing.
  if [[ $want != avx512 ]]; then
    if emu "$model" "$zipccl" compress --isa avx512 "$tmp/in.bf16" "$tmp/$model.no.zc" 2>>"$log.cli"; then
      problems+=("--isa avx512 accepted")
    elif ! grep -q 'no AVX-512 (.*avx512f.* missing)' "$log.cli"; then
      problems+=("--isa avx512 refused without saying why")
    else
      cli=$((cli + 1))
    fi
  fi

  # The plugin: the set its init line names, then the conformance suite over host buffers.
  plugin_set=$(emu "$model" "$zipccl" doctor --plugin "$plugin" --nccl-version 2.27 -v 2>&1 |
    sed -n 's/.*NET\/zipccl : .* codec kernels \([a-z0-9]*\) (ZIPCCL_CODEC_ISA=.*/\1/p' | head -n 1) || true
  [[ $plugin_set == "$want" ]] || problems+=("plugin picked '${plugin_set:-nothing}', not $want")
  emu "$model" "$conformance" --setenv=NCCL_SOCKET_IFNAME=lo --setenv=ZIPCCL_COMPRESS=always \
    --setenv=ZIPCCL_MIN_BYTES=0 --gtest_filter='Versions/Conformance.*/v7:Versions/Conformance.*/v11:ConformanceV11.*' \
    >"$log.plugin" 2>&1 || true
  plugin_n=$(gtest_passed "$log.plugin")
  [[ $plugin_n -gt 0 ]] || problems+=("plugin conformance failed")

  passed=$((codec_n + cli + plugin_n))
  printf '%-10s %-8s %-8s %6s %4s %7s %5ss %s\n' "$model" "${got:-?}" "${plugin_set:-?}" "$codec_n" "$cli" "$plugin_n" \
    $((SECONDS - t0)) "$passed" >"$tmp/row.$model"
  if ((${#problems[@]})); then
    {
      for p in "${problems[@]}"; do echo "qemu_check: $model: $p"; done
      for f in "$log".*; do
        echo "---- ${f##*/} (last lines)"
        tail -n 15 "$f"
      done
    } >"$tmp/problems.$model"
  fi
}

# The models side by side: each mostly runs one emulated process at a time.
pids=()
for entry in "${models[@]}"; do
  echo "-- qemu -cpu ${entry%%:*} (must pick ${entry#*:})"
  check_model "$entry" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || true; done
total=0
failed=0
rows=()
for entry in "${models[@]}"; do
  model=${entry%%:*}
  row=$(cat "$tmp/row.$model" 2>/dev/null || printf '%-10s did not finish 0' "$model")
  total=$((total + ${row##* }))
  rows+=("${row% *}")
  if [[ -s $tmp/problems.$model || ! -f $tmp/row.$model ]]; then
    failed=$((failed + 1))
    cat "$tmp/problems.$model" >&2 2>/dev/null || true
  fi
done

echo
printf '%-10s %-8s %-8s %6s %4s %7s %6s\n' "cpu model" "codec" "plugin" "codec" "cli" "plugin" "time"
printf '%-10s %-8s %-8s %6s %4s %7s %6s\n' "" "set" "set" "tests" "" "tests" ""
for r in "${rows[@]}"; do echo "$r"; done
if ((failed)); then
  echo "qemu_check: $failed of ${#models[@]} CPU models failed"
  exit 1
fi
echo "100% tests passed, 0 tests failed out of $total"
