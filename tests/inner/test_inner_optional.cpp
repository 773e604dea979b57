// zipccl over a stand-in inner plugin (fake_inner.c) that has, or lacks, the optional entries
// getDeviceMr, irecvConsumed, makeVDevice and setNetAttr, and grouped receives (maxRecvs 8):
// setNetAttr reaches the inner's context when it has one (its result unchanged), the device-side
// entries are never offered (with one INFO saying why when the inner has them), makeVDevice is
// forwarded exactly when the inner has it (the fused device joins zipccl's devices), zipccl advertises
// the inner's maxRecvs, and grouped receives (n > 1, tags, sends in another order than the receives) put
// every message in the receive with its tag. docs/notes/inner.md. The case comes as --setenv
// arguments (tests/inner/inner_tests.cmake):
//   ZIPCCL_NET_INNER          the stand-in's file
//   ZIPCCL_TEST_FAKE_EXTRAS   1: the stand-in has the entries, 0: it lacks them
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "plugin_data.h"
#include "plugin_driver.h"

using namespace zipccl_test;
using zipccl::net_client::Entry;

namespace {

// fake_inner_state_t in fake_inner.c.
struct FakeState {
  int inits, finalizes;
  int set_net_attr_calls;
  void* set_net_attr_ctx;
  ncclNetAttr_v12_t last_attr;
  int other_calls;
  int make_vdevice_calls;
  int max_group_seen;
  int out_of_order_sends;
  unsigned long long bytes_sent;
  int live_regs;
  int errors;
  int regs_host, regs_cuda;
  int posted_host, posted_cuda;
  int iflush_calls;
  int recv_cuda;
  int unflushed;
};

// The stand-in's record, from the copy zipccl loaded (dlopen of the same file returns it).
FakeState* fake_state() {
  const char* path = std::getenv("ZIPCCL_NET_INNER");
  if (!path) return nullptr;
  void* lib = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  return lib ? static_cast<FakeState*>(dlsym(lib, "fake_inner_state")) : nullptr;
}

// The stand-in's fake_inner_declare_device: which memory is "device" memory (the GPU emulation's is host
// memory); nullptr forgets it all.
bool declare_device(const void* p, size_t n) {
  const char* path = std::getenv("ZIPCCL_NET_INNER");
  void* lib = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  auto* f = lib ? reinterpret_cast<int (*)(const void*, size_t)>(dlsym(lib, "fake_inner_declare_device")) : nullptr;
  return f && f(p, n);
}

// ZIPCCL_TEST_FAKE_CUDA=1: the stand-in's devices take NCCL_PTR_CUDA too; =dev1: all but device 0,
// the one these tests use (an inner whose devices differ).
bool inner_cuda() {
  const char* e = std::getenv("ZIPCCL_TEST_FAKE_CUDA");
  return e && std::string(e) == "1";
}

// Two counts from zipccl's last log line containing `key` (a close line), read by `format` after it.
bool last_counts(const std::string& key, const char* format, unsigned long long* a, unsigned long long* b) {
  LogSink& s = log_sink();
  std::lock_guard<std::mutex> lock(s.mu);
  for (auto it = s.lines.rbegin(); it != s.lines.rend(); ++it) {
    const size_t at = it->find(key);
    if (at != std::string::npos) return std::sscanf(it->c_str() + at + key.size(), format, a, b) == 2;
  }
  return false;
}
// What the inner transport's last closed connection of one kind (`what`: "send", "receive") said: how many
// payloads it posted in place (registered memory) and how many it copied through its bounce buffers.
bool close_counts(const char* what, unsigned long long* in_place, unsigned long long* bounced) {
  return last_counts(std::string("inner transport: ") + what + " connection closes: ",
                     "%llu payload(s) %*s in place, %llu", in_place, bounced);
}
// The send comm's close line of the GPU path: device messages, and how many went as device-encoded frames.
bool send_gpu_counts(unsigned long long* messages, unsigned long long* frames) {
  return last_counts("GPU path (send): ", "%llu device messages, %llu", messages, frames);
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

  // Devices and properties: the inner's, maxRecvs included, and host networking only.
  int n = 0;
  ASSERT_EQ(v12->devices(&n), ncclSuccess);
  ASSERT_EQ(n, 2);
  for (int d = 0; d < n; ++d) {
    Props p;
    ASSERT_EQ(v12->props(d, &p), ncclSuccess);
    EXPECT_EQ(p.name, "fake-inner:fake" + std::to_string(d));
    EXPECT_EQ(p.max_recvs, extras() ? 8 : 1);
    EXPECT_EQ(p.all.netDeviceType, NCCL_NET_DEVICE_HOST);
    EXPECT_EQ(p.all.vProps.ndevs, 1);
  }

  // Entries NCCL never gets from zipccl, whatever the inner has; makeVDevice exactly when the inner
  // has it (InnerVDevice below).
  for (auto* api : {v12.get(), v11.get()}) {
    EXPECT_FALSE(api->net().has(Entry::kGetDeviceMr)) << "v" << api->version();
    EXPECT_FALSE(api->net().has(Entry::kIrecvConsumed)) << "v" << api->version();
    EXPECT_EQ(api->net().has(Entry::kMakeVDevice), extras()) << "v" << api->version();
    EXPECT_TRUE(api->net().has(Entry::kSetNetAttr)) << "v" << api->version();
  }
  EXPECT_EQ(log_contains("offers device-side networking"), extras());
  EXPECT_EQ(log_contains("can fuse devices (makeVDevice): forwarded"), extras());

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

// ---- makeVDevice: forwarded when the inner has it, the fused device one of zipccl's ----
namespace {

// One message over device `dev` of `api`, bit-exact (listen, connect and accept as NCCL loops them).
void one_message(NetApi* api, int dev, size_t size) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void *lc = nullptr, *sc = nullptr, *rc = nullptr;
  ASSERT_EQ(api->listen(dev, handle, &lc), ncclSuccess);
  auto t0 = Clock::now();
  while (!sc || !rc) {
    if (!sc) {
      ASSERT_EQ(api->connect(dev, handle, &sc), ncclSuccess);
    }
    if (!rc) {
      ASSERT_EQ(api->accept(lc, &rc), ncclSuccess);
    }
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  }
  std::vector<uint8_t> src = make_data(DataKind::kBf16Gauss, size, 7), dst(size);
  void *rreq = nullptr, *sreq = nullptr;
  ASSERT_EQ(api->irecv(rc, dst.data(), dst.size(), 3, nullptr, &rreq), ncclSuccess);
  ASSERT_EQ(api->isend(sc, src.data(), src.size(), 3, nullptr, &sreq), ncclSuccess);
  ASSERT_TRUE(rreq && sreq);
  int rdone = 0, sdone = 0, got = -1, sent = -1;
  while (!rdone || !sdone) {
    if (!sdone) {
      ASSERT_EQ(api->test(sreq, &sdone, &sent), ncclSuccess);
    }
    if (!rdone) {
      ASSERT_EQ(api->test(rreq, &rdone, &got), ncclSuccess);
    }
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0);
  }
  EXPECT_EQ(got, static_cast<int>(size));
  EXPECT_TRUE(src == dst);
  EXPECT_EQ(api->close_send(sc), ncclSuccess);
  EXPECT_EQ(api->close_recv(rc), ncclSuccess);
  EXPECT_EQ(api->close_listen(lc), ncclSuccess);
}

TEST(InnerVDevice, FusedDeviceIsOneOfZipcclsDevices) {
  ASSERT_TRUE(std::getenv("ZIPCCL_TEST_FAKE_EXTRAS")) << "run through CTest (tests/inner/inner_tests.cmake)";
  auto v12 = load_api(12);
  auto v9 = load_api(9);
  ASSERT_TRUE(v12 && v9);
  // Before init no inner plugin is open: the entry is NULL. Init sets it from the inner's table (NCCL
  // reads it only after init).
  EXPECT_FALSE(v12->net().has(Entry::kMakeVDevice));
  ASSERT_EQ(v12->init(), ncclSuccess);
  ASSERT_EQ(v9->init(), ncclSuccess);
  FakeState* st = fake_state();
  ASSERT_NE(st, nullptr);
  EXPECT_EQ(v12->net().has(Entry::kMakeVDevice), extras());
  EXPECT_EQ(v9->net().has(Entry::kMakeVDevice), extras());
  int n = 0;
  ASSERT_EQ(v12->devices(&n), ncclSuccess);
  ASSERT_EQ(n, 2);
  if (extras()) {
    zipccl::net_client::VDeviceProps vp{};
    vp.ndevs = 2;
    vp.devs[0] = 0;
    vp.devs[1] = 1;
    int d = -1;
    ASSERT_EQ(v12->net().make_vdevice(&d, &vp), ncclSuccess);
    EXPECT_EQ(d, 2);
    ASSERT_EQ(v12->devices(&n), ncclSuccess);
    EXPECT_EQ(n, 3);
    Props p;
    ASSERT_EQ(v12->props(2, &p), ncclSuccess);  // the inner's properties of its new device
    EXPECT_EQ(p.name, "fake-inner:fakeV0");
    EXPECT_EQ(p.speed, 200000);
    EXPECT_EQ(p.max_recvs, 8);
    ASSERT_EQ(p.all.vProps.ndevs, 2);
    EXPECT_EQ(p.all.vProps.devs[0], 0);
    EXPECT_EQ(p.all.vProps.devs[1], 1);
    ASSERT_EQ(v12->props(1, &p), ncclSuccess);  // a physical device is itself
    EXPECT_EQ(p.all.vProps.ndevs, 1);
    EXPECT_EQ(p.all.vProps.devs[0], 1);
    // Through the v9 table (up to 4 devices per fusion), seen by both.
    vp.devs[0] = 1;
    vp.devs[1] = 0;
    ASSERT_EQ(v9->net().make_vdevice(&d, &vp), ncclSuccess);
    EXPECT_EQ(d, 3);
    ASSERT_EQ(v9->props(3, &p), ncclSuccess);
    EXPECT_EQ(p.name, "fake-inner:fakeV1");
    ASSERT_EQ(p.all.vProps.ndevs, 2);
    EXPECT_EQ(p.all.vProps.devs[0], 1);
    ASSERT_EQ(v12->devices(&n), ncclSuccess);
    EXPECT_EQ(n, 4);
    // The inner's refusal comes back unchanged and adds nothing.
    vp.devs[1] = 1;
    EXPECT_EQ(v12->net().make_vdevice(&d, &vp), ncclInvalidArgument);
    ASSERT_EQ(v12->devices(&n), ncclSuccess);
    EXPECT_EQ(n, 4);
    EXPECT_EQ(st->make_vdevice_calls, 3);
    EXPECT_TRUE(log_contains("makeVDevice of 2 device(s) failed"));
    // Data over a fused device.
    one_message(v12.get(), 2, 1 << 20);
    Props out;
    EXPECT_EQ(v12->props(4, &out), ncclInvalidArgument);
  } else {
    EXPECT_EQ(st->make_vdevice_calls, 0);
    one_message(v12.get(), 1, 1 << 20);
  }
  EXPECT_EQ(st->errors, 0);
  EXPECT_EQ(v9->finalize(), ncclSuccess);
  EXPECT_EQ(v12->finalize(), ncclSuccess);
  EXPECT_EQ(st->finalizes, 1);
}

}  // namespace

