// One client of the NCCL net plugin ABI: loads a plugin (net_load.h), takes the newest ncclNet_vN table
// both sides know, and presents it through one interface with the newest ABI's semantics (v12),
// adapting older tables the way NCCL's own compatibility layer does:
//   - init: before v11 a plugin is initialised once per process; later inits only count, and the
//     context returned carries the communicator's config (v10 takes it at connect).
//   - getProperties: fields an older table lacks get NCCL's defaults (regIsGlobal/forceFlush 0, one
//     physical device per virtual one, 1 GiB / 512 MiB transfer limits, one request per
//     multi-request, rail and plane undefined).
//   - sizes: v7 registers at most 2^31-1 bytes, v7/v8 move at most 1 GiB per message; larger ones are
//     refused with ncclInternalError instead of being truncated.
//   - irecv: v7/v8 know no optional completion (*request == NCCL_NET_OPTIONAL_RECV_COMPLETION is
//     cleared); profiler handles (phandle) exist from v10.
//   - entries a table lacks (regMrDmaBuf, getDeviceMr, irecvConsumed, makeVDevice, setNetAttr) are
//     reported by has() and refused with ncclInternalError when called.
// Header-only C++17, no exceptions of its own beyond std::bad_alloc; usable from tests, tools and by
// libnccl-net-zipccl.so itself.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "nccl/net_v10.h"
#include "nccl/net_v11.h"
#include "nccl/net_v12.h"
#include "nccl/net_v7.h"
#include "nccl/net_v8.h"
#include "nccl/net_v9.h"
#include "zipccl/net_load.h"

namespace zipccl {
namespace net_client {

constexpr int kOldestVersion = ZIPCCL_NET_ABI_OLDEST;
constexpr int kNewestVersion = ZIPCCL_NET_ABI_NEWEST;
// NCCL's limits for tables that cannot report their own (MAX_NET_SIZE, MAX_COLLNET_SIZE).
constexpr size_t kLegacyMaxP2pBytes = size_t{1} << 30;
constexpr size_t kLegacyMaxCollBytes = size_t{512} << 20;
// Most receives one grouped irecv may carry (NCCL's proxy: one per channel).
constexpr int kMaxGroupedRecvs = 64;

// The newest ABI's types: what every caller sees whatever the table's version.
using Properties = ncclNetProperties_v12_t;
using CommConfig = ncclNetCommConfig_v12_t;
using VDeviceProps = ncclNetVDeviceProps_v12_t;
using NetAttr = ncclNetAttr_v12_t;
using DeviceHandle = ncclNetDeviceHandle_v12_t;

// Entries a table may lack (NULL in the table, or absent from its version).
enum class Entry { kRegMrDmaBuf, kGetDeviceMr, kIrecvConsumed, kMakeVDevice, kFinalize, kSetNetAttr };

// Each version's table and properties types.
template <int V>
struct Table;
#define ZIPCCL_NET_CLIENT_TABLE(V)            \
  template <>                                 \
  struct Table<V> {                           \
    using Net = ncclNet_v##V##_t;             \
    using Props = ncclNetProperties_v##V##_t; \
  };
ZIPCCL_NET_CLIENT_TABLE(7)
ZIPCCL_NET_CLIENT_TABLE(8)
ZIPCCL_NET_CLIENT_TABLE(9)
ZIPCCL_NET_CLIENT_TABLE(10)
ZIPCCL_NET_CLIENT_TABLE(11)
ZIPCCL_NET_CLIENT_TABLE(12)
#undef ZIPCCL_NET_CLIENT_TABLE

// One plugin table, called with v12 semantics. Thread safety is the plugin's: the client keeps no
// per-call state (only the pre-v11 init count, under a lock).
class Net {
 public:
  virtual ~Net() = default;
  int version() const { return version_; }
  const char* name() const { return zipccl_net_table_name(table_); }
  const void* table() const { return table_; }
  void* library() const { return lib_; }
  virtual bool has(Entry e) const = 0;

