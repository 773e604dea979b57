// The plugin conformance harness, unchanged, with the verbs transport selected: CTest passes
// --setenv=ZIPCCL_TRANSPORT=ib (env_main.cpp applies it before the plugin first reads its settings).
// Where the plugin did not pick the RDMA transport (no libibverbs, no active port), every test is
// skipped with that reason instead of passing over sockets.
#include "test_plugin_conformance.cpp"

namespace {

class RdmaOnly : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* t = std::getenv("ZIPCCL_TRANSPORT");
    ASSERT_TRUE(t && std::string(t) == "ib") << "run through CTest, or pass --setenv=ZIPCCL_TRANSPORT=ib";
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