// ---- Grouped receives (NCCL's irecv with n > 1) over an inner plugin that has them ----
namespace {

struct Msg {
  int round, slot;  // the grouped receive and its place in it
  int tag;
  std::vector<uint8_t> src;
  size_t capacity;
  bool shrinks;  // with ZIPCCL_COMPRESS=always it travels as a codec frame (Gaussian bf16, 24 KiB or more)
};

constexpr size_t kCanary = 64;  // bytes after each posted buffer that nothing may touch
constexpr uint8_t kCanaryByte = 0xa5;

// Rounds of grouped receives: tags in an order unlike the send order, duplicates in one group,
// sizes from 0 bytes to a few hundred KiB, exactly the posted size or less, compressible and random
// data. The last kAhead rounds are {10, 12} each, sent as when one of NCCL's channels runs ahead: all
// of tag 10's messages first, which the inner cannot take before tag 12's come (more than 16, the
// inner transport's send slots once; ZIPCCL_MAX_REQUESTS=128 in these runs, inner_tests.cmake).
constexpr size_t kAhead = 20;
std::vector<std::vector<Msg>> make_rounds() {
  std::vector<std::vector<int>> tags = {
      {5, 1, 7, 3, 0, 2, 6, 4}, {9, 4, 4, 11}, {2}, {6, 0, 3}, {8, 1, 5, 2, 7, 0, 3}, {3, 3, 3}};
  for (size_t i = 0; i < kAhead; ++i) tags.push_back({10, 12});
  std::vector<std::vector<Msg>> rounds;
  for (size_t r = 0; r < tags.size(); ++r) {
    std::vector<Msg> round;
    for (size_t k = 0; k < tags[r].size(); ++k) {
      Msg m;
      m.round = static_cast<int>(r);
      m.slot = static_cast<int>(k);
      m.tag = tags[r][k];
      size_t size = ((r * 7 + k * 13) % 9) * 24576 + (k % 3) * 2;  // 0 for the first of round 0
      auto kind = (k + r) % 3 == 2 ? DataKind::kRandom : DataKind::kBf16Gauss;
      m.src = make_data(kind, size, r * 100 + k);
      m.capacity = size + ((k % 2) ? 0 : 4096 * (k + 1));  // odd slots: exactly the posted size
      m.shrinks = kind == DataKind::kBf16Gauss && size >= 24576;
      round.push_back(std::move(m));
    }
    rounds.push_back(std::move(round));
  }
  return rounds;
}

// The order the sender issues the messages in: each round's in reverse except that messages sharing a
// tag keep their order (NCCL's IB transport gives a tag's sends the group's receives with that tag in
// order), and the first message of the next round goes ahead of the last one of this round when its
// tag was already sent in this round (the inner must hold it back; zipccl must not wait on it).
std::vector<const Msg*> send_order(const std::vector<std::vector<Msg>>& rounds) {
  const size_t nfirst = rounds.size() - kAhead;
  std::vector<const Msg*> order;
  for (size_t r = 0; r < nfirst; ++r) {
    std::vector<const Msg*> rev;
    for (auto it = rounds[r].rbegin(); it != rounds[r].rend(); ++it) rev.push_back(&*it);
    // Restore the order among equal tags.
    for (size_t i = 0; i < rev.size(); ++i) {
      for (size_t j = i + 1; j < rev.size(); ++j) {
        if (rev[i]->tag == rev[j]->tag && rev[i]->slot > rev[j]->slot) std::swap(rev[i], rev[j]);
      }
    }
    order.insert(order.end(), rev.begin(), rev.end());
  }
  // Pull each round's first message ahead of the previous round's last when that is allowed.
  size_t at = 0;
  for (size_t r = 0; r + 1 < nfirst; ++r) {
    at += rounds[r].size();
    const Msg* next = order[at];
    bool sent_before = false;
    for (size_t i = at - rounds[r].size(); i + 1 < at; ++i) sent_before = sent_before || order[i]->tag == next->tag;
    if (sent_before && order[at - 1]->tag != next->tag) std::swap(order[at - 1], order[at]);
  }
  // The last rounds: one tag's messages for all of them, then the other's.
  for (int slot = 0; slot < 2; ++slot) {
    for (size_t r = nfirst; r < rounds.size(); ++r) order.push_back(&rounds[r][slot]);
  }
  return order;
}

// ZIPCCL_TEST_PTR=cuda (test_inner_optional_emu, the GPU path's host emulation): registered buffers are
// NCCL_PTR_CUDA, so groups mix device and host receives, and sends from device and host memory reach
// both. The stand-in is told which memory is "device" memory and refuses a registration or a transfer
// of the wrong type. With ZIPCCL_TEST_FAKE_CUDA=1 the inner takes NCCL_PTR_CUDA: zipccl forwards NCCL's
// device registrations to it, yet the inner only ever carries host memory, since the GPU path moves
// device data through its pinned host staging (docs/notes/inner.md, "Memory registration").
int registered_type() {
  const char* v = std::getenv("ZIPCCL_TEST_PTR");
  return v && std::string(v) == "cuda" ? NCCL_PTR_CUDA : NCCL_PTR_HOST;
}

class InnerGrouped : public ::testing::TestWithParam<int> {};

TEST_P(InnerGrouped, EachMessageLandsInTheReceiveWithItsTag) {
  ASSERT_TRUE(std::getenv("ZIPCCL_TEST_FAKE_EXTRAS")) << "run through CTest (tests/inner/inner_tests.cmake)";
  auto api = load_api(GetParam());
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  FakeState* st = fake_state();
  ASSERT_NE(st, nullptr);
  Props p;
  ASSERT_EQ(api->props(0, &p), ncclSuccess);
  EXPECT_EQ(p.max_recvs, extras() ? 8 : 1);  // the inner's
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  ASSERT_TRUE(make_pair(api.get(), &sc, &rc, &lc));
  auto& net = api->net();

  if (!extras()) {  // an inner without grouped receives: zipccl refuses n > 1
    std::vector<uint8_t> a(64), b(64);
    void* data[2] = {a.data(), b.data()};
    size_t sizes[2] = {64, 64};
    int tags[2] = {0, 1};
    void* mh[2] = {nullptr, nullptr};
    void* ph[2] = {nullptr, nullptr};
    void* req = nullptr;
    EXPECT_EQ(net.irecv(rc, 2, data, sizes, tags, mh, ph, &req), ncclInternalError);
    EXPECT_EQ(req, nullptr);
  } else {
    const auto rounds = make_rounds();
    const auto order = send_order(rounds);
    // Buffers come from two pools per side, as NCCL's come from its registered buffers: pool 0
    // registered with zipccl (host: forwarded to the inner; device: staged by the GPU path), pool 1 not
    // (zipccl's bounce buffers). Receives: even rounds from pool 0. Sends: every other one.
    std::vector<uint8_t> rpool[2], spool[2];
    std::vector<std::vector<uint8_t*>> dst(rounds.size());
    size_t rbytes[2] = {}, sbytes[2] = {}, total = 0;
    for (size_t r = 0; r < rounds.size(); ++r) {
      for (const Msg& m : rounds[r]) rbytes[r % 2] += m.capacity + kCanary;
    }
    for (size_t i = 0; i < order.size(); ++i) sbytes[i % 2] += order[i]->src.size() + 1;
    for (int k = 0; k < 2; ++k) {
      rpool[k].assign(rbytes[k], kCanaryByte);
      spool[k].resize(sbytes[k]);
    }
    void* rmh = nullptr;
    void* smh = nullptr;
    const bool device = registered_type() == NCCL_PTR_CUDA;
    if (device) {
      ASSERT_TRUE(declare_device(rpool[0].data(), rpool[0].size()));
      ASSERT_TRUE(declare_device(spool[0].data(), spool[0].size()));
    }
    ASSERT_EQ(net.reg_mr(rc, rpool[0].data(), rpool[0].size(), registered_type(), &rmh), ncclSuccess);
    ASSERT_EQ(net.reg_mr(sc, spool[0].data(), spool[0].size(), registered_type(), &smh), ncclSuccess);
    // Each message's way: from pool i % 2 of the sends into pool r % 2 of its receive's round.
    int ways[2][2] = {};
    for (size_t i = 0; i < order.size(); ++i) ++ways[i % 2][order[i]->round % 2];
    EXPECT_TRUE(ways[0][0] && ways[0][1] && ways[1][0] && ways[1][1]);
    std::vector<void*> reqs(rounds.size(), nullptr), sreqs(order.size(), nullptr);
    std::vector<bool> sdone(order.size()), rdone(rounds.size());
    size_t open = order.size() + rounds.size();
    // Tests every request once; a completed receive group is checked.
    auto poll_all = [&] {
      for (size_t i = 0; i < order.size(); ++i) {
        if (!sreqs[i] || sdone[i]) continue;
        int done = 0, size = -1;
        ASSERT_EQ(net.test(sreqs[i], &done, &size), ncclSuccess);
        if (done) {
          sdone[i] = true;
          --open;
        }
      }
      for (size_t r = 0; r < rounds.size(); ++r) {
        if (!reqs[r] || rdone[r]) continue;
        int done = 0;
        int sizes[8];
        std::fill(sizes, sizes + 8, -1);
        ASSERT_EQ(net.test(reqs[r], &done, sizes), ncclSuccess);
        if (!done) continue;
        rdone[r] = true;
        --open;
        if (r % 2 == 0 && rmh) {  // NCCL flushes a completed receive into registered device memory
          void* fdata = dst[r][0];
          int fsize = static_cast<int>(rounds[r][0].capacity);
          void* freq = nullptr;
          ASSERT_EQ(net.iflush(rc, 1, &fdata, &fsize, &rmh, &freq), ncclSuccess);
          for (int spins = 0; freq && spins < 1000000; ++spins) {
            int fdone = 0, fsz = 0;
            ASSERT_EQ(net.test(freq, &fdone, &fsz), ncclSuccess);
            if (fdone) freq = nullptr;
          }
          ASSERT_EQ(freq, nullptr) << "a flush never completed";
        }
        for (size_t k = 0; k < rounds[r].size(); ++k) {
          const Msg& m = rounds[r][k];
          const uint8_t* got = dst[r][k];
          EXPECT_EQ(sizes[k], static_cast<int>(m.src.size())) << "round " << r << " receive " << k << " tag " << m.tag;
          EXPECT_TRUE(std::equal(m.src.begin(), m.src.end(), got))
              << "round " << r << " receive " << k << " tag " << m.tag << " holds another message";
          EXPECT_TRUE(std::all_of(got + m.capacity, got + m.capacity + kCanary,
                                  [](uint8_t b) { return b == kCanaryByte; }))
              << "round " << r << " receive " << k << ": written past the posted size";
        }
      }
    };
    // All rounds posted before anything is sent (NCCL posts up to NCCL_STEPS groups ahead).
    size_t roff[2] = {};
    for (size_t r = 0; r < rounds.size(); ++r) {
      void* data[8];
      size_t sizes[8];
      int tags[8];
      void* mhs[8];
      void* ph[8] = {};
      const int n = static_cast<int>(rounds[r].size());
      for (int k = 0; k < n; ++k) {
        const Msg& m = rounds[r][k];
        total += m.src.size();
        dst[r].push_back(rpool[r % 2].data() + roff[r % 2]);
        roff[r % 2] += m.capacity + kCanary;
        data[k] = dst[r][k];
        sizes[k] = m.capacity;
        tags[k] = m.tag;
        mhs[k] = r % 2 ? nullptr : rmh;
      }
      auto t0 = Clock::now();
      while (!reqs[r]) {
        ASSERT_EQ(net.irecv(rc, n, data, sizes, tags, mhs, ph, &reqs[r]), ncclSuccess);
        ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0) << "irecv of round " << r;
      }
    }
    size_t soff[2] = {};
    auto t0 = Clock::now();
    for (size_t i = 0; i < order.size(); ++i) {
      uint8_t* src = spool[i % 2].data() + soff[i % 2];
      soff[i % 2] += order[i]->src.size() + 1;
      std::copy(order[i]->src.begin(), order[i]->src.end(), src);
      while (!sreqs[i]) {
        ASSERT_EQ(net.isend(sc, src, order[i]->src.size(), order[i]->tag, i % 2 ? nullptr : smh, &sreqs[i]),
                  ncclSuccess);
        if (!sreqs[i]) poll_all();
        ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0) << "isend " << i;
      }
    }
    while (open) {
      poll_all();
      ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0)
          << open << " requests never completed (grouped receives not matched); the inner saw groups of up to "
          << st->max_group_seen << ", " << st->bytes_sent << " bytes sent, " << st->errors << " errors";
    }
    EXPECT_EQ(st->max_group_seen, 8);
    EXPECT_GT(st->out_of_order_sends, 0);  // the inner really matched by tag, not by order
    const char* mode = std::getenv("ZIPCCL_COMPRESS");
    if (mode && std::string(mode) == "always") {
      EXPECT_LT(st->bytes_sent, total) << "nothing was compressed";
    } else if (mode && std::string(mode) == "never") {
      EXPECT_EQ(st->bytes_sent, total + 40 * order.size());  // each message: its bytes and a 40-byte header
    }
    EXPECT_EQ(net.dereg_mr(sc, smh), ncclSuccess);
    EXPECT_EQ(net.dereg_mr(rc, rmh), ncclSuccess);
    // NCCL's device registrations reach the inner exactly when it takes NCCL_PTR_CUDA (one per comm), and
    // so do the sender's and the receiver's device staging (one arena each); host ones always (plus
    // zipccl's own: header slots, pinned staging, bounce buffers).
    EXPECT_EQ(st->regs_cuda, device && inner_cuda() ? 4 : 0);
    EXPECT_GE(st->regs_host, device ? 2 : 4);
    // What the inner carries is host memory, registered as such, except the codec frames the GPU path
    // encoded (checked below, after the send comm's close line says how many).
    EXPECT_GT(st->posted_host, 0);
    // Over an inner that takes NCCL_PTR_CUDA every device receive's payload lands in the receiver's device
    // staging (CUDA-registered) and zipccl flushes each landing once before reading it: the stand-in
    // shows the bytes only after that flush (skipped, the data is its poison). NCCL's own iflush is not
    // forwarded (it would add flushes here), and nothing is left unflushed.
    EXPECT_EQ(st->iflush_calls, st->recv_cuda);
    EXPECT_EQ(st->unflushed, 0);
    if (device && inner_cuda()) {
      EXPECT_GT(st->recv_cuda, 0);
    } else {
      EXPECT_EQ(st->recv_cuda, 0);
    }
  }
  EXPECT_EQ(st->errors, 0);
  EXPECT_EQ(api->close_send(sc), ncclSuccess);
  EXPECT_EQ(api->close_recv(rc), ncclSuccess);
  EXPECT_EQ(api->close_listen(lc), ncclSuccess);
  EXPECT_EQ(st->live_regs, 0);  // zipccl's own registrations and NCCL's forwarded ones all released
  if (extras()) {
    // Over an inner that takes NCCL_PTR_CUDA each device-encoded codec frame goes from the device staging,
    // registered as CUDA memory (no copy to pinned host memory); nothing else is device memory there.
    unsigned long long frames = 0, device_msgs = 0;
    if (registered_type() == NCCL_PTR_CUDA && inner_cuda()) {
      ASSERT_TRUE(send_gpu_counts(&device_msgs, &frames));
      const char* mode = std::getenv("ZIPCCL_COMPRESS");
      if (mode && std::string(mode) == "always") {
        EXPECT_GT(frames, 0u);
      }
    }
    EXPECT_EQ(static_cast<unsigned long long>(st->posted_cuda), frames + st->recv_cuda);
  }
  const char* mode = std::getenv("ZIPCCL_COMPRESS");
  const bool always = mode && std::string(mode) == "always", never = mode && std::string(mode) == "never";
  if (extras() && (always || never || registered_type() == NCCL_PTR_CUDA)) {
    // Payloads in memory registered with the inner go in place: NCCL's registered buffers (pool 0; device
    // messages from and into the GPU path's pinned staging, which zipccl registers with the inner) and
    // codec frames of host messages (the compressing layer's send staging, registered too). Only raw
    // payloads in the unregistered pool take a bounce buffer. With `auto` the policy decides which host
    // messages of that pool are compressed: only the sum and the registered pool's share are known.
    const auto rounds = make_rounds();
    const auto order = send_order(rounds);
    unsigned long long want[2][2] = {};  // [send, receive][in place, bounced]
    unsigned long long sends = 0, registered_sends = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      if (order[i]->src.empty()) continue;
      want[0][i % 2 == 1 && !(always && order[i]->shrinks)] += 1;
      ++sends;
      registered_sends += i % 2 == 0;
    }
    for (size_t r = 0; r < rounds.size(); ++r) {
      for (const Msg& m : rounds[r]) want[1][r % 2] += m.capacity > 0;
    }
    unsigned long long got[2][2] = {};
    ASSERT_TRUE(close_counts("send", &got[0][0], &got[0][1]));
    ASSERT_TRUE(close_counts("receive", &got[1][0], &got[1][1]));
    // Over an inner with NCCL_PTR_CUDA those in-place receives are exactly the device-staging landings.
    if (inner_cuda() && registered_type() == NCCL_PTR_CUDA) {
      EXPECT_EQ(static_cast<unsigned long long>(st->recv_cuda), want[1][0]);
    }
    for (int side = 0; side < 2; ++side) {
      if (side == 0 && !always && !never) {
        EXPECT_EQ(got[0][0] + got[0][1], sends);
        EXPECT_GE(got[0][0], registered_sends) << "sends from registered memory through bounce buffers";
        continue;
      }
      EXPECT_EQ(got[side][0], want[side][0]) << (side ? "receives" : "sends") << " in place";
      EXPECT_EQ(got[side][1], want[side][1]) << (side ? "receives" : "sends") << " through bounce buffers";
    }
  }
  EXPECT_EQ(api->finalize(), ncclSuccess);
  declare_device(nullptr, 0);
}

