// Thin adapters: one exported ncclNet_vN table per supported NCCL ABI (v7: NCCL 2.17 .. v12: 2.30+),
// all forwarding to net.h. Every entry point catches everything: nothing unwinds into NCCL.
#include <climits>
#include <cstring>
#include <exception>
#include <new>
#include <type_traits>

#include "abi/net.h"
#include "abi/net_mr.h"
#include "common/log.h"
#include "layer/profiler_events.h"
#include "nccl/net_v10.h"
#include "nccl/net_v11.h"
#include "nccl/net_v12.h"
#include "nccl/net_v7.h"
#include "nccl/net_v8.h"
#include "nccl/net_v9.h"

namespace zipccl {
namespace net {

ncclResult_t caught_exception(const char* what) noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    ZIPCCL_WARN("%s: out of memory", what);
    return ncclSystemError;
  } catch (const std::exception& e) {
    ZIPCCL_WARN("%s: internal error: %s", what, e.what());
    return ncclInternalError;
  } catch (...) {
    ZIPCCL_WARN("%s: unknown internal error", what);
    return ncclInternalError;
  }
}

namespace {

template <typename F>
ncclResult_t guard(const char* what, F&& f) noexcept {
  try {
    return f();
  } catch (...) {
    return caught_exception(what);
  }
}

ncclResult_t checked_size(int size, size_t* out) {
  if (size < 0) {
    ZIPCCL_WARN("negative message size %d", size);
    return ncclInternalError;
  }
  *out = static_cast<size_t>(size);
  return ncclSuccess;
}

template <typename P>
void fill_common(const Properties& q, P* p) {
  p->name = const_cast<char*>(q.name);
  p->pciPath = const_cast<char*>(q.pci_path);
  p->guid = q.guid;
  p->ptrSupport = q.ptr_support;
  p->speed = q.speed;
  p->port = q.port;
  p->latency = q.latency;
  p->maxComms = q.max_comms;
  p->maxRecvs = q.max_recvs;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
}

template <typename P>
void fill_v9(int dev, const Properties& q, P* p) {
  fill_common(q, p);
  p->regIsGlobal = 0;
  p->forceFlush = 0;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  constexpr int kMaxDevs = sizeof(p->vProps.devs) / sizeof(p->vProps.devs[0]);
  if (q.nvdevs > 0 && q.nvdevs <= kMaxDevs) {  // a virtual device (makeVDevice)
    p->vProps.ndevs = q.nvdevs;
    for (int i = 0; i < q.nvdevs; ++i) p->vProps.devs[i] = q.vdevs[i];
  }
  p->maxP2pBytes = q.max_bytes;
  p->maxCollBytes = q.max_bytes;
}

ncclResult_t test_int(void* request, int* done, int* sizes) {
  return guard("test", [&] {
    size_t n[kMaxRecvs] = {};
    int count = 1;
    ncclResult_t r = net_test(request, done, n, &count);
    for (int i = 0; r == ncclSuccess && *done && sizes && i < count; ++i)
      sizes[i] = n[i] > static_cast<size_t>(INT_MAX) ? INT_MAX : static_cast<int>(n[i]);
    return r;
  });
}

// ---- shared by all versions ----
ncclResult_t a_devices(int* ndev) {
  return guard("devices", [&] { return net_devices(ndev); });
}
ncclResult_t a_accept(void* l, void** rc, ncclNetDeviceHandle_v7_t** dev) {
  return guard("accept", [&] {
    (void)dev;  // no device offload: NCCL's *dev stays as it set it
    return net_accept(l, rc);
  });
}
ncclResult_t a_listen(int dev, void* handle, void** l) {
  return guard("listen", [&] { return net_listen(dev, handle, l); });
}
ncclResult_t a_connect(int dev, void* handle, void** sc, ncclNetDeviceHandle_v7_t**) {
  return guard("connect", [&] { return net_connect(dev, handle, sc); });
}
ncclResult_t a_reg_mr_int(void* comm, void* data, int size, int type, void** mh) {
  return guard("regMr", [&] {
    size_t n;
    ZIPCCL_CHECK(checked_size(size, &n));
    return net_reg_mr(comm, data, n, type, mh);
  });
}
ncclResult_t a_reg_mr(void* comm, void* data, size_t size, int type, void** mh) {
  return guard("regMr", [&] { return net_reg_mr(comm, data, size, type, mh); });
}
// NCCL passes the dma-buf fd it exported for device memory (and data's offset in it); -1: none.
ncclResult_t a_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                             void** mh) {
  return guard("regMrDmaBuf", [&] { return net_reg_mr_dmabuf(comm, data, size, type, offset, fd, mh); });
}
ncclResult_t a_dereg_mr(void* comm, void* mh) {
  return guard("deregMr", [&] { return net_dereg_mr(comm, mh); });
}
ncclResult_t a_isend_int(void* sc, void* data, int size, int tag, void* mh, void** req) {
  return guard("isend", [&] {
    size_t n;
    ZIPCCL_CHECK(checked_size(size, &n));
    return net_isend(sc, data, n, tag, mh, nullptr, req);
  });
}
ncclResult_t a_isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
  return guard("isend", [&] { return net_isend(sc, data, size, tag, mh, nullptr, req); });
}
ncclResult_t a_isend_p(void* sc, void* data, size_t size, int tag, void* mh, void* phandle, void** req) {
  return guard("isend", [&] { return net_isend(sc, data, size, tag, mh, phandle, req); });
}
ncclResult_t a_irecv_int(void* rc, int n, void** data, int* sizes, int* tags, void** mh, void** req) {
  return guard("irecv", [&] {
    if (n < 1 || n > kMaxRecvs || !sizes) return net_irecv(rc, n, data, nullptr, tags, mh, nullptr, req);
    size_t s[kMaxRecvs];
    for (int i = 0; i < n; ++i) ZIPCCL_CHECK(checked_size(sizes[i], &s[i]));
    return net_irecv(rc, n, data, s, tags, mh, nullptr, req);
  });
}
ncclResult_t a_irecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh, void** req) {
  return guard("irecv", [&] { return net_irecv(rc, n, data, sizes, tags, mh, nullptr, req); });
}
ncclResult_t a_irecv_p(void* rc, int n, void** data, size_t* sizes, int* tags, void** mh, void** phandles,
                       void** req) {
  return guard("irecv", [&] { return net_irecv(rc, n, data, sizes, tags, mh, phandles, req); });
}
ncclResult_t a_iflush(void* rc, int n, void** data, int* sizes, void** mh, void** req) {
  return guard("iflush", [&] { return net_iflush(rc, n, data, sizes, mh, req); });
}
ncclResult_t a_close_send(void* c) {
  return guard("closeSend", [&] { return net_close_send(c); });
}
ncclResult_t a_close_recv(void* c) {
  return guard("closeRecv", [&] { return net_close_recv(c); });
}
ncclResult_t a_close_listen(void* c) {
  return guard("closeListen", [&] { return net_close_listen(c); });
}

