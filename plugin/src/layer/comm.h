// The compressing layer: NCCL-facing send and receive comms over any transport connection. Each
// message travels as a frame header (frame.h) plus either the message (raw) or one codec frame.
// Host buffers are encoded and decoded on the worker pool; device buffers (NCCL_PTR_CUDA) on the GPU
// through gpu_path.h (send: encode into device staging, copy the frame to pinned staging, post;
// receive: pinned staging, copy to the device, decode into NCCL's buffer). The proxy thread only polls.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include "common/log.h"
#include "gpu/gpu_path.h"
#include "layer/frame.h"
#include "layer/policy.h"
#include "layer/profiler_events.h"
#include "layer/stats.h"
#include "layer/worker_pool.h"
#include "nccl/net_common.h"
#include "transport.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace net {

constexpr uint32_t kSendCommMagic = 0x53435a5au;
constexpr uint32_t kRecvCommMagic = 0x52435a5au;
constexpr uint32_t kListenCommMagic = 0x4c435a5au;
constexpr uint32_t kRequestMagic = 0x51435a5au;
constexpr uint32_t kDeadMagic = 0xdeadbeefu;

// First member of every object handed to NCCL, so a pointer coming back can be checked.
struct CommHeader {
  uint32_t magic;
};

class SendComm;
class RecvComm;

struct RequestHeader {
  uint32_t magic = kRequestMagic;
  bool is_send = false;
  void* comm = nullptr;
};

// Keeps memory the transport may still use after its connection closed (a channel with its staging, a
// send staging) for the process's lifetime, reachable (for LeakSanitizer), as the transport keeps what
// such a connection leaves open: a failed job leaks a little instead of the inner using freed memory.
// Out of memory for the list it is leaked unreferenced, never freed.
template <typename T, typename D>
void keep_reachable(std::unique_ptr<T, D> p) noexcept {
  static std::mutex mu;
  static auto* kept = new std::vector<std::unique_ptr<T, D>>;
  std::lock_guard<std::mutex> lock(mu);
  try {
    kept->push_back(std::move(p));
  } catch (...) {
    p.release();
  }
}

// The GPU path's pinned host staging registered with the connection's transport, when it asks for it
// (BufferRegistry::pins_staging: the inner transport), so that device messages are posted from and
// land in it without the transport's own copy; with `device` (a sender over a transport that posts
// device memory, BufferRegistry::posts_device) the device staging too, as device memory, so codec
// frames go from where they were encoded. Each arena is pinned once, by the regMr that made it and
// before the Channel publishes it to the data path, and unpinned at close; while the transport still
// has requests in flight nothing is unpinned and the staging must outlive the connection (close()
// says so).
// A staging the transport refuses is not an error: the staging comes from CUDA memory pools, which
// GPUDirect RDMA (nvidia-peermem or a dma-buf export) does not document as supported, while NCCL's own
// buffers register fine. Refused host staging goes through the transport's own registered buffers (a
// host copy); refused device staging turns device frames off for the comm (frames go through the
// pinned host staging, as over sockets). The regMr itself succeeds either way.
class StagingPins {
 public:
  ncclResult_t pin_new(BufferRegistry* reg, const gpu::Channel& ch, bool device) {
    if (!reg || !reg->pins_staging()) return ncclSuccess;
    if (!pin_arenas(reg, ch, gpu::Channel::Buf::kHost)) {
      refused("host", "device messages go through the transport's own registered buffers (a host copy)");
    }
    if (device && reg->posts_device() && !device_refused_) {
      if (pin_arenas(reg, ch, gpu::Channel::Buf::kDevice)) {
        device_frames_.store(true, std::memory_order_release);
      } else {
        device_refused_ = true;
        device_frames_.store(false, std::memory_order_release);
        refused("device", "codec frames go through the pinned host staging instead (one more copy)");
      }
    }
    return ncclSuccess;
  }
  // Whether codec frames may be posted from the device staging (every device arena is pinned).
  bool device_frames() const { return device_frames_.load(std::memory_order_acquire); }
  // Before the connection closes. False: the transport may still use the staging, which must then be
  // left allocated (keep_reachable).
  bool close(BufferRegistry* reg) {
    if (!reg || pinned_.empty()) return true;
    if (reg->in_flight()) return false;
    for (void* p : pinned_) reg->unpin(p);
    pinned_.clear();
    return true;
  }

