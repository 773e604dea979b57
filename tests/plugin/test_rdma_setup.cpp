// The RDMA transport's connection setup (rdma_transport.cpp) over loopback ports: handle, TCP side
// channel, non-blocking listen/connect/accept, the exchange of QP numbers and ring keys, strangers and
// wrong handles dropped, and a peer whose side channel closes.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "rdma/rdma_proto.h"
#include "rdma/rdma_transport.h"
#include "testing/rdma_loopback.h"

using namespace zipccl::net;

namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Transport> make_transport() {
  std::vector<std::unique_ptr<RdmaPort>> ports;
  ports.push_back(make_loopback_port("lo_rdma:1", 5));
  return std::unique_ptr<Transport>(make_rdma_transport(std::move(ports), find_interfaces("=lo", AF_INET)));
}

// Drives connect() and accept() until both return a connection (or 10 s pass).
bool establish(Transport* t, Listener* l, void* handle, SendConn** s, RecvConn** r) {
  *s = nullptr;
  *r = nullptr;
  auto until = Clock::now() + std::chrono::seconds(10);
  while ((!*s || !*r) && Clock::now() < until) {
    if (!*s && t->connect(0, handle, s) != ncclSuccess) return false;
    if (!*r && l->accept(r) != ncclSuccess) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return *s && *r;
}

// Sends `count` messages of `n` bytes and checks them; false on any error or mismatch.
bool exchange(SendConn* s, RecvConn* r, int count, size_t n) {
  for (int m = 0; m < count; ++m) {
    std::vector<char> src(n), dst(n + 8, 'q');
    for (size_t i = 0; i < n; ++i) src[i] = static_cast<char>(i * 7 + m);
    uint8_t meta[kMetaBytes] = {static_cast<uint8_t>(m)};
    if (r->post_target(dst.data(), n, n) != ncclSuccess) return false;
    int op = kNoOp;
    if (s->post(meta, src.data(), n, &op) != ncclSuccess || op == kNoOp) return false;
    bool sent = false, ready = false;
    uint8_t got[kMetaBytes];
    uint64_t len = 0;
    for (int i = 0; i < 100000 && !(sent && ready); ++i) {
      if (!sent && s->test(op, &sent) != ncclSuccess) return false;
      if (!ready && r->peek(got, &len, &ready) != ncclSuccess) return false;
    }
    if (!sent || !ready || len != n || got[0] != m) return false;
    int rop = kNoOp;
    bool done = false;
    if (r->recv(dst.data(), n, &rop) != ncclSuccess || r->test(rop, &done) != ncclSuccess || !done)
      return false;
    if (!std::equal(src.begin(), src.end(), dst.begin()) || dst[n] != 'q') return false;
  }
  return true;
}

// The side-channel address the handle publishes (after magic and nonce).
SocketAddr handle_addr(const char* handle) {
  SocketAddr a;
  std::memcpy(&a, handle + 16, sizeof a);
  return a;
}

// A transport over one loopback port, listening.
class RdmaSetup : public ::testing::Test {
 protected:
  void SetUp() override {
    t_ = make_transport();
    ASSERT_EQ(t_->device_count(), 1);
    Listener* l = nullptr;
    ASSERT_EQ(t_->listen(0, handle_, &l), ncclSuccess);
    listener_.reset(l);
  }
  // Connects with a copy of the handle (NCCL gives each connect its own).
  void pair(std::unique_ptr<SendConn>* s, std::unique_ptr<RecvConn>* r) {
    char handle[NCCL_NET_HANDLE_MAXSIZE];
    std::memcpy(handle, handle_, sizeof handle);
    SendConn* sc;
    RecvConn* rc;
    ASSERT_TRUE(establish(t_.get(), listener_.get(), handle, &sc, &rc));
    s->reset(sc);
    r->reset(rc);
  }
  std::unique_ptr<Transport> t_;
  std::unique_ptr<Listener> listener_;
  char handle_[NCCL_NET_HANDLE_MAXSIZE];
};

}  // namespace

TEST_F(RdmaSetup, ConnectsAndCarriesMessages) {
  DeviceInfo info;
  ASSERT_EQ(t_->device_info(0, &info), ncclSuccess);
  EXPECT_EQ(info.name, "lo_rdma:1");
  std::unique_ptr<SendConn> s, s2;
  std::unique_ptr<RecvConn> r, r2;
  pair(&s, &r);
  EXPECT_TRUE(exchange(s.get(), r.get(), 20, 300000));  // several pieces over the QPs
  EXPECT_TRUE(exchange(s.get(), r.get(), 5, 0));
  pair(&s2, &r2);  // a second connection through the same listener
  EXPECT_TRUE(exchange(s2.get(), r2.get(), 3, 1000));
}

// Garbage on the side channel and a handle with the wrong nonce are dropped; the listener still
// accepts a real connection afterwards.
TEST_F(RdmaSetup, StrangersAreDroppedListenerStaysUsable) {
  SocketAddr a = handle_addr(handle_);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(connect(fd, &a.sa, sizeof a.in), 0);
  std::vector<char> junk(200, 'J');
  ASSERT_EQ(send(fd, junk.data(), junk.size(), 0), static_cast<ssize_t>(junk.size()));

  char wrong[NCCL_NET_HANDLE_MAXSIZE];
  std::memcpy(wrong, handle_, sizeof wrong);
  wrong[8] ^= 1;  // the nonce
  SendConn* bad = nullptr;
  ncclResult_t res = ncclSuccess;
  RecvConn* none = nullptr;
  auto until = Clock::now() + std::chrono::seconds(10);
  while (res == ncclSuccess && !bad && Clock::now() < until) {
    res = t_->connect(0, wrong, &bad);
    ASSERT_EQ(listener_->accept(&none), ncclSuccess);
    ASSERT_EQ(none, nullptr);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  EXPECT_EQ(res, ncclSystemError) << "the listener drops a connector with the wrong nonce";
  EXPECT_EQ(bad, nullptr);
  char b;
  ssize_t n = recv(fd, &b, 1, 0);  // EOF, or a reset: the listener closed it with junk unread
  EXPECT_TRUE(n == 0 || (n < 0 && errno == ECONNRESET)) << "the stranger's socket is still open";
  close(fd);

  std::unique_ptr<SendConn> s;
  std::unique_ptr<RecvConn> r;
  pair(&s, &r);
  EXPECT_TRUE(exchange(s.get(), r.get(), 2, 100));
}

// The receiver goes away: its side channel closes and the sender's next operations fail.
TEST_F(RdmaSetup, ClosedPeerIsAnError) {
  std::unique_ptr<SendConn> s;
  std::unique_ptr<RecvConn> r;
  pair(&s, &r);
  r.reset();
  uint8_t meta[kMetaBytes] = {};
  char byte = 1;
  int op = kNoOp;
  ncclResult_t res = s->post(meta, &byte, 1, &op);
  bool done = false;
  for (int i = 0; i < 100000 && res == ncclSuccess && !done; ++i) res = s->test(op, &done);
  EXPECT_EQ(res, ncclSystemError);
  EXPECT_FALSE(done);
  const std::string& why = static_cast<RdmaSendConn*>(s.get())->error();
  EXPECT_NE(why.find("side channel"), std::string::npos) << why;
}
