// The RDMA transport: the protocol of rdma_proto.h over the RC queue pairs of an RdmaPort (libibverbs:
// rdma_verbs.cpp; the tests: a loopback port). Connection setup goes through the 128-byte handle and a small
// TCP side channel (non-blocking, like the socket transport's handshake) that exchanges QP numbers, LID/GID
// and the ring addresses and keys; the side channel then stays open so a vanished peer shows up as EOF.
#include "rdma/rdma_transport.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <set>
#include <vector>

#include "common/log.h"
#include "common/settings.h"
#include "rdma/rdma_proto.h"
#include "socket/socket_iface.h"
#include "transport.h"

namespace zipccl {
namespace net {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kRdmaHandleMagic = 0x31414d4452435a5aull;  // "ZZCRDMA1"
constexpr uint32_t kSetupMagic = 0x53525a5au;
constexpr uint32_t kSetupVersion = 1;
constexpr int kDepth = 16;
constexpr int kSlots = 8;

struct RdmaHandle {
  uint64_t magic;
  uint64_t nonce;
  SocketAddr addr;  // the listener's side channel
  uint8_t reserved[24];
  uint64_t connect_state;  // 0 on the wire; a registered pointer while connecting
};
static_assert(sizeof(RdmaHandle) <= NCCL_NET_HANDLE_MAXSIZE, "handle must fit NCCL_NET_HANDLE_MAXSIZE");

// Each side's half of the setup, over the side channel.
struct SetupMsg {
  uint32_t magic;
  uint32_t version;
  uint64_t nonce;
  uint32_t depth;
  uint32_t reserved;
  RingInfo ring;
  QpEndpoint qps;
};

RdmaParams params() {
  RdmaParams p;
  p.depth = kDepth;
  p.slots = kSlots;
  p.max_ops = settings().max_requests;
  return p;
}

// Moves the rest of a fixed-size message over a non-blocking socket: 1 complete, 0 would block,
// -1 failed or closed.
int pump(int fd, bool out, void* buf, size_t len, size_t* done) {
  char* p = static_cast<char*>(buf);
  while (*done < len) {
    ssize_t n = out ? ::send(fd, p + *done, len - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                    : ::recv(fd, p + *done, len - *done, MSG_DONTWAIT);
    if (n > 0) {
      *done += static_cast<size_t>(n);
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      return 0;
    } else {
      return -1;
    }
  }
  return 1;
}

const char* check_setup(const SetupMsg& m, uint64_t nonce, int nqps) {
  if (m.magic != kSetupMagic) return "wrong magic";
  if (m.version != kSetupVersion) return "unsupported version";
  if (m.nonce != nonce) return "handle nonce mismatch";
  if (m.depth != kDepth || m.ring.depth != kDepth) return "different ring depth";
  if (m.qps.nqps != static_cast<uint32_t>(nqps)) return "different queue pair count (ZIPCCL_IB_QPS)";
  return nullptr;
}

bool timed_out(Clock::time_point since) {
  return Clock::now() - since > std::chrono::milliseconds(settings().connect_timeout_ms);
}

// One side's half-built connection, common to both directions.
struct Setup {
  int fd = -1;       // owned until the fabric is created, then the fabric's
  int side_fd = -1;  // the same socket, for the rest of the exchange
  ConnectableFabric* fabric = nullptr;
  SetupMsg mine{}, theirs{};
  size_t sent = 0, got = 0, ready_done = 0;
  char ready = 'R';
  Clock::time_point since = Clock::now();
};

// Creates the fabric over `port` (taking the side channel) and fills this side's SetupMsg.
template <typename Conn>
ncclResult_t build(RdmaPort* port, uint64_t nonce, Setup* s, std::unique_ptr<Conn>* conn) {
  std::unique_ptr<ConnectableFabric> f;
  ZIPCCL_CHECK(port->make_fabric(settings().ib_qps, kDepth, s->fd, &f));
  s->fd = -1;
  s->fabric = f.get();
  conn->reset(new Conn(std::move(f), params()));
  ZIPCCL_CHECK((*conn)->init());
  s->mine = SetupMsg{kSetupMagic, kSetupVersion, nonce, kDepth, 0, (*conn)->ring(), s->fabric->local()};
  return ncclSuccess;
}

class RdmaListener final : public Listener {
 public:
  RdmaListener(RdmaPort* port, int fd, uint64_t nonce) : port_(port), fd_(fd), nonce_(nonce) {}
  ~RdmaListener() override {
    close(fd_);
    for (Pending& p : pending_) {
      if (p.s.fd >= 0) close(p.s.fd);
    }
  }

  ncclResult_t accept(RecvConn** out) override {
    *out = nullptr;
    for (;;) {
      int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) break;
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      pending_.emplace_back();
      pending_.back().s.fd = fd;
    }
    for (size_t i = 0; i < pending_.size(); ++i) {
      Pending& p = pending_[i];
      const char* bad = nullptr;
      ncclResult_t res = step(&p, &bad);
      if (res == ncclSuccess && !bad && p.done) {
        *out = p.conn.release();
        pending_.erase(pending_.begin() + i);
        return ncclSuccess;
      }
      if (res != ncclSuccess || bad || timed_out(p.s.since)) {
        // A stranger or a broken peer: drop it, the listener stays usable.
        ZIPCCL_WARN("RDMA: dropping an incoming connection: %s", bad ? bad : "setup failed or timed out");
        if (p.s.fd >= 0) close(p.s.fd);
        pending_.erase(pending_.begin() + i);
        --i;
      }
    }
    return ncclSuccess;
  }

 private:
  struct Pending {
    Setup s;
    std::unique_ptr<RdmaRecvConn> conn;
    bool done = false;
  };

  ncclResult_t step(Pending* p, const char** bad) {
    Setup& s = p->s;
    if (!s.fabric) {
      int r = pump(s.fd, false, &s.theirs, sizeof s.theirs, &s.got);
      if (r < 0) *bad = "the peer closed the side channel";
      if (r <= 0) return ncclSuccess;
      if ((*bad = check_setup(s.theirs, nonce_, settings().ib_qps))) return ncclSuccess;
      s.side_fd = s.fd;
      s.ready = 0;  // must become the peer's 'R'
      ZIPCCL_CHECK(build(port_, nonce_, &s, &p->conn));
      ZIPCCL_CHECK(s.fabric->connect(s.theirs.qps));
      p->conn->set_peer_ring(s.theirs.ring);
    }
    int r = pump(s.side_fd, true, &s.mine, sizeof s.mine, &s.sent);
    if (r == 1) r = pump(s.side_fd, false, &s.ready, 1, &s.ready_done);  // the peer's QPs are ready too
    if (r < 0 || (r == 1 && s.ready != 'R')) *bad = "the peer closed the side channel";
    p->done = r == 1;
    return ncclSuccess;
  }

  RdmaPort* port_;
  int fd_;
  uint64_t nonce_;
  std::deque<Pending> pending_;
};

struct ConnectState {
  SocketAddr peer;
  uint64_t nonce;
  Setup s;
  std::unique_ptr<RdmaSendConn> conn;
  int stage = 0;  // 0 connect, 1 wait for TCP, 2 exchange, 3 send "ready"
  Clock::time_point retry_at = Clock::now();
};

std::mutex g_connect_mu;
std::set<ConnectState*>& g_connects = *new std::set<ConnectState*>;  // never destroyed: see net.cpp

class RdmaTransport final : public Transport {
 public:
  RdmaTransport(std::vector<std::unique_ptr<RdmaPort>> ports, std::vector<SocketIface> ifaces)
      : ports_(std::move(ports)), ifaces_(std::move(ifaces)) {}
  const char* name() const override { return "ib"; }
  int device_count() const override { return static_cast<int>(ports_.size()); }

