// The one small interface every transport implements. The compressing layer talks only to this; it
// never knows whether bytes go over TCP streams or RDMA.
//
// Model: a connection carries messages in order. Each message is `kMetaBytes` of opaque metadata
// (the compressing layer's frame header) plus a payload. All calls are non-blocking and made from one
// thread per connection (NCCL's proxy thread); transports may run their own helper threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nccl/net_common.h"

namespace zipccl {
namespace net {

constexpr size_t kMetaBytes = 32;
constexpr int kNoOp = -1;
// Most receives one grouped irecv may carry through zipccl (NCCL's IB transport offers 8).
constexpr int kMaxRecvs = 8;

struct DeviceInfo {
  std::string name;      // interface name, for logs and getProperties
  std::string pci_path;  // empty when unknown
  int speed_mbps = 10000;
  uint64_t guid = 0;
  // Set by transports over another plugin (inner_transport.cpp): its values, passed on to NCCL.
  float latency_us = 0;
  int port = 0;
  bool host_ptr = true;  // false: the device cannot carry host memory (NCCL_PTR_HOST clear)
  size_t max_bytes = 0;  // largest message the device carries; 0: no limit below zipccl's own
  int max_recvs = 1;     // receives one grouped irecv may carry (RecvConn::post_group), 1..kMaxRecvs
  // The physical devices a virtual device (makeVDevice) fuses; empty: the device itself.
  std::vector<int> vdevs;
};

class SendConn {
 public:
  virtual ~SendConn() = default;
  // Queues one message. `payload` must stay valid until the op completes. *op is kNoOp when the
  // connection has no free op slot (the caller retries later).
  virtual ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) = 0;
  // Like post(), for a payload the receiver does not keep as is (a compressed frame it decodes): a
  // transport that writes into the receiver's memory (RDMA) lands it in a staging slot rather than
  // in the posted buffer. Default: post().
  virtual ncclResult_t post_staged(const uint8_t* meta, const void* payload, size_t len, int* op) {
    return post(meta, payload, len, op);
  }
  // Progresses the connection; *done once every byte of `op` has been handed to the network.
  // A completed op's slot is released by this call.
  virtual ncclResult_t test(int op, bool* done) = 0;
  // Link progress for the policy's bandwidth estimate: *delivered counts bytes the peer has
  // acknowledged (not merely bytes copied into kernel buffers), *backlog the bytes posted but not yet
  // delivered. A link is busy while the backlog stays non-zero; its speed is delivered/time then.
  virtual void link_progress(uint64_t* delivered, uint64_t* backlog) = 0;
  // Whether the compressing layer may send one NCCL message as several consecutive messages
  // (segments, frame.h) on this connection: true when the receiving end needs nothing per transport
  // message beyond what peek/recv do. The RDMA transport pairs each transport message with one
  // post_target() (one per NCCL receive), so it says false and messages go whole there. Every
  // transport answers: a silent default would turn segments off unnoticed.
  virtual bool carries_segments() const = 0;
  // NCCL's tag of the message that the following post()/post_staged() calls carry. Transports that
  // pass tags on to grouped receives (the inner transport) keep it; default: ignored, messages match
  // in order.
  virtual void set_tag(int /*tag*/) {}
};

class RecvConn {
 public:
  virtual ~RecvConn() = default;
  // Fetches the next message's metadata and payload length, in order. *ready false: not arrived yet.
  // Calling again before recv() returns the same message.
  virtual ncclResult_t peek(uint8_t* meta, uint64_t* payload_len, bool* ready) = 0;
  // Receives the payload of the message last peeked into dst. Fails (never overflows) when the
  // payload is larger than `capacity`. *op is kNoOp when no op slot is free.
  virtual ncclResult_t recv(void* dst, size_t capacity, int* op) = 0;
  virtual ncclResult_t test(int op, bool* done) = 0;