// ---- per version ----
void publish_make_vdevice();  // below the tables
ncclResult_t a_init(ncclDebugLogger_t logger) {
  return guard("init", [&] {
    ncclResult_t r = net_init(logger);
    if (r == ncclSuccess) publish_make_vdevice();
    return r;
  });
}
// v10+: NCCL's profiler callback, for zipccl's per-message events (layer/profiler_events.h).
ncclResult_t a_init_v10(ncclDebugLogger_t logger, ncclProfilerCallback_t profiler) {
  set_profiler_callback(profiler);
  return a_init(logger);
}
// v11 and v12: a context per communicator (their configs differ only in type).
template <typename Config>
ncclResult_t a_init_ctx(void** ctx, uint64_t comm_id, Config*, ncclDebugLogger_t logger,
                        ncclProfilerCallback_t profiler) {
  set_profiler_callback(profiler);
  return guard("init", [&] {
    ncclResult_t r = net_init_ctx(ctx, comm_id, logger);
    if (r == ncclSuccess) publish_make_vdevice();
    return r;
  });
}
constexpr auto* a_init_v11 = &a_init_ctx<ncclNetCommConfig_v11_t>;
constexpr auto* a_init_v12 = &a_init_ctx<ncclNetCommConfig_v12_t>;
ncclResult_t a_finalize_v11(void* ctx) {
  return guard("finalize", [&] { return net_finalize_ctx(ctx); });
}
ncclResult_t a_set_net_attr_v12(void* ctx, ncclNetAttr_v12_t* attr) {
  return guard("setNetAttr", [&] { return net_set_net_attr(ctx, attr); });
}
ncclResult_t a_set_net_attr_v11(void* ctx, ncclNetAttr_v11_t* attr) {
  static_assert(sizeof(ncclNetAttr_v11_t) == sizeof(ncclNetAttr_v12_t), "ncclNetAttr layouts agree from v11");
  if (!attr) return ncclInternalError;
  ncclNetAttr_v12_t a;
  std::memcpy(&a, attr, sizeof a);
  return a_set_net_attr_v12(ctx, &a);
}

