#include "abi/net.h"

#include <climits>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "abi/net_mr.h"
#include "abi/transports.h"
#include "common/log.h"
#include "common/settings.h"
#include "common/version.h"
#include "fabric/fabric.h"
#include "gpu/gpu_path.h"
#include "inner/inner_transport.h"
#include "layer/comm.h"
#include "layer/live_stats.h"
#include "transport.h"

namespace zipccl {
namespace net {
namespace {

struct ListenComm {
  CommHeader header{kListenCommMagic};
  Listener* listener;
  DeviceInfo dev;
};

struct MemHandle {
  void* data;
  size_t size;
  int type;
  bool pinned;  // registered with the connection's transport (BufferRegistry)
};

struct Context {
  uint64_t comm_id;
};

std::mutex g_init_mu;
Transport* g_transport = nullptr;
// Grows at run time (makeVDevice over an inner plugin): a deque, so that the names and paths
// getProperties handed out stay valid; read and grown under g_dev_mu. Never destroyed (as every
// process-long object here: NCCL's threads may still call in while the process exits).
std::mutex g_dev_mu;
std::deque<DeviceInfo>& g_devices = *new std::deque<DeviceInfo>;
int g_contexts = 0;  // v11+ init/finalize reference count
bool g_inner = false;  // g_transport runs over ZIPCCL_NET_INNER's plugin
bool g_fabric_said = false;      // the fabric decision was logged (once per process)
bool g_capability_aside = false;  // stepped aside rather than take a capability from the node's plugin

template <typename T>
T* as(void* p, uint32_t magic) {
  if (!p || reinterpret_cast<CommHeader*>(p)->magic != magic) return nullptr;
  return reinterpret_cast<T*>(p);
}

BufferRegistry* registry_of(void* comm) {
  if (SendComm* s = as<SendComm>(comm, kSendCommMagic)) return s->registry();
  if (RecvComm* r = as<RecvComm>(comm, kRecvCommMagic)) return r->registry();
  return nullptr;
}

// The mhandle records the memory type NCCL registered (regMr); a NULL one means host memory.
bool is_device(void* mhandle) {
  auto* h = static_cast<MemHandle*>(mhandle);
  return h && h->type == NCCL_PTR_CUDA;
}

bool device(int dev, DeviceInfo* out) {
  std::lock_guard<std::mutex> dlock(g_dev_mu);
  if (dev < 0 || dev >= static_cast<int>(g_devices.size())) return false;
  *out = g_devices[dev];
  return true;
}
int device_count() {
  std::lock_guard<std::mutex> dlock(g_dev_mu);
  return static_cast<int>(g_devices.size());
}

ncclResult_t ready() {
  if (!g_transport) {
    ZIPCCL_WARN("called before a successful init");
    return ncclInternalError;
  }
  return ncclSuccess;
}

}  // namespace

ncclResult_t net_init(ncclDebugLogger_t logger) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  set_logger(logger);
  if (g_transport) return ncclSuccess;
  // First, so that a bug report's log says which build it came from (zipccl doctor reads it back).
  ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "zipccl %s", version_string());
  log_settings_once();
  // What this node's network is and what zipccl does on it (fabric/fabric.h, README "Which fabric?").
  // Said once per process: NCCL calls init for every communicator, and a step-aside repeats it.
  const FabricDecision& d = node_decision();
  const bool first = !g_fabric_said;
  g_fabric_said = true;
  if (first) {
    for (const std::string& p : node_fabric().problems) ZIPCCL_WARN("fabric: %s", p.c_str());
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "fabric: %s -> %s (%s%s)", d.why.c_str(), fabric_action_name(d.action),
                d.rule.c_str(), d.explicit_choice ? ", set explicitly" : "");
    if (d.slower_than_nccl) ZIPCCL_WARN("this configuration is slower than NCCL alone: %s", d.slower_why.c_str());
  }
  Transport* t = nullptr;
  switch (d.action) {
    case FabricAction::kStepAside:
      if (first) {
        ZIPCCL_WARN("zipccl steps aside: %s. NCCL goes on with %s. To compress here: %s", d.why.c_str(),
                    step_aside_next(node_fabric()).c_str(), d.to_compress.c_str());
      }
      return ncclSystemError;
    case FabricAction::kWrap: {
      if (g_capability_aside) return ncclSystemError;  // decided (and said) at the first init
      // The inner plugin or nothing: a failure returns an error (NCCL falls back to its own transports),
      // never a silent change to another transport.
      bool self = false;
      const std::string origin =
          d.explicit_choice ? "ZIPCCL_NET_INNER=" + d.inner : "the node's net plugin " + d.inner + " (fabric decision)";
      ZIPCCL_CHECK(open_inner_transport(d.inner, origin, logger, &t, &self));
      const std::string lost = self ? "" : inner_capability_lost(gpu::device_ops() != nullptr);
      if (!lost.empty() && !d.explicit_choice) {
        // Wrapping would take it away: NCCL is better off with the plugin alone.
        finalize_inner_transport();
        g_capability_aside = true;
        ZIPCCL_WARN("zipccl steps aside: wrapping %s would take away %s. NCCL goes on with %s%s", d.inner.c_str(),
                    lost.c_str(), step_aside_next(node_fabric()).c_str(),
                    node_fabric().after_self.empty() ? " (list the plugin after zipccl in NCCL_NET_PLUGIN, or "
                                                       "NCCL loses it)"
                                                     : "");
        return ncclSystemError;
      }
      if (!lost.empty()) ZIPCCL_WARN("%s: through zipccl NCCL loses %s", origin.c_str(), lost.c_str());
      if (self) {
        ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
                    "ZIPCCL_NET_INNER=%s names this library: loaded as the inner plugin of another zipccl, it "
                    "carries bytes only (built-in transport, ZIPCCL_COMPRESS=never)",
                    d.inner.c_str());
        settings_inner_role();
      }
      g_inner = !self;
      if (!t) t = pick_transport(TransportChoice::kSocket);
      break;
    }
    case FabricAction::kIb:
      t = pick_transport(TransportChoice::kIb);
      break;
    case FabricAction::kSocket:
      t = pick_transport(TransportChoice::kSocket);
      break;
  }
  if (!t) return ncclSystemError;
  std::deque<DeviceInfo> devs(t->device_count());
  for (int i = 0; i < t->device_count(); ++i) ZIPCCL_CHECK(t->device_info(i, &devs[i]));
  {
    std::lock_guard<std::mutex> dlock(g_dev_mu);
    g_devices = std::move(devs);
  }
  const codec::Isa want = settings().codec_isa;
  if (!codec::isa_supported(want)) {
    ZIPCCL_WARN("ZIPCCL_CODEC_ISA=%s: this CPU or build lacks it (%s); using %s", codec::isa_name(want),
                codec::isa_missing(want).c_str(), codec::isa_name(codec_isa()));
  }
  ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
              "zipccl %s transport, %d device(s), codec kernels %s (ZIPCCL_CODEC_ISA=%s; cpu: %s), %d codec "
              "worker(s)",
              t->name(), t->device_count(), codec::isa_name(codec_isa()), codec::isa_name(want),
              codec::cpu_features().empty() ? "none of the SIMD features" : codec::cpu_features().c_str(),
              settings().workers);
  g_transport = t;
  return ncclSuccess;
}

