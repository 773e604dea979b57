// Send side of the compressing layer: decide raw or compressed per message, encode on the worker
// pool, and hand frames to the transport strictly in isend order.
#include <algorithm>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "common/settings.h"
#include "layer/comm.h"

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
  opt.isa = codec_isa();
  status = codec::encode(src, n, dst, cap, &out, opt);
  ns = ns_since(t0);
}

SendComm::SendComm(SendConn* conn, const DeviceInfo& dev)
    : conn_(conn),
      registry_(dynamic_cast<BufferRegistry*>(conn)),
      reqs_(settings().max_requests),
      policy_(settings().compress, settings().min_bytes,
              (settings().link_gbps > 0 ? settings().link_gbps * 1e3 : dev.speed_mbps) * 1e6 / 8,
              settings().link_gbps <= 0, worker_pool().threads(), settings().probe_interval) {
  for (int i = static_cast<int>(reqs_.size()) - 1; i >= 0; --i) {
    reqs_[i].h.is_send = true;
    reqs_[i].h.comm = this;
    free_.push_back(i);
  }
  segment_bytes_ = effective_segment_bytes(settings().segment_bytes);
  if (segment_bytes_ && !conn_->carries_segments()) {
    static std::once_flag once;
    std::call_once(once, [] {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
                  "ZIPCCL_SEGMENT_BYTES: segments are off on this transport's connections (RDMA pairs "
                  "each transport message with one posted receive); messages go whole there");
    });
    segment_bytes_ = 0;
  }
  if (gpu::DeviceOps* ops = gpu::device_ops()) gpu_.reset(new gpu::Channel(ops, static_cast<int>(reqs_.size())));
  stats_ = open_conn_stats("send", dev.name);
  created_ = last_sample_ = Clock::now();
}