// One message of n bytes from src (send comm sc) into dst (receive comm rc) with `tag`, both requests
// tested until they complete (the receive posted first); fails the test past `limit_s` seconds.
void exchange(NetApi* api, void* sc, const void* src, void* smh, void* rc, void* dst, void* rmh, size_t n, int tag,
              double limit_s) {
  void *rreq = nullptr, *sreq = nullptr;
  auto t0 = Clock::now();
  while (!rreq) {
    ASSERT_EQ(api->irecv(rc, dst, n, tag, rmh, &rreq), ncclSuccess);
  }
  while (!sreq) {
    ASSERT_EQ(api->isend(sc, const_cast<void*>(src), n, tag, smh, &sreq), ncclSuccess);
  }
  for (int rdone = 0, sdone = 0, got = 0, sent = 0; !rdone || !sdone;) {
    if (!sdone) {
      ASSERT_EQ(api->test(sreq, &sdone, &sent), ncclSuccess);
    }
    if (!rdone) {
      ASSERT_EQ(api->test(rreq, &rdone, &got), ncclSuccess);
    }
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), limit_s) << "the message never completed";
  }
}

// A connected pair over the stand-in with one registered buffer of n bytes on each side (src holding
// bf16 data), device memory (the GPU emulation's) or host memory; before_reg runs once the comms are
// connected, before the registrations.
struct Pair {
  std::unique_ptr<NetApi> api;
  FakeState* st = nullptr;
  void *sc = nullptr, *rc = nullptr, *lc = nullptr, *smh = nullptr, *rmh = nullptr;
  std::vector<uint8_t> src, dst;
};
void open_pair(size_t n, uint64_t seed, bool device, Pair* d, const std::function<void()>& before_reg) {
  d->api = load_api(12);
  ASSERT_TRUE(d->api);
  ASSERT_EQ(d->api->init(), ncclSuccess);
  d->st = fake_state();
  ASSERT_NE(d->st, nullptr);
  ASSERT_TRUE(make_pair(d->api.get(), &d->sc, &d->rc, &d->lc));
  d->src = make_data(DataKind::kBf16Gauss, n, seed);
  d->dst.assign(n, 0);
  if (device) {
    ASSERT_TRUE(declare_device(d->src.data(), n));
    ASSERT_TRUE(declare_device(d->dst.data(), n));
  }
  if (before_reg) before_reg();
  const int type = device ? NCCL_PTR_CUDA : NCCL_PTR_HOST;
  ASSERT_EQ(d->api->net().reg_mr(d->sc, d->src.data(), n, type, &d->smh), ncclSuccess);
  ASSERT_EQ(d->api->net().reg_mr(d->rc, d->dst.data(), n, type, &d->rmh), ncclSuccess);
}
void open_device_pair(size_t n, uint64_t seed, Pair* d, const std::function<void()>& before_reg = nullptr) {
  open_pair(n, seed, true, d, before_reg);
}

