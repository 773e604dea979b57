// main() of the plugin test binaries that run under several settings: each `--setenv=NAME=VALUE`
// argument is applied before any test loads the plugin (which reads its settings once per process).
// CTest passes them as arguments because gtest_discover_tests keeps only the first entry of an
// ENVIRONMENT list (CMake 3.25), which once left every policy run on the defaults.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (std::strncmp(a, "--setenv=", 9) != 0) {
      std::fprintf(stderr, "unknown argument %s\n", a);
      return 2;
    }
    const std::string kv = a + 9;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      std::fprintf(stderr, "bad --setenv argument %s\n", a);
      return 2;
    }
    setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
  }
  return RUN_ALL_TESTS();
}
