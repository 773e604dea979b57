// Transport selection through the built plugin: ZIPCCL_TRANSPORT=ib on a machine without an RDMA
// port falls back to sockets with a WARN, and libibverbs is never a link-time dependency.
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

const int kEnvSet = [] {
  setenv("ZIPCCL_TRANSPORT", "ib", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  return 0;
}();

bool rdma_device_present() {
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (dirent* e = readdir(d)) any |= e->d_name[0] != '.';
  closedir(d);
  return any;
}

}  // namespace

TEST(RdmaSelection, NoDeviceMeansSocketTransport) {
  ASSERT_EQ(kEnvSet, 0);
  if (rdma_device_present()) GTEST_SKIP() << "an RDMA device exists here: the fallback is not exercised";
  auto api = load_api(11);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  EXPECT_TRUE(log_contains("RDMA transport")) << "the INFO line saying why RDMA is not used";
  EXPECT_TRUE(log_contains("ZIPCCL_TRANSPORT=ib but no usable RDMA port"));
  EXPECT_TRUE(log_contains("zipccl socket transport"));
  int n = 0;
  ASSERT_EQ(api->devices(&n), ncclSuccess);
  ASSERT_GE(n, 1);
  Props p;
  ASSERT_EQ(api->props(0, &p), ncclSuccess);
  EXPECT_EQ(p.name, "lo");
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  ASSERT_TRUE(make_pair(api.get(), &sc, &rc, &lc));  // and it carries connections
  EXPECT_EQ(api->close_send(sc), ncclSuccess);
  EXPECT_EQ(api->close_recv(rc), ncclSuccess);
  EXPECT_EQ(api->close_listen(lc), ncclSuccess);
  EXPECT_EQ(api->finalize(), ncclSuccess);
}