// Deregisters the two buffers and closes the pair's comms (finalize is the test's).
void close_pair(Pair* d) {
  EXPECT_EQ(d->api->net().dereg_mr(d->sc, d->smh), ncclSuccess);
  EXPECT_EQ(d->api->net().dereg_mr(d->rc, d->rmh), ncclSuccess);
  EXPECT_EQ(d->api->close_send(d->sc), ncclSuccess);
  EXPECT_EQ(d->api->close_recv(d->rc), ncclSuccess);
  EXPECT_EQ(d->api->close_listen(d->lc), ncclSuccess);
}

// A receive comm closed with a device receive still posted (a failed job): its inner comm and
// registrations stay open, and so does the GPU path's pinned staging that the receive's payload lands in
// (registered with the inner). A message sent afterwards lands there: under ASan (tools/test.sh) a freed
// staging shows as a use-after-free in the stand-in's copy.
TEST(InnerStaging, ClosedWithADeviceReceivePostedKeepsItsStaging) {
  if (registered_type() != NCCL_PTR_CUDA) GTEST_SKIP() << "device buffers only (test_inner_optional_emu)";
  Pair d;
  ASSERT_NO_FATAL_FAILURE(open_device_pair(64 << 10, 11, &d));
  auto& net = d.api->net();
  const size_t n = d.src.size();
  void* rreq = nullptr;
  ASSERT_EQ(d.api->irecv(d.rc, d.dst.data(), n, 5, d.rmh, &rreq), ncclSuccess);
  ASSERT_NE(rreq, nullptr);
  EXPECT_EQ(net.dereg_mr(d.rc, d.rmh), ncclSuccess);
  EXPECT_EQ(d.api->close_recv(d.rc), ncclSuccess);
  EXPECT_TRUE(log_contains("closing a receive connection with"));
  void* sreq = nullptr;
  auto t0 = Clock::now();
  for (int done = 0, size = 0; !done;) {
    if (!sreq) {
      ASSERT_EQ(d.api->isend(d.sc, d.src.data(), n, 5, d.smh, &sreq), ncclSuccess);
    } else {
      ASSERT_EQ(d.api->test(sreq, &done, &size), ncclSuccess);
    }
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0) << "the send never completed";
  }
  EXPECT_EQ(d.st->errors, 0);
  EXPECT_EQ(net.dereg_mr(d.sc, d.smh), ncclSuccess);
  EXPECT_EQ(d.api->close_send(d.sc), ncclSuccess);
  EXPECT_EQ(d.api->close_listen(d.lc), ncclSuccess);
  EXPECT_GT(d.st->live_regs, 0);  // what the receive connection left open
  EXPECT_EQ(d.api->finalize(), ncclSuccess);
  declare_device(nullptr, 0);
}