SendComm::~SendComm() {
  // Jobs still on the pool reference our buffers: wait for them (bounded by one encode each).
  for (Req& r : reqs_) {
    if (r.state != State::kActive) continue;
    for (size_t j = 0; j < r.nsegs && j < r.segs.size(); ++j) {
      Seg& g = *r.segs[j];
      if (g.state == SegState::kEncoding) {
        while (!g.job.done.load(std::memory_order_acquire)) std::this_thread::yield();
      }
    }
  }
  if (sample_busy_) {
    while (!sample_job_.done.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  // Device work of a request NCCL abandoned (error, abort) reads or writes its buffers: it finishes
  // before close returns (no wait when every request completed).
  if (gpu_) gpu_->drain();
  const bool staging_free = staging_pins_.close(registry_);
  for (Req& r : reqs_) {
    if (!r.staging.close(registry_)) r.staging.keep();  // the inner may still read it
  }
  conn_.reset();  // joins the transport's helper threads, which may still read staging buffers
  if (!staging_free) keep_reachable(std::move(gpu_));  // the inner may still read its staging
  gpu_.reset();   // returns its memory to the pools once the device has passed this close
  if (gpu_messages_) {
    ZIPCCL_INFO(NCCL_NET, "GPU path (send): %llu device messages, %llu sent as device-encoded frames",
                (unsigned long long)gpu_messages_, (unsigned long long)stats_->device_codec.get());
  }
  header.magic = kDeadMagic;
  for (Req& r : reqs_) r.h.magic = kDeadMagic;
  stats_->link_gbps.store(policy_.link_bps() * 8e-9, std::memory_order_relaxed);
  stats_->seconds = ns_since(created_) * 1e-9;
  report_stats(*stats_);
}

// Whether the message of `r` (its fields set by isend) is to be encoded: the settings, the policy and,
// for host memory, the detected element type decide; sets r->type and counts a raw decision.
bool SendComm::choose_compress(Req* r) {
  const size_t size = r->size;
  const Settings& s = settings();
  bool compress = false;
  if (size < s.min_bytes || s.compress == CompressMode::kNever) {
    ++stats_->raw_small;
  } else {
    // The policy first: a message it sends raw needs no type detection (in auto the detector only
    // runs for messages about to be encoded or sampled), so raw traffic costs what `never` costs.
    bool sample = false;
    bool want = policy_.choose(size, &sample);
    r->chosen = want;
    codec::ElemType type = hint_type(s.dtype);
    if (r->device) {
      // The host cannot read device memory: the GPU codec detects the type (kAuto) and the message
      // the policy wants sampled is encoded whole on the device (that measures the GPU codec).
      if (want || sample) {
        compress = true;
        r->type = type;
      } else {
        ++stats_->raw_policy;
      }
    } else {
      if ((want || sample) && type == codec::ElemType::kAuto && s.compress == CompressMode::kAuto) {
        type = codec::detect_elem_type(r->data, size);
      }
      if (!want) {
        ++stats_->raw_policy;
        if (sample && type != codec::ElemType::kNone) start_sample(r, type);
      } else if (type == codec::ElemType::kNone) {
        ++stats_->raw_incompressible;
      } else {
        compress = true;
        r->type = type;
      }
    }
  }
  return compress;
}

// The segments of r's message (one unless it is larger than the segment size), their offsets and
// their regions of the staging buffer (r->stage_bytes in all).
void SendComm::plan_segments(Req* r) {
  const size_t size = r->size;
  r->nsegs = static_cast<size_t>(segment_count(size, segment_bytes_));
  while (r->segs.size() < r->nsegs) r->segs.emplace_back(new Seg);
  size_t off = 0, stage = 0;
  for (size_t j = 0; j < r->nsegs; ++j) {
    Seg& g = *r->segs[j];
    g.off = off;
    g.len = static_cast<size_t>(segment_len(size, segment_bytes_, j));
    g.stage_off = stage;
    g.kind = FrameKind::kRaw;
    g.wire = g.len;
    g.staged = nullptr;
    g.result = nullptr;
    g.state = SegState::kReady;
    off += g.len;
    stage += codec::max_encoded_size(g.len);
  }
  r->stage_bytes = stage;
}

ncclResult_t SendComm::isend(void* data, size_t size, int tag, bool device, void* phandle, void** request) {
  *request = nullptr;
  if (failed_) return ncclSystemError;
  if (size && !data) {
    ZIPCCL_WARN("isend of %zu bytes from a null buffer", size);
    return ncclInternalError;
  }
  if (free_.empty()) return ncclSuccess;  // NCCL retries
  if (free_.size() == reqs_.size()) busy_from_ = Clock::now();  // the comm was idle
  int idx = free_.back();
  free_.pop_back();
  Req& r = reqs_[idx];
  r.data = static_cast<const char*>(data);
  r.size = size;
  r.tag = tag;
  r.state = State::kActive;
  r.device = device;
  r.tried = false;
  r.chosen = false;
  r.type = codec::ElemType::kAuto;
  r.next_post = 0;
  r.inflight = 0;
  r.wire = 0;
  r.codec_ns = 0;
  r.any_codec = false;

  bool compress = choose_compress(&r);
  plan_segments(&r);

  if (device) {
    bool busy = false;
    ncclResult_t res = start_device(&r, compress && size > 0, &busy);
    if (res == ncclSuccess && busy) {  // staging full: NCCL retries this isend later
      r.state = State::kFree;
      free_.push_back(idx);
      return ncclSuccess;
    }
    r.prof.start(phandle, true, size, true);
    unposted_.push_back(idx);
    *request = &r.h;
    if (res == ncclSuccess) res = progress();
    if (res != ncclSuccess) failed_ = true;
    return res;
  }
  if (compress && !r.staging.reserve(registry_, r.stage_bytes, &staging_refused_)) {
    ZIPCCL_WARN_FIRST(NCCL_NET, "no memory for %zu bytes of codec staging: the message goes uncompressed",
                      r.stage_bytes);
    compress = false;
  }
  if (compress) {
    r.tried = true;
    // Every segment goes to the pool at once: the workers encode them in order (in parallel when there
    // are several), and each is posted as soon as it and the ones before it are done.
    for (size_t j = 0; j < r.nsegs; ++j) {
      Seg& g = *r.segs[j];
      g.job.src = r.data + g.off;
      g.job.n = g.len;
      g.job.dst = r.staging.data() + g.stage_off;
      g.job.cap = codec::max_encoded_size(g.len);
      g.job.type = r.type;
      g.job.out = 0;
      g.job.done.store(false);
      g.state = SegState::kEncoding;
      worker_pool().submit(&g.job);
    }
  }
  r.prof.start(phandle, true, size, false);
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
  stats_->codec_ns += sample_job_.ns;
  sample_busy_ = false;
}

ncclResult_t SendComm::reserve_device(void* data, size_t size) {
  ZIPCCL_CHECK(gpu::Channel::reserve_for(&gpu_, static_cast<int>(reqs_.size()), data, size,
                                         static_cast<size_t>(segment_count(size, segment_bytes_)), true));
  ZIPCCL_CHECK(staging_pins_.pin_new(registry_, *gpu_, true));
  gpu_->publish();  // only now may messages use the new staging: the transport knows it
  return ncclSuccess;
}

// Device message: every segment's encode is enqueued on the stream now, each into its own region of
// device staging with its own pinned result, then the slot's event (an encode that faults shows there);
// or, raw, every segment's D2H on the copy stream. Nothing here allocates or waits for the device;
// *busy when the staging arenas are full (the caller hands NCCL no request, and NCCL retries).
ncclResult_t SendComm::start_device(Req* r, bool compress, bool* busy) {
  *busy = false;
  if (!gpu_ || !gpu_->reserved()) {
    ZIPCCL_WARN("isend from device memory that was never registered with this comm (regMr)");
    return ncclInternalError;
  }
  ZIPCCL_CHECK(gpu_->bind(gpu_->ops()->device_of(r->data)));
  int slot = static_cast<int>(r - reqs_.data());
  void* host = nullptr;
  void* dst = nullptr;
  ZIPCCL_CHECK(gpu_->buffer(slot, gpu::Channel::Buf::kHost, r->stage_bytes, &host));
  if (host && compress) ZIPCCL_CHECK(gpu_->buffer(slot, gpu::Channel::Buf::kDevice, r->stage_bytes, &dst));
  if (!host || (compress && !dst)) {
    gpu_->release(slot);
    *busy = true;
    return ncclSuccess;
  }
  ++gpu_messages_;
  if (!compress) {
    for (size_t j = 0; j < r->nsegs; ++j) {
      Seg* g = r->segs[j].get();
      ZIPCCL_CHECK(copy_to_host(r, g, j, r->data + g->off, g->len));
    }
    return ncclSuccess;
  }
  r->tried = true;
  gpu::DeviceOps* ops = gpu_->ops();
  for (size_t j = 0; j < r->nsegs; ++j) {
    Seg* g = r->segs[j].get();
    ZIPCCL_CHECK(gpu_->seg_result(slot, j, &g->result));
    gpu::result_clear(g->result);
    ZIPCCL_CHECK(ops->encode(gpu_->stream(), r->data + g->off, g->len, static_cast<char*>(dst) + g->stage_off,
                             codec::max_encoded_size(g->len), r->type, settings().gpu_max_sms, g->result));
    g->state = SegState::kGpuEncoding;
  }
  ZIPCCL_CHECK(gpu_->record(slot));
  r->gpu_t0 = Clock::now();
  return ncclSuccess;
}

// Whether segment g's encode has finished. A result not yet published while the stream has passed the
// slot's event means the encode never wrote it (a faulted kernel): an error, never a wait for ever.
ncclResult_t SendComm::encode_finished(int slot, const Seg* g, bool* finished) {
  *finished = gpu::result_ready(g->result);
  if (*finished) return ncclSuccess;
  bool passed = false;
  ZIPCCL_CHECK(gpu_->query(slot, &passed));  // a CUDA error (sticky kernel fault) fails here
  if (!passed) return ncclSuccess;
  *finished = gpu::result_ready(g->result);  // published just before the event completed
  if (*finished) return ncclSuccess;
  ZIPCCL_WARN("GPU encode of %zu bytes finished without publishing its result", g->len);
  return ncclUnhandledCudaError;
}

// Enqueues the D2H copy of what segment j posts (its frame, or its raw bytes) into its region of the
// pinned staging, on the copy stream, and the segment's event.
ncclResult_t SendComm::copy_to_host(Req* r, Seg* g, size_t j, const void* src, size_t n) {
  int slot = static_cast<int>(r - reqs_.data());
  void* host = nullptr;
  ZIPCCL_CHECK(gpu_->buffer(slot, gpu::Channel::Buf::kHost, r->stage_bytes, &host));  // the same buffer
  char* dst = static_cast<char*>(host) + g->stage_off;
  ZIPCCL_CHECK(gpu_->ops()->copy(gpu_->copy_stream(), dst, src, n, gpu::Copy::kDeviceToHost));
  ZIPCCL_CHECK(gpu_->seg_record(slot, j));
  g->staged = dst;
  g->state = SegState::kGpuCopying;
  return ncclSuccess;
}

// Moves every device segment forward independently of the others (they post in order later): a
// finished encode gets its D2H at once, on the copy stream, while later encodes run on the stream.
ncclResult_t SendComm::progress_device() {
  for (int idx : unposted_) {
    Req* r = &reqs_[idx];
    if (!r->device) continue;
    for (size_t j = r->next_post; j < r->nsegs; ++j) {
      Seg* g = r->segs[j].get();
      if (g->state == SegState::kGpuEncoding) {
        bool finished = false;
        ZIPCCL_CHECK(encode_finished(idx, g, &finished));
        if (!finished) break;  // encodes finish in stream order
        auto now = Clock::now();
        double seconds = std::chrono::duration<double>(now - r->gpu_t0).count();
        r->gpu_t0 = now;  // the next segment's encode started when this one finished
        stats_->codec_ns += static_cast<uint64_t>(seconds * 1e9);
        r->codec_ns += static_cast<uint64_t>(seconds * 1e9);
        auto st = static_cast<codec::Status>(g->result->status);
        const char* src_raw = r->data + g->off;
        if (st != codec::Status::kOk) {
          ZIPCCL_WARN("GPU encode of %zu bytes failed (%s); sending raw", g->len, codec::status_string(st));
          ZIPCCL_CHECK(copy_to_host(r, g, j, src_raw, g->len));
        } else {
          policy_.on_encoded(g->len, g->result->size, seconds);
          if (g->result->size < g->len) {
            void* frames = nullptr;
            ZIPCCL_CHECK(gpu_->buffer(idx, gpu::Channel::Buf::kDevice, r->stage_bytes, &frames));
            g->kind = FrameKind::kCodec;
            g->wire = g->result->size;
            char* frame = static_cast<char*>(frames) + g->stage_off;
            if (staging_pins_.device_frames()) {  // the NIC reads it there; the encode has completed
              g->staged = frame;
              g->state = SegState::kReady;
            } else {
              ZIPCCL_CHECK(copy_to_host(r, g, j, frame, g->wire));
            }
          } else {
            ZIPCCL_CHECK(copy_to_host(r, g, j, src_raw, g->len));
          }
        }
      }
      if (g->state == SegState::kGpuCopying) {
        bool done = false;
        ZIPCCL_CHECK(gpu_->seg_query(idx, j, &done));
        if (done) g->state = SegState::kReady;
      }
    }
  }
  return ncclSuccess;
}

void SendComm::finish_encode(Req* r, Seg* g) {
  stats_->codec_ns += g->job.ns;
  r->codec_ns += g->job.ns;
  if (g->job.status != codec::Status::kOk) {
    ZIPCCL_WARN("encode of %zu bytes failed (%s); sending raw", g->len, codec::status_string(g->job.status));
  } else {
    policy_.on_encoded(g->len, g->job.out, g->job.ns * 1e-9);
    if (g->job.out < g->len) {
      g->kind = FrameKind::kCodec;
      g->wire = g->job.out;
    }  // else the original bytes go, not the staging copy
  }
  g->state = SegState::kReady;
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

// Posts ready segments strictly in order (each as soon as it and all before it are ready), then
// completes transport ops in posting order.
ncclResult_t SendComm::progress() {
  if (settings().compress == CompressMode::kAuto) {
    sample_link();
    finish_sample();
  }
  if (gpu_) ZIPCCL_CHECK(progress_device());
  bool blocked = false;
  while (!unposted_.empty() && !blocked) {
    int idx = unposted_.front();
    Req* r = &reqs_[idx];
    while (r->next_post < r->nsegs) {
      size_t j = r->next_post;
      Seg* g = r->segs[j].get();
      if (g->state == SegState::kEncoding) {
        if (!g->job.done.load(std::memory_order_acquire)) {
          blocked = true;
          break;
        }
        finish_encode(r, g);
      }
      if (g->state != SegState::kReady) {  // a device segment still on the GPU
        blocked = true;
        break;
      }
      FrameMeta meta = r->nsegs > 1 ? make_segment(g->kind, r->tag, static_cast<uint32_t>(j),
                                                   j + 1 == r->nsegs, g->len, g->wire)
                                    : make_frame(g->kind, r->tag, r->size, g->wire);
      const void* payload = r->device ? g->staged
                            : g->kind == FrameKind::kCodec
                                ? static_cast<const void*>(r->staging.data() + g->stage_off)
                                : r->data + g->off;
      int op = kNoOp;
      // A codec frame is decoded by the receiver, not kept: a transport writing into the receiver's
      // memory lands it in staging (post_staged), while raw bytes go straight to the posted buffer.
      const uint8_t* m = reinterpret_cast<const uint8_t*>(&meta);
      conn_->set_tag(r->tag);
      ZIPCCL_CHECK(g->kind == FrameKind::kCodec ? conn_->post_staged(m, payload, g->wire, &op)
                                                : conn_->post(m, payload, g->wire, &op));
      if (op == kNoOp) {
        blocked = true;
        break;
      }
      g->state = SegState::kPosted;
      posted_.push_back(PostedOp{idx, op});
      ++r->inflight;
      r->wire += g->wire;
      if (g->kind == FrameKind::kCodec) r->any_codec = true;
      ++r->next_post;
    }
    if (r->next_post == r->nsegs) {
      r->state = State::kPosted;
      unposted_.pop_front();
    }
  }
  while (!posted_.empty()) {
    bool done = false;
    ZIPCCL_CHECK(conn_->test(posted_.front().op, &done));
    if (!done) break;
    --reqs_[posted_.front().req].inflight;  // the transport released its slot
    posted_.pop_front();
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
  if (res == ncclSuccess && r->state == State::kPosted && r->inflight == 0) {
    auto now = Clock::now();
    policy_.on_delivered(r->size, r->chosen, std::chrono::duration<double>(now - busy_from_).count());
    busy_from_ = now;
    ++stats_->messages;
    stats_->link_gbps.store(policy_.link_bps() * 8e-9, std::memory_order_relaxed);
    stats_->bytes_in += r->size;
    stats_->bytes_wire += r->wire;
    if (r->any_codec) {
      ++stats_->compressed;
    } else if (r->tried) {
      ++stats_->raw_incompressible;  // the encoder found nothing to gain (or failed)
    }
    if (r->nsegs > 1) {
      ++stats_->segmented;
      stats_->segments += r->nsegs;
    }
    if (r->device) {
      ++stats_->device_messages;
      if (r->any_codec) ++stats_->device_codec;
    }
    r->prof.finish(r->size, r->wire, r->codec_ns, r->nsegs, r->any_codec);
    *done = 1;
    if (size) *size = r->size;
    r->state = State::kFree;
    if (r->device) gpu_->release(static_cast<int>(r - reqs_.data()));
    free_.push_back(static_cast<int>(r - reqs_.data()));
  }
  if (res != ncclSuccess) {
    failed_ = true;
    ++stats_->errors;
    r->prof.abandon();
  }
  return res;
}

}  // namespace net
}  // namespace zipccl
