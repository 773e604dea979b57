// TCP transport: one control stream (headers and small payloads, driven by NCCL's proxy thread with
// non-blocking I/O) plus `nstreams` data streams served by helper threads that carry the pieces of
// large messages. Connect and accept are non-blocking state machines.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/sockios.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/log.h"
#include "common/settings.h"
#include "socket/socket_iface.h"
#include "socket/socket_plan.h"
#include "socket/socket_streams.h"
#include "socket/socket_transport.h"
#include "socket/socket_wire.h"
#include "transport.h"

namespace zipccl {
namespace net {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t random_u64() {
  static std::mutex mu;
  static std::mt19937_64 rng(std::random_device{}() ^
                             static_cast<uint64_t>(Clock::now().time_since_epoch().count()));
  std::lock_guard<std::mutex> lock(mu);
  uint64_t v;
  do v = rng();
  while (v == 0);
  return v;
}

// TCP_NODELAY: headers must not wait for Nagle. Keepalive: a peer host that vanishes without a FIN/RST
// (power loss, cable) still turns into an error on an idle connection, after about a minute.
void tune_socket(int fd) {
  int one = 1, idle = 30, intvl = 10, cnt = 3;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
}

int make_socket(int family) {
  int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  tune_socket(fd);
  return fd;
}

static_assert(kMaxStreams >= static_cast<uint32_t>(kNcclMaxSockets),
              "zipccl must open as many streams as NCCL");

// Builds the helper threads for sockets fds[1..n] (fds[0] is the control stream).
std::vector<std::unique_ptr<StreamThread>> make_threads(const std::vector<int>& fds, bool sending,
                                                        std::atomic<int>* err, int per_thread) {
  std::vector<std::unique_ptr<StreamThread>> threads;
  for (size_t i = 1; i < fds.size(); i += per_thread) {
    std::vector<int> mine;
    for (size_t j = i; j < fds.size() && j < i + per_thread; ++j) mine.push_back(fds[j]);
    threads.emplace_back(new StreamThread(mine, sending, err, settings().io_timeout_ms));
  }
  return threads;
}

// Pieces of a split message: kPiecesPerStream per stream where there are several streams (so that a
// faster stream can take more of them), none smaller than ZIPCCL_MIN_CHUNK_BYTES.
uint64_t chunk_for(uint64_t len, int nstreams) {
  uint64_t pieces = nstreams > 1 ? static_cast<uint64_t>(nstreams) * kPiecesPerStream : 1;
  uint64_t per = (len + pieces - 1) / pieces;
  uint64_t min_chunk = settings().min_chunk_bytes;
  return per < min_chunk ? min_chunk : per;
}

// What both directions of a connection share: the control stream (fds[0]), the helper threads of the
// data streams, the op table and the connection's error flag.
class SocketConn {
 protected:
  SocketConn(const std::vector<int>& fds, int per_thread, bool sending)
      : ctrl_(fds[0]),
        nstreams_(static_cast<int>(fds.size()) - 1),
        per_thread_(per_thread),
        ops_(settings().max_requests),
        local_(sending && peer_is_local(fds[0])) {
    threads_ = make_threads(fds, sending, &error_, per_thread);
  }
  ~SocketConn() {
    threads_.clear();  // joins helper threads, closes data streams
    close(ctrl_);
  }

  // Queues the pieces of a split message: piece i (`chunk` bytes, the last one shorter) goes on data
  // stream map[i]. The op's pending count (pieces + `extra`) is set before any helper thread can see a
  // piece.
  void enqueue_pieces(char* p, uint64_t len, uint64_t chunk, const uint8_t* map, OpSlot* slot, int extra) {
    int npieces = static_cast<int>((len + chunk - 1) / chunk);
    slot->pending.store(npieces + extra);
    for (int i = 0; i < npieces; ++i) {
      uint64_t off = static_cast<uint64_t>(i) * chunk;
      int s = map[i];
      threads_[s / per_thread_]->enqueue(s % per_thread_,
                                         Piece{p + off, std::min<uint64_t>(chunk, len - off), slot});
    }
  }