  // Optional, for transports that write into the receiver's memory (RDMA): announces, in receive
  // order, where the next message is to land (`dst`, `capacity` bytes) and the most bytes a staged
  // payload (post_staged) for that receive may carry. Called once per receive, before its peek();
  // a transport that needs it sends nothing until it is called. Default: ignored.
  virtual ncclResult_t post_target(void* /*dst*/, size_t /*capacity*/, size_t /*staged_capacity*/) {
    return ncclSuccess;
  }
  // The receives of one grouped irecv (n <= max_group()), with NCCL's tags: each takes the one message
  // sent with its tag; they are then peeked and received in this order (the i-th peek after them is
  // receive i's message, whatever order the messages came in). Default: n == 1, post_target.
  virtual int max_group() const { return 1; }
  virtual ncclResult_t post_group(int n, void* const* dst, const size_t* capacity, const size_t* staged_capacity,
                                  const int* /*tags*/) {
    if (n != 1) return ncclInternalError;
    return post_target(dst[0], capacity[0], staged_capacity[0]);
  }
  // Optional zero-copy path: when the payload of the message last peeked already lies in transport
  // memory (an RDMA staging slot), consumes the message as recv() would and returns that address;
  // the bytes stay valid until release_staged(). nullptr: use recv().
  virtual const void* take_staged() { return nullptr; }
  virtual void release_staged(const void* /*payload*/) {}
};

// A buffer NCCL registers (regMr / regMrDmaBuf): host memory, or CUDA device memory, optionally with
// the dma-buf file descriptor NCCL exported for it (regMrDmaBuf; NCCL keeps the fd) and the offset of
// `data` within that dma-buf.
struct MemDesc {
  void* data = nullptr;
  size_t size = 0;
  bool device = false;  // NCCL_PTR_CUDA
  int dmabuf_fd = -1;
  uint64_t dmabuf_offset = 0;
};

// Optional, for transports that register memory with a NIC (RDMA): NCCL's regMr/deregMr of a buffer
// it will send from or receive into, so the transport keeps it registered instead of registering it
// per message. net.cpp finds it on a connection with dynamic_cast. Every pin() is matched by one
// unpin() of the same `data` (registrations are shared and counted).
class BufferRegistry {
 public:
  virtual ~BufferRegistry() = default;
  virtual ncclResult_t pin(const MemDesc& mem) = 0;
  virtual void unpin(void* data) = 0;
  // Whether zipccl's own host staging (the GPU path's pinned buffers, which device messages are sent
  // from and land in) is to be pinned too: a transport that would otherwise copy each such payload
  // through buffers of its own (the inner transport) says yes. Default: no.
  virtual bool pins_staging() const { return false; }
  // Whether device memory pinned here (MemDesc::device) may then be posted as a payload: the NIC reads
  // device memory (GPUDirect). The GPU path then pins its device staging too and posts codec frames
  // from it, without the copy to pinned host memory. Default: no.
  virtual bool posts_device() const { return false; }
  // Receive connections where posts_device(): the NIC may write pinned device memory, and a completed
  // receive's bytes there become visible to a kernel only after this flush (GPUDirect RDMA; the
  // inner's iflush on the region with its own registration). *op is kNoOp when there is nothing to
  // wait for; test_flush_pinned() completes it without blocking. Default: nothing to do.
  virtual ncclResult_t flush_pinned(void* /*data*/, size_t /*size*/, int* op) {
    *op = kNoOp;
    return ncclSuccess;
  }
  virtual ncclResult_t test_flush_pinned(int /*op*/, bool* done) {
    *done = true;
    return ncclSuccess;
  }
  // True while the transport may still read or write pinned memory: requests in flight, which a
  // connection closed now leaves open with its registrations. Memory the caller pinned must then not
  // be unpinned or freed. Default: false.
  virtual bool in_flight() const { return false; }
};

// Optional, for receive connections of transports whose NIC writes straight into device memory (RDMA
// with GPUDirect): NCCL's iflush. flush() starts making the NIC's writes into the registered device
// buffer at `data` visible to the GPU (an RDMA read through a loopback queue pair); *op is kNoOp when
// there is nothing to do. test_flush() completes it (non-blocking). net.cpp finds it with dynamic_cast.
class DeviceFlusher {
 public:
  virtual ~DeviceFlusher() = default;
  virtual ncclResult_t flush(void* data, size_t size, int* op) = 0;
  virtual ncclResult_t test_flush(int op, bool* done) = 0;
};

class Listener {
 public:
  virtual ~Listener() = default;
  // Returns a connection once a peer has fully connected; *conn == nullptr means "call again".
  virtual ncclResult_t accept(RecvConn** conn) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual int device_count() const = 0;
  virtual ncclResult_t device_info(int dev, DeviceInfo* info) const = 0;
  // Fills the NCCL_NET_HANDLE_MAXSIZE-byte handle the peer passes to connect().
  virtual ncclResult_t listen(int dev, void* handle, Listener** listener) = 0;
  // Non-blocking: *conn == nullptr means "call again with the same handle".
  virtual ncclResult_t connect(int dev, void* handle, SendConn** conn) = 0;
};

}  // namespace net
}  // namespace zipccl
