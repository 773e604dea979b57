// zipccl over nccl-rdma-sharp-plugins (NVIDIA's IB verbs net plugin, net table "IBext"; built by
// tools/sharp_build.sh) on a machine without an HCA: the plugin loads, its table is found (v11, the
// newest both have), its init runs and finds no device (or fails), and zipccl's init then returns an
// error with exactly one WARN that names the library and the reason, with no transport of its own
// brought up instead. `zipccl doctor` over it names the library and gives a verdict.
// docs/notes/inner.md. The case comes as --setenv arguments (tests/inner/inner_tests.cmake):
//   ZIPCCL_TEST_INNER_REQUIRED  the built libnccl-net-sharp.so: the tests skip, saying so, without it
//   ZIPCCL_NET_INNER            what zipccl is given (a path, or a name found on LD_LIBRARY_PATH)
//   ZIPCCL_TEST_EXPECT_LIBRARY  the library as zipccl names it in its WARN
//   ZIPCCL_TEST_EXPECT_REASON   optional: text the first init's WARN must hold
#include <dirent.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

// Why the test must skip: the plugin was not built (tools/test.sh builds it when its packages are there).
std::string sharp_absent() {
  const char* need = std::getenv("ZIPCCL_TEST_INNER_REQUIRED");
  if (!need || !*need) return "run through CTest (tests/inner/inner_tests.cmake)";
  if (access(need, R_OK) == 0) return "";
  return std::string("inner plugin build absent: ") + need + " (tools/sharp_build.sh builds it)";
}

// An RDMA device that libibverbs would list (its sysfs class): then the plugin has devices, and these
// tests, written for a machine without one, do not apply.
std::string rdma_device_present() {
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return "";
  std::string found;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') found = e->d_name;
  }
  closedir(d);
  return found;
}

#define SKIP_UNLESS_APPLICABLE()                                                                           \
  do {                                                                                                     \
    if (!sharp_absent().empty()) GTEST_SKIP() << sharp_absent();                                           \
    const std::string dev = rdma_device_present();                                                         \
    if (!dev.empty()) GTEST_SKIP() << "an RDMA device is present (/sys/class/infiniband/" << dev           \
                                   << "): nccl-rdma-sharp-plugins would use it; these tests are for a node " \
                                      "without one";                                                       \
  } while (0)

std::vector<std::string> lines_since(size_t first) {
  LogSink& s = log_sink();
  std::lock_guard<std::mutex> lock(s.mu);
  return std::vector<std::string>(s.lines.begin() + static_cast<long>(std::min(first, s.lines.size())), s.lines.end());
}
size_t lines_now() {
  LogSink& s = log_sink();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.lines.size();
}
int count(const std::vector<std::string>& lines, const std::string& what) {
  int n = 0;
  for (const std::string& l : lines) n += l.find(what) != std::string::npos;
  return n;
}

// The built library exports the tables NCCL looks for: ncclNetPlugin_v6..v11 (no v12 in this
// snapshot). Each table starts with its name (the plugin renames them "IBext_vN" at init, when it
// chooses its IB transport).
TEST(SharpPlugin, ExportsNetTablesV6ToV11) {
  if (!sharp_absent().empty()) GTEST_SKIP() << sharp_absent();
  const char* path = std::getenv("ZIPCCL_TEST_INNER_REQUIRED");
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  for (int v = 6; v <= 11; ++v) {
    const std::string sym = "ncclNetPlugin_v" + std::to_string(v);
    auto* table = static_cast<const char* const*>(dlsym(lib, sym.c_str()));
    ASSERT_NE(table, nullptr) << sym;
    ASSERT_NE(table[0], nullptr) << sym << " has no name";
    EXPECT_NE(std::string(table[0]).find("v" + std::to_string(v)), std::string::npos) << sym << ": " << table[0];
  }
  EXPECT_EQ(dlsym(lib, "ncclNetPlugin_v12"), nullptr);
  EXPECT_EQ(dlsym(lib, "ncclNetPlugin_v5"), nullptr);
}