ncclResult_t a_props_v7(int dev, ncclNetProperties_v7_t* p) {
  return guard("getProperties", [&] {
    Properties q;
    ZIPCCL_CHECK(net_properties(dev, &q));
    fill_common(q, p);
    return ncclSuccess;
  });
}
ncclResult_t a_props_v8(int dev, ncclNetProperties_v8_t* p) {
  return guard("getProperties", [&] {
    Properties q;
    ZIPCCL_CHECK(net_properties(dev, &q));
    fill_common(q, p);
    p->regIsGlobal = 0;
    return ncclSuccess;
  });
}
// v9 and later: v9's fields (fill_v9); v11 adds maxMultiRequestSize, v12 the rail and plane:
// undefined, zipccl's devices are not mapped onto a rail topology.
template <typename P>
ncclResult_t a_props_v9_up(int dev, P* p) {
  constexpr bool v12 = std::is_same_v<P, ncclNetProperties_v12_t>;
  return guard("getProperties", [&] {
    Properties q;
    ZIPCCL_CHECK(net_properties(dev, &q));
    fill_v9(dev, q, p);
    if constexpr (v12 || std::is_same_v<P, ncclNetProperties_v11_t>) p->maxMultiRequestSize = 1;
    if constexpr (v12) {
      p->railId = NCCL_NET_ID_UNDEF;
      p->planeId = NCCL_NET_ID_UNDEF;
    }
    return ncclSuccess;
  });
}
constexpr auto* a_props_v9 = &a_props_v9_up<ncclNetProperties_v9_t>;
constexpr auto* a_props_v10 = &a_props_v9_up<ncclNetProperties_v10_t>;
constexpr auto* a_props_v11 = &a_props_v9_up<ncclNetProperties_v11_t>;
constexpr auto* a_props_v12 = &a_props_v9_up<ncclNetProperties_v12_t>;
// makeVDevice of v9..v12 (their props differ in how many devices one fuses: 4 before v12, 8 from v12).
template <typename VProps>
ncclResult_t a_make_vdevice(int* d, VProps* props) {
  return guard("makeVDevice", [&] {
    if (!d || !props) return ncclInternalError;
    constexpr int kMaxDevs = sizeof(props->devs) / sizeof(props->devs[0]);
    if (props->ndevs < 0 || props->ndevs > kMaxDevs) {
      ZIPCCL_WARN("makeVDevice of %d devices (at most %d)", props->ndevs, kMaxDevs);
      return ncclInvalidArgument;
    }
    ncclNetVDeviceProps_v12_t v{};
    v.ndevs = props->ndevs;
    for (int i = 0; i < props->ndevs; ++i) v.devs[i] = props->devs[i];
    return net_make_vdevice(d, &v);
  });
}

ncclResult_t a_connect_v10(int dev, ncclNetCommConfig_v10_t*, void* handle, void** sc,
                           ncclNetDeviceHandle_v10_t** dc) {
  return a_connect(dev, handle, sc, dc);
}
ncclResult_t a_listen_v11(void*, int dev, void* handle, void** l) {
  return a_listen(dev, handle, l);
}
ncclResult_t a_connect_v11(void*, int dev, void* handle, void** sc, ncclNetDeviceHandle_v11_t** dc) {
  return a_connect(dev, handle, sc, dc);
}

}  // namespace
}  // namespace net
}  // namespace zipccl

using namespace zipccl::net;

// The only exported symbols (see exports.map). `extern "C"` without braces gives the const objects
// external linkage. v9..v12 are writable for one entry, makeVDevice (publish_make_vdevice).
extern "C" {
extern ncclNet_v9_t ncclNetPlugin_v9;
extern ncclNet_v10_t ncclNetPlugin_v10;
extern ncclNet_v11_t ncclNetPlugin_v11;
extern ncclNet_v12_t ncclNetPlugin_v12;
}
extern "C" __attribute__((visibility("default"))) const ncclNet_v7_t ncclNetPlugin_v7 = {
    kPluginName,  a_init,          a_devices,      a_props_v7,  a_listen,    a_connect, a_accept,
    a_reg_mr_int, a_reg_mr_dmabuf, a_dereg_mr,     a_isend_int, a_irecv_int, a_iflush,  test_int,
    a_close_send, a_close_recv,    a_close_listen, nullptr,     nullptr};

