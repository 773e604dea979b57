// Receive side of the compressing layer: match receives to incoming frames in order, validate every
// header, land raw payloads directly in NCCL's buffer and codec frames in staging, decode on the
// worker pool, and report the uncompressed size.
#include <algorithm>
#include <thread>

#include "common/log.h"
#include "common/settings.h"
#include "layer/comm.h"

namespace zipccl {
namespace net {
namespace {
using Clock = std::chrono::steady_clock;
}

void DecodeJob::run() {
  auto t0 = Clock::now();
  codec::DecodeOptions opt;
  opt.threads = 1;
  opt.isa = codec_isa();
  status = codec::decode(src, n, dst, cap, &out, opt);
  ns = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

RecvComm::RecvComm(RecvConn* conn, const DeviceInfo& dev)
    : conn_(conn), registry_(dynamic_cast<BufferRegistry*>(conn)), reqs_(settings().max_requests) {
  max_recvs_ = std::max(1, std::min({dev.max_recvs, conn->max_group(), kMaxRecvs}));
  for (int i = static_cast<int>(reqs_.size()) - 1; i >= 0; --i) {
    reqs_[i].h.is_send = false;
    reqs_[i].h.comm = this;
    free_.push_back(i);
  }
  if (gpu::DeviceOps* ops = gpu::device_ops()) gpu_.reset(new gpu::Channel(ops, static_cast<int>(reqs_.size())));
  stats_ = open_conn_stats("recv", dev.name);
  created_ = Clock::now();
}

RecvComm::~RecvComm() {
  for (Req& r : reqs_) {
    if (r.state == State::kFree) continue;
    for (size_t j = 0; j < r.nsegs; ++j) {
      Seg& g = *r.segs[j];
      if (g.state == SegState::kDecoding) {
        while (!g.job.done.load(std::memory_order_acquire)) std::this_thread::yield();
      }
    }
  }
  // Device work of a request NCCL abandoned (error, abort) reads or writes its buffers: it finishes
  // before close returns (no wait when every request completed).
  if (gpu_) gpu_->drain();
  const bool staging_free = staging_pins_.close(registry_);
  conn_.reset();  // stops the transport's helper threads before NCCL frees its buffers
  if (!staging_free) keep_reachable(std::move(gpu_));  // the inner may still write its staging
  gpu_.reset();   // returns its memory to the pools once the device has passed this close
  if (gpu_messages_) {
    ZIPCCL_INFO(NCCL_NET,
                "GPU path (recv): %llu device messages, %llu decoded on the device, %llu payloads landed in "
                "device staging",
                (unsigned long long)gpu_messages_, (unsigned long long)stats_->device_codec.get(),
                (unsigned long long)device_landed_);
  }
  header.magic = kDeadMagic;
  for (Req& r : reqs_) r.h.magic = kDeadMagic;
  stats_->seconds = std::chrono::duration<double>(Clock::now() - created_).count();
  report_stats(*stats_);
}

// One receive of an irecv: its request slot prepared (device receives: all their staging taken, so
// that nothing later can find the arenas full). *busy: an arena is full now, nothing taken.
ncclResult_t RecvComm::claim(Req* r, void* data, size_t size, bool device, bool marked, bool* busy) {
  *busy = false;
  r->data = static_cast<char*>(data);
  r->capacity = size;
  r->state = State::kActive;
  r->device = device;
  r->in_device = device && staging_pins_.device_frames();
  r->host_stage = r->dev_stage = r->land_stage = nullptr;
  r->asm_.reset(size);
  r->nsegs = r->done_segs = r->scan = 0;
  r->wire = 0;
  r->codec_ns = 0;
  r->any_codec = false;
  r->group_n = 0;
  if (!device) return ncclSuccess;
  // Every payload for a device receive lands in staging first: device staging when the transport
  // writes device memory (StagingPins::device_frames), else pinned host staging (a socket cannot write
  // device memory), from where it goes to the device on this comm's stream.
  return take_device_staging(r, marked, busy);
}

// Gives back a receive claimed by an irecv that then posted nothing.
void RecvComm::unclaim(Req* r) {
  const int idx = static_cast<int>(r - reqs_.data());
  if (r->device && r->host_stage) gpu_->release(idx);
  r->state = State::kFree;
  free_.push_back(idx);
}

ncclResult_t RecvComm::irecv(int n, void* const* data, const size_t* sizes, const int* tags, const bool* device,
                             bool marked, void* const* phandles, void** request) {
  *request = nullptr;
  if (failed_) return ncclSystemError;
  if (n < 1 || n > max_recvs_) {
    ZIPCCL_WARN("irecv of %d grouped receives; this device takes 1 to %d (maxRecvs)", n, max_recvs_);
    return ncclInternalError;
  }
  for (int i = 0; i < n; ++i) {
    if (sizes[i] && !data[i]) {
      ZIPCCL_WARN("irecv of %zu bytes into a null buffer", sizes[i]);
      return ncclInternalError;
    }
  }
  if (free_.size() < static_cast<size_t>(n)) return ncclSuccess;  // no request: NCCL retries
  int idx[kMaxRecvs];
  void* targets[kMaxRecvs];
  size_t staged[kMaxRecvs];
  ncclResult_t res = ncclSuccess;
  bool busy = false;
  int taken = 0;
  for (; taken < n && res == ncclSuccess && !busy; ++taken) {
    idx[taken] = free_.back();
    free_.pop_back();
    Req* r = &reqs_[idx[taken]];
    res = claim(r, data[taken], sizes[taken], device[taken], marked && n == 1, &busy);
    r->tag = tags ? tags[taken] : 0;
    r->check_tag = n > 1;
    targets[taken] = r->in_device ? r->dev_stage : r->device ? r->host_stage : data[taken];
    staged[taken] = codec::max_encoded_size(sizes[taken]);
  }
  if (res != ncclSuccess || busy) {
    for (int i = taken - 1; i >= 0; --i) unclaim(&reqs_[idx[i]]);
    // Busy, and with this group's regions given back no region is held: the attempt started in empty
    // arenas (regions are taken and returned only on this thread), so it never succeeds: n device
    // receives whose regions together exceed what this comm's registrations staged (arenas of twice
    // the largest). An error, never a retry loop.
    if (busy && gpu_->idle()) {
      size_t total = 0;
      for (int i = 0; i < n; ++i) total += sizes[i];
      ZIPCCL_WARN(
          "irecv of %d grouped device receives (%zu bytes in all): their staging does not fit what this "
          "comm's device registrations staged (twice the largest), so they could never be posted",
          n, total);
      res = ncclInternalError;
    }
    if (res != ncclSuccess) failed_ = true;
    return res;  // busy: no request, NCCL retries
  }
  Req& lead = reqs_[idx[0]];
  lead.group_n = n;
  for (int i = 0; i < n; ++i) {
    if (reqs_[idx[i]].device) ++gpu_messages_;
    reqs_[idx[i]].prof.start(phandles ? phandles[i] : nullptr, false, sizes[i], reqs_[idx[i]].device);
    lead.group[i] = idx[i];
    unmatched_.push_back(idx[i]);
    active_.push_back(idx[i]);
  }
  *request = &lead.h;
  res = conn_->post_group(n, targets, sizes, staged, tags);
  if (res == ncclSuccess) res = progress();
  if (res != ncclSuccess) failed_ = true;
  return res;
}

ncclResult_t RecvComm::reserve_device(void* data, size_t size) {
  // A zipccl sender's segments other than the last are at least 4 KiB (effective_segment_bytes).
  ZIPCCL_CHECK(
      gpu::Channel::reserve_for(&gpu_, static_cast<int>(reqs_.size()), data, size, size / 4096 + 1, false));
  // Device arenas too, when the transport writes device memory: payloads then land there (no H2D).
  ZIPCCL_CHECK(staging_pins_.pin_new(registry_, *gpu_, true));
  gpu_->publish();  // only now may receives use the new staging: the transport knows it
  return ncclSuccess;
}

// A device receive's regions: pinned staging for what arrives (a whole codec frame may be up to
// max_encoded_size(posted)), device staging for codec frames, and the landing buffer when it lands
// flag-last. *busy (and nothing taken) when an arena is full now.
ncclResult_t RecvComm::take_device_staging(Req* r, bool marked, bool* busy) {
  *busy = false;
  if (!gpu_ || !gpu_->reserved()) {
    ZIPCCL_WARN("irecv into device memory that was never registered with this comm (regMr)");
    return ncclInternalError;
  }
  ZIPCCL_CHECK(gpu_->bind(gpu_->ops()->device_of(r->data)));
  const int slot = static_cast<int>(r - reqs_.data());
  const size_t size = r->capacity, most = std::max(size, codec::max_encoded_size(size));
  r->landing = gpu::needs_ordered_landing(
      settings().gpu_landing == GpuLanding::kMarked ? gpu::Landing::kMarked : gpu::Landing::kOrdered, marked);
  using Buf = gpu::Channel::Buf;
  ZIPCCL_CHECK(gpu_->buffer(slot, Buf::kHost, most, &r->host_stage));
  if (r->host_stage) ZIPCCL_CHECK(gpu_->buffer(slot, Buf::kDevice, most, &r->dev_stage));
  if (r->dev_stage && r->landing) ZIPCCL_CHECK(gpu_->buffer(slot, Buf::kLand, size, &r->land_stage));
  if (!r->host_stage || !r->dev_stage || (r->landing && !r->land_stage)) {
    gpu_->release(slot);
    r->host_stage = r->dev_stage = r->land_stage = nullptr;
    *busy = true;
  }
  return ncclSuccess;
}

// Matches arriving transport messages to posted receives, oldest first: each header is checked by the
// receive's Assembly (frame.h) before its payload is received; a receive leaves the queue once its
// last segment's header is accepted. Then moves every receive's segments forward.
ncclResult_t RecvComm::progress() {
  while (!unmatched_.empty()) {
    int idx = unmatched_.front();
    Req* r = &reqs_[idx];
    uint64_t payload_len = 0;
    bool ready = false;
    ZIPCCL_CHECK(conn_->peek(reinterpret_cast<uint8_t*>(&r->meta), &payload_len, &ready));
    if (!ready) break;
    Assembly next = r->asm_;  // committed only once the payload's receive is posted
    const char* bad = next.accept(r->meta, payload_len);
    if (!bad && r->check_tag && r->meta.tag != r->tag) bad = "the message's tag is not its grouped receive's";
    if (bad) {
      ZIPCCL_WARN(
          "rejecting an incoming message: %s (frame: version %u, kind %u, segment %u%s, %llu B original, "
          "%llu B on wire; posted receive %zu B, %llu B and %u segments received so far)",
          bad, r->meta.version, r->meta.kind, r->meta.segment, (r->meta.flags & kSegLast) ? " (last)" : "",
          (unsigned long long)r->meta.original_len, (unsigned long long)r->meta.wire_len, r->capacity,
          (unsigned long long)r->asm_.offset, r->asm_.next);
      return ncclSystemError;
    }
    size_t j = r->nsegs;
    while (r->segs.size() <= j) r->segs.emplace_back(new Seg);
    Seg* g = r->segs[j].get();
    g->meta = r->meta;
    g->off = static_cast<size_t>(r->asm_.offset);
    g->op = kNoOp;
    g->staged = g->src = nullptr;
    g->result = nullptr;
    bool codec_frame = r->meta.kind == static_cast<uint8_t>(FrameKind::kCodec);
    bool whole = r->meta.version == kFrameVersion;
    // Already in transport memory (an RDMA staging slot; whole messages only): a host codec frame is
    // decoded from there. A device receive copies it into its pinned staging instead (recv() below):
    // the slot is pageable, and a host-to-device copy from pageable memory synchronises.
    const void* staged = (whole && !r->device && codec_frame) ? conn_->take_staged() : nullptr;
    char* dst = nullptr;
    if (!staged) {
      if (r->device) {
        dst = static_cast<char*>(r->in_device ? r->dev_stage : r->host_stage) + g->off;
      } else if (codec_frame) {
        // Host codec segments land in staging laid out like the message (a whole codec frame may be
        // up to max_encoded_size(posted)); sized at the message's first codec segment, never while
        // one of its segments is being received into it.
        size_t need = whole ? static_cast<size_t>(payload_len) : r->capacity;
        if (!r->any_codec && r->staging_cap < need) {
          r->staging.reset(new char[need]);  // not zero-filled: every byte read is received first
          r->staging_cap = need;
        }
        dst = r->staging.get() + g->off;
      } else {
        dst = r->data + g->off;
      }
      int op = kNoOp;
      ZIPCCL_CHECK(conn_->recv(dst, static_cast<size_t>(payload_len), &op));
      if (op == kNoOp) break;
      g->op = op;
    }
    r->asm_ = next;
    ++r->nsegs;
    r->wire += payload_len;
    if (codec_frame) r->any_codec = true;
    g->src = staged ? staged : dst;
    g->staged = staged;
    if (staged) {
      start_decode(r, g, staged);
    } else {
      g->state = SegState::kReceiving;
    }
    if (r->asm_.complete) unmatched_.pop_front();
  }
  for (int idx : active_) ZIPCCL_CHECK(advance(&reqs_[idx]));
  return ncclSuccess;
}

// Moves one receive's segments forward: a received segment is decoded (host codec), handed to the
// device (device receives) or done (host raw); a device receive whose last segment is queued records
// its event.
ncclResult_t RecvComm::advance(Req* r) {
  if (r->state != State::kActive) return ncclSuccess;
  // Segments before r->scan need nothing more from the host (a 64 MiB message may have 1024).
  while (r->scan < r->nsegs &&
         (r->segs[r->scan]->state == SegState::kDone || r->segs[r->scan]->state == SegState::kGpuQueued)) {
    ++r->scan;
  }
  for (size_t j = r->scan; j < r->nsegs; ++j) {
    Seg* g = r->segs[j].get();
    if (g->state == SegState::kReceiving) {
      bool finished = false;
      ZIPCCL_CHECK(conn_->test(g->op, &finished));
      if (!finished) continue;
      g->op = kNoOp;
      if (r->in_device) {
        // GPUDirect: the completion does not make the NIC's writes visible to a kernel; the
        // transport's flush of the region does, and only then is the decode (or copy) enqueued.
        ++device_landed_;
        const size_t len = static_cast<size_t>(g->meta.wire_len);
        ZIPCCL_CHECK(registry_->flush_pinned(const_cast<void*>(g->src), len, &g->op));
        g->state = SegState::kFlushing;
      } else if (r->device) {
        ZIPCCL_CHECK(start_device_segment(r, g, j, g->src));
      } else if (g->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
        start_decode(r, g, g->src);
      } else {
        g->state = SegState::kDone;
        ++r->done_segs;
      }
    }
    if (g->state == SegState::kFlushing) {
      if (g->op != kNoOp) {
        bool flushed = false;
        ZIPCCL_CHECK(registry_->test_flush_pinned(g->op, &flushed));
        if (!flushed) continue;
        g->op = kNoOp;
      }
      ZIPCCL_CHECK(start_device_segment(r, g, j, g->src));
    }
    if (g->state == SegState::kDecoding) {
      if (!g->job.done.load(std::memory_order_acquire)) continue;
      if (g->staged) conn_->release_staged(g->staged);
      g->staged = nullptr;
      stats_->codec_ns += g->job.ns;
      r->codec_ns += g->job.ns;
      if (g->job.status != codec::Status::kOk || g->job.out != g->meta.original_len) {
        ZIPCCL_WARN("corrupt compressed frame from the peer (%s, %zu of %llu bytes decoded, segment %zu)",
                    codec::status_string(g->job.status), g->job.out, (unsigned long long)g->meta.original_len,
                    j);
        return ncclSystemError;
      }
      g->state = SegState::kDone;
      ++r->done_segs;
    }
  }
  if (r->device && r->asm_.complete && r->done_segs == r->nsegs) {
    ZIPCCL_CHECK(gpu_->record(static_cast<int>(r - reqs_.data())));
    r->state = State::kGpuLanding;
  }
  return ncclSuccess;
}

void RecvComm::start_decode(Req* r, Seg* g, const void* src) {
  g->job.src = src;
  g->job.n = g->meta.wire_len;
  g->job.dst = r->data + g->off;
  g->job.cap = g->meta.original_len;  // never past the segment: bytes beyond it stay untouched
  g->job.out = 0;
  g->job.done.store(false);
  g->state = SegState::kDecoding;
  worker_pool().submit(&g->job);
}

// Device receive, segment j's payload at src: in pinned host staging (H2D first) or, Req::in_device,
// flushed in device staging at the segment's offset (read from there). Then decode (codec frames) into
// NCCL's buffer at the segment's offset or, when landing flag-last, into the landing buffer followed by
// the line-ordered copy of the segment's range (segments are multiples of 4 KiB, so no 128-byte line
// is split). One event after the last segment's work completes them all.
ncclResult_t RecvComm::start_device_segment(Req* r, Seg* g, size_t j, const void* src) {
  ZIPCCL_CHECK(gpu_->make_current());
  gpu::DeviceOps* ops = gpu_->ops();
  void* stream = gpu_->stream();
  int slot = static_cast<int>(r - reqs_.data());
  size_t wire = g->meta.wire_len, n = g->meta.original_len;
  bool whole = g->meta.version == kFrameVersion;
  char* out_final = r->data + g->off;
  char* land = static_cast<char*>(r->land_stage) + (r->land_stage ? g->off : 0);
  if (g->meta.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
    // Frames laid out like the message (each codec segment is smaller than its range); a whole frame
    // may be up to max_encoded_size(posted).
    if (!whole && g->off + wire > r->capacity) return ncclInternalError;  // Assembly checked it: a bug
    char* frame = static_cast<char*>(r->dev_stage) + g->off;
    if (!r->in_device) ZIPCCL_CHECK(ops->copy(stream, frame, src, wire, gpu::Copy::kHostToDevice));
    void* out = r->landing ? static_cast<void*>(land) : static_cast<void*>(out_final);
    ZIPCCL_CHECK(gpu_->seg_result(slot, j, &g->result));
    gpu::result_clear(g->result);
    ZIPCCL_CHECK(ops->decode(stream, frame, wire, out, n, settings().gpu_max_sms, g->result));
    if (r->landing) ZIPCCL_CHECK(ops->land_lines(stream, out_final, out, n));
  } else if (r->in_device) {  // raw, already on the device: one device-to-device copy (line-ordered)
    if (r->landing) {
      ZIPCCL_CHECK(ops->land_lines(stream, out_final, src, n));
    } else {
      ZIPCCL_CHECK(ops->copy(stream, out_final, src, n, gpu::Copy::kDeviceToDevice));
    }
  } else if (r->landing) {
    ZIPCCL_CHECK(ops->copy(stream, land, src, n, gpu::Copy::kHostToDevice));
    ZIPCCL_CHECK(ops->land_lines(stream, out_final, land, n));
  } else {
    ZIPCCL_CHECK(ops->copy(stream, out_final, src, n, gpu::Copy::kHostToDevice));
  }
  g->state = SegState::kGpuQueued;
  ++r->done_segs;
  return ncclSuccess;
}

ncclResult_t RecvComm::finish_device_landing(Req* r, bool* done) {
  int slot = static_cast<int>(r - reqs_.data());
  ZIPCCL_CHECK(gpu_->query(slot, done));
  if (!*done) return ncclSuccess;
  for (size_t j = 0; j < r->nsegs; ++j) {
    Seg* g = r->segs[j].get();
    if (g->staged) conn_->release_staged(g->staged);
    g->staged = nullptr;
    g->state = SegState::kDone;
    if (g->meta.kind != static_cast<uint8_t>(FrameKind::kCodec)) continue;
    const gpu::Result* res = g->result;
    auto st =
        res && gpu::result_ready(res) ? static_cast<codec::Status>(res->status) : codec::Status::kCorrupt;
    if (st != codec::Status::kOk || res->size != g->meta.original_len) {
      ZIPCCL_WARN("corrupt compressed frame from the peer (GPU decode: %s, %llu of %llu bytes, segment %zu)",
                  codec::status_string(st), (unsigned long long)(res ? res->size : 0),
                  (unsigned long long)g->meta.original_len, j);
      return ncclSystemError;
    }
  }
  return ncclSuccess;
}

ncclResult_t RecvComm::fail(Req* /*r*/) {
  failed_ = true;
  ++stats_->errors;
  return ncclSystemError;
}

// Whether receive r is complete (its bytes in NCCL's buffer); *res: an error found on the way.
bool RecvComm::complete(Req* r, ncclResult_t* res) {
  *res = ncclSuccess;
  if (r->state == State::kGpuLanding) {
    bool done = false;
    *res = finish_device_landing(r, &done);
    return *res == ncclSuccess && done;
  }
  return !r->device && r->asm_.complete && r->done_segs == r->nsegs;
}

// Counts a completed receive and frees its slot.
void RecvComm::finish(Req* r) {
  r->prof.finish(r->asm_.offset, r->wire, r->codec_ns, r->nsegs, r->any_codec);
  ++stats_->messages;
  stats_->bytes_in += r->asm_.offset;
  stats_->bytes_wire += r->wire;
  if (r->any_codec) ++stats_->compressed;
  if (r->nsegs > 1) {
    ++stats_->segmented;
    stats_->segments += r->nsegs;
  }
  if (r->device) {
    ++stats_->device_messages;
    if (r->any_codec) ++stats_->device_codec;
  }
  r->state = State::kFree;
  r->group_n = 0;
  int idx = static_cast<int>(r - reqs_.data());
  if (r->device) gpu_->release(idx);
  active_.erase(std::find(active_.begin(), active_.end(), idx));
  free_.push_back(idx);
}

ncclResult_t RecvComm::test(void* request, int* done, size_t* sizes, int* count) {
  *done = 0;
  Req* r = reinterpret_cast<Req*>(request);
  if (r < reqs_.data() || r >= reqs_.data() + reqs_.size() || r->state == State::kFree || r->group_n < 1) {
    ZIPCCL_WARN("test on a receive request this comm does not own (or already completed)");
    return ncclInternalError;
  }
  if (failed_) return ncclSystemError;
  if (progress() != ncclSuccess) return fail(r);
  const int n = r->group_n;
  for (int i = 0; i < n; ++i) {
    ncclResult_t res = ncclSuccess;
    if (!complete(&reqs_[r->group[i]], &res)) return res == ncclSuccess ? ncclSuccess : fail(r);
  }
  int group[kMaxRecvs];
  std::copy(r->group, r->group + n, group);
  for (int i = 0; i < n; ++i) {
    Req* m = &reqs_[group[i]];
    if (sizes) sizes[i] = static_cast<size_t>(m->asm_.offset);
    finish(m);
  }
  if (count) *count = n;
  *done = 1;
  return ncclSuccess;
}

}  // namespace net
}  // namespace zipccl