 private:
  // Pins each arena of kind `which` not pinned yet; false when the transport refused one. The
  // registrations run outside the Channel's lock (for_each_arena holds it): pinning can take long.
  bool pin_arenas(BufferRegistry* reg, const gpu::Channel& ch, gpu::Channel::Buf which) {
    std::vector<std::pair<void*, size_t>> todo;
    ch.for_each_arena(which, [&](void* base, size_t bytes) {
      if (std::find(pinned_.begin(), pinned_.end(), base) == pinned_.end()) todo.emplace_back(base, bytes);
    });
    bool all = true;
    for (const auto& a : todo) {
      MemDesc m;
      m.data = a.first;
      m.size = a.second;
      m.device = which != gpu::Channel::Buf::kHost;
      if (reg->pin(m) == ncclSuccess) {
        pinned_.push_back(a.first);
      } else {
        all = false;
      }
    }
    return all;
  }
  // A WARN the first time in the process (after the transport's own report of the failure), then INFO.
  static void refused(const char* kind, const char* what) {
    ZIPCCL_WARN_FIRST(
        NCCL_NET,
        "GPU path: the transport did not register the GPU path's %s staging (see above; handled): %s", kind,
        what);
  }
  std::vector<void*> pinned_;
  bool device_refused_ = false;              // regMr only (NCCL's service thread)
  std::atomic<bool> device_frames_{false};  // set by regMr (NCCL's service thread), read by the data path
};

// The CPU codec's send staging of one request: codec frames of host messages are encoded into it and
// posted from it. Over a transport that pins staging (BufferRegistry::pins_staging: the inner plugin,
// RDMA) it is registered with the connection when it grows, so each frame is posted in place; else the
// inner transport copies every frame through a bounce buffer of its own and RDMA registers the frame's
// range for each message. It grows to the largest message its request has carried and is reused;
// growth happens only while its request is idle (no transport op reads it). It is aligned to whole host
// pages, the unit transports register in (RDMA widens a registration to whole pages), so no other
// buffer shares a page with it. A registration the transport refuses is not an error: frames then go as
// they would without it, and the comm asks no more (`refused`, shared by its requests).
class SendStaging {
 public:
  SendStaging() = default;
  SendStaging(const SendStaging&) = delete;
  SendStaging& operator=(const SendStaging&) = delete;
  char* data() const { return buf_.get(); }
  // Room for n bytes; false when memory is short (the message then goes raw).
  bool reserve(BufferRegistry* reg, size_t n, bool* refused) {
    if (n <= size_) return true;
    unpin(reg);
    static const size_t page = [] {
      const long ps = sysconf(_SC_PAGESIZE);
      return ps > 4096 ? static_cast<size_t>(ps) : size_t{4096};
    }();
    const size_t want = (n + page - 1) / page * page;
    void* p = nullptr;
    if (posix_memalign(&p, page, want) != 0) return false;
    buf_.reset(static_cast<char*>(p));
    size_ = want;
    if (!reg || !reg->pins_staging() || *refused) return true;
    MemDesc m;
    m.data = buf_.get();
    m.size = size_;
    pinned_ = reg->pin(m) == ncclSuccess;
    if (!pinned_) {
      *refused = true;
      said_refused();
    }
    return true;
  }
  // Before the connection closes. False: the transport may still read it; then it is kept for the
  // process's lifetime (keep()) instead of freed.
  bool close(BufferRegistry* reg) {
    if (!pinned_) return true;
    if (reg->in_flight()) return false;
    unpin(reg);
    return true;
  }
  // Leaves the buffer allocated for the process's lifetime (keep_reachable).
  void keep() noexcept {
    size_ = 0;
    pinned_ = false;
    keep_reachable(std::move(buf_));
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  void unpin(BufferRegistry* reg) {
    if (pinned_) reg->unpin(buf_.get());
    pinned_ = false;
  }
  // A WARN the first time in the process (after the transport's own report of the failure), then INFO.
  static void said_refused() {
    ZIPCCL_WARN_FIRST(NCCL_NET,
                      "the transport did not register the codec's send staging (see above; handled): codec "
                      "frames of host messages go through its own registered buffers (a host copy) or a "
                      "registration per message on this connection");
  }
  std::unique_ptr<char, Free> buf_;
  size_t size_ = 0;
  bool pinned_ = false;
};

class EncodeJob final : public Job {
 public:
  void run() override;
  const void* src = nullptr;
  size_t n = 0;
  void* dst = nullptr;
  size_t cap = 0;
  codec::ElemType type = codec::ElemType::kAuto;
  size_t out = 0;
  codec::Status status = codec::Status::kOk;
  uint64_t ns = 0;
};

class DecodeJob final : public Job {
 public:
  void run() override;
  const void* src = nullptr;
  size_t n = 0;
  void* dst = nullptr;
  size_t cap = 0;
  size_t out = 0;
  codec::Status status = codec::Status::kOk;
  uint64_t ns = 0;
};

class SendComm {
 public:
  SendComm(SendConn* conn, const DeviceInfo& dev);
  ~SendComm();  // waits for its codec jobs, reports statistics
  // device: `data` is device memory (the mhandle's type is NCCL_PTR_CUDA). phandle: NCCL's profiler
  // handle of the message (v10+; nullptr: none).
  ncclResult_t isend(void* data, size_t size, int tag, bool device, void* phandle, void** request);
  ncclResult_t isend(void* data, size_t size, int tag, bool device, void** request) {
    return isend(data, size, tag, device, nullptr, request);
  }
  ncclResult_t isend(void* data, size_t size, int tag, void** request) {  // host memory
    return isend(data, size, tag, false, nullptr, request);
  }
  ncclResult_t test(void* request, int* done, size_t* size);
  // regMr of `size` bytes of device memory at `data`: everything device messages from it need is
  // allocated, created and loaded now (gpu::Channel::reserve), none of it on the data path.
  ncclResult_t reserve_device(void* data, size_t size);
  SendConn* conn() const { return conn_.get(); }
  // The connection as a BufferRegistry (regMr, staging pins, flushes); null when it is not one.
  BufferRegistry* registry() const { return registry_; }