  // test() of one op: an error if the op or its connection failed; done (and the slot released) once
  // every piece has moved.
  ncclResult_t test_op(int op, const char* what, bool* done) {
    OpSlot* slot = ops_.get(op);
    if (!slot) {
      ZIPCCL_WARN("test on an unknown %s op %d", what, op);
      return ncclInternalError;
    }
    if (slot->error.load() || error_.load()) return ncclSystemError;
    if (slot->pending.load(std::memory_order_acquire) == 0) {
      *done = true;
      ops_.release(op);
    }
    return ncclSuccess;
  }

  int ctrl_;
  int nstreams_;
  int per_thread_;
  OpTable ops_;
  const bool local_;  // sending side only: the peer is this host (peer_is_local)
  std::atomic<int> error_{0};
  std::vector<std::unique_ptr<StreamThread>> threads_;
};

class SocketSendConn final : public SendConn, private SocketConn {
 public:
  SocketSendConn(const std::vector<int>& fds, int per_thread) : SocketConn(fds, per_thread, true) {
    if (local_) {
      ZIPCCL_INFO(NCCL_NET, "peer of this connection is this host: no link to measure, auto keeps it raw");
    }
  }

  ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) override {
    *op = kNoOp;
    if (error_.load()) return ncclSystemError;
    int id = ops_.acquire();
    if (id < 0) return ncclSuccess;
    OpSlot* slot = ops_.get(id);
    CtrlItem item{};
    MsgHeader hdr{};
    hdr.magic = kHeaderMagic;
    hdr.seq = seq_;
    hdr.payload_len = len;
    std::memcpy(hdr.meta, meta, kMetaBytes);
    item.op = slot;
    bool split = len > settings().inline_bytes && nstreams_ > 0;
    uint8_t map[kMaxPieces];
    int npieces = 0;
    if (!split) {
      hdr.flags = kFlagInline;
      item.payload = static_cast<const char*>(payload);
      item.payload_len = len;
      slot->pending.store(1);
    } else {
      uint64_t chunk = chunk_for(len, nstreams_);
      hdr.chunk = chunk;
      npieces = static_cast<int>((len + chunk - 1) / chunk);
      uint64_t backlog[kMaxStreams], moved[kMaxStreams];
      for (int s = 0; s < nstreams_; ++s) {
        backlog[s] = threads_[s / per_thread_]->backlog(s % per_thread_);
        moved[s] = threads_[s / per_thread_]->moved(s % per_thread_);
      }
      rates_.update(moved, backlog, nstreams_,
                    std::chrono::duration<double>(Clock::now().time_since_epoch()).count());
      assign_pieces(backlog, rates_.rates(), nstreams_, npieces, chunk, len, static_cast<int>(seq_ % nstreams_),
                    map);
      enqueue_pieces(static_cast<char*>(const_cast<void*>(payload)), len, chunk, map, slot, 1);
    }
    std::memcpy(item.prefix, &hdr, sizeof(MsgHeader));
    std::memcpy(item.prefix + sizeof(MsgHeader), map, static_cast<size_t>(npieces));
    item.prefix_len = sizeof(MsgHeader) + static_cast<size_t>(npieces);
    wire_ += item.prefix_len + len;
    ++seq_;
    ctrl_queue_.push_back(item);
    ZIPCCL_CHECK(progress());
    *op = id;
    return ncclSuccess;
  }

  ncclResult_t test(int op, bool* done) override {
    *done = false;
    ZIPCCL_CHECK(progress());
    return test_op(op, "send", done);
  }

