// ZIPCCL_NET_INNER naming a plugin that is missing, is no plugin, or fails its init: zipccl's init must
// fail (NCCL then falls back to its own transports) with exactly one zipccl WARN naming the library and
// the reason, and must not have switched to another transport. One case per process (settings are read
// once); the case comes as --setenv arguments (tests/inner/inner_tests.cmake):
//   ZIPCCL_TEST_EXPECT_WARN   text the zipccl WARN must hold
//   ZIPCCL_TEST_EXPECT_WARN2  optional: more text it must hold (a list names each plugin's reason)
//   ZIPCCL_TEST_EXPECT_RESULT the ncclResult_t init must return, or "any" (an error the inner chose)
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

// Lines holding `what` from line `first` on.
int lines_since(size_t first, const char* what) {
  LogSink& s = log_sink();
  std::lock_guard<std::mutex> lock(s.mu);
  int n = 0;
  for (size_t i = first; i < s.lines.size(); ++i) n += s.lines[i].find(what) != std::string::npos;
  return n;
}
size_t lines_now() {
  LogSink& s = log_sink();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.lines.size();
}

TEST(InnerErrors, InitFailsWithOneWarnNamingTheLibrary) {
  if (!inner_plugin_absent().empty()) GTEST_SKIP() << inner_plugin_absent();
  const char* expect = std::getenv("ZIPCCL_TEST_EXPECT_WARN");
  const char* result = std::getenv("ZIPCCL_TEST_EXPECT_RESULT");
  ASSERT_TRUE(expect && result) << "run through CTest (tests/inner/inner_tests.cmake)";
  for (int version : {7, 12}) {
    auto api = load_api(version);
    ASSERT_TRUE(api);
    const size_t first = lines_now();
    const ncclResult_t r = api->init();
    // Exactly one WARN of zipccl's about it (the inner plugin's own lines, if any, come before it).
    EXPECT_EQ(lines_since(first, "zipccl does not initialise"), 1) << "v" << version;
    if (std::string(result) == "any")
      EXPECT_NE(r, ncclSuccess) << "v" << version;
    else
      EXPECT_EQ(r, static_cast<ncclResult_t>(std::atoi(result))) << "v" << version;
    int n = -1;
    EXPECT_NE(api->devices(&n), ncclSuccess) << "v" << version << ": a transport is up after the failed init";
  }
  LogSink& s = log_sink();
  int ours = 0;
  std::lock_guard<std::mutex> lock(s.mu);
  for (const std::string& l : s.lines) {
    if (l.find("zipccl does not initialise") != std::string::npos) {
      ++ours;
      EXPECT_EQ(l.find("NET/zipccl : ZIPCCL_NET_INNER="), 0u) << l;
      EXPECT_NE(l.find(expect), std::string::npos) << l;
      if (const char* more = std::getenv("ZIPCCL_TEST_EXPECT_WARN2")) {
        EXPECT_NE(l.find(more), std::string::npos) << l;
      }
    }
  }
  EXPECT_EQ(ours, 2);
}

}  // namespace