ncclResult_t net_init_ctx(void** ctx, uint64_t comm_id, ncclDebugLogger_t logger) {
  if (!ctx) return ncclInternalError;
  *ctx = nullptr;
  ZIPCCL_CHECK(net_init(logger));
  std::lock_guard<std::mutex> lock(g_init_mu);
  *ctx = new Context{comm_id};
  ++g_contexts;
  return ncclSuccess;
}

ncclResult_t net_finalize_ctx(void* ctx) {
  std::lock_guard<std::mutex> lock(g_init_mu);
  if (!ctx || g_contexts == 0) {
    ZIPCCL_WARN("finalize without a matching init");
    return ncclInternalError;
  }
  delete static_cast<Context*>(ctx);
  // The last communicator is gone: the final snapshot and the process summary (live_stats.h).
  if (g_contexts == 1) live_stats_finalize();
  // Transport, settings and the worker pool live as long as the process (the library is built
  // nodelete): connections of other communicators may still be open. An inner plugin is finalized
  // (once) with the last context, as NCCL would finalize it; a later init opens it again.
  if (--g_contexts == 0 && g_inner) {
    finalize_inner_transport();
    g_inner = false;
    g_transport = nullptr;
    std::lock_guard<std::mutex> dlock(g_dev_mu);
    g_devices.clear();
  }
  return ncclSuccess;
}

