// The plugin's GPU path: the small set of device operations the send/receive pipeline needs, behind one
// interface with two implementations - CUDA (gpu_cuda.cpp, built with the toolkit) and a host
// emulation for tests (plugin/testing/gpu_emulated.cpp: "device memory" is host memory, stream work
// runs on a helper thread, optionally delayed, so ordering bugs show on a CPU). Design and the LL/LL128 facts:
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
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nccl/net_common.h"
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
  // The calling thread's current device (-1: none can be found).
  virtual int current_device() { return 0; }

  // ---- setup: may synchronise the device or load modules, so they run only once per device and
  // process (the shared streams' creation, shared_streams() below), or in tests ----
  // Loads and configures every kernel of the GPU path on `dev` (CUDA loads modules lazily, and a
  // module load while NCCL's kernel spins on the proxy thread can deadlock). Idempotent.
  virtual ncclResult_t prepare(int dev) = 0;
  // A non-blocking stream on `dev` (made current first).
  virtual ncclResult_t create_stream(int dev, void** stream) = 0;
  // Waits for the stream's work, frees it and its workspaces (tests only: the GPU path's streams live
  // as long as the process).
  virtual void destroy_stream(void* stream) = 0;
  // Device memory on the current device, and pinned host memory the device can write (mapped): both
  // synchronise the device (cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost); tests only.
  virtual ncclResult_t alloc_device(size_t n, void** p) = 0;
  virtual void free_device(void* p) = 0;
  virtual ncclResult_t alloc_host(size_t n, void** p) = 0;
  virtual void free_host(void* p) = 0;
  // A dma-buf of the device memory [p, p + n), for a NIC that registers GPU memory only that way (an
  // inner plugin's regMrDmaBuf on a host without nvidia-peermem; docs/notes/inner.md): the range widened
  // to whole host pages is exported, *offset is where p lies in it. The caller closes *fd once it has
  // registered it (the registration keeps its own reference). At regMr only. Default: not available
  // (ncclInvalidUsage, *fd -1).
  virtual ncclResult_t dmabuf_fd(const void* /*p*/, size_t /*n*/, int* fd, uint64_t* offset) {
    *fd = -1;
    *offset = 0;
    return ncclInvalidUsage;
  }

  // ---- at regMr and close, on NCCL's service thread while kernels run: none synchronises ----
  // The stream's codec workspaces, sized for messages of up to `bytes` (grow-only, stream-ordered):
  // encode()/decode() never allocate, and fail on a larger message. Thread-safe against encode/decode
  // on the same stream from other threads (the streams are shared by every comm on the device).
  virtual ncclResult_t reserve_workspace(void* stream, size_t bytes) = 0;
  // cudaEventCreate/Destroy: neither synchronises (a pending event is released when it completes).
  virtual ncclResult_t create_event(void* stream, void** event) = 0;
  virtual void destroy_event(void* event) = 0;
  // Stream-ordered allocation on `stream`'s device (cudaMallocFromPoolAsync from the process's pool of
  // device memory, or of pinned host memory the device can read and write), and the stream-ordered
  // free (cudaFreeAsync): the memory returns to the pool after the stream's earlier work.
  virtual ncclResult_t alloc_device_async(void* stream, size_t n, void** p) = 0;
  virtual ncclResult_t alloc_host_async(void* stream, size_t n, void** p) = 0;
  virtual void free_async(void* stream, void* p) = 0;

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
  // Non-blocking: *done once everything enqueued before the last record() has finished. An error
  // here (a faulted kernel: CUDA's errors from kernels are sticky) fails the request, never hangs it.
  virtual ncclResult_t query(void* event, bool* done) = 0;
};

