// Selection of the device operations (ZIPCCL_GPU) and the per-comm Channel.
#include "gpu/gpu_path.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
      // Offered to NCCL only once it works here: NCCL then registers device buffers with us, and a path
      // that fails at the first regMr would fail a job NCCL alone runs.
      const int dev = ops ? ops->current_device() : -1;
      std::string failed = dev < 0 ? "no current CUDA device" : "";
      if (ops && (dev < 0 || self_test(ops, dev, &failed) != ncclSuccess)) {
        ZIPCCL_LOG(mode == GpuMode::kOn ? NCCL_LOG_WARN : NCCL_LOG_INFO, NCCL_INIT | NCCL_NET,
                   "GPU path: off (its self-test on GPU %d failed: %s); NCCL stages device data in host memory "
                   "for us",
                   dev, failed.c_str());
        ops = nullptr;
        return;
      }
    }
    if (ops) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path: %s, %d streams per GPU shared by every connection", ops->name(),
                  kStreamsPerDevice);
    } else {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path: off (host buffers only)");
    }
  });
  return ops;
}

namespace {
constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }
}  // namespace

namespace {
// Per device: the shared streams (created once, never destroyed) and the memory of closed comms,
// freed on the codec stream once both streams have passed events recorded at the close.
struct Retired {
  void* codec_event = nullptr;
  void* copy_event = nullptr;
  std::vector<void*> blocks;
};
struct DeviceStreams {
  SharedStreams streams;
  std::vector<Retired> retired;
  // Memory of comms closed after the device failed: never freed (a faulted context frees nothing),
  // kept reachable so that it reads as held, not as a leak.
  std::vector<void*> lost;
};
std::mutex g_streams_mu;
std::vector<std::unique_ptr<DeviceStreams>>* g_devices = new std::vector<std::unique_ptr<DeviceStreams>>;  // by ordinal

// Frees what closed comms left once the device is done with it. Caller holds g_streams_mu.
void sweep(DeviceOps* ops, DeviceStreams* d) {
  for (size_t i = 0; i < d->retired.size();) {
    Retired& r = d->retired[i];
    bool a = false, b = false;
    if (ops->query(r.codec_event, &a) != ncclSuccess || ops->query(r.copy_event, &b) != ncclSuccess || !a || !b) {
      ++i;  // not yet (or a faulted device: left allocated)
      continue;
    }
    for (void* p : r.blocks) ops->free_async(d->streams.codec, p);
    ops->destroy_event(r.codec_event);
    ops->destroy_event(r.copy_event);
    d->retired.erase(d->retired.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

DeviceStreams* device_streams(int dev) {
  if (dev < 0) return nullptr;
  if (g_devices->size() <= static_cast<size_t>(dev)) g_devices->resize(static_cast<size_t>(dev) + 1);
  auto& d = (*g_devices)[static_cast<size_t>(dev)];
  if (!d) d.reset(new DeviceStreams);
  return d.get();
}
}  // namespace

ncclResult_t shared_streams(DeviceOps* ops, int dev, SharedStreams* out) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  DeviceStreams* d = device_streams(dev);
  if (!d) return ncclInternalError;
  if (!d->streams.codec) {
    // The path's init on this device: module load and the streams, once per process.
    ZIPCCL_CHECK(ops->make_current(dev));
    ZIPCCL_CHECK(ops->prepare(dev));
    SharedStreams s;
    ZIPCCL_CHECK(ops->create_stream(dev, &s.codec));
    if (ops->create_stream(dev, &s.copy) != ncclSuccess) {
      ops->destroy_stream(s.codec);
      return ncclUnhandledCudaError;
    }
    d->streams = s;
  }
  sweep(ops, d);
  *out = d->streams;
  return ncclSuccess;
}

namespace {
enum class Waited { kDone, kFailed, kTimedOut };
// Polls `events` until every one has passed, one reports an error (CUDA's errors from kernels are
// sticky), or `limit` has passed; naps from 10 us, doubling up to 1 ms. Never a device-wide sync.
Waited wait_for(DeviceOps* ops, std::initializer_list<void*> events, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::chrono::microseconds nap(10);
  for (;;) {
    bool all = true;
    for (void* e : events) {
      bool done = false;
      if (ops->query(e, &done) != ncclSuccess) return Waited::kFailed;
      all = all && done;
    }
    if (all) return Waited::kDone;
    if (std::chrono::steady_clock::now() > deadline) return Waited::kTimedOut;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

// The self-test's wait for the work before `event`: false with *why on a device error or after 10 s.
bool finished(DeviceOps* ops, void* event, const char* what, std::string* why) {
  switch (wait_for(ops, {event}, std::chrono::seconds(10))) {
    case Waited::kDone:
      return true;
    case Waited::kFailed:
      *why = std::string(what) + ": the device reported an error";
      return false;
    case Waited::kTimedOut:
      break;
  }
  *why = std::string(what) + " did not finish within 10 s";
  return false;
}

// 64 KiB of bf16 shaped like training data: random sign and mantissa, exponents around 2^-6.
std::vector<uint8_t> self_test_input() {
  std::vector<uint8_t> v(64 << 10);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i + 1 < v.size(); i += 2) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    const unsigned exponent = 121 + static_cast<unsigned>(__builtin_popcountll(x & 0xff)) % 6;
    const uint16_t h = static_cast<uint16_t>(((x >> 8) & 0x8000) | (exponent << 7) | ((x >> 24) & 0x7f));
    std::memcpy(&v[i], &h, 2);
  }
  return v;
}
}  // namespace

ncclResult_t self_test(DeviceOps* ops, int dev, std::string* why) {
  why->clear();
  SharedStreams streams;
  if (shared_streams(ops, dev, &streams) != ncclSuccess) {
    *why = "loading the kernels or creating the streams failed (see above)";
    return ncclUnhandledCudaError;
  }
  const std::vector<uint8_t> in = self_test_input();
  const size_t n = in.size(), cap = codec::max_encoded_size(n);
  std::vector<uint8_t> want(cap);
  size_t want_size = 0;
  codec::EncodeOptions opt;
  opt.type = codec::ElemType::kBf16;
  if (codec::encode(in.data(), n, want.data(), cap, &want_size, opt) != codec::Status::kOk) {
    *why = "the CPU codec failed";
    return ncclInternalError;
  }
  void* s = streams.codec;
  // Host memory from the pinned pool: the staging the path uses, written and read here.
  void *host_in = nullptr, *host_frame = nullptr, *host_out = nullptr, *results = nullptr;
  void *dev_in = nullptr, *dev_frame = nullptr, *dev_out = nullptr, *event = nullptr;
  ncclResult_t r = ops->create_event(s, &event);
  for (auto a : {std::make_pair(&host_in, n), std::make_pair(&host_frame, cap), std::make_pair(&host_out, n),
                 std::make_pair(&results, 2 * sizeof(Result))}) {
    if (r == ncclSuccess) r = ops->alloc_host_async(s, a.second, a.first);
  }
  for (auto a : {std::make_pair(&dev_in, n), std::make_pair(&dev_frame, cap), std::make_pair(&dev_out, n)}) {
    if (r == ncclSuccess) r = ops->alloc_device_async(s, a.second, a.first);
  }
  if (r == ncclSuccess) r = ops->reserve_workspace(s, n);
  if (r != ncclSuccess) *why = "allocating its buffers failed (see above)";
  Result* res = static_cast<Result*>(results);
  // Each stage waits for the one before: the host touches pool memory only once the stream has it, and
  // the decode needs the encoded size.
  bool ok = r == ncclSuccess && ops->record(s, event) == ncclSuccess && finished(ops, event, "allocating", why);
  if (ok) {
    std::memcpy(host_in, in.data(), n);
    result_clear(&res[0]);
    result_clear(&res[1]);
    ok = ops->copy(s, dev_in, host_in, n, Copy::kHostToDevice) == ncclSuccess &&
         ops->encode(s, dev_in, n, dev_frame, cap, codec::ElemType::kBf16, 0, &res[0]) == ncclSuccess &&
         ops->record(s, event) == ncclSuccess && finished(ops, event, "the encode", why);
    if (!ok && why->empty()) *why = "launching the encode failed (see above)";
  }
  if (ok && (!result_ready(&res[0]) || res[0].status != static_cast<int32_t>(codec::Status::kOk))) {
    *why = "the encode reported no result or an error";
    ok = false;
  }
  if (ok) {
    const size_t frame = static_cast<size_t>(res[0].size);
    ok = frame <= cap && ops->copy(s, host_frame, dev_frame, frame, Copy::kDeviceToHost) == ncclSuccess &&
         ops->decode(s, dev_frame, frame, dev_out, n, 0, &res[1]) == ncclSuccess &&
         ops->copy(s, host_out, dev_out, n, Copy::kDeviceToHost) == ncclSuccess &&
         ops->record(s, event) == ncclSuccess && finished(ops, event, "the decode", why);
    if (!ok && why->empty()) *why = "launching the decode failed (see above)";
    if (ok && (frame != want_size || std::memcmp(host_frame, want.data(), frame) != 0)) {
      *why = "the frame differs from the CPU codec's (" + std::to_string(frame) + " vs " + std::to_string(want_size) +
             " bytes)";
      ok = false;
    }
  }
  if (ok && (!result_ready(&res[1]) || res[1].status != static_cast<int32_t>(codec::Status::kOk) ||
             res[1].size != n || std::memcmp(host_out, in.data(), n) != 0)) {
    *why = "the decode did not give back the input";
    ok = false;
  }
  const std::initializer_list<void*> blocks = {host_in, host_frame, host_out, results, dev_in, dev_frame, dev_out};
  if (ok) {
    for (void* p : blocks) ops->free_async(s, p);
    std::string ignored;  // the memory is back in the pools once the stream passed this point
    if (ops->record(s, event) == ncclSuccess) finished(ops, event, "freeing", &ignored);
  } else {
    // A failed device may never run a stream-ordered free (a sticky fault stops its streams), and a
    // timed-out run may still use the buffers: kept allocated, reachable, as a closed comm's are then.
    std::lock_guard<std::mutex> lock(g_streams_mu);
    DeviceStreams* d = device_streams(dev);
    for (void* p : blocks) {
      if (p && d) d->lost.push_back(p);
    }
  }
  if (event) ops->destroy_event(event);
  return ok ? ncclSuccess : ncclUnhandledCudaError;
}

bool Channel::holds_regions() const {
  for (const Slot& s : slots_) {
    for (const Region& r : s.buf) {
      if (r.p) return true;
    }
  }
  return false;
}

bool Channel::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !holds_regions();
}

void Channel::drain() {
  std::lock_guard<std::mutex> lock(mu_);
  if (dev_ < 0 || !holds_regions()) return;
  if (ops_->record(stream_, drain_events_[0]) != ncclSuccess ||
      ops_->record(copy_stream_, drain_events_[1]) != ncclSuccess) {
    return;  // the device failed (CUDA's errors from kernels are sticky): it runs nothing any more
  }
  // A failed wait is a failed device, as above: nothing to wait for.
  if (wait_for(ops_, {drain_events_[0], drain_events_[1]}, std::chrono::milliseconds(kDrainLimitMs)) ==
      Waited::kTimedOut) {
    ZIPCCL_WARN("GPU path: a closing connection's device work is still running after %d ms; it may still "
                "read or write buffers that are about to be freed",
                kDrainLimitMs);
  }
}

Channel::~Channel() {
  if (!ops_ || dev_ < 0) return;
  drain();
  Retired r;
  for (void* e : drain_events_) {
    if (e) ops_->destroy_event(e);
  }
  for (Slot& s : slots_) {
    if (s.event) ops_->destroy_event(s.event);  // a pending event is released when it completes
    for (void* e : s.seg_events) {
      if (e) ops_->destroy_event(e);
    }
    if (s.results) r.blocks.push_back(s.results);
  }
  for (Result* p : retired_results_) r.blocks.push_back(p);
  for (auto& list : arenas_) {
    for (auto& a : list) {
      if (a->base) r.blocks.push_back(a->base);
    }
  }
  // The comm's work may still run on both streams (a request NCCL stopped waiting for): its memory is
  // freed only after both have passed this point. The events are the device's (an event is created on
  // the current device, and recording it on another device's stream fails): the thread that closes
  // may have another device current.
  std::lock_guard<std::mutex> lock(g_streams_mu);
  DeviceStreams* d = device_streams(dev_);
  if (ops_->make_current(dev_) != ncclSuccess || ops_->create_event(stream_, &r.codec_event) != ncclSuccess ||
      ops_->create_event(copy_stream_, &r.copy_event) != ncclSuccess ||
      ops_->record(stream_, r.codec_event) != ncclSuccess ||
      ops_->record(copy_stream_, r.copy_event) != ncclSuccess) {
    ZIPCCL_INFO(NCCL_NET, "GPU path: a closed connection's %zu staging blocks stay allocated (the device failed)",
                r.blocks.size());
    for (void* e : {r.codec_event, r.copy_event}) {
      if (e) ops_->destroy_event(e);
    }
    d->lost.insert(d->lost.end(), r.blocks.begin(), r.blocks.end());
    return;
  }
  d->retired.push_back(std::move(r));
  sweep(ops_, d);
}

ncclResult_t Channel::bind(int dev) {
  std::lock_guard<std::mutex> lock(mu_);
  if (dev != dev_) {
    ZIPCCL_WARN("device buffer on GPU %d for a connection %s", dev,
                dev_ < 0 ? "whose device memory was never registered (regMr)" : "bound to another GPU");
    return ncclInternalError;
  }
  return ops_->make_current(dev);
}

ncclResult_t Channel::make_current() {
  std::lock_guard<std::mutex> lock(mu_);
  if (dev_ < 0) return ncclInternalError;  // a device message always comes after a regMr (reserve)
  return ops_->make_current(dev_);
}

// Two messages' worth per kind: the bump allocator restarts only when no region is out, so a
// steady stream of messages needs room for the ones in flight while the next is taken.
ncclResult_t Channel::grow(int kind, size_t cap) {
  if (!arenas_[kind].empty() && arenas_[kind].back()->cap >= cap) return ncclSuccess;
  std::unique_ptr<Arena> a(new Arena);
  void* p = nullptr;
  ZIPCCL_CHECK(kind == 0 ? ops_->alloc_host_async(stream_, cap, &p) : ops_->alloc_device_async(stream_, cap, &p));
  a->base = static_cast<char*>(p);
  a->cap = cap;
  arenas_[kind].push_back(std::move(a));
  return ncclSuccess;
}

ncclResult_t Channel::reserve(int dev, size_t bytes, size_t segments, bool seg_events) {
  SharedStreams streams;
  ZIPCCL_CHECK(shared_streams(ops_, dev, &streams));  // outside mu_: may take the device's init
  std::lock_guard<std::mutex> lock(mu_);
  if (dev_ >= 0 && dev != dev_) {
    ZIPCCL_WARN("regMr of device memory on GPU %d for a connection bound to GPU %d", dev, dev_);
    return ncclInternalError;
  }
  if (segments < 1) segments = 1;
  ZIPCCL_CHECK(ops_->make_current(dev));
  if (dev_ < 0) {
    stream_ = streams.codec;
    copy_stream_ = streams.copy;
    dev_ = dev;
    for (Slot& s : slots_) ZIPCCL_CHECK(ops_->create_event(stream_, &s.event));
    ZIPCCL_CHECK(ops_->create_event(stream_, &drain_events_[0]));
    ZIPCCL_CHECK(ops_->create_event(copy_stream_, &drain_events_[1]));
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
      ZIPCCL_CHECK(ops_->alloc_host_async(stream_, sizeof(Result) * segments, &p));
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
  if (bytes > kMaxStagedRegistration) {
    // A WARN the first time (were it NCCL's own buffer, its connection fails), then INFO.
    ZIPCCL_WARN_FIRST(
        NCCL_NET,
        "regMr of %zu bytes of device memory at %p refused: the GPU path stages at most %zu bytes "
        "per registration (NCCL moves a user buffer it could not register through its own buffers)",
        bytes, data, kMaxStagedRegistration);
    return ncclInvalidUsage;
  }
  if (!*ch) ch->reset(new Channel(ops, slots));
  return (*ch)->reserve(dev, bytes, segments, seg_events);
}

ncclResult_t Channel::buffer(int slot, Buf which, size_t n, void** p) {
  std::lock_guard<std::mutex> lock(mu_);
  *p = nullptr;
  Region& r = slots_[static_cast<size_t>(slot)].buf[static_cast<int>(which)];
  if (r.p && r.size >= n) {
    *p = r.p;
    return ncclSuccess;
  }
  Arena* a = nullptr;
  for (auto it = arenas_[static_cast<int>(which)].rbegin(); !a && it != arenas_[static_cast<int>(which)].rend(); ++it) {
    if ((*it)->published) a = it->get();
  }
  if (!a || r.p) {
    ZIPCCL_WARN("device message of %zu bytes: its connection's device memory was never registered (regMr)%s", n,
                r.p ? ", or the region is already taken" : "");
    return ncclInternalError;
  }
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

void Channel::publish() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& list : arenas_) {
    for (auto& a : list) a->published = true;
  }
}

void Channel::release(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  for (Region& r : slots_[static_cast<size_t>(slot)].buf) {
    if (!r.p) continue;
    if (--r.arena->live == 0) r.arena->head = 0;
    r = Region{};
  }
}

ncclResult_t Channel::record(int slot) {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_->record(stream_, slots_[static_cast<size_t>(slot)].event);
}

ncclResult_t Channel::query(int slot, bool* done) {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_->query(slots_[static_cast<size_t>(slot)].event, done);
}

ncclResult_t Channel::seg_result(int slot, size_t j, Result** r) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (j >= segments_) {
    ZIPCCL_WARN("segment %zu of a device message: its registration prepared %zu", j, segments_);
    return ncclInternalError;
  }
  *r = s.results + j;
  return ncclSuccess;
}

ncclResult_t Channel::seg_record(int slot, size_t j) {
  std::lock_guard<std::mutex> lock(mu_);
  Slot& s = slots_[static_cast<size_t>(slot)];
  if (j >= s.seg_events.size()) {
    ZIPCCL_WARN("segment %zu of a device message: its registration prepared %zu", j, segments_);
    return ncclInternalError;
  }
  return ops_->record(copy_stream_, s.seg_events[j]);
}

ncclResult_t Channel::seg_query(int slot, size_t j, bool* done) {
  std::lock_guard<std::mutex> lock(mu_);
  return ops_->query(slots_[static_cast<size_t>(slot)].seg_events[j], done);
}

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
