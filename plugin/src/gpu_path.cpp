// Selection of the device operations (ZIPCCL_GPU) and the per-comm Channel.
#include "gpu_path.h"

#include <mutex>
#include <string>

#include "log.h"
#include "settings.h"

namespace zipccl {
namespace net {
namespace gpu {

#ifndef ZIPCCL_PLUGIN_CUDA
DeviceOps* cuda_ops() {
  ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path: this build has no CUDA (configure with -DZIPCCL_CUDA=ON)");
  return nullptr;
}
#endif

DeviceOps* device_ops() {
  static std::once_flag once;
  static DeviceOps* ops = nullptr;
  std::call_once(once, [] {
    const std::string mode = settings().gpu;  // validated by the registry
    if (mode == "emulate") {
      ops = emulated_ops();
      ZIPCCL_WARN("ZIPCCL_GPU=emulate: device buffers are host memory handled by a test emulation");
    } else if (mode == "auto") {
      ops = cuda_ops();
    }
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path: %s", ops ? ops->name() : "off (host buffers only)");
  });
  return ops;
}

Channel::~Channel() {
  if (!ops_) return;
  if (stream_) ops_->destroy_stream(stream_);  // waits for in-flight work on this comm's buffers
  if (copy_stream_) ops_->destroy_stream(copy_stream_);
  for (Slot& s : slots_) {
    if (s.event) ops_->destroy_event(s.event);
    for (void* e : s.seg_events) {
      if (e) ops_->destroy_event(e);
    }
    for (Result* r : s.result_chunks) ops_->free_host(r);
    if (s.buf[0]) ops_->free_host(s.buf[0]);
    if (s.buf[1]) ops_->free_device(s.buf[1]);
    if (s.buf[2]) ops_->free_device(s.buf[2]);
  }
  for (auto& r : retired_) {
    if (r.first == 0)
      ops_->free_host(r.second);
    else
      ops_->free_device(r.second);
  }
}

ncclResult_t Channel::bind(int dev) {
  if (dev_ >= 0) {
    if (dev != dev_) {
      ZIPCCL_WARN("device buffer on GPU %d for a connection bound to GPU %d", dev, dev_);
      return ncclInternalError;
    }
    return ops_->make_current(dev);
  }
  ZIPCCL_CHECK(ops_->make_current(dev));
  ZIPCCL_CHECK(ops_->create_stream(dev, &stream_));
  ZIPCCL_CHECK(ops_->create_stream(dev, &copy_stream_));
  dev_ = dev;
  return ncclSuccess;
}

ncclResult_t Channel::buffer(int slot, Buf which, size_t n, void** p) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  int k = static_cast<int>(which);
  if (s.size[k] < n || !s.buf[k]) {
    // Grow to the next power of two (>= 64 KiB): NCCL's step sizes repeat, so this settles quickly.
    size_t want = 64u << 10;
    while (want < n) want <<= 1;
    void* q = nullptr;
    ZIPCCL_CHECK(k == 0 ? ops_->alloc_host(want, &q) : ops_->alloc_device(want, &q));
    if (s.buf[k]) retired_.emplace_back(k == 0 ? 0 : 1, s.buf[k]);
    s.buf[k] = q;
    s.size[k] = want;
  }
  *p = s.buf[k];
  return ncclSuccess;
}

ncclResult_t Channel::record(int slot) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (!s.event) ZIPCCL_CHECK(ops_->create_event(stream_, &s.event));
  return ops_->record(stream_, s.event);
}

ncclResult_t Channel::query(int slot, bool* done) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (!s.event) {
    *done = true;
    return ncclSuccess;
  }
  return ops_->query(s.event, done);
}

ncclResult_t Channel::seg_result(int slot, size_t j, Result** r) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  while (s.result_chunks.size() <= j / kSegChunk) {
    void* p = nullptr;
    ZIPCCL_CHECK(ops_->alloc_host(sizeof(Result) * kSegChunk, &p));
    auto* chunk = static_cast<Result*>(p);
    for (size_t i = 0; i < kSegChunk; ++i) result_clear(chunk + i);
    s.result_chunks.push_back(chunk);
  }
  *r = s.result_chunks[j / kSegChunk] + j % kSegChunk;
  return ncclSuccess;
}

ncclResult_t Channel::seg_record(int slot, size_t j) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (s.seg_events.size() <= j) s.seg_events.resize(j + 1, nullptr);
  if (!s.seg_events[j]) ZIPCCL_CHECK(ops_->create_event(copy_stream_, &s.seg_events[j]));
  return ops_->record(copy_stream_, s.seg_events[j]);
}

ncclResult_t Channel::seg_query(int slot, size_t j, bool* done) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (j >= s.seg_events.size() || !s.seg_events[j]) {
    *done = true;
    return ncclSuccess;
  }
  return ops_->query(s.seg_events[j], done);
}

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
