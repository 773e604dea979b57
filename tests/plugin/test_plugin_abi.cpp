// The shared object's ABI surface: exactly the ncclNetPlugin_v7..v12 symbols, no C++ runtime or codec
// symbols, no dependency on libstdc++, and `name` readable before init.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

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

TEST(PluginAbi, ExportsExactlyTheNetTables) {
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
  std::set<std::string> want = {"ncclNetPlugin_v7", "ncclNetPlugin_v8", "ncclNetPlugin_v9",
                                "ncclNetPlugin_v10", "ncclNetPlugin_v11", "ncclNetPlugin_v12"};
  EXPECT_EQ(syms, want) << out;
}

TEST(PluginAbi, NoCxxRuntimeDependency) {
  std::string out = run(std::string("readelf -d ") + ZIPCCL_PLUGIN_PATH + " 2>&1");
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
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