ncclResult_t net_set_net_attr(void* ctx, ncclNetAttr_v12_t* attr) {
  if (!ctx || !attr) return ncclInternalError;
  return inner_set_net_attr(attr);
}

bool net_make_vdevice_offered() {
  std::lock_guard<std::mutex> lock(g_init_mu);
  return g_inner && inner_has_make_vdevice();
}

// The inner plugin fuses the devices (zipccl's device i is the inner's device i); zipccl's list then
// takes the devices the inner added, with the properties it reports for them.
ncclResult_t net_make_vdevice(int* d, ncclNetVDeviceProps_v12_t* props) {
  ZIPCCL_CHECK(ready());
  if (!d || !props) return ncclInternalError;
  std::lock_guard<std::mutex> lock(g_init_mu);  // one fusion at a time, and not across a finalize
  if (!g_inner || !g_transport) {  // the entry is NULL then: NCCL does not call it
    ZIPCCL_WARN("makeVDevice: zipccl's own transports cannot merge devices");
    return ncclInvalidUsage;
  }
  ZIPCCL_CHECK(inner_make_vdevice(d, props));
  std::lock_guard<std::mutex> dlock(g_dev_mu);
  for (int i = static_cast<int>(g_devices.size()); i < g_transport->device_count(); ++i) {
    DeviceInfo info;
    ZIPCCL_CHECK(g_transport->device_info(i, &info));
    g_devices.push_back(std::move(info));
  }
  ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "makeVDevice: the inner plugin fused %d device(s) into device %d (%s)",
              props->ndevs, *d, *d >= 0 && *d < static_cast<int>(g_devices.size()) ? g_devices[*d].name.c_str() : "?");
  return ncclSuccess;
}

ncclResult_t net_devices(int* ndev) {
  ZIPCCL_CHECK(ready());
  std::lock_guard<std::mutex> dlock(g_dev_mu);
  *ndev = static_cast<int>(g_devices.size());
  return ncclSuccess;
}

ncclResult_t net_properties(int dev, Properties* p) {
  ZIPCCL_CHECK(ready());
  std::lock_guard<std::mutex> dlock(g_dev_mu);
  if (dev < 0 || dev >= static_cast<int>(g_devices.size())) {
    ZIPCCL_WARN("getProperties for device %d of %zu", dev, g_devices.size());
    return ncclInvalidArgument;
  }
  const DeviceInfo& d = g_devices[dev];
  p->name = d.name.c_str();
  p->pci_path = d.pci_path.empty() ? nullptr : d.pci_path.c_str();
  p->guid = d.guid;
  // Device buffers only where the GPU path is usable (a CUDA device here, or the tests' emulation);
  // otherwise NCCL stages GPU data in host memory for us.
  p->ptr_support = (d.host_ptr ? NCCL_PTR_HOST : 0) | (gpu::device_ops() ? NCCL_PTR_CUDA : 0);
  p->speed = d.speed_mbps;
  p->port = d.port;
  p->latency = d.latency_us;
  p->max_comms = 65536;
  p->max_recvs = d.max_recvs;
  p->max_bytes = d.max_bytes && d.max_bytes < INT_MAX ? d.max_bytes : INT_MAX;
  p->vdevs = d.vdevs.data();
  p->nvdevs = static_cast<int>(d.vdevs.size());
  return ncclSuccess;
}

ncclResult_t net_listen(int dev, void* handle, void** listen_comm) {
  *listen_comm = nullptr;
  ZIPCCL_CHECK(ready());
  if (!handle) return ncclInternalError;
  DeviceInfo info;
  if (!device(dev, &info)) {
    ZIPCCL_WARN("listen on device %d of %d", dev, device_count());
    return ncclInternalError;
  }
  Listener* l = nullptr;
  ZIPCCL_CHECK(g_transport->listen(dev, handle, &l));
  *listen_comm = new ListenComm{CommHeader{kListenCommMagic}, l, info};
  return ncclSuccess;
}

