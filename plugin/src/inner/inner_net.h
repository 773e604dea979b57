// The inner NCCL net plugin as the inner transport uses it: one table with the newest semantics
// (v11/v12: size_t sizes, per-init context), whatever version the library exports. Calls go straight
// to the plugin; nothing here blocks, allocates per message or throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nccl/net_common.h"
#include "nccl/net_v12.h"

namespace zipccl {
namespace net {

struct InnerProps {
  std::string name;
  std::string pci_path;
  uint64_t guid = 0;
  int ptr_support = 0;
  int reg_is_global = 0;
  int force_flush = 0;
  int speed = 0;
  int port = 0;
  float latency = 0;
  int max_comms = 0;
  int max_recvs = 1;
  size_t max_p2p_bytes = 0;  // 0: the plugin's ABI has no such field
  int net_device_type = 0;   // NCCL_NET_DEVICE_HOST, or a device-side (offload) protocol
  std::vector<int> vdevs;    // vProps: the physical devices behind this one (itself for a physical one)
};

// Entries of the inner's table that zipccl's own tables do not simply pass through
// (docs/notes/inner.md, "Optional entries").
enum class InnerEntry { kGetDeviceMr, kIrecvConsumed, kMakeVDevice, kSetNetAttr };

class InnerNet {
 public:
  virtual ~InnerNet() = default;
  virtual const char* name() const = 0;  // the table's name ("AWS Libfabric", "zipccl", ...)
  virtual int version() const = 0;       // the ABI table used (7..12)
  virtual const std::string& library() const = 0;  // what dlopen opened
  // Whether the library is the object this code runs in (ZIPCCL_NET_INNER naming zipccl itself).
  virtual bool is_self() const = 0;
  virtual ncclResult_t init(ncclDebugLogger_t logger) = 0;  // once; v11+: the context kept inside
  virtual ncclResult_t finalize() = 0;                      // once, after the last comm closed
  virtual ncclResult_t devices(int* n) = 0;
  virtual ncclResult_t properties(int dev, InnerProps* p) = 0;
  virtual ncclResult_t listen(int dev, void* handle, void** listen_comm) = 0;
  virtual ncclResult_t connect(int dev, void* handle, void** send_comm) = 0;
  virtual ncclResult_t accept(void* listen_comm, void** recv_comm) = 0;
  virtual ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) = 0;
  // fd < 0: regMr. ncclInternalError without calling anything when the plugin has no regMrDmaBuf.
  virtual ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                     void** mh) = 0;
  virtual ncclResult_t dereg_mr(void* comm, void* mh) = 0;
  virtual ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mh, void** req) = 0;
  virtual ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhs,
                             void** req) = 0;
  // One region (size: the inner ABI's int); *req == nullptr: nothing to wait for.
  virtual ncclResult_t iflush(void* recv_comm, void* data, int size, void* mh, void** req) = 0;
  // sizes: room for the request's n sizes (a grouped receive reports one per receive); may be null.
  virtual ncclResult_t test(void* req, int* done, size_t* sizes, int n) = 0;
  virtual ncclResult_t close_send(void* c) = 0;
  virtual ncclResult_t close_recv(void* c) = 0;
  virtual ncclResult_t close_listen(void* c) = 0;
  virtual bool has(InnerEntry e) const = 0;
  // On the one context zipccl initialised the inner with; ncclInternalError when the table lacks it.
  virtual ncclResult_t set_net_attr(ncclNetAttr_v12_t* attr) = 0;
  // makeVDevice; ncclInternalError when the table lacks it.
  virtual ncclResult_t make_vdevice(int* d, ncclNetVDeviceProps_v12_t* props) = 0;
};

// Opens the plugin `name` as NCCL resolves NCCL_NET_PLUGIN ("ofi" -> libnccl-net-ofi.so; a path as
// given) with RTLD_LOCAL and takes the newest table both know. nullptr with *error naming the library
// and the reason.
std::unique_ptr<InnerNet> open_inner_net(const std::string& name, std::string* error);

}  // namespace net
}  // namespace zipccl
