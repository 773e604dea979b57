// libibverbs for the RDMA transport, loaded at run time: the plugin has no link-time dependency on
// it (dlopen("libibverbs.so.1") and a small table of the functions used; ibv_post_send, ibv_post_recv
// and ibv_poll_cq are inline calls through the provider's ops and need no symbol). Also device
// discovery and the Fabric over RC queue pairs.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "rdma/rdma_fabric.h"
#include "rdma/rdma_select.h"

namespace zipccl {
namespace net {

struct IbvApi {
  ibv_device** (*get_device_list)(int*);
  void (*free_device_list)(ibv_device**);
  const char* (*get_device_name)(ibv_device*);
  __be64 (*get_device_guid)(ibv_device*);
  ibv_context* (*open_device)(ibv_device*);
  int (*close_device)(ibv_context*);
  int (*query_device)(ibv_context*, ibv_device_attr*);
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*);
  int (*query_gid)(ibv_context*, uint8_t, int, ibv_gid*);
  ibv_pd* (*alloc_pd)(ibv_context*);
  int (*dealloc_pd)(ibv_pd*);
  ibv_mr* (*reg_mr)(ibv_pd*, void*, size_t, int);
  int (*dereg_mr)(ibv_mr*);
  ibv_cq* (*create_cq)(ibv_context*, int, void*, ibv_comp_channel*, int);
  int (*destroy_cq)(ibv_cq*);
  ibv_qp* (*create_qp)(ibv_pd*, ibv_qp_init_attr*);
  int (*destroy_qp)(ibv_qp*);
  int (*modify_qp)(ibv_qp*, ibv_qp_attr*, int);
  const char* (*wc_status_str)(ibv_wc_status);
  // Optional (rdma-core >= 34): registration of device memory exported as a dma-buf.
  ibv_mr* (*reg_dmabuf_mr)(ibv_pd*, uint64_t, size_t, uint64_t, int, int);
};

// Loads libibverbs once per process. nullptr when it is missing or lacks a needed function (*why).
const IbvApi* ibv_api(const char** why);

// The CUDA driver's dma-buf export, loaded at run time too (dlopen("libcuda.so.1"); no CUDA link or
// header dependency). CUresult is an int (0 = CUDA_SUCCESS); CUdeviceptr an unsigned long long.
constexpr int kCuMemRangeHandleTypeDmaBufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
struct CudaDriverApi {
  // cuMemGetHandleForAddressRange (CUDA >= 11.7): a dma-buf fd for [dptr, dptr+size) (host-page
  // aligned); the caller closes it. nullptr: not available.
  int (*mem_get_handle_for_address_range)(void* handle, unsigned long long dptr, size_t size, int type,
                                          unsigned long long flags);
  int (*get_error_string)(int error, const char** text);  // cuGetErrorString; optional
};
// Loads libcuda.so.1 once per process (on the first device-memory registration that needs it).
// nullptr when the library or the export function is missing (*why).
const CudaDriverApi* cuda_driver_api(const char** why);

// One active port the transport may use, opened for the life of the process.
struct IbPort {
  std::string name;  // "mlx5_0:1"
  std::string dev_name;
  int port = 1;
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  bool ethernet = false;  // RoCE
  int gid_index = 0;
  ibv_gid gid{};
  uint16_t lid = 0;
  ibv_mtu mtu = IBV_MTU_1024;
  int speed_mbps = 0;
  std::string pci_path;
  uint64_t guid = 0;
};

// Active ports selected by NCCL_IB_HCA, with a usable GID (NCCL_IB_GID_INDEX). INFO/WARN say why a
// port was skipped.
std::vector<IbPort> discover_ports(const IbvApi& api, const std::string& hca_spec, int gid_index);

// A queue pair state transition: the attributes and the mask handed to ibv_modify_qp.
struct QpTransition {
  ibv_qp_attr attr;
  int mask;
};
// INIT -> RTR towards the peer's QP `qpn` (remote.qpn[i] for data QPs; our own for the flush QP):
// path MTU the smaller of both, GRH (traffic class NCCL_IB_TC, sgid index from the GID choice, hop
// limit 255) on RoCE or when the peer has no LID, service level NCCL_IB_SL, min RNR timer 12.
QpTransition rtr_transition(const IbPort& port, const QpEndpoint& remote, uint32_t qpn, const IbQpSettings& s);
// RTR -> RTS: ACK timeout NCCL_IB_TIMEOUT, retry count NCCL_IB_RETRY_CNT, RNR retry 7 (infinite).
QpTransition rts_transition(uint32_t psn, const IbQpSettings& s);

struct VerbsOptions {
  IbQpSettings qp;
  // The CUDA driver for the dma-buf export; nullptr: cuda_driver_api() on first use.
  const CudaDriverApi* cuda = nullptr;
};

class VerbsFabric final : public ConnectableFabric {
 public:
  // Creates a CQ and `nqps` RC QPs in INIT on `port`. `alive_fd` is the side channel: its EOF means
  // the peer is gone (the fabric closes it).
  static ncclResult_t create(const IbvApi* api, const IbPort* port, int nqps, int depth, int alive_fd,
                             const VerbsOptions& opt, std::unique_ptr<VerbsFabric>* out);
  ~VerbsFabric() override;
  QpEndpoint local() const override;
  // INIT -> RTR -> RTS towards the peer's QPs.
  ncclResult_t connect(const QpEndpoint& remote) override;