  bool carries_segments() const override { return true; }  // peek/recv per transport message
  void link_progress(uint64_t* delivered, uint64_t* backlog) override {
    // A peer on this host: the "link" is the two processes' CPUs copying memory, whose pace dips
    // whenever another job takes a core. Compressing cannot save anything there (the receiver would
    // decode on the same CPUs), so no backlog is reported and the policy never measures a link.
    if (local_) {
      *delivered = wire_;
      *backlog = 0;
      return;
    }
    // SIOCOUTQ: bytes the kernel still holds for a socket (unsent or unacknowledged).
    uint64_t written = ctrl_written_, queued = 0;
    int q = 0;
    if (ioctl(ctrl_, SIOCOUTQ, &q) == 0 && q > 0) queued += static_cast<uint64_t>(q);
    for (auto& t : threads_) {
      written += t->bytes_moved();
      for (int fd : t->fds()) {
        if (ioctl(fd, SIOCOUTQ, &q) == 0 && q > 0) queued += static_cast<uint64_t>(q);
      }
    }
    *delivered = written > queued ? written - queued : 0;
    *backlog = (wire_ - written) + queued;
  }

 private:
  struct CtrlItem {
    char prefix[sizeof(MsgHeader) + kMaxPieces];  // the header and the piece map, as sent
    size_t prefix_len;
    const char* payload;
    size_t payload_len;
    size_t sent;
    OpSlot* op;
  };

  ncclResult_t progress() {
    if (error_.load()) return ncclSystemError;
    while (!ctrl_queue_.empty()) {
      CtrlItem& it = ctrl_queue_.front();
      size_t total = it.prefix_len + it.payload_len;
      while (it.sent < total) {
        iovec iov[2];
        int n = 0;
        if (it.sent < it.prefix_len) {
          iov[n++] = {it.prefix + it.sent, it.prefix_len - it.sent};
          if (it.payload_len) iov[n++] = {const_cast<char*>(it.payload), it.payload_len};
        } else {
          size_t off = it.sent - it.prefix_len;
          iov[n++] = {const_cast<char*>(it.payload) + off, it.payload_len - off};
        }
        msghdr mh{};
        mh.msg_iov = iov;
        mh.msg_iovlen = n;
        ssize_t w = sendmsg(ctrl_, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
          it.sent += static_cast<size_t>(w);
          ctrl_written_ += static_cast<uint64_t>(w);
          continue;
        }
        if (w < 0 && errno == EINTR) continue;
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
        ZIPCCL_WARN("control stream send failed: %s; the peer is gone", std::strerror(errno));
        error_.store(1);
        return ncclSystemError;
      }
      it.op->pending.fetch_sub(1, std::memory_order_acq_rel);
      ctrl_queue_.pop_front();
    }
    return ncclSuccess;
  }

  std::deque<CtrlItem> ctrl_queue_;
  StreamRates rates_;
  uint64_t seq_ = 0;
  uint64_t wire_ = 0;          // bytes posted (headers included)
  uint64_t ctrl_written_ = 0;  // bytes written to the control stream
};

class SocketRecvConn final : public RecvConn, private SocketConn {
 public:
  SocketRecvConn(const std::vector<int>& fds, int per_thread) : SocketConn(fds, per_thread, false) {}

  ncclResult_t peek(uint8_t* meta, uint64_t* payload_len, bool* ready) override {
    *ready = false;
    ZIPCCL_CHECK(progress());
    if (state_ != State::kPeeked) return ncclSuccess;
    std::memcpy(meta, hdr_.meta, kMetaBytes);
    *payload_len = hdr_.payload_len;
    *ready = true;
    return ncclSuccess;
  }

  ncclResult_t recv(void* dst, size_t capacity, int* op) override {
    *op = kNoOp;
    if (state_ != State::kPeeked) {
      ZIPCCL_WARN("recv without a peeked message");
      return ncclInternalError;
    }
    if (hdr_.payload_len > capacity) {
      ZIPCCL_WARN("incoming message carries %llu bytes but the receive buffer holds %zu; refusing it",
                  (unsigned long long)hdr_.payload_len, capacity);
      error_.store(1);
      return ncclSystemError;
    }
    int id = ops_.acquire();
    if (id < 0) return ncclSuccess;
    OpSlot* slot = ops_.get(id);
    char* p = static_cast<char*>(dst);
    if (hdr_.flags & kFlagInline) {
      slot->pending.store(1);
      inline_dst_ = p;
      inline_got_ = 0;
      inline_op_ = slot;
      state_ = State::kInline;
    } else {
      enqueue_pieces(p, hdr_.payload_len, hdr_.chunk, map_, slot, 0);
      next_header();
    }
    *op = id;
    ZIPCCL_CHECK(progress());
    return ncclSuccess;
  }

