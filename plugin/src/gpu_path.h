// The plugin's GPU path: the small set of device operations the send/receive pipeline needs, behind one
// interface with two implementations - CUDA (gpu_cuda.cpp, built with the toolkit) and a host
// emulation for tests (gpu_emulated.cpp: "device memory" is host memory, stream work runs on a helper
// thread, optionally delayed, so ordering bugs show on a CPU). Design and the LL/LL128 facts:
// docs/notes/gpu.md ("The plugin's GPU path").
//
// Contract: every enqueueing call returns at once (stream-ordered, never a blocking synchronisation of
// the proxy thread); completion is seen by polling (query_event, result_ready). All calls for one
// stream come from one thread (NCCL's proxy thread of that connection); create/destroy and the
// allocators are thread-safe. Errors: ncclUnhandledCudaError for a failing CUDA call (with a WARN that
// names it), ncclInternalError for misuse.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "../nccl/net_common.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace net {
namespace gpu {

// Same layout as codec::gpu::CodecResult (static_assert in gpu_cuda.cpp): written by the device (or
// the emulation's helper thread) into pinned host memory; `ready` becomes 1 after size and status.
struct Result {
  uint64_t size;
  int32_t status;  // codec::Status
  uint32_t ready;
};

inline bool result_ready(const Result* r) {
  return __atomic_load_n(&r->ready, __ATOMIC_ACQUIRE) != 0;
}
inline void result_clear(Result* r) {
  r->size = 0;
  r->status = 0;
  __atomic_store_n(&r->ready, 0u, __ATOMIC_RELEASE);
}

enum class Copy { kDeviceToHost, kHostToDevice, kDeviceToDevice };

class DeviceOps {
 public:
  virtual ~DeviceOps() = default;
  virtual const char* name() const = 0;
  // CUDA ordinal of the device owning `p`, or -1 when it is not device memory.
  virtual int device_of(const void* p) = 0;
  // Makes `dev` current on the calling thread.
  virtual ncclResult_t make_current(int dev) = 0;
  // A non-blocking stream on `dev` (made current first).
  virtual ncclResult_t create_stream(int dev, void** stream) = 0;
  // Waits for the stream's work (comm close only), frees it and its workspaces.
  virtual void destroy_stream(void* stream) = 0;
  virtual ncclResult_t create_event(void* stream, void** event) = 0;
  virtual void destroy_event(void* event) = 0;
  // Device memory on the current device, and pinned host memory the device can write (mapped).
  virtual ncclResult_t alloc_device(size_t n, void** p) = 0;
  virtual void free_device(void* p) = 0;
  virtual ncclResult_t alloc_host(size_t n, void** p) = 0;
  virtual void free_host(void* p) = 0;

