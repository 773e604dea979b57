// NCCL_IB_TC, NCCL_IB_SL, NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT through the settings registry. CTest runs
// this binary three times (--setenv arguments, env_main.cpp): unset, valid values, out-of-range values.
// Expectations come from NCCL's documented ranges and defaults, written out here, not from the code.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/settings.h"
#include "rdma/rdma_select.h"

using namespace zipccl::net;

namespace {

struct Spec {
  const char* name;
  int lo, hi, dflt;
  int Settings::*field;
};
const Spec kSpecs[] = {
    {"NCCL_IB_TC", 0, 255, 0, &Settings::ib_tc},
    {"NCCL_IB_SL", 0, 15, 0, &Settings::ib_sl},
    {"NCCL_IB_TIMEOUT", 1, 31, 20, &Settings::ib_timeout},
    {"NCCL_IB_RETRY_CNT", 0, 7, 7, &Settings::ib_retry_cnt},
};

// The value the environment asks for, when it is an integer in the documented range.
bool wanted(const Spec& s, int* v) {
  const char* e = std::getenv(s.name);
  if (!e || !*e) return false;
  char* end = nullptr;
  long x = std::strtol(e, &end, 10);
  if (*end || x < s.lo || x > s.hi) return false;
  *v = static_cast<int>(x);
  return true;
}

const SettingInfo* find(const std::vector<SettingInfo>& all, const char* name) {
  for (const SettingInfo& i : all) {
    if (i.name == name) return &i;
  }
  return nullptr;
}

}  // namespace

TEST(RdmaSettings, NcclIbQueuePairSettings) {
  // Which run this is (CTest passes it with the others): proves the --setenv arguments arrived.
  const char* run = std::getenv("ZIPCCL_TEST_RUN");
  ASSERT_TRUE(run) << "run through CTest (--setenv=ZIPCCL_TEST_RUN=default|set|bad ...)";
  for (const Spec& s : kSpecs) {
    const char* e = std::getenv(s.name);
    EXPECT_EQ(e != nullptr, std::string(run) != "default") << s.name;
    int v;
    if (e) {
      EXPECT_EQ(wanted(s, &v), std::string(run) == "set") << s.name << "=" << e;
    }
  }
  const Settings& st = settings();
  std::vector<SettingInfo> all = describe_settings();
  for (const Spec& s : kSpecs) {
    const SettingInfo* info = find(all, s.name);
    ASSERT_NE(info, nullptr) << s.name << " is not in the settings registry";
    const char* env = std::getenv(s.name);
    int v = 0;
    if (wanted(s, &v)) {
      EXPECT_EQ(st.*s.field, v) << s.name;
      EXPECT_TRUE(info->problem.empty()) << info->problem;
    } else {
      EXPECT_EQ(st.*s.field, s.dflt) << s.name << ": NCCL's default";
      if (env && *env) {  // set to something out of range: a problem naming the value and the range
        EXPECT_NE(info->problem.find(std::string(s.name) + "='" + env + "'"), std::string::npos)
            << info->problem;
        EXPECT_NE(info->problem.find(std::to_string(s.lo) + ", " + std::to_string(s.hi)), std::string::npos)
            << info->problem;
      } else {
        EXPECT_TRUE(info->problem.empty()) << info->problem;
      }
    }
    EXPECT_EQ(info->value, std::to_string(st.*s.field));
    EXPECT_EQ(info->values, "integer " + std::to_string(s.lo) + ".." + std::to_string(s.hi));
  }
  // Whatever the environment says, what the verbs layer gets is valid.
  IbQpSettings q{st.ib_tc, st.ib_sl, st.ib_timeout, st.ib_retry_cnt};
  std::string why;
  EXPECT_TRUE(ib_qp_settings_valid(q, &why)) << why;
}
