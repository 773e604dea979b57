// Receive side of the compressing layer: match receives to incoming frames in order, validate every
// header, land raw payloads directly in NCCL's buffer and codec frames in staging, decode on the
// worker pool, and report the uncompressed size.
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
  header.magic = kDeadMagic;
  for (Req& r : reqs_) r.h.magic = kDeadMagic;
  stats_.seconds = std::chrono::duration<double>(Clock::now() - created_).count();
  report_stats(stats_);
}

ncclResult_t RecvComm::irecv(void* data, size_t size, int /*tag*/, void** request) {
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
  unmatched_.push_back(idx);
  *request = &r.h;
  ncclResult_t res = conn_->post_target(data, size, codec::max_encoded_size(size));
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
    if (r->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
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
    if (r->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
      start_decode(r, r->staging.data());
      return ncclSuccess;
    }
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
