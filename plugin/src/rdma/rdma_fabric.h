// The few RDMA operations the RDMA transport's protocol (rdma_proto.h) needs, as a small interface
// over one reliable connection (several RC queue pairs to one peer). Two implementations:
// rdma_verbs.cpp (libibverbs, resolved with dlopen) and rdma_loopback.h (in-process memcpy, for the
// CPU tests, with injectable failures and reordering).
//
// Semantics the protocol relies on (those of RC queue pairs):
// - operations on one QP are executed, and complete, in posting order; a write-with-immediate's
//   receive completion at the peer means every earlier write on that QP has landed;
// - completions of different QPs may interleave in any order;
// - a failed work request completes with ok == false and a status text, and every later one on that
//   QP completes flushed (also not ok); an unsignaled request still reports its failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "nccl/net_common.h"
#include "transport.h"

namespace zipccl {
namespace net {

// A registered memory range. `handle` belongs to the fabric.
struct MemRegion {
  void* addr = nullptr;
  size_t len = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  void* handle = nullptr;
};

struct Completion {
  uint64_t wr_id = 0;
  bool is_recv = false;  // a receive consumed by the peer's write-with-immediate
  bool ok = true;
  uint32_t imm = 0;         // receives only
  const char* status = "";  // failure text (ibv_wc_status_str for verbs)
  int qp = 0;
};

class Fabric {
 public:
  virtual ~Fabric() = default;
  virtual int qp_count() const = 0;
  // Registers [addr, addr+len) of host memory for local use and remote write/read by the peer.
  virtual ncclResult_t reg(void* addr, size_t len, MemRegion* mr) = 0;
  // Registers a buffer NCCL handed to regMr: host memory as reg(); device memory (CUDA, with or
  // without a dma-buf fd) the way the fabric can (verbs: dma-buf, else the peer-memory path).
  // Default: reg() (fabrics whose "device memory" is host memory, such as the loopback).
  virtual ncclResult_t reg_mem(const MemDesc& mem, MemRegion* mr) { return reg(mem.data, mem.size, mr); }
  virtual void dereg(MemRegion* mr) = 0;
  // RDMA write of [src, src+len) (lkey) to the peer's raddr (rkey). with_imm: the peer consumes one
  // posted receive on the same QP index and gets `imm`. signaled: a local completion with wr_id.
  virtual ncclResult_t write(int qp, uint64_t wr_id, const void* src, uint32_t lkey, size_t len,
                             uint64_t raddr, uint32_t rkey, bool with_imm, uint32_t imm, bool signaled) = 0;
  // RDMA read of len bytes from the peer's raddr into dst (signaled).
  virtual ncclResult_t read(int qp, uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t raddr,
                            uint32_t rkey) = 0;
  // NCCL's GPU flush: an RDMA read of len bytes of this side's own registered memory at addr (rkey)
  // into dst (lkey, host memory), through a queue pair connected to itself, so the NIC's earlier
  // writes into that (device) memory are visible before the GPU reads it. Signaled; completes through
  // poll() with wr_id (qp == -1).
  // At most kMaxFlushReads in flight.
  virtual ncclResult_t flush_read(uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t addr,
                                  uint32_t rkey) = 0;
  static constexpr int kMaxFlushReads = 64;
  // Posts one zero-length receive (for an immediate) on qp.
  virtual ncclResult_t post_recv(int qp, uint64_t wr_id) = 0;
  // Up to `max` completions, never blocking.
  virtual ncclResult_t poll(Completion* out, int max, int* n) = 0;
  // False (with a reason) once the peer is known to be gone (its side channel closed). Cheap.
  virtual bool peer_alive(const char** why) = 0;
};

// What the peer needs to reach one side's queue pairs (exchanged over the setup side channel).
struct QpEndpoint {
  static constexpr int kMaxQps = 8;
  uint32_t qpn[kMaxQps];
  uint32_t psn;
  uint32_t mtu;
  uint16_t lid;
  uint16_t pad;
  uint32_t nqps;
  uint8_t gid[16];
};

// A fabric before it is connected: its queue pairs exist, the peer's are not known yet.
class ConnectableFabric : public Fabric {
 public:
  virtual QpEndpoint local() const = 0;
  virtual ncclResult_t connect(const QpEndpoint& remote) = 0;
};

// One port the RDMA transport may use (a verbs port, or a loopback port in the tests).
class RdmaPort {
 public:
  virtual ~RdmaPort() = default;
  virtual std::string name() const = 0;  // "mlx5_0:1"
  virtual std::string pci_path() const = 0;
  virtual int speed_mbps() const = 0;
  virtual uint64_t guid() const = 0;
  // Creates a fabric with `nqps` queue pairs for a window of `depth` messages. On success it owns
  // `alive_fd`, the connection's side channel, whose EOF means the peer is gone.
  virtual ncclResult_t make_fabric(int nqps, int depth, int alive_fd,
                                   std::unique_ptr<ConnectableFabric>* out) = 0;
};

// peer_alive() over a side channel socket: false (with *why) once the peer closed it or it failed.
bool side_channel_alive(int fd, const char** why);

}  // namespace net
}  // namespace zipccl