  int qp_count() const override { return static_cast<int>(qps_.size()); }
  ncclResult_t reg(void* addr, size_t len, MemRegion* mr) override;
  // Host memory: ibv_reg_mr. Device memory: the paths of reg_paths() in order (dma-buf with NCCL's fd
  // or the CUDA driver's, then ibv_reg_mr of the device pointer for nvidia-peermem); a WARN naming
  // every failed attempt and ncclSystemError when none works.
  ncclResult_t reg_mem(const MemDesc& mem, MemRegion* mr) override;
  void dereg(MemRegion* mr) override;
  ncclResult_t write(int qp, uint64_t wr_id, const void* src, uint32_t lkey, size_t len, uint64_t raddr,
                     uint32_t rkey, bool with_imm, uint32_t imm, bool signaled) override;
  ncclResult_t read(int qp, uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t raddr,
                    uint32_t rkey) override;
  // On a queue pair connected to itself, created on the first flush (NCCL's GPU flush QP).
  ncclResult_t flush_read(uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t addr,
                          uint32_t rkey) override;
  ncclResult_t post_recv(int qp, uint64_t wr_id) override;
  ncclResult_t poll(Completion* out, int max, int* n) override;
  bool peer_alive(const char** why) override;

 private:
  VerbsFabric(const IbvApi* api, const IbPort* port, const VerbsOptions& opt)
      : api_(api), port_(port), opt_(opt) {}
  ncclResult_t post(ibv_qp* qp, const char* what, ibv_send_wr* wr);
  // A signalled RDMA read of len bytes from (raddr, rkey) into dst (lkey) on qp.
  ncclResult_t post_read(ibv_qp* qp, const char* what, uint64_t wr_id, void* dst, uint32_t lkey, size_t len,
                         uint64_t raddr, uint32_t rkey);
  ncclResult_t new_qp(int send_wr, int recv_wr, ibv_qp** out);
  ncclResult_t connect_qp(ibv_qp* qp, const QpEndpoint& remote, uint32_t qpn, const char* what);
  const CudaDriverApi* cuda();

  const IbvApi* api_;
  const IbPort* port_;
  VerbsOptions opt_;
  bool cuda_loaded_ = false;
  int alive_fd_ = -1;
  ibv_cq* cq_ = nullptr;
  std::vector<ibv_qp*> qps_;
  ibv_qp* flush_qp_ = nullptr;
  uint32_t psn_ = 0;
};

}  // namespace net
}  // namespace zipccl
