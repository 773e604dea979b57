// Helper threads of the socket transport: each drives a few non-blocking TCP streams of one
// connection, moving the pieces of large messages while NCCL's proxy thread only polls.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zipccl {
namespace net {

// Completion state of one message. `pending` counts outstanding pieces (the control-stream part
// included); the proxy thread owns everything else.
struct OpSlot {
  std::atomic<int> pending{0};
  std::atomic<int> error{0};
  bool in_use = false;
};

// Fixed pool of op slots, sized at connect time (no allocation per message).
class OpTable {
 public:
  explicit OpTable(int capacity);
  int acquire();  // -1 when full
  void release(int id);
  OpSlot* get(int id);
  bool valid(int id) const { return id >= 0 && id < static_cast<int>(slots_.size()) && slots_[id].in_use; }

 private:
  std::vector<OpSlot> slots_;
  std::vector<int> free_;
};

struct Piece {
  char* ptr;
  size_t len;
  OpSlot* op;
};

// Which data stream carries each of the `npieces` pieces of a message (`chunk` bytes each, the last
// `len` - (npieces-1)*chunk): each piece in turn goes to the stream that would finish it first, from
// its queued bytes (`backlog[s]`, plus the pieces already placed) and its measured rate (`rate[s]`,
// bytes/s; 0 = not measured yet, taken as the fastest measured); ties go to the first such stream
// from `first` on. TCP flows that share a bottleneck, or hash onto different paths, rarely get equal
// shares, and a message is done only when its last piece is: the fixed round robin NCCL uses paces
// every stream at the slowest one's rate. `map` gets npieces entries.
void assign_pieces(const uint64_t* backlog, const double* rate, int nstreams, int npieces, uint64_t chunk,
                   uint64_t len, int first, uint8_t* map);

// Per-stream send rates for assign_pieces: bytes a stream moved between two looks, counted only while
// it had bytes queued at both (an idle stream's pace says nothing), smoothed; a stream idle at two looks
// is unmeasured again.
class StreamRates {
 public:
  void update(const uint64_t* moved, const uint64_t* backlog, int nstreams, double now_s);
  const double* rates() const { return rate_; }

 private:
  static constexpr int kMax = 64;
  double rate_[kMax] = {};
  uint64_t last_moved_[kMax] = {};
  bool last_busy_[kMax] = {};
  double last_s_ = -1;
};

class StreamThread {
 public:
  // Takes ownership of `fds` (non-blocking sockets). `sending` picks the direction. Any failure sets
  // *conn_error (and the failing ops' error) and keeps the thread idle until destruction.
  StreamThread(std::vector<int> fds, bool sending, std::atomic<int>* conn_error, int io_timeout_ms);
  ~StreamThread();
  StreamThread(const StreamThread&) = delete;
  StreamThread& operator=(const StreamThread&) = delete;

  void enqueue(int local_index, const Piece& p);
  // Bytes queued on socket `local_index` and not yet handed to the kernel, and handed so far.
  uint64_t backlog(int local_index) const { return backlog_[local_index].load(std::memory_order_relaxed); }
  uint64_t moved(int local_index) const { return sock_moved_[local_index].load(std::memory_order_relaxed); }
  // Bytes this thread has moved through its sockets so far.
  uint64_t bytes_moved() const {
    uint64_t sum = 0;
    for (size_t i = 0; i < fds_.size(); ++i) sum += moved(static_cast<int>(i));
    return sum;
  }
  const std::vector<int>& fds() const { return fds_; }

 private:
  struct Sock {
    int fd;
    std::deque<Piece> queue;  // guarded by mu_; references stay valid across push_back
    size_t offset = 0;        // progress within queue.front(), thread-only
    int lowat = 1;            // SO_RCVLOWAT currently set (receive streams)
  };
  void run();
  bool step(Sock* s, bool* failed);
  void fail_all(const char* why, int err);

  std::vector<Sock> socks_;
  std::vector<int> fds_;  // the sockets' descriptors, in order (fixed after construction)
  bool sending_;
  std::atomic<int>* conn_error_;
  int io_timeout_ms_;
  int event_fd_ = -1;
  std::mutex mu_;
  std::atomic<bool> stop_{false};
  std::unique_ptr<std::atomic<uint64_t>[]> backlog_;     // per socket
  std::unique_ptr<std::atomic<uint64_t>[]> sock_moved_;  // per socket
  std::atomic<bool> failed_{false};
  std::thread thread_;
};

}  // namespace net
}  // namespace zipccl
