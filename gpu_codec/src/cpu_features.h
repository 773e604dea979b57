// The CPU features the kernel sets need, read once (cpuid and XCR0 on x86-64, HWCAP on AArch64) in
// a file compiled without target flags.
#pragma once

#include <cstdint>

#include "zipccl/codec.h"

namespace zipccl {
namespace codec {

enum CpuFeature : uint32_t {
  kCpuPopcnt = 1u << 0,
  kCpuAvx2 = 1u << 1,  // with the OS saving AVX state
  kCpuBmi2 = 1u << 2,
  kCpuAvx512f = 1u << 3,  // the AVX-512 bits: with the OS saving AVX-512 state
  kCpuAvx512bw = 1u << 4,
  kCpuAvx512vl = 1u << 5,
  kCpuAvx512dq = 1u << 6,
  kCpuAvx512vbmi = 1u << 7,
  kCpuAvx512vbmi2 = 1u << 8,
  kCpuPrfchw = 1u << 9,
  kCpuAsimd = 1u << 10,  // AArch64 Advanced SIMD
};

// This CPU's CpuFeature bits (thread-safe; cpuid runs once).
uint32_t cpu_feature_bits();
// Whether this CPU has every feature the target flags of `isa`'s kernel file allow the compiler to
// use. The only gate in front of a target file (kernels_for); kAuto and kScalar: true.
bool cpu_runs(Isa isa);

}  // namespace codec
}  // namespace zipccl
