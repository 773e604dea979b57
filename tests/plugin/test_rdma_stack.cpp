// The compressing layer (SendComm/RecvComm) over the RDMA protocol and the loopback fabric: what the
// plugin does on an RDMA device, minus the verbs calls. Registered with ZIPCCL_COMPRESS=always and
// ZIPCCL_MIN_BYTES=0 (set before the settings are first read), so every message the codec shrinks
// travels as a codec frame.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "layer/comm.h"
#include "layer/frame.h"
#include "rdma/rdma_proto.h"
#include "testing/rdma_loopback.h"

using namespace zipccl::net;

namespace {

const bool kEnvSet = [] {
  setenv("ZIPCCL_COMPRESS", "always", 1);
  setenv("ZIPCCL_MIN_BYTES", "0", 1);
  // Segments requested: the RDMA connections must still send whole messages (frame.h version 1), which
  // the 1 and 3 MiB messages below check on the wire.
  setenv("ZIPCCL_SEGMENT_BYTES", "64KiB", 1);
  return true;
}();

// Calls post_staged() for codec frames, as send_comm.cpp does once it passes the hint.
class HintingSendConn final : public SendConn {
 public:
  explicit HintingSendConn(SendConn* c) : c_(c) {}
  ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) override {
    FrameMeta m;
    std::memcpy(&m, meta, sizeof m);
    if (m.version != kFrameVersion) ++segments;
    if (m.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
      ++staged;
      return c_->post_staged(meta, payload, len, op);
    }
    return c_->post(meta, payload, len, op);
  }
  ncclResult_t test(int op, bool* done) override { return c_->test(op, done); }
  void link_progress(uint64_t* d, uint64_t* b) override { c_->link_progress(d, b); }
  bool carries_segments() const override { return c_->carries_segments(); }
  int staged = 0;
  int segments = 0;  // segment headers seen (must stay 0 on RDMA)

 private:
  std::unique_ptr<SendConn> c_;
};

std::vector<char> bf16_gaussian(size_t n, uint32_t seed) {
  std::vector<char> v(n);
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.f, 0.02f);
  for (size_t i = 0; i + 1 < n; i += 2) {
    float f = g(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint16_t h = static_cast<uint16_t>(u >> 16);
    std::memcpy(v.data() + i, &h, 2);
  }
  return v;
}

// Two connected ends over a loopback fabric pair (the comms built on them take ownership); *sf: the
// sender's fabric.
void connect_ends(const RdmaParams& p, uint32_t seed, RdmaSendConn** s, RdmaRecvConn** r,
                  LoopbackFabric** sf = nullptr) {
  auto ends = make_loopback_pair(2, seed);
  if (sf) *sf = ends.first.get();
  *s = new RdmaSendConn(std::move(ends.first), p);
  *r = new RdmaRecvConn(std::move(ends.second), p);
  ASSERT_EQ((*s)->init(), ncclSuccess);
  ASSERT_EQ((*r)->init(), ncclSuccess);
  (*s)->set_peer_ring((*r)->ring());
  (*r)->set_peer_ring((*s)->ring());
}

void run_stack(bool hint, uint32_t seed) {
  RdmaParams p;
  p.depth = 8;
  p.slots = 8;
  p.min_chunk = 64 << 10;
  RdmaSendConn* s = nullptr;
  RdmaRecvConn* r = nullptr;
  ASSERT_NO_FATAL_FAILURE(connect_ends(p, seed, &s, &r));
  EXPECT_FALSE(s->carries_segments());  // one post_target per transport message (docs/notes/rdma.md)
  HintingSendConn* hinting = hint ? new HintingSendConn(s) : nullptr;
  DeviceInfo dev;
  dev.name = "loopback";
  SendComm send(hint ? static_cast<SendConn*>(hinting) : s, dev);
  RecvComm recv(r, dev);

  const size_t sizes[] = {0, 1, 1000, 65536, 100000, 1 << 20, 3 << 20};
  const int kMessages = 28, kWindow = 6;
  std::vector<std::vector<char>> src(kMessages), dst(kMessages);
  for (int i = 0; i < kMessages; ++i) {
    size_t n = sizes[i % 7];
    src[i] = (i / 7) % 2 ? std::vector<char>(n, static_cast<char>(i)) : bf16_gaussian(n, i);
    dst[i].assign(n + 100, 'z');  // receive posted larger than the message
  }
  std::vector<void*> sreq(kMessages, nullptr), rreq(kMessages, nullptr);
  int posted_s = 0, posted_r = 0, done_s = 0, done_r = 0;
  for (int guard = 0; (done_s < kMessages || done_r < kMessages) && guard < 5000000; ++guard) {
    if (posted_r < kMessages && posted_r < done_r + kWindow) {
      ASSERT_EQ(recv.irecv(dst[posted_r].data(), dst[posted_r].size(), 0, /*device=*/false, /*marked=*/false,
                         &rreq[posted_r]), ncclSuccess);
      if (rreq[posted_r]) ++posted_r;
    }
    if (posted_s < kMessages && posted_s < done_s + kWindow) {
      ASSERT_EQ(send.isend(src[posted_s].data(), src[posted_s].size(), 0, /*device=*/false, &sreq[posted_s]), ncclSuccess);
      if (sreq[posted_s]) ++posted_s;
    }
    if (done_s < posted_s) {
      int done = 0;
      size_t size = 0;
      ASSERT_EQ(send.test(sreq[done_s], &done, &size), ncclSuccess);
      if (done) {
        EXPECT_EQ(size, src[done_s].size());
        ++done_s;
      }
    }
    if (done_r < posted_r) {
      int done = 0;
      size_t size = 0;
      ASSERT_EQ(recv.test(rreq[done_r], &done, &size), ncclSuccess) << "message " << done_r;
      if (done) {
        size_t n = src[done_r].size();
        ASSERT_EQ(size, n);
        EXPECT_TRUE(std::equal(src[done_r].begin(), src[done_r].end(), dst[done_r].begin()))
            << "message " << done_r;
        for (size_t k = n; k < dst[done_r].size(); ++k) ASSERT_EQ(dst[done_r][k], 'z') << "past the message";
        ++done_r;
      }
    }
  }
  EXPECT_EQ(done_s, kMessages);
  EXPECT_EQ(done_r, kMessages);
  ASSERT_TRUE(kEnvSet);
  if (hint) {
    EXPECT_GT(hinting->staged, 0);  // compressed frames did go through the staging slots
    EXPECT_EQ(hinting->segments, 0);  // 1 and 3 MiB messages went whole despite 64 KiB segments
  }
  EXPECT_EQ(r->free_slots(), p.slots);  // every slot taken for a decode was released
}