  ncclResult_t test(int op, bool* done) override {
    *done = false;
    ZIPCCL_CHECK(progress());
    return test_op(op, "receive", done);
  }

 private:
  enum class State { kHeader, kMap, kPeeked, kInline };

  void next_header() {
    state_ = State::kHeader;
    hdr_got_ = 0;
    ++expected_seq_;
  }

  // Reads what the control stream has; returns false on EOF/error (error_ set).
  bool read_some(char* dst, size_t want, size_t* got) {
    while (*got < want) {
      ssize_t n = ::recv(ctrl_, dst + *got, want - *got, MSG_DONTWAIT);
      if (n > 0) {
        *got += static_cast<size_t>(n);
        continue;
      }
      if (n == 0) {
        ZIPCCL_WARN("peer closed the connection (control stream)");
        error_.store(1);
        return false;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return true;
      ZIPCCL_WARN("control stream recv failed: %s", std::strerror(errno));
      error_.store(1);
      return false;
    }
    return true;
  }

  ncclResult_t progress() {
    if (error_.load()) return ncclSystemError;
    if (state_ == State::kInline) {
      if (!read_some(inline_dst_, hdr_.payload_len, &inline_got_)) return ncclSystemError;
      if (inline_got_ < hdr_.payload_len) return ncclSuccess;
      inline_op_->pending.fetch_sub(1, std::memory_order_acq_rel);
      next_header();
    }
    if (state_ == State::kHeader) {
      if (!read_some(reinterpret_cast<char*>(&hdr_), sizeof hdr_, &hdr_got_)) return ncclSystemError;
      if (hdr_got_ < sizeof hdr_) return ncclSuccess;
      ZIPCCL_CHECK(validate());
      map_len_ = (hdr_.flags & kFlagInline) ? 0 : static_cast<size_t>((hdr_.payload_len + hdr_.chunk - 1) / hdr_.chunk);
      map_got_ = 0;
      state_ = State::kMap;
    }
    if (state_ == State::kMap) {
      if (!read_some(reinterpret_cast<char*>(map_), map_len_, &map_got_)) return ncclSystemError;
      if (map_got_ < map_len_) return ncclSuccess;
      for (size_t i = 0; i < map_len_; ++i) {
        if (map_[i] >= nstreams_) {
          ZIPCCL_WARN("corrupt piece map on the control stream (piece %zu on stream %u of %d); closing the "
                      "connection", i, map_[i], nstreams_);
          error_.store(1);
          return ncclSystemError;
        }
      }
      state_ = State::kPeeked;
    }
    return ncclSuccess;
  }

  ncclResult_t validate() {
    const char* bad = nullptr;
    if (hdr_.magic != kHeaderMagic)
      bad = "bad magic";
    else if (hdr_.seq != expected_seq_)
      bad = "out-of-sequence message";
    else if (hdr_.flags & ~kFlagInline)
      bad = "unknown flags";
    else if (hdr_.payload_len > (1ull << 40))
      bad = "absurd payload length";
    else if (!(hdr_.flags & kFlagInline)) {
      if (nstreams_ == 0 || hdr_.chunk == 0 || hdr_.payload_len == 0)
        bad = "split message without streams or chunk";
      else if (hdr_.chunk > (1ull << 40))
        bad = "absurd chunk size";  // keeps the piece arithmetic exact
      else if ((hdr_.payload_len + hdr_.chunk - 1) / hdr_.chunk >
               static_cast<uint64_t>(nstreams_) * kPiecesPerStream)
        bad = "more pieces than the streams may carry";
    }
    if (bad) {
      ZIPCCL_WARN("corrupt message header on the control stream (%s); closing the connection", bad);
      error_.store(1);
      return ncclSystemError;
    }
    return ncclSuccess;
  }

  State state_ = State::kHeader;
  MsgHeader hdr_{};
  size_t hdr_got_ = 0;
  uint8_t map_[kMaxPieces];
  size_t map_len_ = 0, map_got_ = 0;
  uint64_t expected_seq_ = 0;
  char* inline_dst_ = nullptr;
  size_t inline_got_ = 0;
  OpSlot* inline_op_ = nullptr;
};

class SocketListener final : public Listener {
 public:
  SocketListener(int fd, uint64_t nonce, int per_thread) : fd_(fd), nonce_(nonce), per_thread_(per_thread) {}
  ~SocketListener() override {
    close(fd_);
    for (Pending& p : pending_) close(p.fd);
    for (auto& g : groups_) {
      for (int fd : g.second.fds) {
        if (fd >= 0) close(fd);
      }
    }
  }

