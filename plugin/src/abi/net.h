// The one internal implementation behind every exported ncclNet_vN table. Signatures follow the newest
// ABI in spirit (size_t sizes); the adapters in nccl_adapters.cpp convert. These functions may throw
// (std::bad_alloc); the adapters catch everything.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl/net_common.h"
#include "nccl/net_v12.h"
#include "transport.h"

namespace zipccl {
namespace net {

struct Properties {
  const char* name;
  const char* pci_path;
  uint64_t guid;
  int ptr_support;
  int speed;
  int port;
  float latency;
  int max_comms;
  int max_recvs;
  size_t max_bytes;  // per message (test() reports an int)
  const int* vdevs;  // a virtual device's physical devices (makeVDevice); nvdevs 0: the device itself
  int nvdevs;
};

constexpr const char kPluginName[] = "zipccl";

ncclResult_t net_init(ncclDebugLogger_t logger);
// Inside a catch block: the result an exported entry (net tables, pass-through tables) returns for the
// exception in flight, with a WARN naming `what`. Nothing unwinds into NCCL.
ncclResult_t caught_exception(const char* what) noexcept;
// v11: init is per communicator; the returned context goes back to finalize.
ncclResult_t net_init_ctx(void** ctx, uint64_t comm_id, ncclDebugLogger_t logger);
ncclResult_t net_finalize_ctx(void* ctx);
// v11+: over an inner plugin forwarded to it when its table has setNetAttr; else accepted and unused
// (hints only).
ncclResult_t net_set_net_attr(void* ctx, ncclNetAttr_v12_t* attr);
// makeVDevice (v9+): present in zipccl's tables only while an inner plugin whose table has it is open
// (nccl_adapters.cpp sets the entry at init; NCCL reads it after init), then forwarded to it.
bool net_make_vdevice_offered();
ncclResult_t net_make_vdevice(int* d, ncclNetVDeviceProps_v12_t* props);
ncclResult_t net_devices(int* ndev);
ncclResult_t net_properties(int dev, Properties* props);
ncclResult_t net_listen(int dev, void* handle, void** listen_comm);
ncclResult_t net_connect(int dev, void* handle, void** send_comm);
ncclResult_t net_accept(void* listen_comm, void** recv_comm);
ncclResult_t net_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t net_dereg_mr(void* comm, void* mhandle);
// phandle(s): NCCL's profiler handles (v10+), nullptr before.
ncclResult_t net_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                       void** request);
ncclResult_t net_irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                       void** mhandles, void** phandles, void** request);
ncclResult_t net_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request);
// sizes (room for kMaxRecvs): the byte count sent, or the uncompressed byte counts received, one per
// receive of the request (*count of them).
ncclResult_t net_test(void* request, int* done, size_t* sizes, int* count);
ncclResult_t net_close_send(void* send_comm);
ncclResult_t net_close_recv(void* recv_comm);
ncclResult_t net_close_listen(void* listen_comm);

}  // namespace net
}  // namespace zipccl
