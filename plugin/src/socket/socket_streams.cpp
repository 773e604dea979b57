#include "socket/socket_streams.h"

#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "common/log.h"
#include "socket/socket_wire.h"

namespace zipccl {
namespace net {
namespace {
constexpr size_t kMaxLowat = 256 << 10;
}  // namespace

OpTable::OpTable(int capacity) : slots_(capacity) {
  free_.reserve(capacity);
  for (int i = capacity - 1; i >= 0; --i) free_.push_back(i);
}

int OpTable::acquire() {
  if (free_.empty()) return -1;
  int id = free_.back();
  free_.pop_back();
  slots_[id].in_use = true;
  slots_[id].pending.store(0);
  slots_[id].error.store(0);
  return id;
}

void OpTable::release(int id) {
  if (!valid(id)) return;
  slots_[id].in_use = false;
  free_.push_back(id);
}

OpSlot* OpTable::get(int id) {
  return valid(id) ? &slots_[id] : nullptr;
}

void assign_pieces(const uint64_t* backlog, const double* rate, int nstreams, int npieces, uint64_t chunk,
                   uint64_t len, int first, uint8_t* map) {
  double fastest = 0;
  for (int s = 0; s < nstreams; ++s) fastest = rate[s] > fastest ? rate[s] : fastest;
  double load[kMaxStreams], pace[kMaxStreams];
  for (int s = 0; s < nstreams; ++s) {
    load[s] = static_cast<double>(backlog[s]);
    pace[s] = rate[s] > 0 ? rate[s] : (fastest > 0 ? fastest : 1.0);
  }
  for (int i = 0; i < npieces; ++i) {
    uint64_t off = static_cast<uint64_t>(i) * chunk;
    double piece = static_cast<double>(len - off < chunk ? len - off : chunk);
    int best = first % nstreams;
    double best_t = (load[best] + piece) / pace[best];
    for (int k = 1; k < nstreams; ++k) {
      int s = (first + k) % nstreams;
      double t = (load[s] + piece) / pace[s];
      if (t < best_t) {
        best = s;
        best_t = t;
      }
    }
    load[best] += piece;
    map[i] = static_cast<uint8_t>(best);
  }
}

void StreamRates::update(const uint64_t* moved, const uint64_t* backlog, int nstreams, double now_s) {
  constexpr double kMinSpan = 1e-3;  // shorter looks are all noise
  constexpr double kAlpha = 0.25;
  if (nstreams > kMax) nstreams = kMax;
  if (last_s_ >= 0 && now_s - last_s_ < kMinSpan) return;
  for (int s = 0; s < nstreams; ++s) {
    bool busy = backlog[s] > 0;
    if (last_s_ >= 0 && last_busy_[s] && busy) {
      double r = static_cast<double>(moved[s] - last_moved_[s]) / (now_s - last_s_);
      rate_[s] = rate_[s] > 0 ? rate_[s] + kAlpha * (r - rate_[s]) : r;
    } else if (!last_busy_[s] && !busy) {
      // Idle at two looks: its rate is stale, and a stream once measured slow would otherwise get no
      // piece (so no new measurement) for as long as the others keep little queued. Unmeasured counts
      // as the fastest, so it is tried again.
      rate_[s] = 0;
    }
    last_moved_[s] = moved[s];
    last_busy_[s] = busy;
  }
  last_s_ = now_s;
}

StreamThread::StreamThread(std::vector<int> fds, bool sending, std::atomic<int>* conn_error,
                           int io_timeout_ms)
    : fds_(fds), sending_(sending), conn_error_(conn_error), io_timeout_ms_(io_timeout_ms) {
  backlog_.reset(new std::atomic<uint64_t>[fds.size()]);
  sock_moved_.reset(new std::atomic<uint64_t>[fds.size()]);
  for (size_t i = 0; i < fds.size(); ++i) {
    backlog_[i].store(0);
    sock_moved_[i].store(0);
  }
  for (int fd : fds) socks_.push_back(Sock{fd, {}, 0});
  event_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  thread_ = std::thread([this] { run(); });
}

StreamThread::~StreamThread() {
  stop_.store(true);
  uint64_t one = 1;
  if (event_fd_ >= 0) (void)!write(event_fd_, &one, sizeof one);
  if (thread_.joinable()) thread_.join();
  for (Sock& s : socks_) close(s.fd);
  if (event_fd_ >= 0) close(event_fd_);
}

void StreamThread::enqueue(int local_index, const Piece& p) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) {
      p.op->error.store(1);
      return;
    }
    socks_[local_index].queue.push_back(p);
  }
  backlog_[local_index].fetch_add(p.len, std::memory_order_relaxed);
  uint64_t one = 1;
  (void)!write(event_fd_, &one, sizeof one);
}