  CommHeader header{kSendCommMagic};

 private:
  // A message is sent as 1..n segments (frame.h; n > 1 only with ZIPCCL_SEGMENT_BYTES on a transport
  // that carries segments), each its own transport message and frame. Per segment: device messages
  // kGpuEncoding (encode enqueued on the stream, size polled in pinned memory) -> kGpuCopying (D2H of
  // the frame or of the raw bytes enqueued on the copy stream, event polled) -> kReady; host messages
  // kEncoding (worker pool) -> kReady. Segments are posted strictly in order (message by message, in
  // isend order), each as soon as it is ready; the request completes when all its segments' transport
  // ops have completed.
  enum class SegState { kEncoding, kGpuEncoding, kGpuCopying, kReady, kPosted };
  struct Seg {
    SegState state = SegState::kReady;
    size_t off = 0, len = 0;  // the segment's bytes within the message
    size_t stage_off = 0;     // its region in the staging buffers (max_encoded_size(len) bytes)
    FrameKind kind = FrameKind::kRaw;
    size_t wire = 0;
    const void* staged = nullptr;   // device messages: what is posted (pinned copy, or device frame)
    gpu::Result* result = nullptr;  // device encodes
    EncodeJob job;
  };
  enum class State { kFree, kActive, kPosted };
  struct Req {
    RequestHeader h;
    State state = State::kFree;
    bool device = false;
    bool tried = false;  // an encode was attempted (for raw_incompressible)
    bool chosen = false;  // the policy chose to compress it (Policy::on_delivered)
    std::chrono::steady_clock::time_point gpu_t0;
    const char* data = nullptr;
    size_t size = 0;
    int tag = 0;
    codec::ElemType type = codec::ElemType::kAuto;
    size_t nsegs = 1;
    size_t stage_bytes = 0;  // staging the segments' regions take (sum of max_encoded_size)
    size_t next_post = 0;    // segments posted so far
    int inflight = 0;        // posted segments whose transport op has not completed
    size_t wire = 0;         // sum of the segments' wire bytes
    uint64_t codec_ns = 0;   // its segments' encode time
    bool any_codec = false;
    ProfilerEvent prof;      // NCCL's profiler event of the message (profiler_events.h)
    std::vector<std::unique_ptr<Seg>> segs;  // grown to the most segments seen, reused
    SendStaging staging;
  };
  struct PostedOp {
    int req;
    int op;
  };
  ncclResult_t progress();
  void finish_encode(Req* r, Seg* g);
  bool choose_compress(Req* r);
  void plan_segments(Req* r);
  void start_sample(Req* r, codec::ElemType type);
  void finish_sample();
  ncclResult_t start_device(Req* r, bool compress, bool* busy);
  ncclResult_t encode_finished(int slot, const Seg* g, bool* finished);
  ncclResult_t copy_to_host(Req* r, Seg* g, size_t j, const void* src, size_t n);
  ncclResult_t progress_device();