  ncclResult_t accept(RecvConn** conn) override {
    *conn = nullptr;
    for (;;) {
      int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        ZIPCCL_WARN("accept failed: %s", std::strerror(errno));
        return ncclSystemError;
      }
      tune_socket(fd);
      pending_.push_back(Pending{fd, {}, 0, Clock::now()});
    }
    auto timeout = std::chrono::milliseconds(settings().connect_timeout_ms);
    for (size_t i = 0; i < pending_.size();) {
      Pending& p = pending_[i];
      bool drop = false;
      char* buf = reinterpret_cast<char*>(&p.hello);
      while (p.got < sizeof(Hello)) {
        ssize_t n = ::recv(p.fd, buf + p.got, sizeof(Hello) - p.got, MSG_DONTWAIT);
        if (n > 0) {
          p.got += static_cast<size_t>(n);
          continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        drop = true;
        break;
      }
      if (!drop && p.got < sizeof(Hello) && Clock::now() - p.since > timeout) {
        ZIPCCL_WARN("dropping an incoming socket that sent no hello within %d ms",
                    settings().connect_timeout_ms);
        drop = true;
      }
      if (!drop && p.got == sizeof(Hello)) {
        const char* bad = check_hello(p.hello);
        if (bad) {
          ZIPCCL_WARN("rejecting an incoming socket: %s (not a zipccl peer, or a stale handle)", bad);
          drop = true;
        } else {
          Group& g = groups_[p.hello.conn_id];
          if (g.fds.empty()) {
            g.fds.assign(p.hello.nstreams + 1, -1);
            g.since = Clock::now();
          }
          if (g.fds.size() != p.hello.nstreams + 1 || g.fds[p.hello.index] >= 0) {
            ZIPCCL_WARN("rejecting an incoming socket: inconsistent stream %u/%u", p.hello.index,
                        p.hello.nstreams);
            drop = true;
          } else {
            g.fds[p.hello.index] = p.fd;
            pending_.erase(pending_.begin() + i);
            continue;
          }
        }
      }
      if (drop) {
        close(p.fd);
        pending_.erase(pending_.begin() + i);
        continue;
      }
      ++i;
    }
    for (auto it = groups_.begin(); it != groups_.end();) {
      bool complete = true;
      for (int fd : it->second.fds) complete &= fd >= 0;
      if (complete) {
        // The sender follows this listener's plan (handle), so its streams group as ours do.
        int nstreams = static_cast<int>(it->second.fds.size()) - 1;
        int per = per_thread_;
        *conn = new SocketRecvConn(it->second.fds, per < nstreams ? per : (nstreams ? nstreams : 1));
        groups_.erase(it);
        return ncclSuccess;
      }
      if (Clock::now() - it->second.since > timeout) {
        ZIPCCL_WARN("dropping a half-open connection (not all streams arrived within %d ms)",
                    settings().connect_timeout_ms);
        for (int fd : it->second.fds) {
          if (fd >= 0) close(fd);
        }
        it = groups_.erase(it);
        continue;
      }
      ++it;
    }
    return ncclSuccess;
  }

