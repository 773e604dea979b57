#include "layer/profiler_events.h"

#include <atomic>

#include "nccl/net_profiler.h"

namespace zipccl {
namespace net {
namespace {

std::atomic<ncclProfilerCallback_t> g_callback{nullptr};
constexpr int64_t kPluginId = ZIPCCL_PROFILER_NET_TYPE | ZIPCCL_PROFILER_NET_VER;

}  // namespace

void set_profiler_callback(ncclProfilerCallback_t cb) {
  if (cb) g_callback.store(cb, std::memory_order_release);
}

void ProfilerEvent::start(void* phandle, bool send, size_t raw_bytes, bool device) {
  handle_ = nullptr;
  started_ = false;
  ncclProfilerCallback_t cb = g_callback.load(std::memory_order_acquire);
  if (!cb || !phandle) return;
  send_ = send;
  device_ = device;
  zipcclProfilerNetDescr_v1_t d{};
  d.type = send ? zipcclProfileSend : zipcclProfileRecv;
  d.msg.raw_bytes = raw_bytes;
  d.msg.device = device;
  // A profiler failure is the profiler's: the message goes on without its event.
  if (cb(&handle_, ncclProfilerNetEventStart, phandle, kPluginId, &d) != ncclSuccess) handle_ = nullptr;
  started_ = handle_ != nullptr;
}

void ProfilerEvent::finish(size_t raw_bytes, size_t wire_bytes, uint64_t codec_ns, size_t segments, bool compressed) {
  if (!started_) return;
  started_ = false;
  zipcclProfilerNetDescr_v1_t d{};
  d.type = send_ ? zipcclProfileSend : zipcclProfileRecv;
  d.msg.raw_bytes = raw_bytes;
  d.msg.wire_bytes = wire_bytes;
  d.msg.codec_ns = codec_ns;
  d.msg.segments = static_cast<int>(segments);
  d.msg.compressed = compressed;
  d.msg.device = device_;
  g_callback.load(std::memory_order_acquire)(&handle_, ncclProfilerNetEventUpdateAndStop, nullptr, kPluginId, &d);
  handle_ = nullptr;
}

void ProfilerEvent::abandon() {
  if (!started_) return;
  started_ = false;
  g_callback.load(std::memory_order_acquire)(&handle_, ncclProfilerNetEventStop, nullptr, 0, nullptr);
  handle_ = nullptr;
}

}  // namespace net
}  // namespace zipccl
