// The plugin conformance harness, unchanged, with the verbs transport selected (ZIPCCL_TRANSPORT=ib,
// set here before the plugin first reads its settings). Where the plugin did not pick the RDMA transport (no
// libibverbs, no active port), every test is skipped with that reason instead of passing over sockets.
#include "test_plugin_conformance.cpp"

namespace {

const int kIbEnv = [] {
  setenv("ZIPCCL_TRANSPORT", "ib", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  return 0;
}();

class RdmaOnly : public ::testing::Environment {
 public:
  void SetUp() override {
    ASSERT_EQ(kIbEnv, 0);
    auto api = zipccl_test::load_api(11);
    ASSERT_TRUE(api);
    ASSERT_EQ(api->init(), ncclSuccess);
    bool ib = zipccl_test::log_contains("zipccl ib transport");
    EXPECT_EQ(api->finalize(), ncclSuccess);
    if (!ib) GTEST_SKIP() << "no RDMA device (no libibverbs or no active port): RDMA conformance not run";
  }
};

const auto* const kRdmaOnly = ::testing::AddGlobalTestEnvironment(new RdmaOnly);

}  // namespace
