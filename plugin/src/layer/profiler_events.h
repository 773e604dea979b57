// zipccl's net-plugin events for NCCL's profiler (plugin/nccl/net_profiler.h): one per message, started
// at isend/irecv and updated-and-stopped at completion with raw and wire bytes and codec time. Nothing
// happens unless NCCL handed a callback to init (v10+) and a profiler handle with the message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl/net_common.h"

namespace zipccl {
namespace net {

// The callback NCCL handed to init (nullptr: none). Kept for the process, as NCCL's own transports do.
void set_profiler_callback(ncclProfilerCallback_t cb);

// One message's event. Owned by the request; start and finish run on the comm's (NCCL's) thread.
class ProfilerEvent {
 public:
  // phandle: what NCCL passed with the message (nullptr: no event).
  void start(void* phandle, bool send, size_t raw_bytes, bool device);
  // Updates with the outcome and stops; nothing when start made no event.
  void finish(size_t raw_bytes, size_t wire_bytes, uint64_t codec_ns, size_t segments, bool compressed);
  // Stops without an update (a failed request).
  void abandon();

 private:
  void* handle_ = nullptr;
  bool started_ = false, send_ = false, device_ = false;
};

}  // namespace net
}  // namespace zipccl