// The process's device operations, chosen once: what the factory a test double registered returns
// (set_device_ops_factory), unless nullptr, else by ZIPCCL_GPU: "off" (the default until the device checks pass on a
// GPU) -> nullptr; "on"/"auto" -> CUDA when this build has it and a device is usable, else nullptr
// ("on" WARNs then). CUDA_DEVICE_MAX_CONNECTIONS=1 turns the CUDA path off (gpu_path_blocker()).
// Thread-safe.
DeviceOps* device_ops();
// For test doubles (plugin/testing): device_ops() returns factory() when that is not nullptr instead of
// choosing by ZIPCCL_GPU, with a WARN that says `what`. Call before the first device_ops() (from a
// static initializer).
using DeviceOpsFactory = DeviceOps* (*)();
void set_device_ops_factory(DeviceOpsFactory factory, const char* what);
// Why the CUDA path must stay off in this process whatever ZIPCCL_GPU says, or nullptr. With a
// single hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1, Megatron's setting) the plugin's launches
// queue behind the application's next kernel, which waits for NCCL's, which waits for the plugin.
const char* gpu_path_blocker();
// The CUDA implementation, or nullptr (no toolkit in this build, no driver, no device). Logs why.
DeviceOps* cuda_ops();
// What device_ops() runs on the current device before it offers the CUDA path (NCCL then registers
// device buffers with us, and a path that fails at the first regMr fails the job NCCL alone would have
// run): the path's init on `dev` (kernels loaded and configured, the shared streams), then 64 KiB of
// bf16 encoded and decoded on the device, stream-ordered, polled for at most 10 s. The frame must equal
// the CPU codec's byte for byte, the decode the input. ncclSuccess, or an error with *why saying what
// failed. Leaves the shared streams made (process-long anyway); frees what it allocated.
ncclResult_t self_test(DeviceOps* ops, int dev, std::string* why);

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

// The GPU path's streams: kStreamsPerDevice per device and process, shared by every comm on that
// device whatever the number of comms (a codec stream: encodes, receive copies, decodes, landing; and a
// copy stream: send-side D2H). Created with the kernels' module load at the first registration of
// device memory on the device (the path's init), never destroyed. Few streams, so that the path takes
// few of the CUDA_DEVICE_MAX_CONNECTIONS hardware queues (docs/notes/gpu.md, "Streams and hardware
// queues"). Thread-safe.
constexpr int kStreamsPerDevice = 2;
struct SharedStreams {
  void* codec = nullptr;
  void* copy = nullptr;
};
ncclResult_t shared_streams(DeviceOps* ops, int dev, SharedStreams* out);

// The largest device registration the GPU path stages (arenas of about twice it per kind). NCCL posts
// up to NCCL_MAX_NET_SIZE (1 GiB) at once from a registered user buffer whatever maxP2pBytes a plugin
// advertises (NCCL only range-checks it), and a user buffer registers its whole memory segment
// (ncclCommRegister, local and graph registration): gigabytes. A larger registration is refused; NCCL
// then moves that buffer's data through its own buffers, which it registers at connect and which stay
// far below this with NCCL's defaults (NCCL_BUFFSIZE 4 MiB per protocol; the shared p2p pool of
// channels x 16 x NCCL_P2P_NET_CHUNKSIZE, 128 KiB, at most 128 MiB). docs/notes/gpu.md.
constexpr size_t kMaxStagedRegistration = size_t{256} << 20;

// Per-comm device state on the device's shared streams: per-slot staging, pinned results, events.
// Everything that allocates or creates happens in reserve(), called at regMr of device memory, and is
// stream-ordered (no call synchronises the device); the destructor (close) hands the memory back
// without waiting: it is freed on the codec stream once events recorded on both streams at close
// have completed (a later reserve() or close sweeps). The data path only takes regions of the
// staging arenas and polls.
//
// reserve() may run on NCCL's service thread (ncclCommRegister, local and graph registration) while
// the data path runs on the progress thread: one mutex per Channel orders them (uncontended on the
// data path but for a registration).
class Channel {
 public:
  Channel(DeviceOps* ops, int slots) : ops_(ops), slots_(static_cast<size_t>(slots)) {}
  // No device work is waited for: see the class comment.
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;