ncclResult_t net_connect(int dev, void* handle, void** send_comm) {
  *send_comm = nullptr;
  ZIPCCL_CHECK(ready());
  DeviceInfo info;
  if (!handle || !device(dev, &info)) {
    ZIPCCL_WARN("connect with device %d of %d or a null handle", dev, device_count());
    return ncclInternalError;
  }
  SendConn* c = nullptr;
  ZIPCCL_CHECK(g_transport->connect(dev, handle, &c));
  if (c) *send_comm = new SendComm(c, info);
  return ncclSuccess;
}

ncclResult_t net_accept(void* listen_comm, void** recv_comm) {
  *recv_comm = nullptr;
  ListenComm* l = as<ListenComm>(listen_comm, kListenCommMagic);
  if (!l) {
    ZIPCCL_WARN("accept on something that is not a listen comm");
    return ncclInternalError;
  }
  RecvConn* c = nullptr;
  ZIPCCL_CHECK(l->listener->accept(&c));
  if (c) *recv_comm = new RecvComm(c, l->dev);
  return ncclSuccess;
}

ncclResult_t net_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return net_reg_mr_dmabuf(comm, data, size, type, 0, -1, mhandle);
}

// regMr / regMrDmaBuf of host or CUDA memory. A transport that registers memory with its NIC
// (BufferRegistry: RDMA) registers it now (page-aligned ranges shared and counted, so registering the
// same buffer again is cheap); the socket transport only records the type.
ncclResult_t net_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                               void** mhandle) {
  *mhandle = nullptr;
  if (!as<CommHeader>(comm, kSendCommMagic) && !as<CommHeader>(comm, kRecvCommMagic)) {
    ZIPCCL_WARN("regMr on something that is not a send or receive comm");
    return ncclInternalError;
  }
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA && type != NCCL_PTR_DMABUF) {
    ZIPCCL_WARN("regMr of memory type %d: zipccl handles host (NCCL_PTR_HOST) and CUDA (NCCL_PTR_CUDA) memory",
                type);
    return ncclInternalError;
  }
  const bool device = type != NCCL_PTR_HOST;
  if (device && !gpu::device_ops()) {  // getProperties said NCCL_PTR_HOST only
    ZIPCCL_WARN("regMr of CUDA memory, but there is no GPU path here (ptrSupport is NCCL_PTR_HOST)");
    return ncclInternalError;
  }
  BufferRegistry* reg = registry_of(comm);
  if (reg) {
    MemDesc m;
    m.data = data;
    m.size = size;
    m.device = device;
    m.dmabuf_fd = device ? fd : -1;  // NCCL exports dma-bufs of device memory only
    m.dmabuf_offset = offset;
    ncclResult_t r = reg->pin(m);
    if (r != ncclSuccess) {
      ZIPCCL_WARN("regMr of %zu bytes of %s memory at %p failed (see above)", size, device ? "CUDA" : "host",
                  data);
      return ncclSystemError;
    }
  }
  if (device) {
    // Device messages from or into this buffer need streams, staging and loaded kernels: all made now,
    // at registration, so that no isend/irecv allocates or loads a module (either can wait for NCCL's
    // running kernel, which waits for this proxy thread).
    SendComm* s = as<SendComm>(comm, kSendCommMagic);
    RecvComm* r = as<RecvComm>(comm, kRecvCommMagic);
    ncclResult_t res = s ? s->reserve_device(data, size) : r->reserve_device(data, size);
    if (res != ncclSuccess) {
      if (reg) reg->unpin(data);
      if (res != ncclInvalidUsage) {  // ncclInvalidUsage: refused as too large, said above
        ZIPCCL_WARN("regMr of %zu bytes of CUDA memory at %p: preparing the GPU path failed (see above)", size, data);
      }
      return res;
    }
  }
  *mhandle = new MemHandle{data, size, device ? NCCL_PTR_CUDA : NCCL_PTR_HOST, reg != nullptr};
  return ncclSuccess;
}

ncclResult_t net_dereg_mr(void* comm, void* mhandle) {
  auto* h = static_cast<MemHandle*>(mhandle);
  if (h && h->pinned) {
    if (BufferRegistry* reg = registry_of(comm)) reg->unpin(h->data);
  }
  delete h;
  return ncclSuccess;
}

