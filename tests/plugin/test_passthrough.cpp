// The tuner, profiler and CollNet tables zipccl exports and passes through to the net plugin it wraps
// (plugin/src/abi/passthrough_*). Each table is found in the built libnccl-net-zipccl.so by dlsym and
// called as NCCL's loader calls it (src/plugin/tuner.cc, profiler.cc, net.cc).
//
// Runs (tests/plugin/CMakeLists.txt):
//   passthrough.fake.*     ZIPCCL_NET_INNER = the stand-in with tuner v6+v3, CollNet v12, profiler v6
//                          (tests/inner/fake_tuner_inner.c): PassthroughFake.* and PassthroughAll.*
//   passthrough.notuner.*  ZIPCCL_NET_INNER = a net plugin with none of them (fake_inner.c)
//   passthrough.noinner.*  ZIPCCL_NET_INNER=none (no inner plugin)
//   passthrough.self.*     ZIPCCL_NET_INNER = this zipccl library (must not forward to itself)
//   passthrough.selffirst.* a list naming zipccl before the stand-in: the search ends at zipccl
//   the last three: PassthroughNone.* and PassthroughAll.*; ZIPCCL_TEST_PASSTHROUGH_WHY: what the INFO
//   must say about why there is nothing to forward to.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../inner/fake_tuner_inner.h"
#include "doctor_passthrough.h"
#include "nccl/collnet.h"
#include "nccl/profiler.h"
#include "nccl/tuner.h"
#include "plugin_driver.h"
#include "src/abi/passthrough_versions.h"

using namespace zipccl_test;