// A device regMr larger than any before (a user buffer NCCL registers while traffic flows) adds staging
// arenas to the comm. The data path may take regions of a new arena only once it is registered with
// the inner: before that, the inner transport finds no registration for it and copies it through a
// bounce buffer on the host, which on a GPU is the CPU reading device memory (a crash). The stand-in's
// registrations are made slow, as pinning a large buffer is on a NIC, so messages flow during them.
TEST(InnerStaging, GrownStagingIsRegisteredBeforeUse) {
  if (registered_type() != NCCL_PTR_CUDA || !inner_cuda()) {
    GTEST_SKIP() << "an inner that takes device memory (test_inner_optional_emu, ZIPCCL_TEST_FAKE_CUDA=1)";
  }
  Pair d;
  ASSERT_NO_FATAL_FAILURE(open_device_pair(64 << 10, 13, &d));
  auto& net = d.api->net();
  const size_t n = d.src.size();
  auto* set_delay = reinterpret_cast<void (*)(int)>(
      dlsym(dlopen(std::getenv("ZIPCCL_NET_INNER"), RTLD_NOW | RTLD_NOLOAD), "fake_inner_set_reg_delay_us"));
  ASSERT_NE(set_delay, nullptr);
  set_delay(3000);
  // User buffers of 128 KiB to 2 MiB, each larger than all before: every one grows both comms' staging.
  std::vector<std::vector<uint8_t>> user;
  for (size_t size = 128 << 10; size <= (2u << 20); size *= 2) user.emplace_back(size);
  for (auto& u : user) ASSERT_TRUE(declare_device(u.data(), u.size()));
  std::vector<void*> umh(2 * user.size(), nullptr);
  std::atomic<bool> done{false};
  std::atomic<int> failures{0};
  std::thread service([&] {
    for (size_t i = 0; i < user.size(); ++i) {
      if (net.reg_mr(d.sc, user[i].data(), user[i].size(), NCCL_PTR_CUDA, &umh[2 * i]) != ncclSuccess ||
          net.reg_mr(d.rc, user[i].data(), user[i].size(), NCCL_PTR_CUDA, &umh[2 * i + 1]) != ncclSuccess) {
        failures.fetch_add(1);
        break;
      }
    }
    done.store(true);
  });
  int messages = 0;
  for (; !done.load() || messages < 20; ++messages) {
    std::fill(d.dst.begin(), d.dst.end(), 0);
    ASSERT_NO_FATAL_FAILURE(
        exchange(d.api.get(), d.sc, d.src.data(), d.smh, d.rc, d.dst.data(), d.rmh, n, 2, 30.0))
        << "message " << messages;
    ASSERT_TRUE(d.src == d.dst) << "message " << messages;
  }
  service.join();
  set_delay(0);
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(d.st->errors, 0);
  for (size_t i = 0; i < user.size(); ++i) {
    EXPECT_EQ(net.dereg_mr(d.sc, umh[2 * i]), ncclSuccess);
    EXPECT_EQ(net.dereg_mr(d.rc, umh[2 * i + 1]), ncclSuccess);
  }
  close_pair(&d);
  unsigned long long in_place = 0, bounced = 0;
  ASSERT_TRUE(close_counts("send", &in_place, &bounced));
  EXPECT_EQ(bounced, 0u) << "sends from staging not registered with the inner (" << messages << " messages)";
  ASSERT_TRUE(close_counts("receive", &in_place, &bounced));
  EXPECT_EQ(bounced, 0u) << "receives into staging not registered with the inner (" << messages << " messages)";
  EXPECT_EQ(d.api->finalize(), ncclSuccess);
  declare_device(nullptr, 0);
}

