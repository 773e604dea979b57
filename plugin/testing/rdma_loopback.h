// An in-process Fabric pair for the CPU tests of the RDMA protocol: registrations are key -> range
// tables, writes and reads are memcpys between the two ends' registered memory. Operations queue per
// QP and execute only when either end polls, in posting order per QP; with a seed, each poll runs a
// random number of them from randomly chosen QPs, so completions of different QPs interleave the way
// a real NIC's may. Faults: an injected failing operation (its QP then flushes the rest), a peer that
// vanishes, and what hardware would report anyway (bad key or bounds, no receive posted).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "rdma/rdma_fabric.h"

namespace zipccl {
namespace net {

struct LoopbackLink;

class LoopbackFabric final : public Fabric {
 public:
  LoopbackFabric(std::shared_ptr<LoopbackLink> link, int side);
  ~LoopbackFabric() override;
  int qp_count() const override;
  ncclResult_t reg(void* addr, size_t len, MemRegion* mr) override;
  ncclResult_t reg_mem(const MemDesc& mem, MemRegion* mr) override;
  void dereg(MemRegion* mr) override;
  ncclResult_t write(int qp, uint64_t wr_id, const void* src, uint32_t lkey, size_t len, uint64_t raddr,
                     uint32_t rkey, bool with_imm, uint32_t imm, bool signaled) override;
  ncclResult_t read(int qp, uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t raddr,
                    uint32_t rkey) override;
  // A read of this end's own memory on an extra queue pair (executed in order with the others'
  // operations, completing with qp == -1).
  ncclResult_t flush_read(uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t addr,
                          uint32_t rkey) override;
  ncclResult_t post_recv(int qp, uint64_t wr_id) override;
  ncclResult_t poll(Completion* out, int max, int* n) override;
  bool peer_alive(const char** why) override;

  // The operation posted by this end `after` operations from now fails with `status`.
  void inject_failure(int after, const char* status);
  // This end disappears: the peer's operations fail ("transport retry counter exceeded") and its
  // peer_alive() turns false.
  void vanish();
  int registrations_live() const;
  uint64_t bytes_written() const;  // payload bytes this end's writes placed in the peer's memory
  uint64_t flush_reads() const;    // flush reads posted
  std::vector<MemDesc> reg_mems() const;  // every reg_mem() request, in order

 private:
  friend class LoopbackConnectable;
  std::shared_ptr<LoopbackLink> link_;
  int side_;
};

// Two connected ends with `qps` queue pairs each; seed 0 keeps posting order across QPs too.
std::pair<std::unique_ptr<LoopbackFabric>, std::unique_ptr<LoopbackFabric>> make_loopback_pair(int qps,
                                                                                               uint32_t seed);

// A port whose fabrics start unpaired and pair up when one connect()s to the other's QP numbers, the
// way the RDMA transport's setup exchanges them over its side channel (for the setup tests).
std::unique_ptr<RdmaPort> make_loopback_port(const std::string& name, uint32_t seed);

}  // namespace net
}  // namespace zipccl