// The codec's send staging is registered once per request as it grows (BufferRegistry::pins_staging),
// not for each message posted from it: on a NIC a registration pins pages and costs tens of microseconds
// per MiB. 24 compressed messages from a buffer NCCL registered, at most 4 in flight: the sender's
// registrations are that buffer's and one per request used, the receiver decodes every frame bit-exact.
TEST(RdmaStack, SendStagingIsRegisteredOncePerRequest) {
  RdmaSendConn* s = nullptr;
  RdmaRecvConn* r = nullptr;
  LoopbackFabric* sf = nullptr;
  ASSERT_NO_FATAL_FAILURE(connect_ends(RdmaParams(), 5, &s, &r, &sf));
  DeviceInfo dev;
  dev.name = "loopback";
  SendComm send(s, dev);
  RecvComm recv(r, dev);
  ASSERT_EQ(send.registry(), static_cast<BufferRegistry*>(s));
  const size_t n = 1 << 20;
  const int kMessages = 24, kWindow = 4;
  std::vector<char> src = bf16_gaussian(n, 7);
  std::vector<std::vector<char>> dst(kWindow, std::vector<char>(n));
  MemDesc m;
  m.data = src.data();
  m.size = n;
  ASSERT_EQ(s->pin(m), ncclSuccess);
  for (auto& d : dst) {
    m.data = d.data();
    ASSERT_EQ(r->pin(m), ncclSuccess);
  }
  const uint64_t regs0 = s->mrs().registrations();
  std::vector<void*> sreq(kMessages, nullptr), rreq(kMessages, nullptr);
  int posted_s = 0, posted_r = 0, done_s = 0, done_r = 0;
  for (int guard = 0; (done_s < kMessages || done_r < kMessages) && guard < 5000000; ++guard) {
    if (posted_r < kMessages && posted_r < done_r + kWindow) {
      ASSERT_EQ(recv.irecv(dst[posted_r % kWindow].data(), n, 0, &rreq[posted_r]), ncclSuccess);
      if (rreq[posted_r]) ++posted_r;
    }
    if (posted_s < kMessages && posted_s < done_s + kWindow) {
      ASSERT_EQ(send.isend(src.data(), n, 0, &sreq[posted_s]), ncclSuccess);
      if (sreq[posted_s]) ++posted_s;
    }
    int done = 0;
    size_t size = 0;
    if (done_s < posted_s) {
      ASSERT_EQ(send.test(sreq[done_s], &done, &size), ncclSuccess);
      done_s += done;
    }
    if (done_r < posted_r) {
      ASSERT_EQ(recv.test(rreq[done_r], &done, &size), ncclSuccess);
      if (done) {
        ASSERT_TRUE(dst[done_r % kWindow] == src) << "message " << done_r;
        ++done_r;
      }
    }
  }
  ASSERT_EQ(done_s, kMessages);
  ASSERT_EQ(done_r, kMessages);
  ASSERT_TRUE(kEnvSet);
  EXPECT_LT(sf->bytes_written(), static_cast<uint64_t>(kMessages) * n * 3 / 4) << "not every message compressed";
  EXPECT_LE(s->mrs().registrations() - regs0, static_cast<uint64_t>(kWindow))
      << "registrations for " << kMessages << " messages";
}

TEST(RdmaStack, CompressedAndRawOverLoopback) {
  run_stack(false, 0);
}
TEST(RdmaStack, StagedFramesDecodedInPlace) {
  run_stack(true, 0);
}
TEST(RdmaStack, StagedFramesWithInterleavedCompletions) {
  run_stack(true, 99);
}

}  // namespace