// The GPU path's staging comes from CUDA memory pools, which GPUDirect RDMA may not register (CUDA
// documents dma-buf export for cuMemAlloc'd and cuMemMap'd ranges only) while NCCL's own buffers register
// fine. A refused staging is not an error: NCCL's regMr succeeds, and device messages go through the
// pinned host staging (codec frames copied off the device first), bit-exact.
TEST(InnerStaging, RefusedDeviceStagingIsNotAnError) {
  if (registered_type() != NCCL_PTR_CUDA || !inner_cuda()) {
    GTEST_SKIP() << "an inner that takes device memory (test_inner_optional_emu, ZIPCCL_TEST_FAKE_CUDA=1)";
  }
  // Loaded before zipccl loads it (the same file: the same copy), to refuse from the first regMr on.
  auto* refuse = reinterpret_cast<int (*)(int)>(
      dlsym(dlopen(std::getenv("ZIPCCL_NET_INNER"), RTLD_NOW), "fake_inner_refuse_staging"));
  ASSERT_NE(refuse, nullptr);
  const int refused0 = refuse(1);
  Pair d;
  ASSERT_NO_FATAL_FAILURE(open_device_pair(256 << 10, 17, &d));
  EXPECT_GT(refuse(1), refused0) << "the stand-in was never asked to register the staging";
  EXPECT_TRUE(log_contains("did not register the GPU path's device staging"));
  auto& api = d.api;
  const int posted_cuda0 = __atomic_load_n(&d.st->posted_cuda, __ATOMIC_RELAXED);
  for (int m = 0; m < 8; ++m) {
    std::fill(d.dst.begin(), d.dst.end(), 0);
    ASSERT_NO_FATAL_FAILURE(
        exchange(api.get(), d.sc, d.src.data(), d.smh, d.rc, d.dst.data(), d.rmh, d.src.size(), 3, 10.0))
        << "message " << m;
    ASSERT_TRUE(d.src == d.dst) << "message " << m;
  }
  refuse(0);
  EXPECT_EQ(d.st->errors, 0);
  // Nothing was posted from or into device memory: no staging of it is registered.
  EXPECT_EQ(__atomic_load_n(&d.st->posted_cuda, __ATOMIC_RELAXED), posted_cuda0);
  close_pair(&d);
  unsigned long long messages = 0, frames = 0;
  ASSERT_TRUE(send_gpu_counts(&messages, &frames));
  EXPECT_EQ(messages, 8u);
  EXPECT_EQ(api->finalize(), ncclSuccess);
  declare_device(nullptr, 0);
}

// Host messages with every message compressed: the InnerStaging tests of the send staging run there.
bool host_always() {
  const char* mode = std::getenv("ZIPCCL_COMPRESS");
  return registered_type() == NCCL_PTR_HOST && mode && std::string(mode) == "always";
}
// n bytes from the start of src into dst, checked bit-exact.
void exchange_host(Pair* h, size_t n) {
  std::fill(h->dst.begin(), h->dst.end(), 0);
  ASSERT_NO_FATAL_FAILURE(exchange(h->api.get(), h->sc, h->src.data(), h->smh, h->rc, h->dst.data(), h->rmh, n, 4, 10.0));
  ASSERT_TRUE(std::equal(h->src.begin(), h->src.begin() + n, h->dst.begin())) << n << " bytes";
}
// Closes the pair; then no registration is live, and *in_place / *bounced are the send connection's
// close-line counts. finalize is the test's.
void close_host_pair(Pair* h, unsigned long long* in_place, unsigned long long* bounced) {
  EXPECT_EQ(h->st->errors, 0);
  close_pair(h);
  EXPECT_EQ(h->st->live_regs, 0);
  ASSERT_TRUE(close_counts("send", in_place, bounced));
}

