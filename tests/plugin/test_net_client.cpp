// The net client (plugin/client): NCCL_NET_PLUGIN's name rule, the choice of table, and each older
// table's adaptation to the newest semantics, against recording fake tables (what reached the table,
// exactly) and against the built plugin (every exported version agrees on what it reports).
#include <gtest/gtest.h>

#include <climits>
#include <cstring>
#include <string>

#include "zipccl/net_client.h"

namespace nc = zipccl::net_client;

namespace {

// ---- name resolution and table choice ----

std::string open_error(const char* name) {
  char opened[ZIPCCL_NET_PATH_MAX];
  char error[ZIPCCL_NET_ERROR_MAX];
  void* lib = zipccl_net_dlopen(name, opened, sizeof opened, error, sizeof error);
  EXPECT_EQ(lib, nullptr) << name;
  return error;
}

TEST(NetClientLoad, ANameIsTriedAsGivenThenWithNcclsPrefix) {
  std::string e = open_error("zz-no-such-net");
  EXPECT_NE(e.find("tried zz-no-such-net, libnccl-net-zz-no-such-net.so"), std::string::npos) << e;
}

TEST(NetClientLoad, LibraryFileNamesAndPathsAreNotPrefixed) {
  std::string e = open_error("libzz-no-such.so");
  EXPECT_NE(e.find("tried libzz-no-such.so)"), std::string::npos) << e;
  e = open_error("/zz/no/such/libnet.so");
  EXPECT_EQ(e.find("libnccl-net-"), std::string::npos) << e;
  e = open_error("");
  EXPECT_NE(e.find("tried libnccl-net.so)"), std::string::npos) << e;
}

TEST(NetClientLoad, AFoundLibraryThatFailsToLoadReportsTheLoadersReason) {
  // A file that exists but is not a shared object: the loader's own text, not "not found".
  std::string e = open_error("/proc/self/status");
  EXPECT_EQ(e.find("not found"), std::string::npos) << e;
  EXPECT_NE(e.find("/proc/self/status"), std::string::npos) << e;
}

TEST(NetClientLoad, ALibraryWithoutTablesIsRefusedByName) {
  std::string error;
  EXPECT_EQ(nc::load("libm.so.6", &error), nullptr);
  EXPECT_NE(error.find("libm.so.6 exports no ncclNetPlugin_v7..v12 table"), std::string::npos) << error;
}

TEST(NetClientLoad, ByNameAsNcclDoes) {
  // The test's environment puts the built plugin's folder on LD_LIBRARY_PATH (CMakeLists.txt).
  std::string error, opened;
  auto net = nc::load("zipccl", &error, nc::kNewestVersion, &opened);
  ASSERT_TRUE(net) << error;
  EXPECT_EQ(opened, "libnccl-net-zipccl.so");
  EXPECT_EQ(net->version(), 12);
  EXPECT_STREQ(net->name(), "zipccl");
  EXPECT_EQ(nc::exported_versions(net->library()), (std::vector<int>{12, 11, 10, 9, 8, 7}));
}

TEST(NetClientLoad, NewestIsCappedByTheCaller) {
  std::string error;
  auto net = nc::load(ZIPCCL_PLUGIN_PATH, &error, 9);
  ASSERT_TRUE(net) << error;
  EXPECT_EQ(net->version(), 9);
  EXPECT_EQ(nc::load(ZIPCCL_PLUGIN_PATH, &error, 6), nullptr);
  EXPECT_NE(error.find("no ncclNetPlugin_v7..v6"), std::string::npos) << error;
  EXPECT_EQ(nc::wrap(nullptr, net->table(), 6), nullptr);
  EXPECT_EQ(nc::wrap(nullptr, net->table(), 13), nullptr);
}

// ---- adaptation, against fake tables that record what they were given ----

struct Seen {
  int inits = 0;
  int size = -1;
  size_t size_t_size = 0;
  void* request_in = nullptr;
  void* phandle = nullptr;
  int traffic_class = 0;
  void* ctx = nullptr;
  int vdevs = -1;
  int calls = 0;
};
Seen g_seen;

ncclResult_t f_init(ncclDebugLogger_t) {
  ++g_seen.inits;
  return ncclSuccess;
}
ncclResult_t f_init10(ncclDebugLogger_t, ncclProfilerCallback_t) {
  ++g_seen.inits;
  return ncclSuccess;
}
ncclResult_t f_devices(int* n) {
  *n = 1;
  return ncclSuccess;
}
ncclResult_t f_props7(int, ncclNetProperties_v7_t* p) {
  std::memset(p, 0, sizeof *p);
  p->name = const_cast<char*>("fake7");
  p->ptrSupport = NCCL_PTR_HOST;
  p->speed = 12345;
  p->latency = 2.5f;
  p->maxRecvs = 1;
  return ncclSuccess;
}
ncclResult_t f_listen(int, void*, void** l) {
  *l = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_connect7(int, void*, void** sc, ncclNetDeviceHandle_v7_t**) {
  *sc = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_accept(void*, void** rc, ncclNetDeviceHandle_v7_t**) {
  *rc = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_reg_mr_int(void*, void*, int size, int, void** mh) {
  g_seen.size = size;
  *mh = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_reg_dmabuf(void*, void*, size_t, int, uint64_t, int, void**) {
  return ncclSuccess;
}
ncclResult_t f_dereg(void*, void*) {
  return ncclSuccess;
}
ncclResult_t f_isend_int(void*, void*, int size, int, void*, void** req) {
  ++g_seen.calls;
  g_seen.size = size;
  *req = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_irecv_int(void*, int, void**, int* sizes, int*, void**, void** req) {
  ++g_seen.calls;
  g_seen.request_in = *req;
  g_seen.size = sizes[0];
  *req = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_iflush(void*, int, void**, int*, void**, void** req) {
  *req = nullptr;
  return ncclSuccess;
}
ncclResult_t f_test(void*, int* done, int*) {
  *done = 1;
  return ncclSuccess;
}
ncclResult_t f_close(void*) {
  return ncclSuccess;
}

const ncclNet_v7_t kFake7 = {"fake7",     f_init,      f_devices,    f_props7,     f_listen,
                             f_connect7,  f_accept,    f_reg_mr_int, f_reg_dmabuf, f_dereg,
                             f_isend_int, f_irecv_int, f_iflush,     f_test,       f_close,
                             f_close,     f_close,     nullptr,      nullptr};

class NetClientV7 : public ::testing::Test {
 protected:
  void SetUp() override {
    g_seen = Seen{};
    net_ = nc::wrap(nullptr, &kFake7, 7);
    ASSERT_TRUE(net_);
  }
  std::unique_ptr<nc::Net> net_;
};

TEST_F(NetClientV7, InitOncePerProcessUntilEveryContextIsFinalised) {
  void *a = nullptr, *b = nullptr;
  ASSERT_EQ(net_->init(&a, 1, nullptr, nullptr, nullptr), ncclSuccess);
  ASSERT_EQ(net_->init(&b, 2, nullptr, nullptr, nullptr), ncclSuccess);
  EXPECT_EQ(g_seen.inits, 1);
  EXPECT_TRUE(a && b && a != b);
  EXPECT_EQ(net_->finalize(a), ncclSuccess);
  EXPECT_EQ(net_->finalize(b), ncclSuccess);
  ASSERT_EQ(net_->init(&a, 3, nullptr, nullptr, nullptr), ncclSuccess);
  EXPECT_EQ(g_seen.inits, 2);
  EXPECT_EQ(net_->finalize(a), ncclSuccess);
  EXPECT_NE(net_->finalize(nullptr), ncclSuccess);
}

TEST_F(NetClientV7, PropertiesGetNcclsDefaultsForMissingFields) {
  nc::Properties p;
  std::memset(&p, 0x5a, sizeof p);
  ASSERT_EQ(net_->get_properties(3, &p), ncclSuccess);
  EXPECT_STREQ(p.name, "fake7");
  EXPECT_EQ(p.speed, 12345);
  EXPECT_FLOAT_EQ(p.latency, 2.5f);
  EXPECT_EQ(p.regIsGlobal, 0);
  EXPECT_EQ(p.forceFlush, 0);
  EXPECT_EQ(p.vProps.ndevs, 1);
  EXPECT_EQ(p.vProps.devs[0], 3);
  EXPECT_EQ(p.maxP2pBytes, size_t{1} << 30);
  EXPECT_EQ(p.maxCollBytes, size_t{512} << 20);
  EXPECT_EQ(p.maxMultiRequestSize, 1);
  EXPECT_EQ(p.railId, NCCL_NET_ID_UNDEF);
  EXPECT_EQ(p.planeId, NCCL_NET_ID_UNDEF);
}

TEST_F(NetClientV7, SizesAreNarrowedOrRefusedNeverTruncated) {
  void* req = nullptr;
  void* mh = nullptr;
  EXPECT_EQ(net_->isend(&g_seen, nullptr, 1000, 0, nullptr, &req), ncclSuccess);
  EXPECT_EQ(g_seen.size, 1000);
  g_seen.calls = 0;
  EXPECT_EQ(net_->isend(&g_seen, nullptr, (size_t{1} << 30) + 1, 0, nullptr, &req), ncclInternalError);
  EXPECT_EQ(net_->irecv(&g_seen, nullptr, size_t{3} << 30, 0, nullptr, &req), ncclInternalError);
  EXPECT_EQ(g_seen.calls, 0);
  EXPECT_EQ(net_->reg_mr(&g_seen, nullptr, size_t{1} << 31, NCCL_PTR_HOST, &mh), ncclInternalError);
  EXPECT_EQ(net_->reg_mr(&g_seen, nullptr, INT_MAX, NCCL_PTR_HOST, &mh), ncclSuccess);
  EXPECT_EQ(g_seen.size, INT_MAX);
}

TEST_F(NetClientV7, OptionalReceiveCompletionIsClearedForOldTables) {
  void* req = reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
  ASSERT_EQ(net_->irecv(&g_seen, nullptr, 64, 0, nullptr, &req), ncclSuccess);
  EXPECT_EQ(g_seen.request_in, nullptr);
  EXPECT_EQ(g_seen.size, 64);
  EXPECT_EQ(req, &g_seen);
}

TEST_F(NetClientV7, MissingEntriesAreReportedAndRefused) {
  EXPECT_TRUE(net_->has(nc::Entry::kRegMrDmaBuf));
  EXPECT_FALSE(net_->has(nc::Entry::kGetDeviceMr));
  EXPECT_FALSE(net_->has(nc::Entry::kMakeVDevice));
  EXPECT_FALSE(net_->has(nc::Entry::kSetNetAttr));
  void* out = nullptr;
  EXPECT_EQ(net_->get_device_mr(&g_seen, nullptr, &out), ncclInternalError);
  nc::VDeviceProps vp{1, {0}};
  int d = -1;
  EXPECT_EQ(net_->make_vdevice(&d, &vp), ncclInternalError);
  nc::NetAttr attr{};
  EXPECT_EQ(net_->set_net_attr(nullptr, &attr), ncclInternalError);
}

// v10: the config travels from init to connect; profiler handles reach the table.
ncclResult_t f_props10(int, ncclNetProperties_v10_t* p) {
  std::memset(p, 0, sizeof *p);
  p->name = const_cast<char*>("fake10");
  p->vProps.ndevs = 99;  // garbage: must not be read past the old array
  p->maxP2pBytes = 777;
  return ncclSuccess;
}
ncclResult_t f_listen10(int, void*, void** l) {
  *l = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_connect10(int, ncclNetCommConfig_v10_t* cfg, void*, void** sc, ncclNetDeviceHandle_v10_t**) {
  g_seen.traffic_class = cfg ? cfg->trafficClass : -100;
  *sc = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_reg_mr(void*, void*, size_t, int, void** mh) {
  *mh = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_isend10(void*, void*, size_t size, int, void*, void* ph, void** req) {
  g_seen.size_t_size = size;
  g_seen.phandle = ph;
  *req = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_irecv10(void*, int, void**, size_t* sizes, int*, void**, void** ph, void** req) {
  g_seen.size_t_size = sizes[0];
  g_seen.phandle = ph[0];
  g_seen.request_in = *req;
  *req = &g_seen;
  return ncclSuccess;
}
ncclResult_t f_vdev10(int* d, ncclNetVDeviceProps_v10_t* p) {
  g_seen.vdevs = p->ndevs;
  *d = 7;
  return ncclSuccess;
}
const ncclNet_v10_t kFake10 = {"fake10",    f_init10,  f_devices, f_props10,    f_listen10,
                               f_connect10, f_accept,  f_reg_mr,  f_reg_dmabuf, f_dereg,
                               f_isend10,   f_irecv10, f_iflush,  f_test,       f_close,
                               f_close,     f_close,   nullptr,   nullptr,      f_vdev10};

TEST(NetClientV10, ConfigFromInitReachesConnect) {
  g_seen = Seen{};
  auto net = nc::wrap(nullptr, &kFake10, 10);
  ASSERT_TRUE(net);
  void* ctx = nullptr;
  nc::CommConfig cfg{42};
  ASSERT_EQ(net->init(&ctx, 1, &cfg, nullptr, nullptr), ncclSuccess);
  void* sc = nullptr;
  nc::DeviceHandle* dh = nullptr;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  ASSERT_EQ(net->connect(ctx, 0, handle, &sc, &dh), ncclSuccess);
  EXPECT_EQ(g_seen.traffic_class, 42);
  EXPECT_EQ(net->finalize(ctx), ncclSuccess);
}

TEST(NetClientV10, LargeSizesPhandlesAndOptionalCompletionPassThrough) {
  g_seen = Seen{};
  auto net = nc::wrap(nullptr, &kFake10, 10);
  void* req = nullptr;
  int marker = 0;
  ASSERT_EQ(net->isend(&g_seen, nullptr, size_t{5} << 30, 0, nullptr, &marker, &req), ncclSuccess);
  EXPECT_EQ(g_seen.size_t_size, size_t{5} << 30);
  EXPECT_EQ(g_seen.phandle, &marker);
  req = reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION);
  ASSERT_EQ(net->irecv(&g_seen, nullptr, 99, 0, nullptr, &req), ncclSuccess);
  EXPECT_EQ(g_seen.request_in, reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION));
  EXPECT_EQ(g_seen.size_t_size, 99u);
}

TEST(NetClientV10, PropertiesAndVirtualDevicesStayInsideTheOldArrays) {
  g_seen = Seen{};
  auto net = nc::wrap(nullptr, &kFake10, 10);
  nc::Properties p;
  ASSERT_EQ(net->get_properties(0, &p), ncclSuccess);
  EXPECT_EQ(p.vProps.ndevs, NCCL_NET_MAX_DEVS_PER_NIC);
  EXPECT_EQ(p.maxP2pBytes, 777u);
  EXPECT_EQ(p.railId, NCCL_NET_ID_UNDEF);
  ASSERT_TRUE(net->has(nc::Entry::kMakeVDevice));
  int d = -1;
  nc::VDeviceProps vp{5, {0, 1, 2, 3, 4}};
  EXPECT_EQ(net->make_vdevice(&d, &vp), ncclInvalidArgument);
  EXPECT_EQ(g_seen.vdevs, -1);
  vp.ndevs = 2;
  EXPECT_EQ(net->make_vdevice(&d, &vp), ncclSuccess);
  EXPECT_EQ(g_seen.vdevs, 2);
  EXPECT_EQ(d, 7);
}

// ---- the built plugin: every version reports the same device ----

void quiet(ncclDebugLogLevel, unsigned long, const char*, int, const char*, ...) {}

TEST(NetClientPlugin, EveryVersionAgreesAndV12AddsRailAndPlane) {
  std::string error;
  auto newest = nc::load(ZIPCCL_PLUGIN_PATH, &error);
  ASSERT_TRUE(newest) << error;
  ASSERT_EQ(newest->version(), 12);
  void* ctx = nullptr;
  ASSERT_EQ(newest->init(&ctx, 5, nullptr, quiet, nullptr), ncclSuccess);
  nc::Properties p12;
  ASSERT_EQ(newest->get_properties(0, &p12), ncclSuccess);
  EXPECT_EQ(p12.railId, NCCL_NET_ID_UNDEF);
  EXPECT_EQ(p12.planeId, NCCL_NET_ID_UNDEF);
  EXPECT_EQ(p12.maxMultiRequestSize, 1);
  EXPECT_EQ(p12.vProps.ndevs, 1);
  EXPECT_EQ(p12.vProps.devs[0], 0);
  for (int v = nc::kOldestVersion; v < nc::kNewestVersion; ++v) {
    auto net = nc::load_version(newest->library(), v);
    ASSERT_TRUE(net) << v;
    nc::Properties p;
    ASSERT_EQ(net->get_properties(0, &p), ncclSuccess) << v;
    EXPECT_STREQ(p.name, p12.name) << v;
    EXPECT_EQ(p.speed, p12.speed) << v;
    EXPECT_EQ(p.ptrSupport, p12.ptrSupport) << v;
    EXPECT_EQ(p.maxRecvs, p12.maxRecvs) << v;
    if (v >= 9) {
      EXPECT_EQ(p.maxP2pBytes, p12.maxP2pBytes) << v;
    }
  }
  EXPECT_EQ(newest->finalize(ctx), ncclSuccess);
}

}  // namespace