  // *ctx receives the context listen/connect/finalize take (before v11: the client's own, holding
  // the config). finalize(ctx) releases it; every successful init needs one finalize.
  virtual ncclResult_t init(void** ctx, uint64_t comm_id, CommConfig* config, ncclDebugLogger_t logger,
                            ncclProfilerCallback_t profiler) = 0;
  virtual ncclResult_t finalize(void* ctx) = 0;
  virtual ncclResult_t devices(int* ndev) = 0;
  virtual ncclResult_t get_properties(int dev, Properties* props) = 0;
  virtual ncclResult_t listen(void* ctx, int dev, void* handle, void** listen_comm) = 0;
  virtual ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm,
                               DeviceHandle** dev_comm) = 0;
  virtual ncclResult_t accept(void* listen_comm, void** recv_comm, DeviceHandle** dev_comm) = 0;
  virtual ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) = 0;
  virtual ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                     void** mhandle) = 0;
  virtual ncclResult_t dereg_mr(void* comm, void* mhandle) = 0;
  virtual ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                             void** request) = 0;
  virtual ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                             void** phandles, void** request) = 0;
  virtual ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                              void** request) = 0;
  virtual ncclResult_t test(void* request, int* done, int* sizes) = 0;
  virtual ncclResult_t close_send(void* send_comm) = 0;
  virtual ncclResult_t close_recv(void* recv_comm) = 0;
  virtual ncclResult_t close_listen(void* listen_comm) = 0;
  virtual ncclResult_t get_device_mr(void* comm, void* mhandle, void** dptr_mhandle) = 0;
  virtual ncclResult_t irecv_consumed(void* recv_comm, int n, void* request) = 0;
  virtual ncclResult_t make_vdevice(int* d, VDeviceProps* props) = 0;
  virtual ncclResult_t set_net_attr(void* ctx, NetAttr* attr) = 0;

  // Conveniences: one receive, no profiler handles.
  ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
    return isend(send_comm, data, size, tag, mhandle, nullptr, request);
  }
  ncclResult_t irecv(void* recv_comm, void* data, size_t size, int tag, void* mhandle, void** request) {
    size_t sizes[1] = {size};
    int tags[1] = {tag};
    void* datas[1] = {data};
    void* mhandles[1] = {mhandle};
    void* phandles[1] = {nullptr};
    return irecv(recv_comm, 1, datas, sizes, tags, mhandles, phandles, request);
  }

 protected:
  Net(void* lib, const void* table, int version) : lib_(lib), table_(table), version_(version) {}

 private:
  void* lib_;
  const void* table_;
  int version_;
};

namespace detail {

// Pre-v11 plugins are initialised once per process (NCCL calls their init again only after every
// communicator finalised): a count per table.
inline int& init_count(const void* table, std::unique_lock<std::mutex>* lock) {
  static std::mutex mu;
  static std::map<const void*, int>& counts = *new std::map<const void*, int>;
  *lock = std::unique_lock<std::mutex>(mu);
  return counts[table];
}

// The pre-v11 context the client hands out: the config v10's connect takes.
struct LegacyContext {
  ncclNetCommConfig_v10_t config{NCCL_NET_TRAFFIC_CLASS_UNDEF};
};

template <int V>
class TableNet final : public Net {
  using T = typename Table<V>::Net;
  using P = typename Table<V>::Props;

 public:
  TableNet(void* lib, const T* t) : Net(lib, t, V), t_(t) {}

  bool has(Entry e) const override {
    switch (e) {
      case Entry::kRegMrDmaBuf:
        return t_->regMrDmaBuf != nullptr;
      case Entry::kGetDeviceMr:
        return t_->getDeviceMr != nullptr;
      case Entry::kIrecvConsumed:
        return t_->irecvConsumed != nullptr;
      case Entry::kMakeVDevice:
        if constexpr (V >= 9) return t_->makeVDevice != nullptr;
        return false;
      case Entry::kFinalize:
        if constexpr (V >= 11) return t_->finalize != nullptr;
        return true;  // the client's own
      case Entry::kSetNetAttr:
        if constexpr (V >= 11) return t_->setNetAttr != nullptr;
        return false;
    }
    return false;
  }