// The codec's send staging of host messages is registered with the inner once per growth, so a codec
// frame goes in place rather than through the inner transport's bounce buffer (a host copy of every
// frame on NCCL's progress thread). Messages of growing and shrinking sizes: every frame in place, and
// at close zipccl's registrations are all released.
TEST(InnerStaging, CodecFramesOfHostMessagesGoInPlace) {
  if (!host_always()) GTEST_SKIP() << "host buffers, every message compressed (inner.fake.with.always.)";
  const size_t max = 1 << 20;
  Pair h;
  ASSERT_NO_FATAL_FAILURE(open_pair(max, 21, false, &h, nullptr));
  const int regs0 = h.st->regs_host;
  const unsigned long long sent0 = h.st->bytes_sent;
  const size_t sizes[] = {64 << 10, 256 << 10, max, 100 << 10, max, 512 << 10};
  unsigned long long total = 0;
  for (size_t n : sizes) {
    ASSERT_NO_FATAL_FAILURE(exchange_host(&h, n));
    total += n;
  }
  // Every message went as a codec frame (about 1/1.5 of its bytes, plus the headers).
  EXPECT_LT(h.st->bytes_sent - sent0, total * 3 / 4) << "not every message was compressed";
  // One registration per growth of the staging (3 sizes larger than all before), not one per message.
  EXPECT_GE(h.st->regs_host - regs0, 1);
  EXPECT_LE(h.st->regs_host - regs0, 3);
  unsigned long long in_place = 0, bounced = 0;
  ASSERT_NO_FATAL_FAILURE(close_host_pair(&h, &in_place, &bounced));
  EXPECT_EQ(in_place, 6u);
  EXPECT_EQ(bounced, 0u) << "codec frames copied through the inner transport's bounce buffers";
  EXPECT_EQ(h.api->finalize(), ncclSuccess);
}

// The inner's registration of the codec's send staging may fail (a NIC out of lockable memory): not an
// error. Frames then go through the inner transport's own registered bounce buffer, bit-exact.
TEST(InnerStaging, RefusedSendStagingIsNotAnError) {
  if (!host_always()) GTEST_SKIP() << "host buffers, every message compressed (inner.fake.with.always.)";
  Pair h;
  ASSERT_NO_FATAL_FAILURE(open_pair(256 << 10, 23, false, &h, nullptr));
  auto* refuse = reinterpret_cast<int (*)(int)>(
      dlsym(dlopen(std::getenv("ZIPCCL_NET_INNER"), RTLD_NOW | RTLD_NOLOAD), "fake_inner_refuse_host"));
  ASSERT_NE(refuse, nullptr);
  const int refused0 = refuse(1);  // the next host registration: the first message's send staging
  for (int m = 0; m < 4; ++m) ASSERT_NO_FATAL_FAILURE(exchange_host(&h, h.src.size())) << "message " << m;
  EXPECT_EQ(refuse(0), refused0 + 1) << "the stand-in was never asked to register the send staging";
  EXPECT_TRUE(log_contains("did not register the codec's send staging"));
  unsigned long long in_place = 0, bounced = 0;
  ASSERT_NO_FATAL_FAILURE(close_host_pair(&h, &in_place, &bounced));
  EXPECT_EQ(bounced, 4u) << "each frame through the bounce buffer";
  EXPECT_EQ(h.api->finalize(), ncclSuccess);
}

// A send comm closed while the inner still has a send in flight from the codec's registered staging (a
// failed job): the inner keeps the connection and its registrations open, and zipccl must keep the staging
// allocated, since the NIC may still read it. The stand-in holds the sends in flight and reads their
// payloads again after the close (fake_inner_read_held): a staging freed at the close is a use-after-free
// under ASan (tools/test.sh), a fault or changed bytes without it.
TEST(InnerStaging, ClosedWithACodecSendInFlightKeepsItsStaging) {
  if (!host_always()) GTEST_SKIP() << "host buffers, every message compressed (inner.fake.with.always.)";
  Pair h;
  const size_t n = 256 << 10;
  ASSERT_NO_FATAL_FAILURE(open_pair(n, 29, false, &h, nullptr));
  void* lib = dlopen(std::getenv("ZIPCCL_NET_INNER"), RTLD_NOW | RTLD_NOLOAD);  // the copy zipccl loaded
  auto* hold = reinterpret_cast<void (*)(int)>(dlsym(lib, "fake_inner_hold_sends"));
  auto* read_held = reinterpret_cast<int (*)(int*)>(dlsym(lib, "fake_inner_read_held"));
  ASSERT_TRUE(hold && read_held);
  hold(1);
  void *rreq = nullptr, *sreq = nullptr;
  ASSERT_EQ(h.api->irecv(h.rc, h.dst.data(), n, 8, h.rmh, &rreq), ncclSuccess);
  ASSERT_NE(rreq, nullptr);
  ASSERT_EQ(h.api->isend(h.sc, h.src.data(), n, 8, h.smh, &sreq), ncclSuccess);
  ASSERT_NE(sreq, nullptr);
  // The frame reaches the inner once its encode is done; the receive then completes, the send does not.
  auto t0 = Clock::now();
  for (int rdone = 0, size = 0; !rdone;) {
    int sdone = 0;
    ASSERT_EQ(h.api->test(sreq, &sdone, &size), ncclSuccess);
    ASSERT_EQ(sdone, 0) << "a held send completed";
    ASSERT_EQ(h.api->test(rreq, &rdone, &size), ncclSuccess);
    ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0) << "the message never arrived";
  }
  ASSERT_TRUE(h.src == h.dst);
  EXPECT_LT(h.st->bytes_sent, n) << "the message was not compressed";
  EXPECT_EQ(h.api->net().dereg_mr(h.sc, h.smh), ncclSuccess);
  EXPECT_EQ(h.api->close_send(h.sc), ncclSuccess);
  EXPECT_TRUE(log_contains("closing a send connection with"));
  int changed = -1;
  EXPECT_EQ(read_held(&changed), 2) << "the message's header and its frame";
  EXPECT_EQ(changed, 0) << "a payload the inner still reads was reused after the close";
  hold(0);
  EXPECT_EQ(h.api->net().dereg_mr(h.rc, h.rmh), ncclSuccess);
  EXPECT_EQ(h.api->close_recv(h.rc), ncclSuccess);
  EXPECT_EQ(h.api->close_listen(h.lc), ncclSuccess);
  EXPECT_GT(h.st->live_regs, 0);  // what the send connection left open
  EXPECT_EQ(h.st->errors, 0);
  EXPECT_EQ(h.api->finalize(), ncclSuccess);
}