// zipccl's init through its v7, v11 (NCCL 2.28's choice) and v12 tables, each a fresh try (one process).
TEST(SharpInner, InitFailsWithOneWarnNamingTheLibrary) {
  SKIP_UNLESS_APPLICABLE();
  const char* value = std::getenv("ZIPCCL_NET_INNER");
  const char* library = std::getenv("ZIPCCL_TEST_EXPECT_LIBRARY");
  ASSERT_TRUE(value && library) << "run through CTest (tests/inner/inner_tests.cmake)";
  for (int version : {7, 11, 12}) {
    SCOPED_TRACE("zipccl's v" + std::to_string(version) + " table");
    auto api = load_api(version);
    ASSERT_TRUE(api);
    const size_t first = lines_now();
    const int warns_before = log_sink().warns.load();
    const ncclResult_t r = api->init();
    EXPECT_NE(r, ncclSuccess);
    const std::vector<std::string> lines = lines_since(first);
    // The plugin's init ran and chose its IB verbs transport (its own INFO, through the logger zipccl
    // passed on). Only its first init in a process says so: it then has put its IB table in place of
    // the exported one (and zipccl keeps a library it opened loaded).
    const bool first_init = version == 7;
    if (first_init) {
      EXPECT_EQ(count(lines, "P2P plugin v11 IBext_v11"), 1);
    }
    // Exactly one WARN of zipccl's, naming the library, its table, and the reason: no device, or its
    // own failed init (e.g. "NET/IB : No IP interface found." on a node with loopback only).
    std::vector<std::string> ours;
    for (const std::string& l : lines) {
      if (l.find("zipccl does not initialise") != std::string::npos) ours.push_back(l);
    }
    ASSERT_EQ(ours.size(), 1u);
    const std::string& w = ours[0];
    EXPECT_EQ(w.find(std::string("NET/zipccl : ZIPCCL_NET_INNER=") + value + ": "), 0u) << w;
    EXPECT_NE(w.find(std::string(library) + " (IBext_v11"), std::string::npos) << w;
    const char* reason = std::getenv("ZIPCCL_TEST_EXPECT_REASON");
    if (first_init && reason) {
      EXPECT_NE(w.find(reason), std::string::npos) << w;
    }
    if (w.find("has no devices") != std::string::npos) {
      EXPECT_EQ(r, ncclSystemError);
      if (first_init) {
        EXPECT_EQ(count(lines, "NET/IB : No device found."), 1) << "the plugin's own INFO";
      }
      EXPECT_EQ(log_sink().warns.load() - warns_before, 1) << "only zipccl's WARN";
    } else {
      EXPECT_NE(w.find("init of " + std::string(library) + " (IBext_v11, ABI v11) failed"), std::string::npos) << w;
      if (first_init) {
        EXPECT_EQ(count(lines, "NET/IB : "), 1) << "the plugin's own WARN, above zipccl's";
      }
    }
    // No silent change to another transport: no inner transport, no socket transport, no devices.
    EXPECT_EQ(count(lines, "inner plugin "), 0);
    int n = -1;
    EXPECT_NE(api->devices(&n), ncclSuccess) << "a transport is up after the failed init";
    char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
    void* listen_comm = nullptr;
    EXPECT_NE(api->listen(0, handle, &listen_comm), ncclSuccess);
    EXPECT_EQ(listen_comm, nullptr);
  }
}

// `zipccl doctor --plugin <the built plugin>` with this ZIPCCL_NET_INNER: it ends normally, names the
// library, and has a verdict line (its layout is not asserted otherwise).
TEST(SharpInner, DoctorNamesTheLibraryAndGivesAVerdict) {
#ifndef ZIPCCL_TOOL_PATH
  GTEST_SKIP() << "the zipccl tool is not built here (ZIPCCL_BUILD_TOOLS=OFF)";
#else
  SKIP_UNLESS_APPLICABLE();
  const char* library = std::getenv("ZIPCCL_TEST_EXPECT_LIBRARY");
  ASSERT_TRUE(library && std::getenv("ZIPCCL_NET_INNER"));
  const std::string cmd = std::string("'") + ZIPCCL_TOOL_PATH + "' doctor --plugin '" + ZIPCCL_PLUGIN_PATH + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr) << cmd;
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << cmd << " did not exit (status " << status << "):\n" << out;
  EXPECT_NE(out.find(library), std::string::npos) << out;
  bool verdict = false;
  size_t at = 0;
  while (at < out.size()) {
    size_t end = out.find('\n', at);
    if (end == std::string::npos) end = out.size();
    std::string line = out.substr(at, end - at);
    line.erase(0, line.find_first_not_of(' '));
    verdict = verdict || line.compare(0, 7, "verdict") == 0 || line.compare(0, 7, "Verdict") == 0;
    at = end + 1;
  }
  EXPECT_TRUE(verdict) << "no verdict line:\n" << out;
#endif
}

}  // namespace