  ncclResult_t device_info(int dev, DeviceInfo* info) const override {
    if (dev < 0 || dev >= device_count()) return ncclInvalidArgument;
    const RdmaPort& p = *ports_[dev];
    info->name = p.name();
    info->pci_path = p.pci_path();
    info->speed_mbps = p.speed_mbps();
    info->guid = p.guid();
    return ncclSuccess;
  }

  ncclResult_t listen(int dev, void* handle, Listener** listener) override {
    *listener = nullptr;
    if (dev < 0 || dev >= device_count() || ifaces_.empty()) {
      ZIPCCL_WARN("RDMA: listen on device %d of %d (side-channel interfaces: %zu)", dev, device_count(),
                  ifaces_.size());
      return ncclInternalError;
    }
    SocketAddr addr = ifaces_[0].addr;
    int fd = socket(addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, &addr.sa, addr_len(addr)) != 0 || ::listen(fd, 1024) != 0) {
      ZIPCCL_WARN("RDMA: cannot listen for the side channel on %s: %s", addr_to_string(addr).c_str(),
                  std::strerror(errno));
      if (fd >= 0) close(fd);
      return ncclSystemError;
    }
    socklen_t len = sizeof addr;
    getsockname(fd, &addr.sa, &len);
    RdmaHandle h{};
    h.magic = kRdmaHandleMagic;
    std::random_device rd;
    h.nonce = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^ 1;
    h.addr = addr;
    std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    std::memcpy(handle, &h, sizeof h);
    *listener = new RdmaListener(ports_[dev].get(), fd, h.nonce);
    return ncclSuccess;
  }

