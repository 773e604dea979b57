// The compressing layer: NCCL-facing send and receive comms over any transport connection. Each
// message travels as a frame header (frame.h) plus either the message (raw) or one codec frame.
// Host buffers are encoded and decoded on the worker pool; device buffers (NCCL_PTR_CUDA) on the GPU
// through gpu_path.h (send: encode into device staging, copy the frame to pinned staging, post;
// receive: pinned staging, copy to the device, decode into NCCL's buffer). The proxy thread only polls.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "../nccl/net_common.h"
#include "frame.h"
#include "gpu_path.h"
#include "policy.h"
#include "stats.h"
#include "transport.h"
#include "worker_pool.h"
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
  // device: `data` is device memory (the mhandle's type is NCCL_PTR_CUDA).
  ncclResult_t isend(void* data, size_t size, int tag, bool device, void** request);
  ncclResult_t isend(void* data, size_t size, int tag, void** request) {  // host memory
    return isend(data, size, tag, false, request);
  }
  ncclResult_t test(void* request, int* done, size_t* size);
  SendConn* conn() const { return conn_.get(); }

  CommHeader header{kSendCommMagic};

 private:
  // Device messages: kGpuEncoding (encode enqueued, its size polled in pinned memory) -> kGpuCopying
  // (D2H of the frame or of the raw message enqueued, event polled) -> kReady. Host messages:
  // kEncoding (worker pool) -> kReady. Then kPosted, strictly in isend order.
  enum class State { kFree, kEncoding, kGpuEncoding, kGpuCopying, kReady, kPosted };
  struct Req {
    RequestHeader h;
    State state = State::kFree;
    bool device = false;
    const void* staged = nullptr;  // device messages: the pinned copy that is posted
    std::chrono::steady_clock::time_point gpu_t0;
    const char* data = nullptr;
    size_t size = 0;
    int tag = 0;
    FrameKind kind = FrameKind::kRaw;
    size_t wire = 0;
    int op = kNoOp;
    EncodeJob job;
    std::vector<char> staging;
  };
  ncclResult_t progress();
  void finish_encode(Req* r);
  void start_sample(Req* r, codec::ElemType type);
  void finish_sample();
  ncclResult_t start_device(Req* r, bool compress, codec::ElemType type);
  ncclResult_t copy_to_host(Req* r, const void* src, size_t n);
  ncclResult_t progress_device();

  std::unique_ptr<SendConn> conn_;
  std::unique_ptr<gpu::Channel> gpu_;  // created at the first device message
  uint64_t gpu_messages_ = 0, gpu_encoded_ = 0;
  std::vector<Req> reqs_;
  std::vector<int> free_;
  std::deque<int> unposted_;
  Policy policy_;
  EncodeJob sample_job_;  // at most one codec sample in flight per comm
  bool sample_busy_ = false;
  std::vector<char> sample_staging_;
  std::vector<char> sample_src_;  // the sampled slice, copied so the message need not wait for it
  ConnStats stats_;
  bool failed_ = false;
  // Link sampling (see sample_link).
  std::chrono::steady_clock::time_point last_sample_, created_;
  uint64_t last_delivered_ = 0, last_backlog_ = 0;
  uint64_t acc_bytes_ = 0;
  double acc_seconds_ = 0;
  void sample_link();
};

class RecvComm {
 public:
  RecvComm(RecvConn* conn, const DeviceInfo& dev);
  ~RecvComm();
  // device: `data` is device memory; marked: NCCL marked the receive as LL/LL128 (gpu_path.h).
  ncclResult_t irecv(void* data, size_t size, int tag, bool device, bool marked, void** request);
  ncclResult_t irecv(void* data, size_t size, int tag, void** request) {  // host memory
    return irecv(data, size, tag, false, false, request);
  }
  ncclResult_t test(void* request, int* done, size_t* size);
  RecvConn* conn() const { return conn_.get(); }

  CommHeader header{kRecvCommMagic};

 private:
  // Device receives: kWaitHeader -> kReceiving (into pinned staging) -> kGpuLanding (H2D, decode,
  // flag-last landing enqueued; event polled) -> done. Host: kReceiving -> kDecoding (pool) -> done.
  enum class State { kFree, kWaitHeader, kReceiving, kDecoding, kGpuLanding };
  struct Req {
    RequestHeader h;
    State state = State::kFree;
    bool device = false;
    bool landing = false;  // land flag-last (gpu::needs_ordered_landing)
    void* host_stage = nullptr;
    char* data = nullptr;
    size_t capacity = 0;
    FrameMeta meta{};
    int op = kNoOp;
    DecodeJob job;
    std::vector<char> staging;
    const void* staged = nullptr;  // the transport's copy of the codec frame (take_staged), if any
  };
  ncclResult_t progress();
  ncclResult_t fail(Req* r);
  void start_decode(Req* r, const void* src);
  ncclResult_t start_device_landing(Req* r, const void* src);
  ncclResult_t finish_device_landing(Req* r, bool* done);

  std::unique_ptr<RecvConn> conn_;
  std::unique_ptr<gpu::Channel> gpu_;
  uint64_t gpu_messages_ = 0, gpu_decoded_ = 0;
  std::vector<Req> reqs_;
  std::vector<int> free_;
  std::deque<int> unmatched_;
  ConnStats stats_;
  bool failed_ = false;
  std::chrono::steady_clock::time_point created_;
};

}  // namespace net
}  // namespace zipccl