  std::unique_ptr<SendConn> conn_;
  BufferRegistry* const registry_;  // conn_ as a BufferRegistry, looked up once
  // Made with the comm when the GPU path is on, never replaced: regMr (service thread) reserves in it
  // while the progress thread reads it.
  std::unique_ptr<gpu::Channel> gpu_;
  StagingPins staging_pins_;
  bool staging_refused_ = false;  // the transport refused a request's send staging (SendStaging::reserve)
  uint64_t gpu_messages_ = 0;   // device messages started (the close line; stats_ counts completed ones)
  uint64_t segment_bytes_ = 0;  // 0: messages go whole on this connection
  std::vector<Req> reqs_;
  std::vector<int> free_;
  std::deque<int> unposted_;     // messages with segments not yet posted, in isend order
  std::deque<PostedOp> posted_;  // transport ops in flight, in posting order
  Policy policy_;
  EncodeJob sample_job_;  // at most one codec sample in flight per comm
  bool sample_busy_ = false;
  std::vector<char> sample_staging_;
  std::vector<char> sample_src_;  // the sampled slice, copied so the message need not wait for it
  std::shared_ptr<ConnStats> stats_;  // counters shared with the live snapshots (stats.h)
  bool failed_ = false;
  // Link sampling (see sample_link).
  std::chrono::steady_clock::time_point last_sample_, created_;
  uint64_t last_delivered_ = 0, last_backlog_ = 0;
  uint64_t acc_bytes_ = 0;
  double acc_seconds_ = 0;
  void sample_link();
  // Busy time for Policy::on_delivered: from the later of the last completion and the moment a
  // message became outstanding on an idle comm.
  std::chrono::steady_clock::time_point busy_from_;
};

class RecvComm {
 public:
  RecvComm(RecvConn* conn, const DeviceInfo& dev);
  ~RecvComm();
  // A grouped irecv of n receives (1 <= n <= max_recvs()): one request, done when all n are; receive i
  // takes the message sent with tags[i] (the transport matches them, RecvConn::post_group).
  // device[i]: data[i] is device memory; marked: NCCL marked the receive (n == 1) as LL/LL128
  // (gpu_path.h); phandles: NCCL's profiler handles of the n receives (v10+; nullptr: none).
  ncclResult_t irecv(int n, void* const* data, const size_t* sizes, const int* tags, const bool* device, bool marked,
                     void* const* phandles, void** request);
  ncclResult_t irecv(void* data, size_t size, int tag, bool device, bool marked, void** request) {
    return irecv(1, &data, &size, &tag, &device, marked, nullptr, request);
  }
  ncclResult_t irecv(void* data, size_t size, int tag, void** request) {  // host memory
    return irecv(data, size, tag, false, false, request);
  }
  // sizes: room for the request's n receives' sizes; *count (optional) is set to n.
  ncclResult_t test(void* request, int* done, size_t* sizes, int* count = nullptr);
  int max_recvs() const { return max_recvs_; }
  // regMr of device memory: as SendComm::reserve_device.
  ncclResult_t reserve_device(void* data, size_t size);
  RecvConn* conn() const { return conn_.get(); }
  // The connection as a BufferRegistry (regMr, staging pins, flushes); null when it is not one.
  BufferRegistry* registry() const { return registry_; }

  CommHeader header{kRecvCommMagic};