  ncclResult_t init(void** ctx, uint64_t comm_id, CommConfig* config, ncclDebugLogger_t logger,
                    ncclProfilerCallback_t profiler) override {
    if constexpr (V >= 11) {
      typename std::remove_pointer<decltype(config_type())>::type c{NCCL_NET_TRAFFIC_CLASS_UNDEF};
      if (config) c.trafficClass = config->trafficClass;
      return t_->init(ctx, comm_id, &c, logger, profiler);
    } else {
      (void)comm_id;
      if (!ctx) return ncclInvalidArgument;
      auto lc = std::make_unique<LegacyContext>();
      if (config) lc->config.trafficClass = config->trafficClass;
      std::unique_lock<std::mutex> lock;
      int& count = init_count(t_, &lock);
      if (count == 0) {
        ncclResult_t r;
        if constexpr (V == 10)
          r = t_->init(logger, profiler);
        else
          r = t_->init(logger);
        if (r != ncclSuccess) return r;
      }
      ++count;
      *ctx = lc.release();
      return ncclSuccess;
    }
  }
  ncclResult_t finalize(void* ctx) override {
    if constexpr (V >= 11) {
      return t_->finalize ? t_->finalize(ctx) : ncclSuccess;
    } else {
      if (!ctx) return ncclInvalidArgument;
      delete static_cast<LegacyContext*>(ctx);
      std::unique_lock<std::mutex> lock;
      int& count = init_count(t_, &lock);
      if (count > 0) --count;
      return ncclSuccess;
    }
  }
  ncclResult_t devices(int* ndev) override { return t_->devices(ndev); }
  ncclResult_t get_properties(int dev, Properties* out) override {
    P p;
    std::memset(&p, 0, sizeof p);
    ncclResult_t r = t_->getProperties(dev, &p);
    if (r != ncclSuccess) return r;
    widen(dev, p, out);
    return ncclSuccess;
  }
  ncclResult_t listen(void* ctx, int dev, void* handle, void** listen_comm) override {
    if constexpr (V >= 11) {
      return t_->listen(ctx, dev, handle, listen_comm);
    } else {
      (void)ctx;
      return t_->listen(dev, handle, listen_comm);
    }
  }
  ncclResult_t connect(void* ctx, int dev, void* handle, void** send_comm, DeviceHandle** dev_comm) override {
    if constexpr (V >= 11) {
      return t_->connect(ctx, dev, handle, send_comm, dev_comm);
    } else if constexpr (V == 10) {
      LegacyContext fallback;
      LegacyContext* lc = ctx ? static_cast<LegacyContext*>(ctx) : &fallback;
      return t_->connect(dev, &lc->config, handle, send_comm, dev_comm);
    } else {
      (void)ctx;
      return t_->connect(dev, handle, send_comm, dev_comm);
    }
  }
  ncclResult_t accept(void* listen_comm, void** recv_comm, DeviceHandle** dev_comm) override {
    return t_->accept(listen_comm, recv_comm, dev_comm);
  }
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) override {
    if constexpr (V == 7) {
      if (size >= (size_t{1} << 31)) return ncclInternalError;
      return t_->regMr(comm, data, static_cast<int>(size), type, mhandle);
    } else {
      return t_->regMr(comm, data, size, type, mhandle);
    }
  }
  ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                             void** mhandle) override {
    if (!t_->regMrDmaBuf) return ncclInternalError;
    return t_->regMrDmaBuf(comm, data, size, type, offset, fd, mhandle);
  }
  ncclResult_t dereg_mr(void* comm, void* mhandle) override { return t_->deregMr(comm, mhandle); }
  ncclResult_t isend(void* send_comm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                     void** request) override {
    if constexpr (V <= 8) {
      (void)phandle;
      if (size > kLegacyMaxP2pBytes) return ncclInternalError;
      return t_->isend(send_comm, data, static_cast<int>(size), tag, mhandle, request);
    } else if constexpr (V == 9) {
      (void)phandle;
      return t_->isend(send_comm, data, size, tag, mhandle, request);
    } else {
      return t_->isend(send_comm, data, size, tag, mhandle, phandle, request);
    }
  }
  ncclResult_t irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                     void** phandles, void** request) override {
    if constexpr (V <= 8) {
      (void)phandles;
      if (n < 0 || n > kMaxGroupedRecvs) return ncclInternalError;
      std::array<int, kMaxGroupedRecvs> int_sizes{};
      for (int i = 0; i < n && sizes; ++i) {
        if (sizes[i] > kLegacyMaxP2pBytes) return ncclInternalError;
        int_sizes[i] = static_cast<int>(sizes[i]);
      }
      if (*request == reinterpret_cast<void*>(NCCL_NET_OPTIONAL_RECV_COMPLETION)) *request = nullptr;
      return t_->irecv(recv_comm, n, data, sizes ? int_sizes.data() : nullptr, tags, mhandles, request);
    } else if constexpr (V == 9) {
      (void)phandles;
      return t_->irecv(recv_comm, n, data, sizes, tags, mhandles, request);
    } else {
      return t_->irecv(recv_comm, n, data, sizes, tags, mhandles, phandles, request);
    }
  }
  ncclResult_t iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                      void** request) override {
    return t_->iflush(recv_comm, n, data, sizes, mhandles, request);
  }
  ncclResult_t test(void* request, int* done, int* sizes) override { return t_->test(request, done, sizes); }
  ncclResult_t close_send(void* c) override { return t_->closeSend(c); }
  ncclResult_t close_recv(void* c) override { return t_->closeRecv(c); }
  ncclResult_t close_listen(void* c) override { return t_->closeListen(c); }
  ncclResult_t get_device_mr(void* comm, void* mhandle, void** dptr_mhandle) override {
    if (!t_->getDeviceMr) return ncclInternalError;
    return t_->getDeviceMr(comm, mhandle, dptr_mhandle);
  }
  ncclResult_t irecv_consumed(void* recv_comm, int n, void* request) override {
    if (!t_->irecvConsumed) return ncclInternalError;
    return t_->irecvConsumed(recv_comm, n, request);
  }
  ncclResult_t make_vdevice(int* d, VDeviceProps* props) override {
    if constexpr (V >= 12) {
      if (!t_->makeVDevice) return ncclInternalError;
      return t_->makeVDevice(d, props);
    } else if constexpr (V >= 9) {
      if (!t_->makeVDevice) return ncclInternalError;
      // Older tables merge at most NCCL_NET_MAX_DEVS_PER_NIC (4) devices.
      typename std::remove_pointer<decltype(vprops_type())>::type old{};
      if (!props || props->ndevs < 0 || props->ndevs > NCCL_NET_MAX_DEVS_PER_NIC) return ncclInvalidArgument;
      old.ndevs = props->ndevs;
      for (int i = 0; i < props->ndevs; ++i) old.devs[i] = props->devs[i];
      return t_->makeVDevice(d, &old);
    } else {
      (void)d;
      (void)props;
      return ncclInternalError;
    }
  }
  ncclResult_t set_net_attr(void* ctx, NetAttr* attr) override {
    if constexpr (V >= 11) {
      if (!t_->setNetAttr) return ncclInternalError;
      typename std::remove_pointer<decltype(attr_type())>::type a;
      static_assert(sizeof a == sizeof *attr, "ncclNetAttr layouts agree from v11");
      std::memcpy(&a, attr, sizeof a);
      return t_->setNetAttr(ctx, &a);
    } else {
      (void)ctx;
      (void)attr;
      return ncclInternalError;
    }
  }

 private:
  // The parameter types of this version's entries (declarations only, for decltype).
  static auto config_type() {
    if constexpr (V >= 12)
      return static_cast<ncclNetCommConfig_v12_t*>(nullptr);
    else
      return static_cast<ncclNetCommConfig_v11_t*>(nullptr);
  }
  static auto vprops_type() {
    if constexpr (V == 9)
      return static_cast<ncclNetVDeviceProps_v9_t*>(nullptr);
    else if constexpr (V == 10)
      return static_cast<ncclNetVDeviceProps_v10_t*>(nullptr);
    else
      return static_cast<ncclNetVDeviceProps_v11_t*>(nullptr);
  }
  static auto attr_type() {
    if constexpr (V >= 12)
      return static_cast<ncclNetAttr_v12_t*>(nullptr);
    else
      return static_cast<ncclNetAttr_v11_t*>(nullptr);
  }

  static void widen(int dev, const P& p, Properties* out) {
    std::memset(out, 0, sizeof *out);
    out->name = p.name;
    out->pciPath = p.pciPath;
    out->guid = p.guid;
    out->ptrSupport = p.ptrSupport;
    out->speed = p.speed;
    out->port = p.port;
    out->latency = p.latency;
    out->maxComms = p.maxComms;
    out->maxRecvs = p.maxRecvs;
    out->netDeviceType = p.netDeviceType;
    out->netDeviceVersion = p.netDeviceVersion;
    out->regIsGlobal = 0;
    out->forceFlush = 0;
    out->vProps.ndevs = 1;
    out->vProps.devs[0] = dev;
    out->maxP2pBytes = kLegacyMaxP2pBytes;
    out->maxCollBytes = kLegacyMaxCollBytes;
    out->maxMultiRequestSize = 1;
    out->railId = NCCL_NET_ID_UNDEF;
    out->planeId = NCCL_NET_ID_UNDEF;
    if constexpr (V >= 8) out->regIsGlobal = p.regIsGlobal;
    if constexpr (V >= 9) {
      out->forceFlush = p.forceFlush;
      // A garbage count must not read past the old array.
      constexpr int kOldMax = static_cast<int>(sizeof p.vProps.devs / sizeof p.vProps.devs[0]);
      const int n = p.vProps.ndevs < 0 ? 0 : p.vProps.ndevs > kOldMax ? kOldMax : p.vProps.ndevs;
      out->vProps.ndevs = n;
      for (int i = 0; i < n; ++i) out->vProps.devs[i] = p.vProps.devs[i];
      out->maxP2pBytes = p.maxP2pBytes;
      out->maxCollBytes = p.maxCollBytes;
    }
    if constexpr (V >= 11) out->maxMultiRequestSize = p.maxMultiRequestSize;
    if constexpr (V >= 12) {
      out->railId = p.railId;
      out->planeId = p.planeId;
    }
  }

  const T* t_;
};

