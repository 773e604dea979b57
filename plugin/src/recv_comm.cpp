// Receive side of the compressing layer: match receives to incoming frames in order, validate every
// header, land raw payloads directly in NCCL's buffer and codec frames in staging, decode on the
// worker pool, and report the uncompressed size.
#include <algorithm>
#include <thread>

#include "comm.h"
#include "log.h"
#include "settings.h"

namespace zipccl {
namespace net {
namespace {
using Clock = std::chrono::steady_clock;
}

void DecodeJob::run() {
  auto t0 = Clock::now();
  codec::DecodeOptions opt;
  opt.threads = 1;
  status = codec::decode(src, n, dst, cap, &out, opt);
  ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

RecvComm::RecvComm(RecvConn* conn, const DeviceInfo& dev) : conn_(conn), reqs_(settings().max_requests) {
  for (int i = static_cast<int>(reqs_.size()) - 1; i >= 0; --i) {
    reqs_[i].h.is_send = false;
    reqs_[i].h.comm = this;
    free_.push_back(i);
  }
  stats_.direction = "recv";
  stats_.peer = dev.name;
  created_ = Clock::now();
}

RecvComm::~RecvComm() {
  for (Req& r : reqs_) {
    if (r.state == State::kDecoding) {
      while (!r.job.done.load(std::memory_order_acquire)) std::this_thread::yield();
    }
  }
  conn_.reset();  // stops the transport's helper threads before NCCL frees its buffers
  gpu_.reset();   // waits for this comm's stream (copies, decodes into NCCL's buffers)
  if (gpu_messages_) {
    ZIPCCL_INFO(NCCL_NET, "GPU path (recv): %llu device messages, %llu decoded on the device",
                (unsigned long long)gpu_messages_, (unsigned long long)gpu_decoded_);
  }
  header.magic = kDeadMagic;
  for (Req& r : reqs_) r.h.magic = kDeadMagic;
  stats_.seconds = std::chrono::duration<double>(Clock::now() - created_).count();
  report_stats(stats_);
}

ncclResult_t RecvComm::irecv(void* data, size_t size, int /*tag*/, bool device, bool marked, void** request) {
  *request = nullptr;
  if (failed_) return ncclSystemError;
  if (size && !data) {
    ZIPCCL_WARN("irecv of %zu bytes into a null buffer", size);
    return ncclInternalError;
  }
  if (free_.empty()) return ncclSuccess;
  int idx = free_.back();
  free_.pop_back();
  Req& r = reqs_[idx];
  r.data = static_cast<char*>(data);
  r.capacity = size;
  r.op = kNoOp;
  r.state = State::kWaitHeader;
  r.staged = nullptr;
  r.device = device;
  r.host_stage = nullptr;
  ncclResult_t res = ncclSuccess;
  void* target = data;
  if (device) {
    // Every payload for a device receive lands in pinned staging first (a socket cannot write device
    // memory); it goes to the device on this comm's stream.
    gpu::DeviceOps* ops = gpu::device_ops();
    if (!ops) {
      ZIPCCL_WARN("irecv into device memory, but the GPU path is off");
      failed_ = true;
      return ncclInternalError;
    }
    if (!gpu_) gpu_.reset(new gpu::Channel(ops, static_cast<int>(reqs_.size())));
    int dev = ops->device_of(data);
    if (dev < 0) {
      ZIPCCL_WARN("irecv: %p is registered as device memory but CUDA does not know it", data);
      failed_ = true;
      return ncclInternalError;
    }
    res = gpu_->bind(dev);
    if (res == ncclSuccess) {
      res = gpu_->buffer(idx, gpu::Channel::Buf::kHost, std::max(size, codec::max_encoded_size(size)),
                         &r.host_stage);
    }
    if (res != ncclSuccess) {
      failed_ = true;
      return res;
    }
    r.landing = gpu::needs_ordered_landing(
        settings().gpu_landing == "marked" ? gpu::Landing::kMarked : gpu::Landing::kOrdered, marked);
    target = r.host_stage;
    ++gpu_messages_;
  }
  unmatched_.push_back(idx);
  *request = &r.h;
  res = conn_->post_target(target, size, codec::max_encoded_size(size));
  if (res == ncclSuccess) res = progress();
  if (res != ncclSuccess) failed_ = true;
  return res;
}

// Matches posted receives to arriving frames, oldest first.
ncclResult_t RecvComm::progress() {
  while (!unmatched_.empty()) {
    Req* r = &reqs_[unmatched_.front()];
    uint64_t payload_len = 0;
    bool ready = false;
    ZIPCCL_CHECK(conn_->peek(reinterpret_cast<uint8_t*>(&r->meta), &payload_len, &ready));
    if (!ready) break;
    const char* bad = validate_frame(r->meta, payload_len, r->capacity, codec::max_encoded_size(r->capacity));
    if (bad) {
      ZIPCCL_WARN(
          "rejecting an incoming message: %s (frame: kind %u, %llu B original, %llu B on wire; "
          "posted receive %zu B)",
          bad, r->meta.kind, (unsigned long long)r->meta.original_len, (unsigned long long)r->meta.wire_len,
          r->capacity);
      return ncclSystemError;
    }
    void* dst = r->data;
    size_t cap = r->capacity;
    if (r->device) {
      if (const void* staged = conn_->take_staged()) {  // already in transport memory: copy from there
        r->staged = staged;
        ZIPCCL_CHECK(start_device_landing(r, staged));
        unmatched_.pop_front();
        continue;
      }
      dst = r->host_stage;
      cap = payload_len;
    } else if (r->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
      if (const void* staged = conn_->take_staged()) {  // already in transport memory: decode from there
        r->staged = staged;
        start_decode(r, staged);
        unmatched_.pop_front();
        continue;
      }
      if (r->staging.size() < payload_len) r->staging.resize(payload_len);  // bounded by validate_frame
      dst = r->staging.data();
      cap = payload_len;
    }
    int op = kNoOp;
    ZIPCCL_CHECK(conn_->recv(dst, cap, &op));
    if (op == kNoOp) break;
    r->op = op;
    r->state = State::kReceiving;
    unmatched_.pop_front();
  }
  return ncclSuccess;
}

void RecvComm::start_decode(Req* r, const void* src) {
  r->job.src = src;
  r->job.n = r->meta.wire_len;
  r->job.dst = r->data;
  r->job.cap = r->meta.original_len;  // never past the message: bytes beyond it stay untouched
  r->job.out = 0;
  r->job.done.store(false);
  r->state = State::kDecoding;
  worker_pool().submit(&r->job);
}

// Device receive, payload in host memory at src: H2D, then decode (codec frames) into NCCL's buffer
// or, when landing flag-last, into device staging followed by the line-ordered copy. One event at the
// end; the request completes only after it (so after the decode).
ncclResult_t RecvComm::start_device_landing(Req* r, const void* src) {
  gpu::DeviceOps* ops = gpu_->ops();
  void* stream = gpu_->stream();
  int slot = static_cast<int>(r - reqs_.data());
  size_t wire = r->meta.wire_len, n = r->meta.original_len;
  using Buf = gpu::Channel::Buf;
  if (r->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
    void* frame = nullptr;
    ZIPCCL_CHECK(gpu_->buffer(slot, Buf::kDevice, wire, &frame));
    ZIPCCL_CHECK(ops->copy(stream, frame, src, wire, gpu::Copy::kHostToDevice));
    void* out = r->data;
    if (r->landing) ZIPCCL_CHECK(gpu_->buffer(slot, Buf::kLand, n, &out));
    gpu::Result* res = gpu_->result(slot);
    gpu::result_clear(res);
    ZIPCCL_CHECK(ops->decode(stream, frame, wire, out, n, settings().gpu_max_sms, res));
    if (r->landing) ZIPCCL_CHECK(ops->land_lines(stream, r->data, out, n));
  } else if (r->landing) {
    void* tmp = nullptr;
    ZIPCCL_CHECK(gpu_->buffer(slot, Buf::kLand, n, &tmp));
    ZIPCCL_CHECK(ops->copy(stream, tmp, src, n, gpu::Copy::kHostToDevice));
    ZIPCCL_CHECK(ops->land_lines(stream, r->data, tmp, n));
  } else {
    ZIPCCL_CHECK(ops->copy(stream, r->data, src, n, gpu::Copy::kHostToDevice));
  }
  ZIPCCL_CHECK(gpu_->record(slot));
  r->state = State::kGpuLanding;
  return ncclSuccess;
}

ncclResult_t RecvComm::finish_device_landing(Req* r, bool* done) {
  int slot = static_cast<int>(r - reqs_.data());
  ZIPCCL_CHECK(gpu_->query(slot, done));
  if (!*done) return ncclSuccess;
  if (r->staged) conn_->release_staged(r->staged);
  r->staged = nullptr;
  if (r->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
    const gpu::Result* res = gpu_->result(slot);
    auto st = gpu::result_ready(res) ? static_cast<codec::Status>(res->status) : codec::Status::kCorrupt;
    if (st != codec::Status::kOk || res->size != r->meta.original_len) {
      ZIPCCL_WARN("corrupt compressed frame from the peer (GPU decode: %s, %llu of %llu bytes)",
                  codec::status_string(st), (unsigned long long)res->size,
                  (unsigned long long)r->meta.original_len);
      return ncclSystemError;
    }
    ++stats_.compressed;
    ++gpu_decoded_;
  }
  return ncclSuccess;
}

ncclResult_t RecvComm::fail(Req* /*r*/) {
  failed_ = true;
  ++stats_.errors;
  return ncclSystemError;
}

ncclResult_t RecvComm::test(void* request, int* done, size_t* size) {
  *done = 0;
  Req* r = reinterpret_cast<Req*>(request);
  if (r < reqs_.data() || r >= reqs_.data() + reqs_.size() || r->state == State::kFree) {
    ZIPCCL_WARN("test on a receive request this comm does not own (or already completed)");
    return ncclInternalError;
  }
  if (failed_) return ncclSystemError;
  if (progress() != ncclSuccess) return fail(r);
  if (r->state == State::kReceiving) {
    bool finished = false;
    if (conn_->test(r->op, &finished) != ncclSuccess) return fail(r);
    if (!finished) return ncclSuccess;
    if (r->device) {
      if (start_device_landing(r, r->host_stage) != ncclSuccess) return fail(r);
      return ncclSuccess;
    }
    if (r->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
      start_decode(r, r->staging.data());
      return ncclSuccess;
    }
  } else if (r->state == State::kGpuLanding) {
    bool finished = false;
    if (finish_device_landing(r, &finished) != ncclSuccess) return fail(r);
    if (!finished) return ncclSuccess;
  } else if (r->state == State::kDecoding) {
    if (!r->job.done.load(std::memory_order_acquire)) return ncclSuccess;
    if (r->staged) conn_->release_staged(r->staged);
    r->staged = nullptr;
    stats_.codec_ns += r->job.ns;
    if (r->job.status != codec::Status::kOk || r->job.out != r->meta.original_len) {
      ZIPCCL_WARN("corrupt compressed frame from the peer (%s, %zu of %llu bytes decoded)",
                  codec::status_string(r->job.status), r->job.out, (unsigned long long)r->meta.original_len);
      return fail(r);
    }
    ++stats_.compressed;
  } else {
    return ncclSuccess;  // still waiting for its frame
  }
  ++stats_.messages;
  stats_.bytes_in += r->meta.original_len;
  stats_.bytes_wire += r->meta.wire_len;
  *done = 1;
  if (size) *size = r->meta.original_len;
  r->state = State::kFree;
  free_.push_back(static_cast<int>(r - reqs_.data()));
  return ncclSuccess;
}

}  // namespace net
}  // namespace zipccl