ncclResult_t net_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                       void** request) {
  *request = nullptr;
  SendComm* c = as<SendComm>(send_comm, kSendCommMagic);
  if (!c) {
    ZIPCCL_WARN("isend on something that is not a send comm");
    return ncclInternalError;
  }
  return c->isend(data, size, tag, is_device(mhandle), phandle, request);
}

ncclResult_t net_irecv(void* recv_comm, int n, void** data, const size_t* sizes, const int* tags,
                       void** mhandles, void** phandles, void** request) {
  // NCCL (v9+) marks LL/LL128 receives through the request pointer's initial value (gpu_path.h).
  const bool marked = gpu::marks_flag_protocol(request);
  *request = nullptr;
  RecvComm* c = as<RecvComm>(recv_comm, kRecvCommMagic);
  if (!c) {
    ZIPCCL_WARN("irecv on something that is not a receive comm");
    return ncclInternalError;
  }
  if (n < 1 || n > c->max_recvs() || !data || !sizes) {
    ZIPCCL_WARN("irecv of %d grouped receives; this device's maxRecvs is %d", n, c->max_recvs());
    return ncclInternalError;
  }
  bool device[kMaxRecvs];
  for (int i = 0; i < n; ++i) device[i] = is_device(mhandles ? mhandles[i] : nullptr);
  return c->irecv(n, data, sizes, tags, device, marked, phandles, request);
}

// After a receive into device memory the NIC wrote (RDMA, GPUDirect), NCCL asks for a flush so the
// GPU sees the data: a one-byte RDMA read of the last non-empty device buffer through a loopback
// queue pair (the read completes only after the earlier writes, as in NCCL's IB transport). Nothing
// to do (null request) for host memory and for transports without a DeviceFlusher (sockets: the GPU
// path copies into device memory itself).
ncclResult_t net_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles, void** request) {
  *request = nullptr;
  RecvComm* c = as<RecvComm>(recv_comm, kRecvCommMagic);
  if (!c) {
    ZIPCCL_WARN("iflush on something that is not a receive comm");
    return ncclInternalError;
  }
  int last = -1;
  for (int i = 0; i < n && data && sizes && mhandles; ++i) {
    auto* h = static_cast<MemHandle*>(mhandles[i]);
    if (sizes[i] > 0 && h && h->type == NCCL_PTR_CUDA) last = i;
  }
  if (last < 0) return ncclSuccess;
  DeviceFlusher* f = dynamic_cast<DeviceFlusher*>(c->conn());
  if (!f) return ncclSuccess;
  int op = kNoOp;
  ZIPCCL_CHECK(f->flush(data[last], static_cast<size_t>(sizes[last]), &op));
  if (op == kNoOp) return ncclSuccess;
  auto* r = new FlushRequest;
  r->flusher = f;
  r->op = op;
  *request = r;
  return ncclSuccess;
}

ncclResult_t net_test(void* request, int* done, size_t* sizes, int* count) {
  *done = 0;
  *count = 1;
  if (is_flush_request(request)) return test_flush_request(request, done, sizes);  // from net_iflush
  auto* h = static_cast<RequestHeader*>(request);
  if (!h || h->magic != kRequestMagic) {
    ZIPCCL_WARN("test on something that is not a live request");
    return ncclInternalError;
  }
  if (h->is_send) return static_cast<SendComm*>(h->comm)->test(request, done, sizes);
  return static_cast<RecvComm*>(h->comm)->test(request, done, sizes, count);
}

ncclResult_t net_close_send(void* send_comm) {
  SendComm* c = as<SendComm>(send_comm, kSendCommMagic);
  if (!c) return send_comm ? ncclInternalError : ncclSuccess;
  delete c;
  return ncclSuccess;
}

ncclResult_t net_close_recv(void* recv_comm) {
  RecvComm* c = as<RecvComm>(recv_comm, kRecvCommMagic);
  if (!c) return recv_comm ? ncclInternalError : ncclSuccess;
  delete c;
  return ncclSuccess;
}

ncclResult_t net_close_listen(void* listen_comm) {
  ListenComm* l = as<ListenComm>(listen_comm, kListenCommMagic);
  if (!l) return listen_comm ? ncclInternalError : ncclSuccess;
  l->header.magic = kDeadMagic;
  delete l->listener;
  delete l;
  return ncclSuccess;
}

}  // namespace net
}  // namespace zipccl
