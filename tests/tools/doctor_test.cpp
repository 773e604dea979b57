// `zipccl doctor` run as an administrator runs it: a good setup passes; a missing library, a library
// without plugin tables, a bad interface and a bad setting each fail with a message naming the
// problem; the ABI table follows the NCCL version; the README's settings table is generated.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>

#include "temp_dir.h"

#ifndef ZIPCCL_BIN
#error "ZIPCCL_BIN must name the zipccl binary"
#endif
#ifndef ZIPCCL_PLUGIN_PATH
#error "ZIPCCL_PLUGIN_PATH must name libnccl-net-zipccl.so"
#endif

namespace {

class Doctor : public zipccl_test::TempDirTest {
 protected:
  // Runs `zipccl doctor ARGS` in a clean environment (only `env`, plus the sanitizers' options);
  // returns the exit status, the output in out_.
  int doctor(const std::string& env, const std::string& args) {
    std::string keep;
    for (const char* v : {"ASAN_OPTIONS", "UBSAN_OPTIONS", "LSAN_OPTIONS", "TSAN_OPTIONS"})
      if (const char* s = std::getenv(v)) keep += std::string(" ") + v + "='" + s + "'";
    const int st = run_here("env -i PATH=/usr/bin:/bin HOME='" + dir_ + "'" + keep + " " + env +
                            " '" ZIPCCL_BIN "' doctor " + args + " > out.txt 2>&1");
    out_ = read_text("out.txt");
    return st;
  }
  bool says(const std::string& s) const { return out_.find(s) != std::string::npos; }

  std::string out_;
};

const std::string kPlugin = std::string("--plugin '") + ZIPCCL_PLUGIN_PATH + "' --nccl-version 2.28";

TEST_F(Doctor, GoodSetupPasses) {
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo", kPlugin), 0) << out_;
  EXPECT_TRUE(says("tables      v12 v11 v10 v9 v8 v7")) << out_;
  EXPECT_TRUE(says("ABI         ncclNetPlugin_v11")) << out_;
  EXPECT_TRUE(says("[0] lo ")) << out_;
  EXPECT_TRUE(says("ZIPCCL_COMPRESS            = auto       (default)")) << out_;
  EXPECT_TRUE(
      says("verdict: OK: NCCL 2.28 would load zipccl through ncclNetPlugin_v11 with 1 device(s) (lo)"))
      << out_;
}

// The tool's version and the plugin's, as its init logs it (the plugin exports only its tables): one
// build, so the same, and no note about a mismatch.
TEST_F(Doctor, ShowsTheToolsAndThePluginsVersion) {
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo", kPlugin), 0) << out_;
  const std::string tool = "version     zipccl " ZIPCCL_PROJECT_VERSION;
  const size_t at = out_.find(tool);
  ASSERT_NE(at, std::string::npos) << out_;
  const size_t end = out_.find(" (this tool)\n", at);
  ASSERT_NE(end, std::string::npos) << out_;
  const std::string version = out_.substr(at + 12, end - at - 12);  // "zipccl 0.1.0 (git ...)"
  EXPECT_TRUE(says("\n  version   " + version + "\n")) << out_;
  EXPECT_FALSE(says("install both from one build")) << out_;
}

// The GPU path is opt-in until proven on a GPU: without ZIPCCL_GPU=on the plugin does not advertise
// device buffers and doctor says why; CUDA_DEVICE_MAX_CONNECTIONS=1 keeps it off even when asked.
TEST_F(Doctor, GpuPathIsOptInAndSaysWhy) {
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo", kPlugin), 0) << out_;
  EXPECT_TRUE(says("GPU path  off (opt-in until proven on a GPU: ZIPCCL_GPU=on)")) << out_;
  EXPECT_TRUE(says("ptrSupport host ")) << out_;
  EXPECT_TRUE(says("ZIPCCL_GPU                 = off        (default)")) << out_;
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo ZIPCCL_GPU=on CUDA_DEVICE_MAX_CONNECTIONS=1", kPlugin), 0) << out_;
  EXPECT_TRUE(says("GPU path  off (CUDA_DEVICE_MAX_CONNECTIONS=1: with one hardware queue")) << out_;
  EXPECT_TRUE(says("ZIPCCL_GPU=on ignored: CUDA_DEVICE_MAX_CONNECTIONS=1")) << out_;
}

TEST_F(Doctor, LoadsByNameThroughTheLoaderPathAsNcclDoes) {
  std::string dir = ZIPCCL_PLUGIN_PATH;
  dir = dir.substr(0, dir.rfind('/'));
  ASSERT_EQ(
      doctor("LD_LIBRARY_PATH='" + dir + "' NCCL_NET_PLUGIN=zipccl NCCL_SOCKET_IFNAME=lo ZIPCCL_WORKERS=3",
             "--nccl-version 2.28.3"),
      0)
      << out_;
  EXPECT_TRUE(says("configured  NCCL_NET_PLUGIN=zipccl (environment)")) << out_;
  EXPECT_TRUE(says("/libnccl-net-zipccl.so")) << out_;
  EXPECT_TRUE(says("ZIPCCL_WORKERS             = 3          (environment)")) << out_;
  EXPECT_FALSE(says("note: NCCL_NET_PLUGIN is set neither")) << out_;
}

TEST_F(Doctor, AbiTableFollowsTheNcclVersion) {
  const struct {
    const char* version;
    int abi;
  } cases[] = {{"2.17", 7},  {"2.18.6", 7},  {"2.19", 8},  {"2.21.5", 8},  {"2.22", 9},  {"2.23.4", 9},
               {"2.24", 10}, {"2.27.7", 10}, {"2.28", 11}, {"2.29.2", 11}, {"2.30", 12}, {"3.0", 12}};
  for (const auto& c : cases) {
    ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo",
                     std::string("--plugin '") + ZIPCCL_PLUGIN_PATH + "' --nccl-version " + c.version),
              0)
        << out_;
    EXPECT_TRUE(says("ABI         ncclNetPlugin_v" + std::to_string(c.abi) + " ")) << c.version << "\n"
                                                                                   << out_;
    EXPECT_TRUE(says("(v" + std::to_string(c.abi) + " init/devices/getProperties)")) << out_;
  }
  EXPECT_EQ(doctor("NCCL_SOCKET_IFNAME=lo",
                   std::string("--plugin '") + ZIPCCL_PLUGIN_PATH + "' --nccl-version 2.16"),
            1)
      << out_;
  EXPECT_TRUE(says("verdict: FAIL: NCCL 2.16 uses plugin ABI v6 or older")) << out_;
}