  ncclResult_t connect(int dev, void* handle, SendConn** conn) override {
    *conn = nullptr;
    RdmaHandle h;
    std::memcpy(&h, handle, sizeof h);
    if (h.magic != kRdmaHandleMagic || dev < 0 || dev >= device_count()) {
      ZIPCCL_WARN("RDMA: connect with a handle that is not a zipccl RDMA handle, or device %d of %d", dev,
                  device_count());
      return ncclInternalError;
    }
    auto* st = reinterpret_cast<ConnectState*>(static_cast<uintptr_t>(h.connect_state));
    {
      std::lock_guard<std::mutex> lock(g_connect_mu);
      if (st && !g_connects.count(st)) {
        ZIPCCL_WARN("RDMA: connect: the handle carries connect state this process did not create");
        return ncclInternalError;
      }
      if (!st) {
        st = new ConnectState();
        st->peer = h.addr;
        st->nonce = h.nonce;
        g_connects.insert(st);
      }
    }
    h.connect_state = reinterpret_cast<uintptr_t>(st);
    std::memcpy(handle, &h, sizeof h);
    bool done = false;
    ncclResult_t res = step(dev, st, &done);
    if (res == ncclSuccess && !done) return ncclSuccess;
    {
      std::lock_guard<std::mutex> lock(g_connect_mu);
      g_connects.erase(st);
    }
    h.connect_state = 0;
    std::memcpy(handle, &h, sizeof h);
    if (res == ncclSuccess) *conn = st->conn.release();
    if (st->s.fd >= 0) close(st->s.fd);
    delete st;
    return res;
  }

 private:
  ncclResult_t step(int dev, ConnectState* st, bool* done) {
    Setup& s = st->s;
    if (timed_out(s.since)) {
      ZIPCCL_WARN("RDMA: connect to %s timed out after %d ms", addr_to_string(st->peer).c_str(),
                  settings().connect_timeout_ms);
      return ncclSystemError;
    }
    if (st->stage == 0) {
      if (Clock::now() < st->retry_at) return ncclSuccess;
      s.fd = socket(st->peer.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (s.fd < 0) return ncclSystemError;
      int one = 1;
      setsockopt(s.fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (::connect(s.fd, &st->peer.sa, addr_len(st->peer)) != 0 && errno != EINPROGRESS) {
        ZIPCCL_WARN("RDMA: side channel to %s: %s", addr_to_string(st->peer).c_str(), std::strerror(errno));
        return ncclSystemError;
      }
      st->stage = 1;
    }
    if (st->stage == 1) {
      pollfd p{s.fd, POLLOUT, 0};
      if (poll(&p, 1, 0) <= 0) return ncclSuccess;
      int err = 0;
      socklen_t len = sizeof err;
      getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      if (err == ECONNREFUSED) {  // the peer may still be setting up: retry until the timeout
        close(s.fd);
        s.fd = -1;
        st->stage = 0;
        st->retry_at = Clock::now() + std::chrono::milliseconds(20);
        return ncclSuccess;
      }
      if (err) {
        ZIPCCL_WARN("RDMA: side channel to %s: %s", addr_to_string(st->peer).c_str(), std::strerror(err));
        return ncclSystemError;
      }
      s.side_fd = s.fd;
      ZIPCCL_CHECK(build(ports_[dev].get(), st->nonce, &s, &st->conn));
      st->stage = 2;
    }
    if (st->stage == 2) {
      int r = pump(s.side_fd, true, &s.mine, sizeof s.mine, &s.sent);
      if (r == 1) r = pump(s.side_fd, false, &s.theirs, sizeof s.theirs, &s.got);
      if (r < 0) {
        ZIPCCL_WARN("RDMA: the listener at %s closed the side channel", addr_to_string(st->peer).c_str());
        return ncclSystemError;
      }
      if (r == 0) return ncclSuccess;
      if (const char* bad = check_setup(s.theirs, st->nonce, settings().ib_qps)) {
        ZIPCCL_WARN("RDMA: bad setup reply from %s: %s", addr_to_string(st->peer).c_str(), bad);
        return ncclSystemError;
      }
      ZIPCCL_CHECK(s.fabric->connect(s.theirs.qps));
      st->conn->set_peer_ring(s.theirs.ring);
      st->stage = 3;
    }
    int r = pump(s.side_fd, true, &s.ready, 1, &s.ready_done);
    if (r < 0) return ncclSystemError;
    *done = r == 1;
    return ncclSuccess;
  }

  std::vector<std::unique_ptr<RdmaPort>> ports_;
  std::vector<SocketIface> ifaces_;
};

}  // namespace

Transport* make_rdma_transport(std::vector<std::unique_ptr<RdmaPort>> ports,
                               std::vector<SocketIface> ifaces) {
  return new RdmaTransport(std::move(ports), std::move(ifaces));
}

}  // namespace net
}  // namespace zipccl