  DeviceOps* ops() const { return ops_; }
  void* stream() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stream_;
  }
  void* copy_stream() const {
    std::lock_guard<std::mutex> lock(mu_);
    return copy_stream_;
  }
  // Prepares this comm for device messages of up to `bytes` on `dev` (regMr of a `bytes` buffer):
  // binds to the device (streams; later registrations must be on it), loads the kernels, sizes the
  // codec workspaces and the arenas, and creates the results of `segments` per message and, for a
  // sender (seg_events), their copy-stream events. Arenas it adds are not used until publish(): the
  // caller first registers them with a transport that posts from and into registered memory only
  // (StagingPins, for the inner transport), outside this Channel's lock.
  ncclResult_t reserve(int dev, size_t bytes, size_t segments, bool seg_events);
  // Arenas added by reserve() are used from now on (older ones drain). Until then buffer() takes
  // regions of the newest published arena of each kind.
  void publish();
  // regMr of device memory at `data` for a comm of `slots` requests: creates *ch at the first one
  // (on the process's device operations; an error when the GPU path is off) and reserves.
  // ncclInvalidUsage, with nothing allocated, for more than kMaxStagedRegistration bytes.
  static ncclResult_t reserve_for(std::unique_ptr<Channel>* ch, int slots, const void* data, size_t bytes,
                                  size_t segments, bool seg_events);
  bool reserved() const {
    std::lock_guard<std::mutex> lock(mu_);
    return dev_ >= 0;
  }
  // Makes the bound device current on the calling thread, checking that `dev` is it.
  ncclResult_t bind(int dev);
  // Makes the bound device current: before a launch from test(), whose thread's current device the
  // plugin does not choose (a launch into a stream of another device fails).
  ncclResult_t make_current();
  enum class Buf { kHost, kDevice, kLand };
  // Slot's region of arena `which`, at least n bytes: taken at the first call of a request, the same
  // region afterwards. *p is null when the arena is busy now (try later); an error when n exceeds
  // what reserve() prepared.
  ncclResult_t buffer(int slot, Buf which, size_t n, void** p);
  // Returns the slot's regions (its request completed).
  void release(int slot);
  // No slot holds a region: every arena is empty, and buffer() starts each at its beginning. What
  // finds no room then (a grouped receive's regions together) never will.
  bool idle() const;
  // At close, before NCCL's and the user's buffers may be freed: waits until the device has run all
  // this comm's work, when a request still holds staging (one NCCL stopped waiting for after an error
  // or an abort; a completed request's work has all finished). Not a device-wide synchronisation:
  // events recorded now on the two shared streams, polled; their wait covers other comms' earlier work
  // there, which never waits on anything outside the streams (docs/notes/gpu.md). A device error ends
  // the wait: after a sticky fault the device runs nothing. Returns at once when nothing is in flight;
  // after kDrainLimitMs a WARN, and the work may still touch the buffers.
  void drain();
  static constexpr int kDrainLimitMs = 10000;
  // Each staging arena of kind `which` (fn(base, bytes)), published or not: pinned host staging is
  // what device messages are sent from and land in, device staging what they are encoded into. An
  // arena lives as long as the Channel (a larger reserve() adds one; older ones only drain).
  template <typename Fn>
  void for_each_arena(Buf which, Fn&& fn) const {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& a : arenas_[static_cast<int>(which)]) fn(static_cast<void*>(a->base), a->cap);
  }
  ncclResult_t record(int slot);
  ncclResult_t query(int slot, bool* done);
  // Segment j of the slot's message: a pinned Result, and an event recorded on the copy stream.
  ncclResult_t seg_result(int slot, size_t j, Result** r);
  ncclResult_t seg_record(int slot, size_t j);
  ncclResult_t seg_query(int slot, size_t j, bool* done);

 private:
  struct Arena {
    char* base = nullptr;
    size_t cap = 0, head = 0;
    int live = 0;  // regions handed out and not yet returned
    bool published = false;  // buffer() may take regions of it (publish())
  };
  struct Region {
    Arena* arena = nullptr;
    void* p = nullptr;
    size_t size = 0;
  };
  struct Slot {
    Region buf[3];
    void* event = nullptr;
    Result* results = nullptr;    // `segments_` of them, pinned
    std::vector<void*> seg_events;  // on the copy stream
  };
  ncclResult_t grow(int kind, size_t cap);
  bool holds_regions() const;  // caller holds mu_
  mutable std::mutex mu_;  // reserve() (service thread) against the data path (progress thread)
  DeviceOps* ops_;
  std::vector<Slot> slots_;
  std::vector<std::unique_ptr<Arena>> arenas_[3];  // the last published one is current; older ones drain
  std::vector<Result*> retired_results_;           // replaced by a larger reserve(), freed at close
  size_t bytes_ = 0;     // largest message reserve() prepared for
  size_t segments_ = 0;  // most segments per message prepared for
  void* stream_ = nullptr;
  void* copy_stream_ = nullptr;
  void* drain_events_[2] = {nullptr, nullptr};  // on stream_ and copy_stream_ (drain())
  int dev_ = -1;
};

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