void StreamThread::fail_all(const char* why, int err) {
  ZIPCCL_WARN("%s stream failed: %s (%s); the connection is unusable", sending_ ? "send" : "receive", why,
              err ? std::strerror(err) : "no error code");
  conn_error_->store(1);
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = true;
  for (size_t i = 0; i < socks_.size(); ++i) {
    Sock& s = socks_[i];
    for (Piece& p : s.queue) p.op->error.store(1);
    s.queue.clear();
    s.offset = 0;
    backlog_[i].store(0, std::memory_order_relaxed);
  }
}

// Moves bytes on one socket until it would block. Returns true if any byte moved.
bool StreamThread::step(Sock* s, bool* failed) {
  bool progressed = false;
  for (;;) {
    Piece* p;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (s->queue.empty()) return progressed;
      p = &s->queue.front();
    }
    while (s->offset < p->len) {
      ssize_t n = sending_ ? send(s->fd, p->ptr + s->offset, p->len - s->offset, MSG_NOSIGNAL | MSG_DONTWAIT)
                           : recv(s->fd, p->ptr + s->offset, p->len - s->offset, MSG_DONTWAIT);
      if (n > 0) {
        s->offset += static_cast<size_t>(n);
        backlog_[s - socks_.data()].fetch_sub(static_cast<uint64_t>(n), std::memory_order_relaxed);
        sock_moved_[s - socks_.data()].fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
        progressed = true;
        continue;
      }
      if (n == 0 && !sending_) {
        fail_all("peer closed the connection", 0);
        *failed = true;
        return progressed;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return progressed;
      fail_all(sending_ ? "send" : "recv", errno);
      *failed = true;
      return progressed;
    }
    OpSlot* op = p->op;
    {
      std::lock_guard<std::mutex> lock(mu_);
      s->queue.pop_front();
      s->offset = 0;
    }
    op->pending.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void StreamThread::run() {
  using Clock = std::chrono::steady_clock;
  auto last_progress = Clock::now();
  std::vector<pollfd> pfds;
  while (!stop_.load()) {
    bool progressed = false, failed = false, busy = false;
    if (!failed_) {
      for (Sock& s : socks_) {
        progressed |= step(&s, &failed);
        if (failed) break;
      }
    }
    if (progressed) {
      last_progress = Clock::now();
      continue;
    }
    pfds.clear();
    pfds.push_back(pollfd{event_fd_, POLLIN, 0});
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Sock& s : socks_) {
        if (s.queue.empty()) continue;
        pfds.push_back(pollfd{s.fd, static_cast<short>(sending_ ? POLLOUT : POLLIN), 0});
        busy = true;
        if (!sending_) {
          // Wake only once a useful amount has arrived (or the piece's remainder, or EOF): one
          // recv per wakeup moves hundreds of KiB instead of one segment. Measured on loopback.
          // Kept well below the receive buffer so the kernel can always satisfy it (newer kernels
          // grow the buffer themselves; older ones do not).
          size_t want = s.queue.front().len - s.offset;
          int lowat = static_cast<int>(want < kMaxLowat ? want : kMaxLowat);
          if (lowat != s.lowat) {
            int rcvbuf = 0;
            socklen_t len = sizeof rcvbuf;
            if (getsockopt(s.fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, &len) == 0 && lowat > rcvbuf / 4) {
              lowat = rcvbuf / 4;
            }
            if (lowat < 1) lowat = 1;
            if (setsockopt(s.fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof lowat) == 0) s.lowat = lowat;
          }
        }
      }
    }
    if (!busy) last_progress = Clock::now();
    if (busy && io_timeout_ms_ > 0 &&
        Clock::now() - last_progress > std::chrono::milliseconds(io_timeout_ms_)) {
      fail_all("no progress within ZIPCCL_IO_TIMEOUT_MS", ETIMEDOUT);
      continue;
    }
    int rc = poll(pfds.data(), pfds.size(), 100);
    if (rc > 0 && (pfds[0].revents & POLLIN)) {
      uint64_t v;
      (void)!read(event_fd_, &v, sizeof v);
    }
  }
}

}  // namespace net
}  // namespace zipccl
