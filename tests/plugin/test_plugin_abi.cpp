// The shared object's ABI surface: exactly the ncclNetPlugin_v7..v12 symbols and the pass-through
// tables (ncclTunerPlugin_v2..v6, ncclProfiler_v1..v6, ncclCollNetPlugin_v6..v12), no C++ runtime or codec
// symbols, no dependency on libstdc++, and `name` readable before init.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

// v12's layout on LP64, as NCCL 2.30 defines it (checked field by field against NVIDIA/nccl's
// plugins/net/example headers when net_v12.h was written): the vNIC array grows from 4 to 8 devices,
// which moves every later field, and the rail and plane close the struct.
static_assert(sizeof(ncclNetVDeviceProps_v12_t) == 36, "v12 vProps: ndevs + 8 devices");
static_assert(offsetof(ncclNetProperties_v12_t, vProps) == 64, "");
static_assert(offsetof(ncclNetProperties_v12_t, maxP2pBytes) == 104, "v11: 88");
static_assert(offsetof(ncclNetProperties_v12_t, maxMultiRequestSize) == 120, "v11: 104");
static_assert(offsetof(ncclNetProperties_v12_t, railId) == 124, "");
static_assert(offsetof(ncclNetProperties_v12_t, planeId) == 126, "");
static_assert(sizeof(ncclNetProperties_v12_t) == 128, "v11: 112");
static_assert(sizeof(ncclNet_v12_t) == 176, "22 entries after the name, as v11");

// Settings are read once per process at the first init: give this process a bad value to see the
// warning, before any test runs. (The test sets its own environment; the plugin never does.)
const int kEnvSet = [] {
  setenv("ZIPCCL_MIN_BYTES", "abc", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  return 0;
}();

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(PluginAbi, ExportsExactlyThePluginTables) {
  std::string out = run(std::string("nm -D --defined-only ") + ZIPCCL_PLUGIN_PATH + " 2>&1");
  std::set<std::string> syms;
  size_t pos = 0;
  while (pos < out.size()) {
    size_t eol = out.find('\n', pos);
    std::string line = out.substr(pos, eol == std::string::npos ? std::string::npos : eol - pos);
    pos = eol == std::string::npos ? out.size() : eol + 1;
    size_t sp = line.rfind(' ');
    if (sp != std::string::npos) syms.insert(line.substr(sp + 1));
  }
  std::set<std::string> want = {"ncclNetPlugin_v7",  "ncclNetPlugin_v8",  "ncclNetPlugin_v9",
                                "ncclNetPlugin_v10", "ncclNetPlugin_v11", "ncclNetPlugin_v12"};
  // NCCL looks for these in the net plugin's library (src/abi/passthrough_*.cpp).
  for (int v = 2; v <= 6; ++v) want.insert("ncclTunerPlugin_v" + std::to_string(v));
  for (int v = 1; v <= 6; ++v) want.insert("ncclProfiler_v" + std::to_string(v));
  for (int v = 6; v <= 12; ++v) want.insert("ncclCollNetPlugin_v" + std::to_string(v));
  EXPECT_EQ(syms, want) << out;
}

TEST(PluginAbi, NoCxxRuntimeDependency) {
  std::string out = run(std::string("readelf -d ") + ZIPCCL_PLUGIN_PATH + " 2>&1");
#ifndef ZIPCCL_SANITIZED
  EXPECT_EQ(out.find("libstdc++"), std::string::npos) << out;
  EXPECT_EQ(out.find("libcudart"), std::string::npos) << out;
#endif
  EXPECT_NE(out.find("NODELETE"), std::string::npos) << out;
}

TEST(PluginAbi, NameIsValidBeforeInit) {
  void* lib = plugin_library();
  ASSERT_TRUE(lib);
  for (const char* sym : {"ncclNetPlugin_v7", "ncclNetPlugin_v8", "ncclNetPlugin_v9", "ncclNetPlugin_v10",
                          "ncclNetPlugin_v11", "ncclNetPlugin_v12"}) {
    const char* const* name = static_cast<const char* const*>(dlsym(lib, sym));
    ASSERT_TRUE(name) << sym;
    EXPECT_STREQ(*name, "zipccl") << sym;
  }
}

// The v12 table called directly, as NCCL 2.30 does: the properties it writes, field by field, over a
// struct NCCL would not have cleared.
TEST(PluginAbi, V12PropertiesAsNcclReadsThem) {
  const auto* v12 = static_cast<const ncclNet_v12_t*>(dlsym(plugin_library(), "ncclNetPlugin_v12"));
  ASSERT_TRUE(v12);
  void* ctx = nullptr;
  ncclNetCommConfig_v12_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ASSERT_EQ(v12->init(&ctx, 7, &cfg, test_logger, nullptr), ncclSuccess);
  ncclNetProperties_v12_t p;
  std::memset(&p, 0x5a, sizeof p);
  ASSERT_EQ(v12->getProperties(0, &p), ncclSuccess);
  ASSERT_TRUE(p.name);
  EXPECT_NE(p.name[0], '\0');
  EXPECT_EQ(p.ptrSupport & NCCL_PTR_HOST, NCCL_PTR_HOST);
  EXPECT_EQ(p.regIsGlobal, 0);
  EXPECT_EQ(p.forceFlush, 0);
  EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
  EXPECT_EQ(p.vProps.ndevs, 1);
  EXPECT_EQ(p.vProps.devs[0], 0);
  EXPECT_GE(p.maxP2pBytes, size_t{1} << 30);
  EXPECT_EQ(p.maxMultiRequestSize, 1);
  EXPECT_EQ(p.railId, NCCL_NET_ID_UNDEF);
  EXPECT_EQ(p.planeId, NCCL_NET_ID_UNDEF);
  EXPECT_EQ(v12->makeVDevice, nullptr);
  EXPECT_EQ(v12->getDeviceMr, nullptr);
  ncclNetAttr_v12_t attr{};
  EXPECT_EQ(v12->setNetAttr(ctx, &attr), ncclSuccess);  // hints, accepted and ignored
  EXPECT_EQ(v12->finalize(ctx), ncclSuccess);
}

TEST(PluginAbi, CallsBeforeInitFailCleanly) {
  // A fresh process image is not available here, but devices() before any init in this test binary
  // must not crash whatever the order the tests ran in.
  auto api = load_api(8);
  ASSERT_TRUE(api);
  int n = -1;
  ncclResult_t r = api->devices(&n);
  EXPECT_TRUE(r == ncclSuccess || r == ncclInternalError);
}

TEST(PluginAbi, InitLogsEverySettingWithPrefix) {
  auto api = load_api(12);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  EXPECT_TRUE(log_contains("NET/zipccl : ZIPCCL_COMPRESS="));
  EXPECT_TRUE(log_contains("NET/zipccl : ZIPCCL_MIN_BYTES="));
  EXPECT_TRUE(log_contains("NET/zipccl : ZIPCCL_DTYPE="));
  EXPECT_TRUE(log_contains("ZIPCCL_MIN_BYTES='abc' is not a size"));  // set by CMakeLists for this test
  EXPECT_EQ(api->finalize(), ncclSuccess);
}

}  // namespace
