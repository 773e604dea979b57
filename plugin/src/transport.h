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

#include "../nccl/net_common.h"

namespace zipccl {
namespace net {

constexpr size_t kMetaBytes = 32;
constexpr int kNoOp = -1;

struct DeviceInfo {
  std::string name;      // interface name, for logs and getProperties
  std::string pci_path;  // empty when unknown
  int speed_mbps = 10000;
  uint64_t guid = 0;
};

class SendConn {
 public:
  virtual ~SendConn() = default;
  // Queues one message. `payload` must stay valid until the op completes. *op is kNoOp when the
  // connection has no free op slot (the caller retries later).
  virtual ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) = 0;
  // Progresses the connection; *done once every byte of `op` has been handed to the network.
  // A completed op's slot is released by this call.
  virtual ncclResult_t test(int op, bool* done) = 0;
  // Link progress for the policy's bandwidth estimate: *delivered counts bytes the peer has
  // acknowledged (not merely bytes copied into kernel buffers), *backlog the bytes posted but not yet
  // delivered. A link is busy while the backlog stays non-zero; its speed is delivered/time then.
  virtual void link_progress(uint64_t* delivered, uint64_t* backlog) = 0;
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

// The socket transport (TCP, several streams per connection). Reads NCCL_SOCKET_IFNAME and
// NCCL_SOCKET_FAMILY once. Returns nullptr (with a WARN) when no usable interface exists.
Transport* socket_transport();

}  // namespace net
}  // namespace zipccl
