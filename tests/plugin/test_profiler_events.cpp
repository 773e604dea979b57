// zipccl's events for NCCL's profiler (plugin/nccl/net_profiler.h): a stand-in for NCCL's callback
// records what the built plugin passes it; every message sent and received with a profiler handle
// makes one event, started with its size and updated-and-stopped with raw and wire bytes and codec
// time. CTest runs it with ZIPCCL_COMPRESS=always, ZIPCCL_MIN_BYTES=0.
#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <vector>

#include "nccl/net_profiler.h"
#include "plugin_data.h"
#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

struct Event {
  void* phandle = nullptr;
  int64_t plugin_id = 0;
  zipcclProfilerNetDescr_v1_t start{}, update{};
  bool stopped = false, updated = false;
};

struct Recorder {
  std::mutex mu;
  std::vector<Event> events;  // reserved up front: handles point into it
  int bad_calls = 0;          // calls NCCL's own callback would mishandle
} g_rec;

// What NCCL's ncclProfilerCallback does, reduced to bookkeeping: Start creates an event for pHandle's
// proxy step and sets *eHandle; the others find it through *eHandle.
ncclResult_t stand_in(void** eHandle, int type, void* pHandle, int64_t pluginId, void* extData) {
  std::lock_guard<std::mutex> lock(g_rec.mu);
  if (!eHandle) return ++g_rec.bad_calls, ncclInternalError;
  if (type == ncclProfilerNetEventStart) {
    if (!pHandle || !extData || g_rec.events.size() == g_rec.events.capacity()) return ++g_rec.bad_calls, ncclInternalError;
    Event e;
    e.phandle = pHandle;
    e.plugin_id = pluginId;
    e.start = *static_cast<zipcclProfilerNetDescr_v1_t*>(extData);
    g_rec.events.push_back(e);
    *eHandle = &g_rec.events.back();
    return ncclSuccess;
  }
  Event* e = static_cast<Event*>(*eHandle);
  if (!e || e->stopped) return ++g_rec.bad_calls, ncclInternalError;
  if (type == ncclProfilerNetEventUpdate || type == ncclProfilerNetEventUpdateAndStop) {
    if (!extData) return ++g_rec.bad_calls, ncclInternalError;
    e->update = *static_cast<zipcclProfilerNetDescr_v1_t*>(extData);
    e->updated = true;
  }
  if (type == ncclProfilerNetEventStop || type == ncclProfilerNetEventUpdateAndStop) e->stopped = true;
  return ncclSuccess;
}

// Sends `sizes` one by one through a pair of comms of `api`, each with profiler handles (send: &send_tag,
// recv: &recv_tag) when `with_handles`.
void run(NetApi* api, const std::vector<size_t>& sizes, bool with_handles, int* send_tag, int* recv_tag) {
  void *sc, *rc, *lc;
  ASSERT_TRUE(make_pair(api, &sc, &rc, &lc));
  for (size_t size : sizes) {
    std::vector<uint8_t> src = make_data(DataKind::kBf16Gauss, size, size), dst(size + 64);
    void *sreq = nullptr, *rreq = nullptr;
    void* rdata = dst.data();
    size_t rsize = dst.size();
    int tag = 0;
    void* mh = nullptr;
    void* ph = with_handles ? recv_tag : nullptr;
    while (!rreq) ASSERT_EQ(api->net().irecv(rc, 1, &rdata, &rsize, &tag, &mh, &ph, &rreq), ncclSuccess);
    while (!sreq) {
      ASSERT_EQ(api->net().isend(sc, src.data(), size, 0, nullptr, with_handles ? send_tag : nullptr, &sreq),
                ncclSuccess);
    }
    int sd = 0, rd = 0, n = 0;
    const auto t0 = Clock::now();
    while (!sd || !rd) {
      if (!sd) {
        ASSERT_EQ(api->test(sreq, &sd, &n), ncclSuccess);
      }
      if (!rd) {
        ASSERT_EQ(api->test(rreq, &rd, &n), ncclSuccess);
      }
      ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20);
    }
    ASSERT_EQ(0, std::memcmp(dst.data(), src.data(), size));
  }
  ASSERT_EQ(api->close_send(sc), ncclSuccess);
  ASSERT_EQ(api->close_recv(rc), ncclSuccess);
  ASSERT_EQ(api->close_listen(lc), ncclSuccess);
}

}  // namespace

TEST(ProfilerEvents, OneEventPerMessageWithRawWireAndCodecTime) {
  g_rec.events.reserve(1024);
  int send_tag = 0, recv_tag = 0;
  const std::vector<size_t> sizes = {1 << 20, 3 << 20, 256 << 10, 64 << 10, 5 << 20};
  for (int version : {10, 11, 12}) {
    SCOPED_TRACE("ncclNet_v" + std::to_string(version));
    auto api = load_api(version);
    ASSERT_TRUE(api);
    ASSERT_EQ(api->init(&stand_in), ncclSuccess);
    const size_t before = g_rec.events.size();
    run(api.get(), sizes, true, &send_tag, &recv_tag);
    // Messages without a handle (NCCL's profiler off for them) make none.
    run(api.get(), {1 << 20, 1 << 20}, false, &send_tag, &recv_tag);
    // v11+: the plugin's finalize (the stats' last flush); v10 has none, and the client frees the
    // context it made at init.
    ASSERT_EQ(api->finalize(), ncclSuccess);
    std::lock_guard<std::mutex> lock(g_rec.mu);
    EXPECT_EQ(g_rec.bad_calls, 0);
    ASSERT_EQ(g_rec.events.size() - before, 2 * sizes.size()) << "one event per message sent and per receive";
    size_t sends = 0, recvs = 0;
    std::map<int, uint64_t> wire;
    for (size_t i = before; i < g_rec.events.size(); ++i) {
      const Event& e = g_rec.events[i];
      EXPECT_EQ(e.plugin_id, int64_t(ZIPCCL_PROFILER_NET_TYPE | ZIPCCL_PROFILER_NET_VER));
      EXPECT_TRUE(e.updated && e.stopped) << "event " << i;
      const bool send = e.start.type == zipcclProfileSend;
      EXPECT_EQ(e.phandle, send ? static_cast<void*>(&send_tag) : static_cast<void*>(&recv_tag));
      EXPECT_EQ(e.update.type, e.start.type);
      const size_t k = send ? sends++ : recvs++;
      ASSERT_LT(k, sizes.size());
      EXPECT_EQ(e.start.msg.raw_bytes, send ? sizes[k] : sizes[k] + 64);  // a receive starts with the posted size
      EXPECT_EQ(e.update.msg.raw_bytes, sizes[k]);
      EXPECT_EQ(e.start.msg.wire_bytes, 0u);
      // Compression always: every message a codec frame, smaller than raw, with codec time.
      EXPECT_EQ(e.update.msg.compressed, 1) << k;
      EXPECT_LT(e.update.msg.wire_bytes, sizes[k]) << k;
      EXPECT_GT(e.update.msg.codec_ns, 0u) << k;
      EXPECT_GE(e.update.msg.segments, 1);
      EXPECT_EQ(e.update.msg.device, 0);
      wire[send] += e.update.msg.wire_bytes;
    }
    EXPECT_EQ(sends, sizes.size());
    EXPECT_EQ(recvs, sizes.size());
    EXPECT_EQ(wire[1], wire[0]) << "what the sender put on the wire is what the receiver took off it";
  }
}
