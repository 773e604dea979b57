// zipccl over a stand-in inner plugin (fake_inner.c) that has, or lacks, the optional entries
// getDeviceMr, irecvConsumed, makeVDevice and setNetAttr, and grouped receives (maxRecvs 8):
// setNetAttr reaches the inner's context when it has one (its result unchanged), the device-side
// entries and makeVDevice are never offered (with one INFO saying why when the inner has them), and
// zipccl advertises maxRecvs 1. docs/notes/inner.md, "Optional entries". The case comes as --setenv
// arguments (tests/inner/inner_tests.cmake):
//   ZIPCCL_NET_INNER          the stand-in's file
//   ZIPCCL_TEST_FAKE_EXTRAS   1: the stand-in has the entries, 0: it lacks them
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "plugin_driver.h"

using namespace zipccl_test;
using zipccl::net_client::Entry;

namespace {

struct FakeState {
  int inits, finalizes;
  int set_net_attr_calls;
  void* set_net_attr_ctx;
  ncclNetAttr_v12_t last_attr;
  int other_calls;
};

// The stand-in's record, from the copy zipccl loaded (dlopen of the same file returns it).
FakeState* fake_state() {
  const char* path = std::getenv("ZIPCCL_NET_INNER");
  if (!path) return nullptr;
  void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  return lib ? static_cast<FakeState*>(dlsym(lib, "fake_inner_state")) : nullptr;
}

bool extras() {
  const char* e = std::getenv("ZIPCCL_TEST_FAKE_EXTRAS");
  return e && std::string(e) == "1";
}

TEST(InnerOptional, ForwardedOrRefusedAsTheInnerDoes) {
  ASSERT_TRUE(std::getenv("ZIPCCL_TEST_FAKE_EXTRAS")) << "run through CTest (tests/inner/inner_tests.cmake)";
  auto v12 = load_api(12);
  auto v11 = load_api(11);
  ASSERT_TRUE(v12 && v11);
  ASSERT_EQ(v12->init(), ncclSuccess);
  ASSERT_EQ(v11->init(), ncclSuccess);
  FakeState* st = fake_state();
  ASSERT_NE(st, nullptr) << "the stand-in inner plugin is not loaded";
  EXPECT_EQ(st->inits, 1);

  // Devices and properties: the inner's, with maxRecvs 1 whatever the inner offers (one receive per
  // irecv through the compressing layer) and host networking only.
  int n = 0;
  ASSERT_EQ(v12->devices(&n), ncclSuccess);
  ASSERT_EQ(n, 2);
  for (int d = 0; d < n; ++d) {
    Props p;
    ASSERT_EQ(v12->props(d, &p), ncclSuccess);
    EXPECT_EQ(p.name, "fake-inner:fake" + std::to_string(d));
    EXPECT_EQ(p.max_recvs, 1);
    EXPECT_EQ(p.all.netDeviceType, NCCL_NET_DEVICE_HOST);
    EXPECT_EQ(p.all.vProps.ndevs, 1);
  }

  // Entries NCCL never gets from zipccl, whatever the inner has.
  for (auto* api : {v12.get(), v11.get()}) {
    EXPECT_FALSE(api->net().has(Entry::kGetDeviceMr)) << "v" << api->version();
    EXPECT_FALSE(api->net().has(Entry::kIrecvConsumed)) << "v" << api->version();
    EXPECT_FALSE(api->net().has(Entry::kMakeVDevice)) << "v" << api->version();
    EXPECT_TRUE(api->net().has(Entry::kSetNetAttr)) << "v" << api->version();
  }
  EXPECT_EQ(log_contains("offers device-side networking"), extras());
  EXPECT_EQ(log_contains("can merge devices (makeVDevice)"), extras());

  // setNetAttr through both tables: the inner gets the attributes, on its own context.
  zipccl::net_client::NetAttr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.sendCommAttr.maxConcurrentPeers = 7;
  attr.recvCommAttr.minFlowsPerPeer = 3;
  attr.op = 2;
  attr.algo = 1;
  attr.proto = 2;
  EXPECT_EQ(v12->net().set_net_attr(v12->context(), &attr), ncclSuccess);
  attr.algo = 4;
  EXPECT_EQ(v11->net().set_net_attr(v11->context(), &attr), ncclSuccess);
  if (extras()) {
    EXPECT_EQ(st->set_net_attr_calls, 2);
    EXPECT_NE(st->set_net_attr_ctx, nullptr);
    EXPECT_NE(st->set_net_attr_ctx, v12->context());  // the inner's context, not zipccl's
    EXPECT_EQ(st->last_attr.sendCommAttr.maxConcurrentPeers, 7);
    EXPECT_EQ(st->last_attr.recvCommAttr.minFlowsPerPeer, 3);
    EXPECT_EQ(st->last_attr.op, 2u);
    EXPECT_EQ(st->last_attr.algo, 4u);
    EXPECT_EQ(st->last_attr.proto, 2u);
    // The inner's refusal reaches NCCL unchanged.
    attr.op = 999;
    EXPECT_EQ(v12->net().set_net_attr(v12->context(), &attr), ncclInvalidArgument);
    EXPECT_EQ(st->set_net_attr_calls, 3);
  } else {
    EXPECT_EQ(st->set_net_attr_calls, 0);
  }
  EXPECT_EQ(st->other_calls, 0);

  // The inner's finalize: once, with the last context.
  EXPECT_EQ(v11->finalize(), ncclSuccess);
  EXPECT_EQ(st->finalizes, 0);
  EXPECT_EQ(v12->finalize(), ncclSuccess);
  EXPECT_EQ(st->finalizes, 1);
}

}  // namespace