 private:
  struct Pending {
    int fd;
    Hello hello;
    size_t got;
    Clock::time_point since;
  };
  struct Group {
    std::vector<int> fds;
    Clock::time_point since;
  };

  const char* check_hello(const Hello& h) const {
    if (h.magic != kHelloMagic) return "wrong magic";
    if (h.version != kWireVersion) return "unsupported wire version";
    if (h.nonce != nonce_) return "handle nonce mismatch";
    if (h.nstreams > kMaxStreams) return "too many streams";
    if (h.index > h.nstreams) return "stream index out of range";
    return nullptr;
  }

  int fd_;
  uint64_t nonce_;
  int per_thread_;  // this listener's plan: data streams per helper thread
  std::vector<Pending> pending_;
  std::map<uint64_t, Group> groups_;
};

// Progress of one connect(); registered so a handle's pointer is only trusted if we made it.
struct ConnectState {
  SocketAddr peer;
  uint64_t nonce;
  uint64_t conn_id;
  int nstreams;
  int per_thread;
  std::vector<int> fds;
  std::vector<Hello> hellos;
  std::vector<size_t> sent;
  std::vector<int> stage;  // 0 connecting, 1 sending hello, 2 done, 3 retry
  Clock::time_point since;
  Clock::time_point retry_at;
};

std::mutex g_connect_mu;
std::set<ConnectState*>& g_connects = *new std::set<ConnectState*>;  // never destroyed: see net.cpp

class SocketTransport final : public Transport {
 public:
  SocketTransport(std::vector<SocketIface> ifaces) : ifaces_(std::move(ifaces)) {
    // NCCL decides per device at listen (its handle carries the counts); the settings are read once,
    // so each device's plan is fixed here and logged once.
    const Settings& s = settings();
    for (const SocketIface& i : ifaces_) {
      const std::string vendor = interface_vendor(s.fabric_root, i.name);
      StreamPlan p = plan_streams(s.socket_nthreads, s.nsocks_per_thread, vendor);
      if (!p.warning.empty()) ZIPCCL_WARN("%s: %s", i.name.c_str(), p.warning.c_str());
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "%s: %d data streams per connection, %d helper threads x %d (%s)",
                  i.name.c_str(), p.streams, p.nthreads, p.per_thread, p.source.c_str());
      plans_.push_back(p);
    }
  }
  const char* name() const override { return "socket"; }
  int device_count() const override { return static_cast<int>(ifaces_.size()); }

  ncclResult_t device_info(int dev, DeviceInfo* info) const override {
    if (dev < 0 || dev >= device_count()) return ncclInvalidArgument;
    const SocketIface& i = ifaces_[dev];
    info->name = i.name;
    info->speed_mbps = 10000;
    std::ifstream speed("/sys/class/net/" + i.name + "/speed");
    int mbps = 0;
    if (speed >> mbps && mbps > 0) info->speed_mbps = mbps;
    char path[PATH_MAX];
    std::string dev_link = "/sys/class/net/" + i.name + "/device";
    info->pci_path = realpath(dev_link.c_str(), path) ? path : "";
    info->guid = static_cast<uint64_t>(dev);
    return ncclSuccess;
  }

  ncclResult_t listen(int dev, void* handle, Listener** listener) override {
    *listener = nullptr;
    if (dev < 0 || dev >= device_count()) {
      ZIPCCL_WARN("listen on device %d but only %d exist", dev, device_count());
      return ncclInternalError;
    }
    SocketAddr addr = ifaces_[dev].addr;
    int fd = make_socket(addr.sa.sa_family);
    if (fd < 0) {
      ZIPCCL_WARN("socket() failed: %s", std::strerror(errno));
      return ncclSystemError;
    }
    if (bind(fd, &addr.sa, addr_len(addr)) != 0 || ::listen(fd, 1024) != 0) {
      ZIPCCL_WARN("cannot listen on %s (%s): %s", ifaces_[dev].name.c_str(), addr_to_string(addr).c_str(),
                  std::strerror(errno));
      close(fd);
      return ncclSystemError;
    }
    socklen_t len = sizeof addr;
    getsockname(fd, &addr.sa, &len);
    SocketHandle h{};
    h.magic = kHandleMagic;
    h.nonce = random_u64();
    h.addr = addr;
    h.nstreams = static_cast<uint32_t>(plans_[dev].streams);
    h.per_thread = static_cast<uint32_t>(plans_[dev].per_thread);
    std::memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    std::memcpy(handle, &h, sizeof h);
    *listener = new SocketListener(fd, h.nonce, plans_[dev].per_thread);
    ZIPCCL_TRACE("listening on %s", addr_to_string(addr).c_str());
    return ncclSuccess;
  }