namespace {

// NCCL's cost table for one collective: 7 algorithms x 3 protocols, -1 where NCCL will not use one.
constexpr int kAlgos = 7, kProtos = 3;
struct CostTable {
  float t[kAlgos][kProtos];
  CostTable() {
    for (int a = 0; a < kAlgos; ++a)
      for (int p = 0; p < kProtos; ++p) t[a][p] = a == 4 ? -1.0f : 10.0f * a + p + 0.5f;  // NVLS: ignored
  }
  float** ptr() { return reinterpret_cast<float**>(t); }  // how NCCL hands it over
  bool operator==(const CostTable& o) const { return std::memcmp(t, o.t, sizeof t) == 0; }
};
constexpr int kAllReduce = 4;

// The table `sym` of the plugin, as NCCL's loader finds it. ZIPCCL_TEST_ECHO_INFO: the plugin's INFO
// lines on stderr too (--setenv applies after static initialisation, hence here).
template <typename T>
const T* table(const char* sym) {
  log_sink().echo_info = std::getenv("ZIPCCL_TEST_ECHO_INFO") != nullptr;
  void* lib = plugin_library();
  return lib ? static_cast<const T*>(dlsym(lib, sym)) : nullptr;
}

const fake_passthrough_state_t* fake_state() {
  const char* inner = std::getenv("ZIPCCL_NET_INNER");
  if (!inner) return nullptr;
  // The library zipccl opened (RTLD_LOCAL): dlopen of the same file returns that same object.
  void* lib = dlopen(inner, RTLD_NOW | RTLD_LOCAL);
  if (!lib) return nullptr;
  auto fn = reinterpret_cast<const fake_passthrough_state_t* (*)()>(dlsym(lib, "fake_passthrough_state"));
  return fn ? fn() : nullptr;
}

// ---- over the stand-in with a tuner, CollNet and a profiler ----

TEST(PassthroughFake, TunerV6ReachesTheInnersV6) {
  const auto* t = table<ncclTuner_v6_t>("ncclTunerPlugin_v6");
  ASSERT_TRUE(t);
  const fake_passthrough_state_t* s = fake_state();
  ASSERT_TRUE(s);
  const int inits = s->tuner6_inits;
  void* ctx = nullptr;
  int constants_stand_in = 0;
  auto* constants = reinterpret_cast<ncclTunerConstants_v6_t*>(&constants_stand_in);
  ASSERT_EQ(t->init(&ctx, 77, 8, 2, test_logger, nullptr, constants), ncclSuccess);
  EXPECT_EQ(s->tuner6_inits, inits + 1);
  EXPECT_EQ(s->tuner6_comm_id, 77u);
  EXPECT_EQ(s->tuner6_constants, static_cast<const void*>(constants));  // NCCL's constants reach it

  CostTable cost, before;
  int nch = 0;
  ASSERT_EQ(t->getCollInfo(ctx, kAllReduce, 1 << 20, 1, cost.ptr(), kAlgos, kProtos, 1, &nch), ncclSuccess);
  EXPECT_EQ(cost.t[0][0], 6.0f);  // the v6 tuner's mark
  EXPECT_EQ(cost.t[0][1], 1.0f);  // regBuff reached it
  EXPECT_EQ(cost.t[1][0], 8.0f);  // its own context (nRanks) came back to it
  EXPECT_EQ(nch, 6);
  EXPECT_EQ(cost.t[2][2], before.t[2][2]);
  EXPECT_EQ(cost.t[4][0], -1.0f);
  size_t chunk = 1234;
  ASSERT_TRUE(t->getChunkSize);
  ASSERT_EQ(t->getChunkSize(ctx, kAllReduce, 1 << 20, 1, 2, 6, &chunk), ncclSuccess);
  EXPECT_EQ(chunk, size_t{FAKE_TUNER_CHUNK_BYTES});
  const int fins = s->tuner6_finalizes;
  ASSERT_EQ(t->finalize(ctx), ncclSuccess);
  EXPECT_EQ(s->tuner6_finalizes, fins + 1);
  EXPECT_TRUE(log_contains("tuner v6 passed through to")) << "no INFO naming the inner tuner";
  EXPECT_TRUE(log_contains("ncclTunerPlugin_v6"));
}

// An older NCCL asks for v5; the inner has v6 (v5 plus an optional entry): an exact match.
TEST(PassthroughFake, TunerV5ReachesTheInnersV6) {
  const auto* t = table<ncclTuner_v5_t>("ncclTunerPlugin_v5");
  ASSERT_TRUE(t);
  void* ctx = nullptr;
  ASSERT_EQ(t->init(&ctx, 5, 4, 1, test_logger, nullptr, nullptr), ncclSuccess);
  CostTable cost;
  int nch = 0;
  ASSERT_EQ(t->getCollInfo(ctx, kAllReduce, 4096, 1, cost.ptr(), kAlgos, kProtos, 0, &nch), ncclSuccess);
  EXPECT_EQ(cost.t[0][0], 6.0f);
  EXPECT_EQ(cost.t[0][1], 0.0f);
  EXPECT_EQ(cost.t[1][0], 4.0f);
  EXPECT_EQ(nch, 6);
  EXPECT_EQ(t->finalize(ctx), ncclSuccess);
}

// v4 (aws-ofi-nccl has no v4): the inner's v3 takes the call, without regBuff.
TEST(PassthroughFake, TunerV4ReachesTheInnersV3) {
  const auto* t = table<ncclTuner_v4_t>("ncclTunerPlugin_v4");
  ASSERT_TRUE(t);
  const fake_passthrough_state_t* s = fake_state();
  ASSERT_TRUE(s);
  const int inits = s->tuner3_inits, fins = s->tuner3_finalizes;
  void* ctx = nullptr;
  ASSERT_EQ(t->init(16, 2, test_logger, &ctx), ncclSuccess);
  EXPECT_EQ(s->tuner3_inits, inits + 1);
  CostTable cost, before;
  int nch = 0;
  ASSERT_EQ(t->getCollInfo(ctx, kAllReduce, 1 << 20, 1, cost.ptr(), kAlgos, kProtos, 1, &nch), ncclSuccess);
  EXPECT_EQ(cost.t[0][0], 3.0f);            // the v3 tuner's mark
  EXPECT_EQ(cost.t[0][1], before.t[0][1]);  // v3 has no regBuff
  EXPECT_EQ(cost.t[1][0], 16.0f);
  EXPECT_EQ(nch, 3);
  ASSERT_EQ(t->destroy(ctx), ncclSuccess);
  EXPECT_EQ(s->tuner3_finalizes, fins + 1);
  EXPECT_TRUE(log_contains("tuner v4 passed through to")) << "no INFO for v4";
}

TEST(PassthroughFake, TunerV3ReachesTheInnersV3) {
  const auto* t = table<ncclTuner_v3_t>("ncclTunerPlugin_v3");
  ASSERT_TRUE(t);
  void* ctx = nullptr;
  ASSERT_EQ(t->init(2, 1, test_logger, &ctx), ncclSuccess);
  CostTable cost;
  int nch = 0;
  ASSERT_EQ(t->getCollInfo(ctx, kAllReduce, 1 << 20, 1, cost.ptr(), kAlgos, kProtos, &nch), ncclSuccess);
  EXPECT_EQ(cost.t[0][0], 3.0f);
  EXPECT_EQ(cost.t[1][0], 2.0f);
  EXPECT_EQ(nch, 3);
  EXPECT_EQ(t->destroy(ctx), ncclSuccess);
}

// The inner tuner's failing init is NCCL's to see, as it would without zipccl.
TEST(PassthroughFake, InnerTunerInitFailureIsPassedBack) {
  const auto* t = table<ncclTuner_v6_t>("ncclTunerPlugin_v6");
  ASSERT_TRUE(t);
  void* ctx = &ctx;
  EXPECT_EQ(t->init(&ctx, 1, 0, 1, test_logger, nullptr, nullptr), ncclInvalidArgument);
  EXPECT_EQ(ctx, static_cast<void*>(&ctx));
}

// The net first (NCCL's order): the tuner then follows the library the inner transport runs on.
TEST(PassthroughFake, TunerAfterTheNetInitFollowsTheInnerTransport) {
  const auto* net = table<ncclNet_v12_t>("ncclNetPlugin_v12");
  ASSERT_TRUE(net);
  void* net_ctx = nullptr;
  ncclNetCommConfig_v12_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  ASSERT_EQ(net->init(&net_ctx, 3, &cfg, test_logger, nullptr), ncclSuccess);
  const auto* t = table<ncclTuner_v6_t>("ncclTunerPlugin_v6");
  ASSERT_TRUE(t);
  void* ctx = nullptr;
  ASSERT_EQ(t->init(&ctx, 3, 8, 1, test_logger, nullptr, nullptr), ncclSuccess);
  CostTable cost;
  int nch = 0;
  ASSERT_EQ(t->getCollInfo(ctx, kAllReduce, 1 << 20, 1, cost.ptr(), kAlgos, kProtos, 0, &nch), ncclSuccess);
  EXPECT_EQ(cost.t[0][0], 6.0f);
  EXPECT_EQ(t->finalize(ctx), ncclSuccess);
  EXPECT_TRUE(log_contains(std::getenv("ZIPCCL_NET_INNER")));
  EXPECT_EQ(net->finalize(net_ctx), ncclSuccess);
}

TEST(PassthroughFake, CollNetV12IsTheInnersUncompressed) {
  auto* c = const_cast<ncclCollNet_v12_t*>(table<ncclCollNet_v12_t>("ncclCollNetPlugin_v12"));
  ASSERT_TRUE(c);
  const fake_passthrough_state_t* s = fake_state();
  ASSERT_TRUE(s);
  void* ctx = nullptr;
  ASSERT_EQ(c->init(&ctx, 42, test_logger), ncclSuccess);
  EXPECT_EQ(s->collnet_comm_id, 42u);
  EXPECT_EQ(ctx, s->collnet_ctx);  // the inner's own context, as it is
  int ndev = 0;
  ASSERT_EQ(c->devices(&ndev), ncclSuccess);
  EXPECT_EQ(ndev, FAKE_COLLNET_DEVICES);
  EXPECT_EQ(c->getProperties(0, nullptr), ncclSuccess);
  EXPECT_EQ(c->getProperties(FAKE_COLLNET_DEVICES, nullptr), ncclInvalidArgument);
  int supported = -1;
  ASSERT_EQ(c->reduceSupport(7, 0, &supported), ncclSuccess);
  EXPECT_EQ(supported, 1);
  ASSERT_EQ(c->reduceSupport(9, 0, &supported), ncclSuccess);
  EXPECT_EQ(supported, 0);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listen_comm = nullptr;
  ASSERT_EQ(c->listen(ctx, 0, handle, &listen_comm), ncclSuccess);
  EXPECT_EQ(s->collnet_listen_ctx, ctx);
  EXPECT_EQ(c->closeListen(listen_comm), ncclSuccess);
  // Optional entries follow the inner's after init: NULL where it has none.
  EXPECT_EQ(c->iallgather, nullptr);
  EXPECT_EQ(c->makeVDevice, nullptr);
  EXPECT_EQ(c->ireducescatter, nullptr);
  EXPECT_NE(c->regMrDmaBuf, nullptr);
  EXPECT_NE(c->closeColl, nullptr);
  const int fins = s->collnet_finalizes;
  EXPECT_EQ(c->finalize(ctx), ncclSuccess);
  EXPECT_EQ(s->collnet_finalizes, fins + 1);
  EXPECT_TRUE(log_contains("CollNet FakeSharp (v12) passed through to")) << "no INFO for CollNet";
  EXPECT_TRUE(log_contains("uncompressed"));
}

// NCCL of another net version asks for a CollNet the inner does not have: init fails, NCCL runs
// without CollNet.
TEST(PassthroughFake, CollNetOfAnotherVersionIsOff) {
  const auto* c = table<ncclCollNet_v9_t>("ncclCollNetPlugin_v9");
  ASSERT_TRUE(c);
  EXPECT_NE(c->init(test_logger), ncclSuccess);
  EXPECT_TRUE(log_contains("has no ncclCollNetPlugin_v9; NCCL runs without CollNet"));
}

TEST(PassthroughFake, ProfilerV6IsTheInners) {
  const auto* p = table<ncclProfiler_v6_t>("ncclProfiler_v6");
  ASSERT_TRUE(p);
  const fake_passthrough_state_t* s = fake_state();
  ASSERT_TRUE(s);
  void* ctx = nullptr;
  int mask = 0;
  ASSERT_EQ(p->init(&ctx, 9, &mask, "comm", 1, 2, 0, test_logger), ncclSuccess);
  EXPECT_EQ(mask, FAKE_PROFILER_MASK);
  void* ev = nullptr;
  const int events = s->profiler_events;
  ASSERT_EQ(p->startEvent(ctx, &ev, nullptr), ncclSuccess);
  EXPECT_EQ(s->profiler_events, events + 1);
  EXPECT_EQ(p->recordEventState(ev, 21, nullptr), ncclSuccess);
  EXPECT_EQ(p->stopEvent(ev), ncclSuccess);
  EXPECT_EQ(p->finalize(ctx), ncclSuccess);
}

TEST(PassthroughFake, ProfilerOfAnotherVersionFailsInit) {
  const auto* p = table<ncclProfiler_v5_t>("ncclProfiler_v5");
  ASSERT_TRUE(p);
  void* ctx = nullptr;
  int mask = 0;
  EXPECT_NE(p->init(&ctx, 9, &mask, "comm", 1, 2, 0, test_logger), ncclSuccess);
}

// ---- nothing to forward to ----

// NCCL fails the communicator when a tuner's init fails: zipccl's must succeed and change nothing.
template <typename Init, typename Call, typename Fin>
void expect_untouched(Init init, Call call, Fin fin) {
  void* ctx = nullptr;
  ASSERT_EQ(init(&ctx), ncclSuccess);
  CostTable cost, before;
  int nch = -7;
  ASSERT_EQ(call(ctx, cost.ptr(), &nch), ncclSuccess);
  EXPECT_TRUE(cost == before) << "the cost table changed";
  EXPECT_EQ(nch, -7);
  EXPECT_EQ(fin(ctx), ncclSuccess);
}

TEST(PassthroughNone, TunerV6SucceedsAndLeavesNcclAlone) {
  const auto* t = table<ncclTuner_v6_t>("ncclTunerPlugin_v6");
  ASSERT_TRUE(t);
  expect_untouched([&](void** c) { return t->init(c, 1, 8, 2, test_logger, nullptr, nullptr); },
                   [&](void* c, float** cost, int* nch) {
                     size_t chunk = 777;
                     ncclResult_t r = t->getChunkSize(c, kAllReduce, 4096, 1, 2, 4, &chunk);
                     EXPECT_EQ(chunk, 777u);
                     if (r != ncclSuccess) return r;
                     return t->getCollInfo(c, kAllReduce, 4096, 1, cost, kAlgos, kProtos, 1, nch);
                   },
                   t->finalize);
  EXPECT_TRUE(log_contains("NCCL tunes on its own")) << "no INFO saying there is no tuner";
  const char* why = std::getenv("ZIPCCL_TEST_PASSTHROUGH_WHY");
  if (why) {
    EXPECT_TRUE(log_contains(why)) << "the INFO does not say: " << why;
  }
}

TEST(PassthroughNone, TunerV4V3V2SucceedAndLeaveNcclAlone) {
  const auto* t4 = table<ncclTuner_v4_t>("ncclTunerPlugin_v4");
  const auto* t3 = table<ncclTuner_v3_t>("ncclTunerPlugin_v3");
  const auto* t2 = table<ncclTuner_v2_t>("ncclTunerPlugin_v2");
  ASSERT_TRUE(t4 && t3 && t2);
  expect_untouched([&](void** c) { return t4->init(8, 2, test_logger, c); },
                   [&](void* c, float** cost, int* nch) {
                     return t4->getCollInfo(c, kAllReduce, 4096, 1, cost, kAlgos, kProtos, 1, nch);
                   },
                   t4->destroy);
  expect_untouched([&](void** c) { return t3->init(8, 2, test_logger, c); },
                   [&](void* c, float** cost, int* nch) {
                     return t3->getCollInfo(c, kAllReduce, 4096, 1, cost, kAlgos, kProtos, nch);
                   },
                   t3->destroy);
  void* ctx = nullptr;
  ASSERT_EQ(t2->init(8, 2, test_logger, &ctx), ncclSuccess);
  int algo = -1, proto = -1, nch = -7;
  ASSERT_EQ(t2->getCollInfo(ctx, kAllReduce, 4096, 0, 0, 1, &algo, &proto, &nch), ncclSuccess);
  EXPECT_EQ(algo, -1);
  EXPECT_EQ(proto, -1);
  EXPECT_EQ(nch, -7);
  EXPECT_EQ(t2->destroy(ctx), ncclSuccess);
}

TEST(PassthroughNone, CollNetInitFails) {
  const auto* c12 = table<ncclCollNet_v12_t>("ncclCollNetPlugin_v12");
  const auto* c9 = table<ncclCollNet_v9_t>("ncclCollNetPlugin_v9");
  ASSERT_TRUE(c12 && c9);
  void* ctx = nullptr;
  EXPECT_NE(c12->init(&ctx, 1, test_logger), ncclSuccess);
  EXPECT_NE(c9->init(test_logger), ncclSuccess);
  EXPECT_TRUE(log_contains("NCCL runs without CollNet"));
}

TEST(PassthroughNone, ProfilerInitFails) {
  const auto* p6 = table<ncclProfiler_v6_t>("ncclProfiler_v6");
  const auto* p1 = table<ncclProfiler_v1_t>("ncclProfiler_v1");
  ASSERT_TRUE(p6 && p1);
  void* ctx = nullptr;
  int mask = 0;
  EXPECT_NE(p6->init(&ctx, 9, &mask, "comm", 1, 2, 0, test_logger), ncclSuccess);
  EXPECT_NE(p1->init(&ctx, &mask), ncclSuccess);
}

// ---- every run ----

// NCCL reads `name` when it loads a table, before any init.
TEST(PassthroughAll, NamesReadableBeforeInit) {
  for (const char* sym :
       {"ncclTunerPlugin_v2", "ncclTunerPlugin_v3", "ncclTunerPlugin_v4", "ncclTunerPlugin_v5",
        "ncclTunerPlugin_v6", "ncclProfiler_v1", "ncclProfiler_v2", "ncclProfiler_v3", "ncclProfiler_v4",
        "ncclProfiler_v5", "ncclProfiler_v6", "ncclCollNetPlugin_v6", "ncclCollNetPlugin_v7",
        "ncclCollNetPlugin_v8", "ncclCollNetPlugin_v9", "ncclCollNetPlugin_v10", "ncclCollNetPlugin_v11",
        "ncclCollNetPlugin_v12"}) {
    const char* const* name = table<const char*>(sym);
    ASSERT_TRUE(name) << sym;
    EXPECT_STREQ(*name, "zipccl (pass-through)") << sym;
  }
}

// The rule itself, for inner libraries shaped like real ones (the plugin and `zipccl doctor` share it).
TEST(PassthroughAll, TunerRule) {
  using zipccl::net::tuner_forward_version;
  auto inner = [](std::vector<int> vs) {
    return [vs](int v) { return std::find(vs.begin(), vs.end(), v) != vs.end(); };
  };
  const auto ofi = inner({2, 3, 6});  // aws-ofi-nccl
  EXPECT_EQ(tuner_forward_version(6, ofi), 6);
  EXPECT_EQ(tuner_forward_version(5, ofi), 6);
  EXPECT_EQ(tuner_forward_version(4, ofi), 3);
  EXPECT_EQ(tuner_forward_version(3, ofi), 3);
  EXPECT_EQ(tuner_forward_version(2, ofi), 2);
  const auto v5 = inner({5});
  EXPECT_EQ(tuner_forward_version(6, v5), 5);
  EXPECT_EQ(tuner_forward_version(4, v5), 0);  // a v4 call lacks what v5's init takes
  const auto v4 = inner({4});
  EXPECT_EQ(tuner_forward_version(6, v4), 4);
  EXPECT_EQ(tuner_forward_version(3, v4), 0);  // regBuff would be invented
  const auto v2 = inner({2});
  for (int r = 3; r <= 6; ++r) EXPECT_EQ(tuner_forward_version(r, v2), 0) << r;
  EXPECT_EQ(tuner_forward_version(1, ofi), 0);
  EXPECT_EQ(tuner_forward_version(7, ofi), 0);
}

// `zipccl doctor`'s line (tools/zipccl/doctor_passthrough.cpp) for this run's inner library: each
// '|'-separated part of ZIPCCL_TEST_DOCTOR_SAYS must be in it, in order (CMake splits arguments at ';').
TEST(PassthroughAll, DoctorLine) {
  const char* inner = std::getenv("ZIPCCL_NET_INNER");
  const char* says = std::getenv("ZIPCCL_TEST_DOCTOR_SAYS");
  if (!says) GTEST_SKIP() << "this run sets no ZIPCCL_TEST_DOCTOR_SAYS";
  std::vector<std::string> notes;
  testing::internal::CaptureStdout();
  zipccl::tools::print_passthrough(inner ? inner : "", &notes);
  const std::string out = testing::internal::GetCapturedStdout();
  EXPECT_EQ(out.rfind("passthrough ", 0), 0u) << out;
  size_t at = 0;
  const std::string want = says;
  for (size_t begin = 0; begin <= want.size();) {
    size_t end = want.find('|', begin);
    if (end == std::string::npos) end = want.size();
    const std::string part = want.substr(begin, end - begin);
    at = out.find(part, at);
    ASSERT_NE(at, std::string::npos) << "no '" << part << "' in: " << out;
    begin = end + 1;
  }
}

}  // namespace
