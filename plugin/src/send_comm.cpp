// Send side of the compressing layer: decide raw or compressed per message, encode on the worker
// pool, and hand frames to the transport strictly in isend order.
#include <algorithm>
#include <thread>

#include "comm.h"
#include "log.h"
#include "settings.h"

namespace zipccl {
namespace net {
namespace {

using Clock = std::chrono::steady_clock;
// The link is sampled every kSampleEvery while it stays backlogged by at least kMinBacklog, and a
// rate goes to the policy once kSampleSpan of busy time has accumulated: long enough to average TCP's
// bursts, short enough to follow a change within tens of milliseconds.
constexpr auto kSampleEvery = std::chrono::microseconds(500);
constexpr uint64_t kMinBacklog = 64u << 10;
constexpr double kSampleSpan = 0.02;
// Size of the codec sample taken from a raw message while the policy chooses raw.
constexpr size_t kSampleBytes = 256u << 10;

uint64_t ns_since(Clock::time_point t0) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

codec::ElemType hint_type(DtypeHint h) {
  switch (h) {
    case DtypeHint::kBf16:
      return codec::ElemType::kBf16;
    case DtypeHint::kFp16:
      return codec::ElemType::kFp16;
    case DtypeHint::kFp32:
      return codec::ElemType::kFp32;
    case DtypeHint::kAuto:
      break;
  }
  return codec::ElemType::kAuto;
}

}  // namespace

void EncodeJob::run() {
  auto t0 = Clock::now();
  codec::EncodeOptions opt;
  opt.type = type;
  opt.threads = 1;
  status = codec::encode(src, n, dst, cap, &out, opt);
  ns = ns_since(t0);
}

SendComm::SendComm(SendConn* conn, const DeviceInfo& dev)
    : conn_(conn),
      reqs_(settings().max_requests),
      policy_(settings().compress, settings().min_bytes,
              (settings().link_gbps > 0 ? settings().link_gbps * 1e3 : dev.speed_mbps) * 1e6 / 8,
              settings().link_gbps <= 0, worker_pool().threads(), settings().probe_interval) {
  for (int i = static_cast<int>(reqs_.size()) - 1; i >= 0; --i) {
    reqs_[i].h.is_send = true;
    reqs_[i].h.comm = this;
    free_.push_back(i);
  }
  stats_.direction = "send";
  stats_.peer = dev.name;
  created_ = last_sample_ = Clock::now();
}

SendComm::~SendComm() {
  // Jobs still on the pool reference our buffers: wait for them (bounded by one encode each).
  for (Req& r : reqs_) {
    if (r.state == State::kEncoding) {
      while (!r.job.done.load(std::memory_order_acquire)) std::this_thread::yield();
    }
  }
  if (sample_busy_) {
    while (!sample_job_.done.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  conn_.reset();  // joins the transport's helper threads, which may still read staging buffers
  gpu_.reset();   // waits for this comm's stream, then frees its device and pinned buffers
  if (gpu_messages_) {
    ZIPCCL_INFO(NCCL_NET, "GPU path (send): %llu device messages, %llu sent as device-encoded frames",
                (unsigned long long)gpu_messages_, (unsigned long long)gpu_encoded_);
  }
  header.magic = kDeadMagic;
  for (Req& r : reqs_) r.h.magic = kDeadMagic;
  stats_.link_gbps = policy_.link_bps() * 8e-9;
  stats_.seconds = ns_since(created_) * 1e-9;
  report_stats(stats_);
}

ncclResult_t SendComm::isend(void* data, size_t size, int tag, bool device, void** request) {
  *request = nullptr;
  if (failed_) return ncclSystemError;
  if (size && !data) {
    ZIPCCL_WARN("isend of %zu bytes from a null buffer", size);
    return ncclInternalError;
  }
  if (free_.empty()) return ncclSuccess;  // NCCL retries
  int idx = free_.back();
  free_.pop_back();
  Req& r = reqs_[idx];
  r.data = static_cast<const char*>(data);
  r.size = size;
  r.tag = tag;
  r.kind = FrameKind::kRaw;
  r.wire = size;
  r.op = kNoOp;
  r.state = State::kReady;
  r.device = device;
  r.staged = nullptr;

  const Settings& s = settings();
  bool compress = false;
  if (size < s.min_bytes || s.compress == CompressMode::kNever) {
    ++stats_.raw_small;
  } else {
    // The policy first: a message it sends raw needs no type detection (in auto the detector only
    // runs for messages about to be encoded or sampled), so raw traffic costs what `never` costs.
    bool sample = false;
    bool want = policy_.choose(size, &sample);
    codec::ElemType type = hint_type(s.dtype);
    if (device) {
      // The host cannot read device memory: the GPU codec detects the type (kAuto) and the message
      // the policy wants sampled is encoded whole on the device (that measures the GPU codec).
      if (want || sample) {
        compress = true;
        r.job.type = type;
      } else {
        ++stats_.raw_policy;
      }
    } else {
      if ((want || sample) && type == codec::ElemType::kAuto && s.compress == CompressMode::kAuto) {
        type = codec::detect_elem_type(data, size);
      }
      if (!want) {
        ++stats_.raw_policy;
        if (sample && type != codec::ElemType::kNone) start_sample(&r, type);
      } else if (type == codec::ElemType::kNone) {
        ++stats_.raw_incompressible;
      } else {
        compress = true;
        r.job.type = type;
      }
    }
  }
  if (device) {
    unposted_.push_back(idx);
    *request = &r.h;
    ncclResult_t res = start_device(&r, compress && size > 0, r.job.type);
    if (res == ncclSuccess) res = progress();
    if (res != ncclSuccess) failed_ = true;
    return res;
  }
  if (compress) {
    size_t cap = codec::max_encoded_size(size);
    if (r.staging.size() < cap) r.staging.resize(cap);  // grows to the largest message, then reused
    r.job.src = data;
    r.job.n = size;
    r.job.dst = r.staging.data();
    r.job.cap = cap;
    r.job.out = 0;
    r.job.done.store(false);
    r.state = State::kEncoding;
    worker_pool().submit(&r.job);
  }
  unposted_.push_back(idx);
  *request = &r.h;
  ncclResult_t res = progress();
  if (res != ncclSuccess) failed_ = true;
  return res;
}

// Encodes the first kSampleBytes of a raw message on the pool for the policy's estimates; the message
// itself goes raw immediately. The slice is copied first (~20 us, once per 16..256 messages), so the
// message's request completes as soon as its bytes are sent, whenever the worker gets to the sample.
void SendComm::start_sample(Req* r, codec::ElemType type) {
  if (sample_busy_) return;
  size_t n = std::min(r->size, kSampleBytes);
  size_t cap = codec::max_encoded_size(n);
  if (sample_staging_.size() < cap) sample_staging_.resize(cap);
  sample_src_.assign(r->data, r->data + n);
  sample_job_.src = sample_src_.data();
  sample_job_.n = n;
  sample_job_.dst = sample_staging_.data();
  sample_job_.cap = cap;
  sample_job_.type = type;
  sample_job_.out = 0;
  sample_job_.done.store(false);
  sample_busy_ = true;
  worker_pool().submit(&sample_job_);
}

// Feeds a finished codec sample to the policy; polled from progress().
void SendComm::finish_sample() {
  if (!sample_busy_ || !sample_job_.done.load(std::memory_order_acquire)) return;
  if (sample_job_.status == codec::Status::kOk) {
    policy_.on_encoded(sample_job_.n, sample_job_.out, sample_job_.ns * 1e-9);
  }
  stats_.codec_ns += sample_job_.ns;
  sample_busy_ = false;
}

// Device message: encode on the GPU into device staging (its size arrives in pinned memory), or copy
// the raw message to pinned staging. Nothing here waits for the device.
ncclResult_t SendComm::start_device(Req* r, bool compress, codec::ElemType type) {
  gpu::DeviceOps* ops = gpu::device_ops();
  if (!ops) {
    ZIPCCL_WARN("isend from device memory, but the GPU path is off");
    return ncclInternalError;
  }
  if (!gpu_) gpu_.reset(new gpu::Channel(ops, static_cast<int>(reqs_.size())));
  int dev = ops->device_of(r->data);
  if (dev < 0) {
    ZIPCCL_WARN("isend: %p is registered as device memory but CUDA does not know it", (const void*)r->data);
    return ncclInternalError;
  }
  ZIPCCL_CHECK(gpu_->bind(dev));
  ++gpu_messages_;
  int slot = static_cast<int>(r - reqs_.data());
  if (!compress) return copy_to_host(r, r->data, r->size);
  size_t cap = codec::max_encoded_size(r->size);
  void* dst = nullptr;
  ZIPCCL_CHECK(gpu_->buffer(slot, gpu::Channel::Buf::kDevice, cap, &dst));
  gpu::Result* res = gpu_->result(slot);
  gpu::result_clear(res);
  ZIPCCL_CHECK(ops->encode(gpu_->stream(), r->data, r->size, dst, cap, type, settings().gpu_max_sms, res));
  r->gpu_t0 = Clock::now();
  r->state = State::kGpuEncoding;
  return ncclSuccess;
}

// Enqueues the D2H copy of what is to be posted (the frame, or the raw message) and its event.
ncclResult_t SendComm::copy_to_host(Req* r, const void* src, size_t n) {
  int slot = static_cast<int>(r - reqs_.data());
  void* host = nullptr;
  ZIPCCL_CHECK(gpu_->buffer(slot, gpu::Channel::Buf::kHost, n, &host));
  ZIPCCL_CHECK(gpu_->ops()->copy(gpu_->stream(), host, src, n, gpu::Copy::kDeviceToHost));
  ZIPCCL_CHECK(gpu_->record(slot));
  r->staged = host;
  r->state = State::kGpuCopying;
  return ncclSuccess;
}

// Moves every device message forward independently of the others (they post in order later).
ncclResult_t SendComm::progress_device() {
  for (int idx : unposted_) {
    Req* r = &reqs_[idx];
    if (r->state == State::kGpuEncoding) {
      gpu::Result* res = gpu_->result(idx);
      if (!gpu::result_ready(res)) continue;
      double seconds = std::chrono::duration<double>(Clock::now() - r->gpu_t0).count();
      stats_.codec_ns += static_cast<uint64_t>(seconds * 1e9);
      auto st = static_cast<codec::Status>(res->status);
      if (st != codec::Status::kOk) {
        ZIPCCL_WARN("GPU encode of %zu bytes failed (%s); sending raw", r->size, codec::status_string(st));
        ++stats_.raw_incompressible;
        ZIPCCL_CHECK(copy_to_host(r, r->data, r->size));
      } else {
        policy_.on_encoded(r->size, res->size, seconds);
        if (res->size < r->size) {
          void* frame = nullptr;
          ZIPCCL_CHECK(gpu_->buffer(idx, gpu::Channel::Buf::kDevice, res->size, &frame));  // the frame's buffer
          r->kind = FrameKind::kCodec;
          r->wire = res->size;
          ZIPCCL_CHECK(copy_to_host(r, frame, res->size));  // exactly the frame's bytes
        } else {
          ++stats_.raw_incompressible;
          ZIPCCL_CHECK(copy_to_host(r, r->data, r->size));
        }
      }
    }
    if (r->state == State::kGpuCopying) {
      bool done = false;
      ZIPCCL_CHECK(gpu_->query(idx, &done));
      if (done) {
        if (r->kind == FrameKind::kCodec) ++gpu_encoded_;
        r->state = State::kReady;
      }
    }
  }
  return ncclSuccess;
}

void SendComm::finish_encode(Req* r) {
  stats_.codec_ns += r->job.ns;
  if (r->job.status != codec::Status::kOk) {
    ZIPCCL_WARN("encode of %zu bytes failed (%s); sending raw", r->size, codec::status_string(r->job.status));
    ++stats_.raw_incompressible;
  } else {
    policy_.on_encoded(r->size, r->job.out, r->job.ns * 1e-9);
    if (r->job.out < r->size) {
      r->kind = FrameKind::kCodec;
      r->wire = r->job.out;
    } else {
      ++stats_.raw_incompressible;  // the original bytes go, not the staging copy
    }
  }
  r->state = State::kReady;
}

// Measures what the link delivers while it has a backlog: bytes the peer acknowledged over time. A
// send completing only means the kernel took a copy, which says nothing about the link's speed.
void SendComm::sample_link() {
  auto now = Clock::now();
  if (now - last_sample_ < kSampleEvery) return;
  uint64_t delivered = 0, backlog = 0;
  conn_->link_progress(&delivered, &backlog);
  if (last_backlog_ >= kMinBacklog && backlog >= kMinBacklog && delivered >= last_delivered_) {
    acc_bytes_ += delivered - last_delivered_;
    acc_seconds_ += std::chrono::duration<double>(now - last_sample_).count();
    if (acc_seconds_ >= kSampleSpan) {
      policy_.on_link(acc_bytes_, acc_seconds_);
      acc_bytes_ = 0;
      acc_seconds_ = 0;
    }
  }
  last_sample_ = now;
  last_delivered_ = delivered;
  last_backlog_ = backlog;
}

ncclResult_t SendComm::progress() {
  if (settings().compress == CompressMode::kAuto) {
    sample_link();
    finish_sample();
  }
  if (gpu_) ZIPCCL_CHECK(progress_device());
  while (!unposted_.empty()) {
    Req* r = &reqs_[unposted_.front()];
    if (r->state == State::kEncoding) {
      if (!r->job.done.load(std::memory_order_acquire)) break;
      finish_encode(r);
    }
    if (r->state != State::kReady) break;  // a device message still on the GPU
    FrameMeta meta = make_frame(r->kind, r->tag, r->size, r->wire);
    const void* payload = r->device                     ? r->staged
                          : r->kind == FrameKind::kCodec ? static_cast<const void*>(r->staging.data())
                                                         : r->data;
    int op = kNoOp;
    // A codec frame is decoded by the receiver, not kept: a transport writing into the receiver's
    // memory lands it in staging (post_staged), while raw bytes go straight to the posted buffer.
    const uint8_t* m = reinterpret_cast<const uint8_t*>(&meta);
    ZIPCCL_CHECK(r->kind == FrameKind::kCodec ? conn_->post_staged(m, payload, r->wire, &op)
                                              : conn_->post(m, payload, r->wire, &op));
    if (op == kNoOp) break;
    r->op = op;
    r->state = State::kPosted;
    unposted_.pop_front();
  }
  return ncclSuccess;
}

ncclResult_t SendComm::test(void* request, int* done, size_t* size) {
  *done = 0;
  Req* r = reinterpret_cast<Req*>(request);
  if (r < reqs_.data() || r >= reqs_.data() + reqs_.size() || r->state == State::kFree) {
    ZIPCCL_WARN("test on a send request this comm does not own (or already completed)");
    return ncclInternalError;
  }
  if (failed_) return ncclSystemError;
  ncclResult_t res = progress();
  if (res == ncclSuccess && r->state == State::kPosted && r->op != kNoOp) {
    bool finished = false;
    res = conn_->test(r->op, &finished);
    if (res == ncclSuccess && finished) r->op = kNoOp;  // the transport released its slot
  }
  if (res == ncclSuccess && r->state == State::kPosted && r->op == kNoOp) {
    ++stats_.messages;
    stats_.bytes_in += r->size;
    stats_.bytes_wire += r->wire;
    if (r->kind == FrameKind::kCodec) ++stats_.compressed;
    *done = 1;
    if (size) *size = r->size;
    r->state = State::kFree;
    free_.push_back(static_cast<int>(r - reqs_.data()));
  }
  if (res != ncclSuccess) {
    failed_ = true;
    ++stats_.errors;
  }
  return res;
}

}  // namespace net
}  // namespace zipccl