  ncclResult_t connect(int /*dev*/, void* handle, SendConn** conn) override {
    *conn = nullptr;
    SocketHandle h;
    std::memcpy(&h, handle, sizeof h);
    if (h.magic != kHandleMagic || (h.addr.sa.sa_family != AF_INET && h.addr.sa.sa_family != AF_INET6)) {
      ZIPCCL_WARN("connect: the handle is not a zipccl socket handle (magic %016llx)",
                  (unsigned long long)h.magic);
      return ncclInternalError;
    }
    if (h.nstreams < 1 || h.nstreams > kMaxStreams || h.per_thread < 1 || h.per_thread > h.nstreams) {
      ZIPCCL_WARN("connect: the handle asks for %u data streams, %u per thread (1..%u expected)", h.nstreams,
                  h.per_thread, kMaxStreams);
      return ncclInternalError;
    }
    ConnectState* st = reinterpret_cast<ConnectState*>(static_cast<uintptr_t>(h.connect_state));
    if (st) {
      std::lock_guard<std::mutex> lock(g_connect_mu);
      if (!g_connects.count(st)) {
        ZIPCCL_WARN("connect: the handle carries connect state this process did not create");
        return ncclInternalError;
      }
    } else {
      st = new ConnectState();
      st->peer = h.addr;
      st->nonce = h.nonce;
      st->conn_id = random_u64();
      st->nstreams = static_cast<int>(h.nstreams);
      st->per_thread = static_cast<int>(h.per_thread);
      st->fds.assign(st->nstreams + 1, -1);
      st->hellos.resize(st->nstreams + 1);
      st->sent.assign(st->nstreams + 1, 0);
      st->stage.assign(st->nstreams + 1, 3);
      st->since = st->retry_at = Clock::now();
      for (int i = 0; i <= st->nstreams; ++i) {
        st->hellos[i] = Hello{kHelloMagic,
                              kWireVersion,
                              h.nonce,
                              st->conn_id,
                              static_cast<uint32_t>(i),
                              static_cast<uint32_t>(st->nstreams)};
      }
      {
        std::lock_guard<std::mutex> lock(g_connect_mu);
        g_connects.insert(st);
      }
      h.connect_state = reinterpret_cast<uintptr_t>(st);
      std::memcpy(handle, &h, sizeof h);
    }
    bool done = false;
    ncclResult_t res = step(st, &done);
    if (res != ncclSuccess || done) {
      {
        std::lock_guard<std::mutex> lock(g_connect_mu);
        g_connects.erase(st);
      }
      h.connect_state = 0;
      std::memcpy(handle, &h, sizeof h);
      if (res == ncclSuccess) {
        *conn = new SocketSendConn(st->fds, st->per_thread);
      } else {
        for (int fd : st->fds) {
          if (fd >= 0) close(fd);
        }
      }
      delete st;
    }
    return res;
  }