  // ---- enqueued on `stream`, return immediately ----
  // One codec frame of src[0, n) into dst (cap >= max_encoded_size(n)); *host_result (pinned) becomes
  // ready with the frame size and status. max_sms bounds the grid (0: the device's).
  virtual ncclResult_t encode(void* stream, const void* src, size_t n, void* dst, size_t cap,
                              codec::ElemType type, int max_sms, Result* host_result) = 0;
  // Decodes the frame src[0, n) into dst[0, cap); never writes past cap.
  virtual ncclResult_t decode(void* stream, const void* src, size_t n, void* dst, size_t cap, int max_sms,
                              Result* host_result) = 0;
  virtual ncclResult_t copy(void* stream, void* dst, const void* src, size_t n, Copy kind) = 0;
  // Device-to-device copy in which each 128-byte line's last 8 bytes (an LL128 flag) become visible
  // only after the line's other bytes (line_order() below).
  virtual ncclResult_t land_lines(void* stream, void* dst, const void* src, size_t n) = 0;
  virtual ncclResult_t record(void* stream, void* event) = 0;
  // Non-blocking: *done once everything enqueued before the last record() has finished.
  virtual ncclResult_t query(void* event, bool* done) = 0;
};

// The process's device operations, chosen once by ZIPCCL_GPU: "off" -> nullptr; "emulate" -> the host
// emulation; "auto" -> CUDA when this build has it and a device is usable, else nullptr. Thread-safe.
DeviceOps* device_ops();
// The CUDA implementation, or nullptr (no toolkit in this build, no driver, no device). Logs why.
DeviceOps* cuda_ops();
// The emulation (ZIPCCL_GPU_EMULATE_DELAY_US, ZIPCCL_GPU_EMULATE_FAIL_EVERY apply).
DeviceOps* emulated_ops();
// Emulation, tests only: encodes the emulation has finished (process-wide), and a gate: an encode
// starts only while fewer than `allow` encodes have finished (its stream waits; other streams run on).
// Lets a test hold a message's later segments in "encoding" and watch what the pipeline does meanwhile.
uint64_t emulated_encodes_done();
void emulated_gate_encodes(uint64_t allow);

// ---- LL/LL128 (docs/notes/gpu.md) ----
// NCCL (v9+ ABI, NCCL_NET_OPTIONAL_RECV_COMPLETION=1, its default) stores this value in *request before
// irecv for LL and LL128 receives of one buffer: the GPU polls flags inside the data and may consume
// lines before test() reports completion.
constexpr uintptr_t kOptionalRecvCompletion = 0x1;
inline bool marks_flag_protocol(void* const* request) {
  return request && reinterpret_cast<uintptr_t>(*request) == kOptionalRecvCompletion;
}
enum class Landing { kOrdered, kMarked };  // ZIPCCL_GPU_LANDING
// Whether a device receive must land flag-last: always under kOrdered (NCCL may not mark: older
// versions, NCCL_NET_OPTIONAL_RECV_COMPLETION=0), only marked receives under kMarked.
inline bool needs_ordered_landing(Landing mode, bool marked) {
  return mode == Landing::kOrdered || marked;
}

constexpr size_t kLineBytes = 128;  // NCCL_LL128_LINEELEMS (16) x 8 bytes
constexpr size_t kFlagBytes = 8;    // the line's last u64 (NCCL_LL128_FLAGTHREAD holds it)
// The store order of land_lines() over n bytes, as (offset, length) pieces in program order, with a
// fence between a line's body and its flag word. The CUDA kernel writes one line per thread in this
// order; the emulation and the tests use it directly.
struct Piece {
  size_t offset;
  size_t length;
  bool fence_before;
};
template <typename Fn>
void line_order(size_t n, Fn&& fn) {
  for (size_t line = 0; line < n; line += kLineBytes) {
    size_t len = n - line < kLineBytes ? n - line : kLineBytes;
    if (len > kFlagBytes) {
      fn(Piece{line, len - kFlagBytes, false});
      fn(Piece{line + len - kFlagBytes, kFlagBytes, true});
    } else {
      fn(Piece{line, len, false});
    }
  }
}

// Per-comm device state: the stream (codec work, receive copies), a second stream for send-side D2H
// copies (so a segment's copy never waits behind encodes enqueued after it), and per request slot:
// grow-only staging (replaced buffers are freed at close, so no allocator call waits on the device
// mid-run), an event (recorded on the stream: a receive's completion), and per segment a pinned Result
// and a copy-stream event.
class Channel {
 public:
  Channel(DeviceOps* ops, int slots) : ops_(ops), slots_(static_cast<size_t>(slots)) {}
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  DeviceOps* ops() const { return ops_; }
  void* stream() const { return stream_; }
  int device() const { return dev_; }
  // Binds to the device of the first device buffer (creates both streams); later buffers must be on it.
  // Makes the device current on the calling thread every time.
  ncclResult_t bind(int dev);
  enum class Buf { kHost, kDevice, kLand };
  // A buffer of at least n bytes for `slot`.
  ncclResult_t buffer(int slot, Buf which, size_t n, void** p);
  ncclResult_t record(int slot);
  ncclResult_t query(int slot, bool* done);
  // The copy stream (created with the stream in bind()).
  void* copy_stream() const { return copy_stream_; }
  // Segment j of the slot's message: a pinned Result, and an event recorded on the copy stream. Both
  // are allocated on first use in chunks and never move, so work in flight keeps its pointers.
  ncclResult_t seg_result(int slot, size_t j, Result** r);
  ncclResult_t seg_record(int slot, size_t j);
  ncclResult_t seg_query(int slot, size_t j, bool* done);

 private:
  struct Slot {
    void* buf[3] = {nullptr, nullptr, nullptr};
    size_t size[3] = {0, 0, 0};
    void* event = nullptr;
    std::vector<Result*> result_chunks;  // kSegChunk results each
    std::vector<void*> seg_events;       // on the copy stream
  };
  static constexpr size_t kSegChunk = 64;
  DeviceOps* ops_;
  std::vector<Slot> slots_;
  std::vector<std::pair<int, void*>> retired_;  // (Buf, pointer) freed at close
  void* stream_ = nullptr;
  void* copy_stream_ = nullptr;
  int dev_ = -1;
};

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
