// What this CPU runs, and which kernel set that allows. Compiled without target flags, like the
// dispatch (kernels_scalar.cpp): this file decides whether a target file's instructions may run, so
// none of them can run before it has (docs/ARCHITECTURE.md "Kernel sets and where their
// instructions run").
#include "cpu_features.h"

#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

#include "kernels.h"

namespace zipccl {
namespace codec {
namespace {

struct FeatureName {
  uint32_t bit;
  const char* name;
};
// In the order the sets build on each other (what doctor and the CLI print).
constexpr FeatureName kFeatureNames[] = {
    {kCpuPopcnt, "popcnt"},         {kCpuAvx2, "avx2"},         {kCpuBmi2, "bmi2"},
    {kCpuAvx512f, "avx512f"},       {kCpuAvx512bw, "avx512bw"}, {kCpuAvx512vl, "avx512vl"},
    {kCpuAvx512dq, "avx512dq"},     {kCpuAvx512vbmi, "avx512vbmi"}, {kCpuAvx512vbmi2, "avx512vbmi2"},
    {kCpuPrfchw, "prfchw"},         {kCpuAsimd, "asimd"},
};

// Each set's -m flags (gpu_codec/CMakeLists.txt) as cpuid bits: the compiler may use any of them
// anywhere in that file.
constexpr uint32_t kAvx2Needs = kCpuPopcnt | kCpuAvx2 | kCpuBmi2;
constexpr uint32_t kAvx512Needs = kAvx2Needs | kCpuAvx512f | kCpuAvx512bw | kCpuAvx512vl | kCpuAvx512dq |
                                  kCpuAvx512vbmi | kCpuAvx512vbmi2 | kCpuPrfchw;

uint32_t needs(Isa isa) {
  switch (isa) {
    case Isa::kAvx2: return kAvx2Needs;
    case Isa::kAvx512: return kAvx512Needs;
    case Isa::kNeon: return kCpuAsimd;
    case Isa::kAuto:
    case Isa::kScalar: return 0;
  }
  return 0;
}

#if defined(__x86_64__)
// XCR0: the OS saves the registers a set uses (SSE and AVX state; AVX-512's opmask and upper zmm
// state too). A CPU feature bit without it faults all the same.
constexpr uint64_t kXcr0Avx = 0x6, kXcr0Avx512 = 0xE6;

uint64_t xcr0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));  // the instruction, not _xgetbv: no -mxsave
  return (uint64_t(hi) << 32) | lo;
}

uint32_t detect() {
  uint32_t a, b, c, d, f = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  if (c & (1u << 23)) f |= kCpuPopcnt;
  const bool osxsave = c & (1u << 27);
  const uint64_t xcr = osxsave ? xcr0() : 0;
  if (__get_cpuid(0x80000001, &a, &b, &c, &d) && (c & (1u << 8))) f |= kCpuPrfchw;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  if (b & (1u << 8)) f |= kCpuBmi2;
  if ((xcr & kXcr0Avx) == kXcr0Avx && (b & (1u << 5))) f |= kCpuAvx2;
  if ((xcr & kXcr0Avx512) == kXcr0Avx512) {
    if (b & (1u << 16)) f |= kCpuAvx512f;
    if (b & (1u << 17)) f |= kCpuAvx512dq;
    if (b & (1u << 30)) f |= kCpuAvx512bw;
    if (b & (1u << 31)) f |= kCpuAvx512vl;
    if (c & (1u << 1)) f |= kCpuAvx512vbmi;
    if (c & (1u << 6)) f |= kCpuAvx512vbmi2;
  }
  return f;
}
#elif defined(__aarch64__)
uint32_t detect() { return (getauxval(AT_HWCAP) & HWCAP_ASIMD) ? uint32_t{kCpuAsimd} : 0u; }
#else
uint32_t detect() { return 0; }
#endif

std::string names(uint32_t bits) {
  std::string s;
  for (const FeatureName& n : kFeatureNames) {
    if (!(bits & n.bit)) continue;
    if (!s.empty()) s += ' ';
    s += n.name;
  }
  return s;
}

}  // namespace

uint32_t cpu_feature_bits() {
  static const uint32_t bits = detect();
  return bits;
}

bool cpu_runs(Isa isa) { return (cpu_feature_bits() & needs(isa)) == needs(isa); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kNeon: return "neon";
  }
  return "invalid";
}

bool parse_isa(const char* s, Isa* out) {
  if (!s || !out) return false;
  for (Isa isa : {Isa::kAuto, Isa::kScalar, Isa::kAvx2, Isa::kAvx512, Isa::kNeon}) {
    if (!std::strcmp(s, isa_name(isa))) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool isa_supported(Isa isa) { return isa == Isa::kAuto || kernels_for(isa) != nullptr; }

Isa effective_isa(Isa requested) {
  if (requested != Isa::kAuto && isa_supported(requested)) return requested;
  for (Isa isa : {Isa::kAvx512, Isa::kAvx2, Isa::kNeon}) {
    if (isa_supported(isa)) return isa;
  }
  return Isa::kScalar;
}

std::string isa_missing(Isa isa) {
  if (isa_supported(isa)) return "";
  const uint32_t lacks = needs(isa) & ~cpu_feature_bits();
  return lacks ? names(lacks) : "not in this build";
}

std::string cpu_features() { return names(cpu_feature_bits()); }

}  // namespace codec
}  // namespace zipccl
