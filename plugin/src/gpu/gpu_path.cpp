// Selection of the device operations (ZIPCCL_GPU) and the per-comm Channel.
#include "gpu/gpu_path.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "common/log.h"
#include "common/settings.h"

namespace zipccl {
namespace net {
namespace gpu {

#ifndef ZIPCCL_PLUGIN_CUDA
DeviceOps* cuda_ops() {
  ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path: this build has no CUDA (configure with -DZIPCCL_CUDA=ON)");
  return nullptr;
}
#endif

const char* gpu_path_blocker() {
  const char* c = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  if (c && std::strtol(c, nullptr, 10) == 1) {
    return "CUDA_DEVICE_MAX_CONNECTIONS=1: with one hardware queue the plugin's kernels would wait behind "
           "the application's next kernel, which waits for NCCL, which waits for the plugin";
  }
  return nullptr;
}

namespace {
DeviceOpsFactory g_factory = nullptr;  // set by a test double's static initializer, before any use
const char* g_factory_what = nullptr;
}  // namespace

void set_device_ops_factory(DeviceOpsFactory factory, const char* what) {
  g_factory = factory;
  g_factory_what = what;
}

DeviceOps* device_ops() {
  static std::once_flag once;
  static DeviceOps* ops = nullptr;
  std::call_once(once, [] {
    const GpuMode mode = settings().gpu;
    if (g_factory && (ops = g_factory())) {
      ZIPCCL_WARN("%s", g_factory_what);
    } else if (mode == GpuMode::kOff) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
                  "GPU path: off (opt-in until proven on a GPU: ZIPCCL_GPU=on); NCCL stages device data in "
                  "host memory for us");
      return;
    } else if (const char* why = gpu_path_blocker()) {
      if (mode == GpuMode::kOn) ZIPCCL_WARN("ZIPCCL_GPU=on ignored: %s", why);
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path: off (%s)", why);
      return;
    } else {
      ops = cuda_ops();
      if (!ops && mode == GpuMode::kOn) ZIPCCL_WARN("ZIPCCL_GPU=on, but no usable CUDA device: host buffers only");
    }
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path: %s", ops ? ops->name() : "off (host buffers only)");
  });
  return ops;
}

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

Channel::~Channel() {
  if (!ops_) return;
  if (stream_) ops_->destroy_stream(stream_);  // waits for in-flight work on this comm's buffers
  if (copy_stream_) ops_->destroy_stream(copy_stream_);
  for (Slot& s : slots_) {
    if (s.event) ops_->destroy_event(s.event);
    for (void* e : s.seg_events) {
      if (e) ops_->destroy_event(e);
    }
    if (s.results) ops_->free_host(s.results);
  }
  for (Result* r : retired_results_) ops_->free_host(r);
  for (int k = 0; k < 3; ++k) {
    for (auto& a : arenas_[k]) free_arena(k, a.get());
  }
}

void Channel::free_arena(int kind, Arena* a) {
  if (!a->base) return;
  if (kind == 0)
    ops_->free_host(a->base);
  else
    ops_->free_device(a->base);
  a->base = nullptr;
}

ncclResult_t Channel::bind(int dev) {
  if (dev != dev_) {
    ZIPCCL_WARN("device buffer on GPU %d for a connection %s", dev,
                dev_ < 0 ? "whose device memory was never registered (regMr)" : "bound to another GPU");
    return ncclInternalError;
  }
  return ops_->make_current(dev);
}

// Two messages' worth per kind: the bump allocator restarts only when no region is out, so a
// steady stream of messages needs room for the ones in flight while the next is taken.
ncclResult_t Channel::grow(int kind, size_t cap) {
  if (!arenas_[kind].empty() && arenas_[kind].back()->cap >= cap) return ncclSuccess;
  std::unique_ptr<Arena> a(new Arena);
  void* p = nullptr;
  ZIPCCL_CHECK(kind == 0 ? ops_->alloc_host(cap, &p) : ops_->alloc_device(cap, &p));
  a->base = static_cast<char*>(p);
  a->cap = cap;
  arenas_[kind].push_back(std::move(a));
  return ncclSuccess;
}

ncclResult_t Channel::reserve(int dev, size_t bytes, size_t segments, bool seg_events) {
  if (dev_ >= 0 && dev != dev_) {
    ZIPCCL_WARN("regMr of device memory on GPU %d for a connection bound to GPU %d", dev, dev_);
    return ncclInternalError;
  }
  if (segments < 1) segments = 1;
  ZIPCCL_CHECK(ops_->make_current(dev));
  if (dev_ < 0) {
    ZIPCCL_CHECK(ops_->prepare(dev));
    ZIPCCL_CHECK(ops_->create_stream(dev, &stream_));
    ZIPCCL_CHECK(ops_->create_stream(dev, &copy_stream_));
    dev_ = dev;
    for (Slot& s : slots_) ZIPCCL_CHECK(ops_->create_event(stream_, &s.event));
  }
  if (bytes > bytes_ || arenas_[0].empty()) {
    ZIPCCL_CHECK(ops_->reserve_workspace(stream_, bytes));
    // A message's staging: its segments' frames (max_encoded_size each) or, receiving, the posted size
    // or a whole frame; the bound of one message is that of `bytes` in `segments` pieces.
    const size_t one = align_up(codec::max_encoded_size(bytes) + segments * codec::max_encoded_size(0));
    for (int k = 0; k < 3; ++k) ZIPCCL_CHECK(grow(k, 2 * one));
    bytes_ = bytes;
  }
  if (segments > segments_) {
    for (Slot& s : slots_) {
      void* p = nullptr;
      ZIPCCL_CHECK(ops_->alloc_host(sizeof(Result) * segments, &p));
      if (s.results) retired_results_.push_back(s.results);  // a request in flight may still use them
      s.results = static_cast<Result*>(p);
      for (size_t i = 0; i < segments; ++i) result_clear(s.results + i);
      if (!seg_events) continue;
      s.seg_events.resize(segments, nullptr);
      for (void*& e : s.seg_events) {
        if (!e) ZIPCCL_CHECK(ops_->create_event(copy_stream_, &e));
      }
    }
    segments_ = segments;
  }
  return ncclSuccess;
}

ncclResult_t Channel::reserve_for(std::unique_ptr<Channel>* ch, int slots, const void* data, size_t bytes,
                                  size_t segments, bool seg_events) {
  DeviceOps* ops = device_ops();
  if (!ops) {
    ZIPCCL_WARN("regMr of device memory, but the GPU path is off");
    return ncclInternalError;
  }
  int dev = ops->device_of(data);
  if (dev < 0) {
    ZIPCCL_WARN("regMr: %p is registered as device memory but CUDA does not know it", data);
    return ncclInternalError;
  }
  if (!*ch) ch->reset(new Channel(ops, slots));
  return (*ch)->reserve(dev, bytes, segments, seg_events);
}

ncclResult_t Channel::buffer(int slot, Buf which, size_t n, void** p) {
  *p = nullptr;
  Region& r = slots_[static_cast<size_t>(slot)].buf[static_cast<int>(which)];
  if (r.p && r.size >= n) {
    *p = r.p;
    return ncclSuccess;
  }
  auto& list = arenas_[static_cast<int>(which)];
  if (list.empty() || r.p) {
    ZIPCCL_WARN("device message of %zu bytes: its connection's device memory was never registered (regMr)%s", n,
                r.p ? ", or the region is already taken" : "");
    return ncclInternalError;
  }
  Arena* a = list.back().get();
  const size_t need = align_up(n ? n : 1);
  if (need > a->cap) {
    ZIPCCL_WARN("device message of %zu bytes, larger than the %zu-byte registration it comes from", n, bytes_);
    return ncclInternalError;
  }
  if (a->head + need > a->cap) {
    if (a->live) return ncclSuccess;  // busy: regions return as requests complete
    a->head = 0;
  }
  r.arena = a;
  r.p = a->base + a->head;
  r.size = need;
  a->head += need;
  ++a->live;
  *p = r.p;
  return ncclSuccess;
}

void Channel::release(int slot) {
  for (Region& r : slots_[static_cast<size_t>(slot)].buf) {
    if (!r.p) continue;
    if (--r.arena->live == 0) r.arena->head = 0;
    r = Region{};
  }
}

ncclResult_t Channel::record(int slot) {
  return ops_->record(stream_, slots_[static_cast<size_t>(slot)].event);
}

ncclResult_t Channel::query(int slot, bool* done) {
  return ops_->query(slots_[static_cast<size_t>(slot)].event, done);
}

ncclResult_t Channel::seg_result(int slot, size_t j, Result** r) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (j >= segments_) {
    ZIPCCL_WARN("segment %zu of a device message: its registration prepared %zu", j, segments_);
    return ncclInternalError;
  }
  *r = s.results + j;
  return ncclSuccess;
}

ncclResult_t Channel::seg_record(int slot, size_t j) {
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (j >= s.seg_events.size()) {
    ZIPCCL_WARN("segment %zu of a device message: its registration prepared %zu", j, segments_);
    return ncclInternalError;
  }
  return ops_->record(copy_stream_, s.seg_events[j]);
}

ncclResult_t Channel::seg_query(int slot, size_t j, bool* done) {
  return ops_->query(slots_[static_cast<size_t>(slot)].seg_events[j], done);
}

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
