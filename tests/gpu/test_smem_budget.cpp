// The CUDA codec's shared memory budget, checked without a GPU: ptxas's resource report of
// codec_cuda.cu for sm_80 and sm_90 (written at build time, gpu_codec/CMakeLists.txt) gives each
// kernel's static shared memory; the attribute codec_cuda.cu sets (launch_config.h) and each
// kernel's dynamic requests (kernels.cuh) must fit the architecture's per-block opt-in with it.
// cudaFuncSetAttribute rejects a dynamic limit above opt-in less static, which failed every launch
// on an H200 when the limit was the whole opt-in (finalize_kernel has 16 static bytes).
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "kernels.cuh"
#include "launch_config.h"

#ifndef ZIPCCL_SMEM_REPORT_DIR
#error "ZIPCCL_SMEM_REPORT_DIR must name the folder of ptxas's reports"
#endif

namespace zipccl {
namespace testing {
namespace {

namespace gd = codec::gpu::detail;

struct KernelResources {
  bool found = false;
  size_t smem = 0;  // static shared memory; ptxas omits the field when it is 0
  size_t registers = 0, stack = 0, spill_stores = 0, spill_loads = 0;
};

const char* const kKernelNames[gd::kKernelCount] = {"detect_kernel", "encode_kernel", "finalize_kernel",
                                                     "decode_kernel"};

// The number just before `unit` in `line` ("16 bytes smem" -> 16); false when absent.
bool number_before(const std::string& line, const std::string& unit, size_t* value) {
  const size_t at = line.find(unit);
  if (at == std::string::npos || at == 0) return false;
  size_t start = at;
  while (start > 0 && line[start - 1] == ' ') --start;
  size_t end = start;
  while (start > 0 && isdigit(static_cast<unsigned char>(line[start - 1]))) --start;
  if (start == end) return false;
  *value = std::stoul(line.substr(start, end - start));
  return true;
}

// The number just after `prefix` in `line` ("Used 56 registers" with "Used " -> 56).
bool number_after(const std::string& line, const std::string& prefix, size_t* value) {
  const size_t at = line.find(prefix);
  if (at == std::string::npos) return false;
  size_t start = at + prefix.size(), end = start;
  while (end < line.size() && isdigit(static_cast<unsigned char>(line[end]))) ++end;
  if (start == end) return false;
  *value = std::stoul(line.substr(start, end - start));
  return true;
}

// Parses `nvcc -Xptxas -v` output: each kernel's lines follow "Compiling entry function '<name>'".
bool parse_report(const std::string& path, const std::string& arch, KernelResources* out, std::string* err) {
  std::ifstream in(path);
  if (!in) {
    *err = "cannot read " + path;
    return false;
  }
  int current = -1;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("Compiling entry function '") != std::string::npos) {
      current = -1;
      if (line.find("for '" + arch + "'") == std::string::npos) continue;
      for (int k = 0; k < gd::kKernelCount; ++k) {
        if (line.find(kKernelNames[k]) != std::string::npos) current = k;
      }
      if (current >= 0) {
        if (out[current].found) {
          *err = std::string(kKernelNames[current]) + " appears twice in " + path;
          return false;
        }
        out[current].found = true;
      }
      continue;
    }
    if (current < 0) continue;
    KernelResources& r = out[current];
    number_before(line, " bytes stack frame", &r.stack);
    number_before(line, " bytes spill stores", &r.spill_stores);
    number_before(line, " bytes spill loads", &r.spill_loads);
    number_after(line, "Used ", &r.registers);
    number_before(line, " bytes smem", &r.smem);
  }
  for (int k = 0; k < gd::kKernelCount; ++k) {
    if (!out[k].found || out[k].registers == 0) {
      *err = std::string(kKernelNames[k]) + " for " + arch + " missing from " + path;
      return false;
    }
  }
  return true;
}

struct Arch {
  const char* name;
  int smem_optin;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
};

void PrintTo(const Arch& a, std::ostream* os) { *os << a.name << " (opt-in " << a.smem_optin << " bytes)"; }

class SmemBudget : public ::testing::TestWithParam<Arch> {};

TEST_P(SmemBudget, KernelsFitTheOptIn) {
  const Arch a = GetParam();
  const std::string path = std::string(ZIPCCL_SMEM_REPORT_DIR) + "/" + a.name + ".txt";
  KernelResources res[gd::kKernelCount];
  std::string err;
  ASSERT_TRUE(parse_report(path, a.name, res, &err)) << err;
  std::printf("%-6s %-16s %10s %5s %6s %7s %7s %12s %14s\n", "arch", "kernel", "static", "regs", "stack",
              "spill_st", "spill_ld", "max_dynamic", "dyn@default");
  for (int i = 0; i < gd::kKernelCount; ++i) {
    const auto k = gd::KernelId(i);
    const KernelResources& r = res[i];
    // The attribute codec_cuda.cu sets; cudaFuncSetAttribute rejects it above opt-in - static.
    const size_t attribute = gd::dynamic_smem_attribute(a.smem_optin, r.smem, gd::largest_dynamic_smem(k));
    // Encode at the default block size sized for 4 planes (fp32, auto): the most it asks for there.
    const size_t at_default = gd::kernel_dynamic_smem(k, 4, codec::gpu::kDefaultBlockLog2);
    std::printf("%-6s %-16s %10zu %5zu %6zu %7zu %7zu %12zu %14zu\n", a.name, kKernelNames[i], r.smem, r.registers,
                r.stack, r.spill_stores, r.spill_loads, attribute, at_default);
    EXPECT_LE(attribute + r.smem, size_t(a.smem_optin))
        << kKernelNames[i] << ": MaxDynamicSharedMemorySize " << attribute << " + " << r.smem
        << " static bytes exceeds the opt-in " << a.smem_optin << " (cudaFuncSetAttribute fails)";
    EXPECT_LE(r.smem + at_default, size_t(a.smem_optin)) << kKernelNames[i] << " at the default block size";
    EXPECT_LE(at_default, attribute) << kKernelNames[i] << ": launches at the default block size would be refused";
    // The largest block size: on sm_80 and sm_90 every request fits, fp32 at 16384 elements included.
    EXPECT_EQ(attribute, gd::largest_dynamic_smem(k)) << kKernelNames[i] << ": some block size does not fit";
  }
  const size_t fp32_largest = gd::kernel_dynamic_smem(gd::kEncodeKernel, 4, codec::fmt::kMaxBlockLog2);
  std::printf("%-6s encode fp32 at block_log2 %d: %zu dynamic + %zu static of %d\n", a.name,
              codec::fmt::kMaxBlockLog2, fp32_largest, res[gd::kEncodeKernel].smem, a.smem_optin);
  EXPECT_LE(fp32_largest + res[gd::kEncodeKernel].smem, size_t(a.smem_optin));
}

INSTANTIATE_TEST_SUITE_P(Archs, SmemBudget,
                         ::testing::Values(Arch{"sm_80", 163 * 1024}, Arch{"sm_90", 227 * 1024}),
                         [](const ::testing::TestParamInfo<Arch>& p) { return std::string(p.param.name); });

TEST(SmemBudgetArithmetic, LimitIsOptInLessStatic) {
  EXPECT_EQ(gd::dynamic_smem_limit(232448, 16), 232432u);
  EXPECT_EQ(gd::dynamic_smem_limit(232448, 0), 232448u);
  EXPECT_EQ(gd::dynamic_smem_limit(1024, 1024), 0u);
  EXPECT_EQ(gd::dynamic_smem_limit(1024, 4096), 0u);
  EXPECT_EQ(gd::dynamic_smem_limit(0, 0), 0u);
  // What the kernel asks for, capped at what it may have.
  EXPECT_EQ(gd::dynamic_smem_attribute(232448, 16, 0), 0u);
  EXPECT_EQ(gd::dynamic_smem_attribute(232448, 16, 5000), 5000u);
  EXPECT_EQ(gd::dynamic_smem_attribute(232448, 16, 300000), 232432u);
}

TEST(SmemBudgetArithmetic, RequestsMatchTheKernelsSharedState) {
  EXPECT_EQ(gd::kernel_dynamic_smem(gd::kDetectKernel, 4, 13), sizeof(gd::DetectShared));
  EXPECT_EQ(gd::kernel_dynamic_smem(gd::kDecodeKernel, 4, 13), sizeof(gd::DecodeShared));
  EXPECT_EQ(gd::kernel_dynamic_smem(gd::kFinalizeKernel, 4, 13), 0u);
  EXPECT_EQ(gd::largest_dynamic_smem(gd::kEncodeKernel), gd::encode_smem_layout(4, codec::fmt::kMaxBlockLog2).total);
  // sm_86/sm_89 (99 KiB per block): fp32 at 16384 elements does not fit, the default block size does.
  const int optin_sm86 = 99 * 1024;
  EXPECT_GT(gd::kernel_dynamic_smem(gd::kEncodeKernel, 4, 14), gd::dynamic_smem_limit(optin_sm86, 0));
  EXPECT_LE(gd::kernel_dynamic_smem(gd::kEncodeKernel, 4, codec::gpu::kDefaultBlockLog2),
            gd::dynamic_smem_attribute(optin_sm86, 0, gd::largest_dynamic_smem(gd::kEncodeKernel)));
}

}  // namespace
}  // namespace testing
}  // namespace zipccl