// Walks the versions from NEWEST down to OLDEST: the dispatch follows net_load.h's range.
template <int V>
std::unique_ptr<Net> make_net(void* lib, const void* table, int version) {
  if constexpr (V < kOldestVersion) {
    (void)lib;
    (void)table;
    (void)version;
    return nullptr;
  } else {
    if (version == V)
      return std::make_unique<TableNet<V>>(lib, static_cast<const typename Table<V>::Net*>(table));
    return make_net<V - 1>(lib, table, version);
  }
}

}  // namespace detail

// A client for a table already in hand (`version` must be its version), or nullptr for an unknown
// version. `lib` is informational (library()).
inline std::unique_ptr<Net> wrap(void* lib, const void* table, int version) {
  if (!table) return nullptr;
  return detail::make_net<kNewestVersion>(lib, table, version);
}

// Opens `name` as NCCL_NET_PLUGIN would (a name -> libnccl-net-<name>.so, or a library file or path)
// and takes its newest table no newer than `newest`. nullptr with *error naming the library and why.
// *opened (optional) gets the name the loader accepted.
inline std::unique_ptr<Net> load(const std::string& name, std::string* error, int newest = kNewestVersion,
                                 std::string* opened = nullptr) {
  zipccl_net_plugin p;
  if (zipccl_net_load(name.c_str(), newest, &p) != 0) {
    if (error) *error = p.error;
    return nullptr;
  }
  if (opened) *opened = p.opened;
  return wrap(p.lib, p.table, p.version);
}

// The table of exactly `version` from an open library, or nullptr.
inline std::unique_ptr<Net> load_version(void* lib, int version) {
  return wrap(lib, zipccl_net_table_exact(lib, version), version);
}

// The versions `lib` exports, newest first.
inline std::vector<int> exported_versions(void* lib) {
  std::vector<int> out;
  for (int v = kNewestVersion; v >= kOldestVersion; --v)
    if (zipccl_net_table_exact(lib, v)) out.push_back(v);
  return out;
}

}  // namespace net_client
}  // namespace zipccl