extern "C" __attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    kPluginName,  a_init,          a_devices,      a_props_v8,  a_listen,    a_connect, a_accept,
    a_reg_mr,     a_reg_mr_dmabuf, a_dereg_mr,     a_isend_int, a_irecv_int, a_iflush,  test_int,
    a_close_send, a_close_recv,    a_close_listen, nullptr,     nullptr};

__attribute__((visibility("default"))) ncclNet_v9_t ncclNetPlugin_v9 = {
    kPluginName,  a_init,          a_devices,      a_props_v9, a_listen, a_connect, a_accept,
    a_reg_mr,     a_reg_mr_dmabuf, a_dereg_mr,     a_isend,    a_irecv,  a_iflush,  test_int,
    a_close_send, a_close_recv,    a_close_listen, nullptr,    nullptr,  nullptr};

__attribute__((visibility("default"))) ncclNet_v10_t ncclNetPlugin_v10 = {
    kPluginName,  a_init_v10,      a_devices,      a_props_v10, a_listen,  a_connect_v10, a_accept,
    a_reg_mr,     a_reg_mr_dmabuf, a_dereg_mr,     a_isend_p,   a_irecv_p, a_iflush,      test_int,
    a_close_send, a_close_recv,    a_close_listen, nullptr,     nullptr,   nullptr};

__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    kPluginName,     a_init_v11,        a_devices,    a_props_v11,
    a_listen_v11,    a_connect_v11,     a_accept,     a_reg_mr,
    a_reg_mr_dmabuf, a_dereg_mr,        a_isend_p,    a_irecv_p,
    a_iflush,        test_int,          a_close_send, a_close_recv,
    a_close_listen,  nullptr,           nullptr,      nullptr,
    a_finalize_v11,  a_set_net_attr_v11};

__attribute__((visibility("default"))) ncclNet_v12_t ncclNetPlugin_v12 = {
    kPluginName,     a_init_v12,        a_devices,    a_props_v12,
    a_listen_v11,    a_connect_v11,     a_accept,     a_reg_mr,
    a_reg_mr_dmabuf, a_dereg_mr,        a_isend_p,    a_irecv_p,
    a_iflush,        test_int,          a_close_send, a_close_recv,
    a_close_listen,  nullptr,           nullptr,      nullptr,
    a_finalize_v11,  a_set_net_attr_v12};

namespace zipccl {
namespace net {
namespace {

template <typename Table, typename Fn>
void publish(Table* t, Fn fn) {
  if (__atomic_load_n(&t->makeVDevice, __ATOMIC_ACQUIRE) != fn) __atomic_store_n(&t->makeVDevice, fn, __ATOMIC_RELEASE);
}

// makeVDevice is present exactly when an inner plugin whose table has it is open (docs/notes/inner.md,
// "makeVDevice"): NCCL reads the entry only after init returns (the v9..v11 compatibility layers copy
// it right after the plugin's init, v12 tables are read in place at each communicator's topology), so
// an init that sets it is in time. A present entry that refused would fail NCCL's init through its
// device fusion, which zipccl's own transports cannot do; NULL there, as NCCL handles a plugin without
// it. The value only changes from NULL to the forwarder and back with the inner plugin, never while
// another thread could act on the old one (ZIPCCL_NET_INNER is fixed for the process).
void publish_make_vdevice() {
  const bool on = net_make_vdevice_offered();
  publish(&ncclNetPlugin_v9, on ? &a_make_vdevice<ncclNetVDeviceProps_v9_t> : nullptr);
  publish(&ncclNetPlugin_v10, on ? &a_make_vdevice<ncclNetVDeviceProps_v10_t> : nullptr);
  publish(&ncclNetPlugin_v11, on ? &a_make_vdevice<ncclNetVDeviceProps_v11_t> : nullptr);
  publish(&ncclNetPlugin_v12, on ? &a_make_vdevice<ncclNetVDeviceProps_v12_t> : nullptr);
}

}  // namespace
}  // namespace net
}  // namespace zipccl