// The GPU path's pinned host staging may be refused too: device messages then go through the inner
// transport's bounce buffers (a host copy), bit-exact, and NCCL's regMr succeeds. Incompressible data, so
// every device message goes raw through the host staging.
TEST(InnerStaging, RefusedHostStagingOfTheGpuPathIsNotAnError) {
  if (registered_type() != NCCL_PTR_CUDA) GTEST_SKIP() << "device buffers only (test_inner_optional_emu)";
  auto* refuse = reinterpret_cast<int (*)(int)>(
      dlsym(dlopen(std::getenv("ZIPCCL_NET_INNER"), RTLD_NOW), "fake_inner_refuse_host"));
  ASSERT_NE(refuse, nullptr);
  const int refused0 = refuse(0);
  Pair d;
  // The next host registration: the sender's GPU path's pinned staging, at NCCL's regMr of its buffer.
  ASSERT_NO_FATAL_FAILURE(open_device_pair(256 << 10, 19, &d, [&] { refuse(1); }));
  EXPECT_EQ(refuse(0), refused0 + 1) << "the stand-in was never asked to register the host staging";
  EXPECT_TRUE(log_contains("did not register the GPU path's host staging"));
  const auto random = make_data(DataKind::kRandom, d.src.size(), 19);
  std::copy(random.begin(), random.end(), d.src.begin());  // in place: the registered buffer
  for (int m = 0; m < 6; ++m) {
    std::fill(d.dst.begin(), d.dst.end(), 0);
    ASSERT_NO_FATAL_FAILURE(
        exchange(d.api.get(), d.sc, d.src.data(), d.smh, d.rc, d.dst.data(), d.rmh, d.src.size(), 3, 10.0))
        << "message " << m;
    ASSERT_TRUE(d.src == d.dst) << "message " << m;
  }
  EXPECT_EQ(d.st->errors, 0);
  close_pair(&d);
  unsigned long long in_place = 0, bounced = 0;
  ASSERT_TRUE(close_counts("send", &in_place, &bounced));
  EXPECT_GT(bounced, 0u) << "device messages from staging the inner did not register";
  EXPECT_EQ(d.api->finalize(), ncclSuccess);
  declare_device(nullptr, 0);
}

// Issue 33 defect 4, the inner transport's half: NCCL registers user buffers (regMr/deregMr) on its proxy
// service thread while the progress thread's isend/irecv look the registrations of the same comm up
// (Registrations::find on every posted buffer). A thread registers and deregisters buffers on both comms
// while registered messages flow. Under TSan (tools/test.sh's TSan stage) a registration map not ordered
// against the data path is a reported race; in every build each message arrives bit-exact.
// The user buffers lie on both sides of the message buffers, in one block: a lookup then reads the keys
// of tree nodes the registering thread just made (instrumented code in our library). With every user
// buffer on one side, a lookup reads only links that libstdc++'s uninstrumented rebalancing writes, and
// TSan saw nothing with the map's lock removed.
TEST(InnerRegistration, RegisterAndDeregisterWhileTrafficFlows) {
  auto api = load_api(12);
  ASSERT_TRUE(api);
  ASSERT_EQ(api->init(), ncclSuccess);
  void *sc = nullptr, *rc = nullptr, *lc = nullptr;
  ASSERT_TRUE(make_pair(api.get(), &sc, &rc, &lc));
  auto& net = api->net();
  FakeState* st = fake_state();
  ASSERT_NE(st, nullptr);
  const int host_regs0 = __atomic_load_n(&st->regs_host, __ATOMIC_RELAXED);
  const size_t n = 16 << 10, ub = 4096;
  // [4 user buffers][src][2 user buffers][dst][2 user buffers]
  std::vector<uint8_t> block(8 * ub + 2 * n);
  uint8_t* src = block.data() + 4 * ub;
  uint8_t* dst = src + n + 2 * ub;
  const std::vector<uint8_t> want = make_data(DataKind::kBf16Gauss, n, 12);
  std::copy(want.begin(), want.end(), src);
  std::vector<uint8_t*> user;  // "user buffers"
  for (uint8_t* p = block.data(); p < block.data() + block.size(); p += ub) {
    if ((p < src || p >= src + n) && (p < dst || p >= dst + n)) user.push_back(p);
  }
  ASSERT_EQ(user.size(), 8u);
  void *smh = nullptr, *rmh = nullptr;
  ASSERT_EQ(net.reg_mr(sc, src, n, NCCL_PTR_HOST, &smh), ncclSuccess);
  ASSERT_EQ(net.reg_mr(rc, dst, n, NCCL_PTR_HOST, &rmh), ncclSuccess);
  std::atomic<bool> stop{false};
  std::atomic<int> rounds{0}, failures{0};
  std::thread service([&] {
    while (!stop.load()) {
      for (uint8_t* b : user) {  // each registered on both comms, then released
        void *a = nullptr, *c = nullptr;
        if (net.reg_mr(sc, b, ub, NCCL_PTR_HOST, &a) != ncclSuccess ||
            net.reg_mr(rc, b, ub, NCCL_PTR_HOST, &c) != ncclSuccess ||
            net.dereg_mr(sc, a) != ncclSuccess || net.dereg_mr(rc, c) != ncclSuccess) {
          failures.fetch_add(1);
          return;
        }
      }
      rounds.fetch_add(1);
    }
  });
  auto t0 = Clock::now();
  int messages = 0;
  // At least 100 messages, and registration rounds before, between and after them.
  for (; messages < 100 || rounds.load() < 20; ++messages) {
    if (failures.load() || std::chrono::duration<double>(Clock::now() - t0).count() > 20.0) break;
    std::fill(dst, dst + n, 0);
    ASSERT_NO_FATAL_FAILURE(exchange(api.get(), sc, src, smh, rc, dst, rmh, n, 1, 30.0)) << "message " << messages;
    ASSERT_TRUE(std::equal(want.begin(), want.end(), dst)) << "message " << messages;
  }
  stop.store(true);
  service.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GE(messages, 100);
  EXPECT_GE(rounds.load(), 20) << "registration rounds during " << messages << " messages";
  // Each user buffer reached the inner on both comms in every round (the map changed under the traffic).
  EXPECT_GE(__atomic_load_n(&st->regs_host, __ATOMIC_RELAXED) - host_regs0, 2 * 8 * rounds.load());
  EXPECT_EQ(net.dereg_mr(sc, smh), ncclSuccess);
  EXPECT_EQ(net.dereg_mr(rc, rmh), ncclSuccess);
  EXPECT_EQ(api->close_send(sc), ncclSuccess);
  EXPECT_EQ(api->close_recv(rc), ncclSuccess);
  EXPECT_EQ(api->close_listen(lc), ncclSuccess);
  EXPECT_EQ(api->finalize(), ncclSuccess);
}

// v7's irecv and test carry int sizes (converted by zipccl's adapters), v12's size_t.
INSTANTIATE_TEST_SUITE_P(Abi, InnerGrouped, ::testing::Values(7, 12),
                         [](const ::testing::TestParamInfo<int>& i) { return "v" + std::to_string(i.param); });

}  // namespace
