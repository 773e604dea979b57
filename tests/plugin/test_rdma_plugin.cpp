// Transport selection through the built plugin: ZIPCCL_TRANSPORT=ib on a machine without an RDMA
// port falls back to sockets with a WARN, and libibverbs is never a link-time dependency. CUDA memory
// registration and flush with the socket transport: the type is recorded, nothing fails. CTest passes
// --setenv=ZIPCCL_TRANSPORT=ib --setenv=NCCL_SOCKET_IFNAME=lo (env_main.cpp).
#include <dirent.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

bool rdma_device_present() {
  DIR* d = opendir("/sys/class/infiniband");
  if (!d) return false;
  bool any = false;
  while (dirent* e = readdir(d)) any |= e->d_name[0] != '.';
  closedir(d);
  return any;
}

}  // namespace

void expect_ib_requested() {
  const char* t = std::getenv("ZIPCCL_TRANSPORT");
  ASSERT_TRUE(t && std::string(t) == "ib") << "run through CTest, or pass --setenv=ZIPCCL_TRANSPORT=ib";
}

TEST(RdmaSelection, NoDeviceMeansSocketTransport) {
  expect_ib_requested();
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

// NCCL's regMr / regMrDmaBuf of CUDA memory and iflush with the socket transport. With a GPU path
// (CTest runs this binary a second time with ZIPCCL_GPU=emulate) getProperties advertises
// NCCL_PTR_CUDA and a CUDA regMr only records the type (no registration, no error); without one it is
// refused, as advertised. The flush has nothing to do (null request). Host memory is unchanged.
// Through the v11 table, as NCCL calls it.
TEST(RdmaSelection, CudaRegistrationAndFlushOnSockets) {
  expect_ib_requested();
  if (rdma_device_present()) GTEST_SKIP() << "an RDMA device exists here: the socket path is not exercised";
  auto api = load_api(11);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  ASSERT_TRUE(make_pair(api.get(), &sc, &rc, &lc));
  zipccl::net_client::Net* table = &api->net();
  Props p;
  ASSERT_EQ(api->props(0, &p), ncclSuccess);
  const char* gpu = std::getenv("ZIPCCL_GPU");
  const bool cuda = gpu && std::string(gpu) == "emulate";
  EXPECT_EQ((p.ptr_support & NCCL_PTR_CUDA) != 0, cuda);
  std::vector<char> buf(1 << 16);  // stands in for device memory: sockets never touch it here
  void *mh_cuda = nullptr, *mh_dmabuf = nullptr, *mh_host = nullptr;
  if (!cuda) {
    EXPECT_EQ(table->reg_mr(rc, buf.data(), buf.size(), NCCL_PTR_CUDA, &mh_cuda), ncclInternalError);
    EXPECT_EQ(mh_cuda, nullptr);
    EXPECT_TRUE(log_contains("there is no GPU path here"));
    EXPECT_EQ(api->close_send(sc), ncclSuccess);
    EXPECT_EQ(api->close_recv(rc), ncclSuccess);
    EXPECT_EQ(api->close_listen(lc), ncclSuccess);
    EXPECT_EQ(api->finalize(), ncclSuccess);
    return;
  }
  EXPECT_EQ(table->reg_mr(rc, buf.data(), buf.size(), NCCL_PTR_CUDA, &mh_cuda), ncclSuccess);
  EXPECT_NE(mh_cuda, nullptr);
  EXPECT_EQ(table->reg_mr_dmabuf(rc, buf.data(), buf.size(), NCCL_PTR_CUDA, 0, -1, &mh_dmabuf), ncclSuccess);
  EXPECT_NE(mh_dmabuf, nullptr);
  EXPECT_EQ(table->reg_mr(sc, buf.data(), buf.size(), NCCL_PTR_HOST, &mh_host), ncclSuccess);
  void* bad = nullptr;
  EXPECT_EQ(table->reg_mr(sc, buf.data(), buf.size(), 0x40, &bad), ncclInternalError);  // unknown type
  EXPECT_EQ(bad, nullptr);
  void* data[1] = {buf.data()};
  int sizes[1] = {4096};
  void* mhs[1] = {mh_cuda};
  void* req = reinterpret_cast<void*>(0x1);
  EXPECT_EQ(table->iflush(rc, 1, data, sizes, mhs, &req), ncclSuccess);
  EXPECT_EQ(req, nullptr) << "sockets: nothing to flush";
  EXPECT_EQ(table->dereg_mr(rc, mh_cuda), ncclSuccess);
  EXPECT_EQ(table->dereg_mr(rc, mh_dmabuf), ncclSuccess);
  EXPECT_EQ(table->dereg_mr(sc, mh_host), ncclSuccess);
  EXPECT_EQ(api->close_send(sc), ncclSuccess);
  EXPECT_EQ(api->close_recv(rc), ncclSuccess);
  EXPECT_EQ(api->close_listen(lc), ncclSuccess);
  EXPECT_EQ(api->finalize(), ncclSuccess);
}