TEST_F(Doctor, MissingLibraryFails) {
  ASSERT_EQ(doctor("NCCL_NET_PLUGIN=nosuch NCCL_SOCKET_IFNAME=lo", "--nccl-version 2.28"), 1) << out_;
  EXPECT_TRUE(
      says("verdict: FAIL: cannot load the plugin nosuch: not found on the loader path (tried nosuch, "
           "libnccl-net-nosuch.so)"))
      << out_;
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo", "--plugin " + dir_ + "/libnccl-net-gone.so --nccl-version 2.28"),
            1);
  EXPECT_TRUE(says("libnccl-net-gone.so")) << out_;
}

TEST_F(Doctor, LibraryWithoutTablesFails) {
  // libc is loadable everywhere and is no plugin.
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo", "--plugin libc.so.6 --nccl-version 2.28"), 1) << out_;
  EXPECT_TRUE(says("exports no ncclNetPlugin_v7..v12 table")) << out_;
  EXPECT_TRUE(says("verdict: FAIL")) << out_;
}

TEST_F(Doctor, BadInterfaceFails) {
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=zz_no_such_if", kPlugin), 1) << out_;
  EXPECT_TRUE(says("verdict: FAIL: the plugin's init() returned ncclSystemError")) << out_;
  EXPECT_TRUE(says("no usable interface (NCCL_SOCKET_IFNAME='zz_no_such_if')")) << out_;
}

TEST_F(Doctor, BadSettingFails) {
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo ZIPCCL_MIN_BYTES=abc", kPlugin), 1) << out_;
  EXPECT_TRUE(says("verdict: FAIL: bad setting: ZIPCCL_MIN_BYTES='abc' is not a size in range; using 64KiB"))
      << out_;
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo ZIPCCL_COMPRESS=sometimes ZIPCCL_WORKERS=0", kPlugin), 1) << out_;
  EXPECT_TRUE(says("ZIPCCL_COMPRESS='sometimes' is not one of auto|always|never")) << out_;
  EXPECT_TRUE(says("ZIPCCL_WORKERS='0' is not an integer in [1, 64]")) << out_;
}

TEST_F(Doctor, CompressionOffIsAWorkingSetup) {
  ASSERT_EQ(doctor("NCCL_SOCKET_IFNAME=lo ZIPCCL_COMPRESS=never", kPlugin), 0) << out_;
  EXPECT_TRUE(says("note: ZIPCCL_COMPRESS=never")) << out_;
  EXPECT_TRUE(says("compression never")) << out_;
}

TEST_F(Doctor, BadUsage) {
  EXPECT_EQ(doctor("", "--nccl-version two"), 2) << out_;
  EXPECT_EQ(doctor("", "--frobnicate"), 2) << out_;
  EXPECT_EQ(doctor("", "--help"), 0) << out_;
}

TEST_F(Doctor, SettingsTableIsGeneratedAndChecked) {
  ASSERT_EQ(doctor("ZIPCCL_COMPRESS=never", "--settings-markdown"), 0) << out_;
  // Defaults, not this environment's values.
  EXPECT_TRUE(says("| `ZIPCCL_COMPRESS` | auto\\|always\\|never | auto | compress host messages |")) << out_;
  EXPECT_TRUE(says("| `ZIPCCL_WORKERS` | integer 1..64 | half the cores, 1..4 |")) << out_;
  const std::string table = out_;

  const std::string begin =
      "<!-- zipccl-settings:begin (generated: zipccl doctor --update-readme README.md) -->\n";
  const std::string end = "<!-- zipccl-settings:end -->\n";
  write_text("README.md", "# intro\n" + begin + "| stale |\n" + end + "after\n");
  EXPECT_EQ(doctor("", "--check-readme README.md"), 1) << out_;
  EXPECT_TRUE(says("zipccl doctor --update-readme README.md")) << out_;
  ASSERT_EQ(doctor("", "--update-readme README.md"), 0) << out_;
  EXPECT_EQ(doctor("", "--check-readme README.md"), 0) << out_;
  EXPECT_EQ(read_text("README.md"), "# intro\n" + begin + table + end + "after\n");

  write_text("NOMARK.md", "# nothing here\n");
  EXPECT_EQ(doctor("", "--check-readme NOMARK.md"), 1);
  EXPECT_TRUE(says("has no generated settings table")) << out_;
}

}  // namespace