 private:
  // One receive consumes 1..n transport messages (segments, frame.h Assembly), matched in order: the
  // receive stays at the head of `unmatched_` until its last segment's header has been accepted. Per
  // segment: host receives kReceiving (raw: into NCCL's buffer at the segment's offset; codec: into
  // staging at the same offset) -> kDecoding (pool, into NCCL's buffer at the offset) -> kDone; device
  // receives kReceiving (into pinned staging at the offset) -> H2D, decode (or copy), flag-last
  // landing enqueued on the stream -> kDone (the receive's event, recorded after its last segment's
  // work, completes them all). A device receive landing in device staging (Req::in_device) passes
  // through kFlushing (the transport's flush of the region, flush_pinned) before its decode (or
  // device-to-device copy) is enqueued, with no H2D. Segments progress independently of the request
  // NCCL tests.
  enum class SegState { kReceiving, kFlushing, kDecoding, kGpuQueued, kDone };
  struct Seg {
    SegState state = SegState::kReceiving;
    FrameMeta meta{};
    size_t off = 0;
    int op = kNoOp;
    const void* staged = nullptr;   // the transport's copy of the codec frame (take_staged), if any
    const void* src = nullptr;      // where the payload is (staging) once received
    gpu::Result* result = nullptr;  // device decodes
    DecodeJob job;
  };
  enum class State { kFree, kActive, kGpuLanding };
  struct Req {
    RequestHeader h;
    State state = State::kFree;
    bool device = false;
    bool landing = false;  // land flag-last (gpu::needs_ordered_landing)
    bool in_device = false;  // device receive landing in device staging (StagingPins::device_frames)
    void* host_stage = nullptr;
    void* dev_stage = nullptr;   // device receives: codec frames, laid out like the message
    void* land_stage = nullptr;  // device receives landing flag-last
    char* data = nullptr;
    size_t capacity = 0;
    Assembly asm_;
    FrameMeta meta{};      // the header peeked for the next segment
    size_t nsegs = 0;      // segments whose header was accepted
    size_t done_segs = 0;  // segments needing nothing more from the host
    size_t scan = 0;       // segments before it are all done (advance() starts there)
    uint64_t wire = 0;
    uint64_t codec_ns = 0;  // its segments' host decode time
    bool any_codec = false;
    ProfilerEvent prof;     // NCCL's profiler event of the receive (profiler_events.h)
    std::vector<std::unique_ptr<Seg>> segs;
    std::unique_ptr<char[]> staging;  // host codec segments, at their offsets
    size_t staging_cap = 0;
    int tag = 0;
    bool check_tag = false;  // in a group of n > 1: the frame must carry this receive's tag
    int group_n = 0;        // the group's first receive (the request NCCL holds): its n; others 0
    int group[kMaxRecvs];   // the first receive: the group's receives, in posted order
  };
  ncclResult_t claim(Req* r, void* data, size_t size, bool device, bool marked, bool* busy);
  void unclaim(Req* r);
  bool complete(Req* r, ncclResult_t* res);
  void finish(Req* r);
  ncclResult_t progress();
  ncclResult_t advance(Req* r);
  ncclResult_t fail(Req* r);
  void start_decode(Req* r, Seg* g, const void* src);
  ncclResult_t start_device_segment(Req* r, Seg* g, size_t j, const void* src);
  ncclResult_t take_device_staging(Req* r, bool marked, bool* busy);
  ncclResult_t finish_device_landing(Req* r, bool* done);

  std::unique_ptr<RecvConn> conn_;
  BufferRegistry* const registry_;  // conn_ as a BufferRegistry, looked up once
  std::unique_ptr<gpu::Channel> gpu_;  // as SendComm's
  StagingPins staging_pins_;
  uint64_t gpu_messages_ = 0;  // device receives posted (the close line; stats_ counts completed ones)
  uint64_t device_landed_ = 0;  // payloads landed in device staging (each flushed before it is read)
  std::vector<Req> reqs_;
  std::vector<int> free_;
  std::deque<int> unmatched_;
  std::vector<int> active_;  // receives with segments in flight (any order)
  std::shared_ptr<ConnStats> stats_;  // counters shared with the live snapshots (stats.h)
  bool failed_ = false;
  int max_recvs_ = 1;
  std::chrono::steady_clock::time_point created_;
};

}  // namespace net
}  // namespace zipccl