 private:
  ncclResult_t step(ConnectState* st, bool* done) {
    auto now = Clock::now();
    if (now - st->since > std::chrono::milliseconds(settings().connect_timeout_ms)) {
      ZIPCCL_WARN("connect to %s timed out after %d ms", addr_to_string(st->peer).c_str(),
                  settings().connect_timeout_ms);
      return ncclSystemError;
    }
    bool all = true;
    for (int i = 0; i <= st->nstreams; ++i) {
      int& fd = st->fds[i];
      if (st->stage[i] == 3) {
        if (now < st->retry_at) {
          all = false;
          continue;
        }
        if (fd >= 0) close(fd);
        fd = make_socket(st->peer.sa.sa_family);
        if (fd < 0) {
          ZIPCCL_WARN("socket() failed: %s", std::strerror(errno));
          return ncclSystemError;
        }
        int rc = ::connect(fd, &st->peer.sa, addr_len(st->peer));
        if (rc == 0)
          st->stage[i] = 1;
        else if (errno == EINPROGRESS || errno == EINTR)
          st->stage[i] = 0;
        else if (!retryable(errno, st))
          return ncclSystemError;
      }
      if (st->stage[i] == 0) {
        pollfd p{fd, POLLOUT, 0};
        if (poll(&p, 1, 0) <= 0) {
          all = false;
          continue;
        }
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err == 0)
          st->stage[i] = 1;
        else if (!retryable(err, st))
          return ncclSystemError;
      }
      if (st->stage[i] == 1) {
        char* b = reinterpret_cast<char*>(&st->hellos[i]);
        while (st->sent[i] < sizeof(Hello)) {
          ssize_t n = send(fd, b + st->sent[i], sizeof(Hello) - st->sent[i], MSG_NOSIGNAL | MSG_DONTWAIT);
          if (n > 0) {
            st->sent[i] += static_cast<size_t>(n);
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          ZIPCCL_WARN("connect to %s: sending hello failed: %s", addr_to_string(st->peer).c_str(),
                      std::strerror(errno));
          return ncclSystemError;
        }
        if (st->sent[i] == sizeof(Hello)) st->stage[i] = 2;
      }
      all &= st->stage[i] == 2;
    }
    *done = all;
    return ncclSuccess;
  }

  // Refused connections are retried until the timeout (the peer may still be setting up).
  bool retryable(int err, ConnectState* st) {
    if (err == ECONNREFUSED || err == ETIMEDOUT || err == EAGAIN) {
      for (int i = 0; i <= st->nstreams; ++i) {
        if (st->stage[i] != 2) {
          st->stage[i] = 3;
          st->sent[i] = 0;
        }
      }
      st->retry_at = Clock::now() + std::chrono::milliseconds(20);
      return true;
    }
    ZIPCCL_WARN("connect to %s failed: %s", addr_to_string(st->peer).c_str(), std::strerror(err));
    return false;
  }

  std::vector<SocketIface> ifaces_;
  std::vector<StreamPlan> plans_;  // one per device
};

}  // namespace

Transport* socket_transport() {
  static Transport* instance = []() -> Transport* {
    const char* spec = std::getenv("NCCL_SOCKET_IFNAME");
    const char* fam = std::getenv("NCCL_SOCKET_FAMILY");
    bool ok = true;
    int family = parse_family(fam, &ok);
    if (!ok) ZIPCCL_WARN("NCCL_SOCKET_FAMILY='%s' is not AF_INET or AF_INET6; using any family", fam);
    std::vector<SocketIface> ifaces = find_interfaces(spec ? spec : "", family);
    if (ifaces.empty()) {
      ZIPCCL_WARN(
          "no usable interface (NCCL_SOCKET_IFNAME='%s'); set NCCL_SOCKET_IFNAME to an interface "
          "that is up and has an address",
          spec ? spec : "");
      return nullptr;
    }
    std::string line;
    for (size_t i = 0; i < ifaces.size(); ++i) {
      line += " [" + std::to_string(i) + "]" + ifaces[i].name + ":" + addr_to_string(ifaces[i].addr);
    }
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "Using%s (NCCL_SOCKET_IFNAME='%s' NCCL_SOCKET_FAMILY='%s')",
                line.c_str(), spec ? spec : "", fam ? fam : "");
    return new SocketTransport(std::move(ifaces));
  }();
  return instance;
}

}  // namespace net
}  // namespace zipccl
