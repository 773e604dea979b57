// The inner plugin through the net ABI client (plugin/client): NCCL's name resolution and the newest
// table both know (v7..v12), called with v12 semantics. This file only narrows the client to what the
// inner transport uses and keeps the one context zipccl initialises it with.
#include <dlfcn.h>

#include <cstring>

#include "inner/inner_net.h"
#include "zipccl/net_client.h"

namespace zipccl {
namespace net {
namespace {

// dladdr base of this object, to recognise ZIPCCL_NET_INNER naming the library we run in.
void* own_base() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_base), &info)) return nullptr;
  return info.dli_fbase;
}

class ClientInner final : public InnerNet {
 public:
  ClientInner(std::unique_ptr<net_client::Net> net, std::string opened)
      : net_(std::move(net)), opened_(std::move(opened)) {}
  const char* name() const override { return net_->name(); }
  int version() const override { return net_->version(); }
  const std::string& library() const override { return opened_; }
  bool is_self() const override {
    Dl_info info{};
    return dladdr(net_->table(), &info) && info.dli_fbase == own_base();
  }
  ncclResult_t init(ncclDebugLogger_t logger) override {
    net_client::CommConfig cfg{};
    cfg.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF;
    return net_->init(&ctx_, 0, &cfg, logger, nullptr);
  }
  ncclResult_t finalize() override { return net_->finalize(ctx_); }
  ncclResult_t devices(int* n) override { return net_->devices(n); }
  ncclResult_t properties(int dev, InnerProps* p) override {
    net_client::Properties q;
    std::memset(&q, 0, sizeof q);
    ncclResult_t r = net_->get_properties(dev, &q);
    if (r != ncclSuccess) return r;
    p->name = q.name ? q.name : "";
    p->pci_path = q.pciPath ? q.pciPath : "";
    p->guid = q.guid;
    p->ptr_support = q.ptrSupport;
    p->reg_is_global = q.regIsGlobal;
    p->force_flush = q.forceFlush;
    p->speed = q.speed;
    p->port = q.port;
    p->latency = q.latency;
    p->max_comms = q.maxComms;
    p->max_recvs = q.maxRecvs;
    p->max_p2p_bytes = q.maxP2pBytes;
    p->net_device_type = q.netDeviceType;
    const int nv = q.vProps.ndevs < 0 ? 0 : q.vProps.ndevs > NCCL_NET_MAX_DEVS_PER_NIC_V12 ? NCCL_NET_MAX_DEVS_PER_NIC_V12
                                                                                        : q.vProps.ndevs;
    p->vdevs.assign(q.vProps.devs, q.vProps.devs + nv);
    return r;
  }
  ncclResult_t listen(int dev, void* handle, void** l) override { return net_->listen(ctx_, dev, handle, l); }
  ncclResult_t connect(int dev, void* handle, void** sc) override {
    net_client::DeviceHandle* dh = nullptr;
    return net_->connect(ctx_, dev, handle, sc, &dh);
  }
  ncclResult_t accept(void* l, void** rc) override {
    net_client::DeviceHandle* dh = nullptr;
    return net_->accept(l, rc, &dh);
  }
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) override {
    return net_->reg_mr(comm, data, size, type, mh);
  }
  ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                             void** mh) override {
    if (fd < 0) return reg_mr(comm, data, size, type, mh);
    return net_->reg_mr_dmabuf(comm, data, size, type, offset, fd, mh);  // refused when the table lacks it
  }
  ncclResult_t dereg_mr(void* comm, void* mh) override { return net_->dereg_mr(comm, mh); }
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) override {
    return net_->isend(sc, data, size, tag, mh, req);
  }
  ncclResult_t irecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mhs, void** req) override {
    void* ph[net_client::kMaxGroupedRecvs] = {};
    if (n < 1 || n > net_client::kMaxGroupedRecvs) return ncclInternalError;
    return net_->irecv(rc, n, data, sizes, tags, mhs, ph, req);
  }
  ncclResult_t iflush(void* rc, void* data, int size, void* mh, void** req) override {
    return net_->iflush(rc, 1, &data, &size, &mh, req);
  }
  ncclResult_t test(void* req, int* done, size_t* sizes, int n) override {
    int s[net_client::kMaxGroupedRecvs] = {};  // a grouped receive writes one size per receive
    ncclResult_t r = net_->test(req, done, s);
    for (int i = 0; sizes && i < n && i < net_client::kMaxGroupedRecvs; ++i)
      sizes[i] = s[i] < 0 ? 0 : static_cast<size_t>(s[i]);
    return r;
  }
  ncclResult_t close_send(void* c) override { return net_->close_send(c); }
  ncclResult_t close_recv(void* c) override { return net_->close_recv(c); }
  ncclResult_t close_listen(void* c) override { return net_->close_listen(c); }
  bool has(InnerEntry e) const override {
    switch (e) {
      case InnerEntry::kGetDeviceMr:
        return net_->has(net_client::Entry::kGetDeviceMr);
      case InnerEntry::kIrecvConsumed:
        return net_->has(net_client::Entry::kIrecvConsumed);
      case InnerEntry::kMakeVDevice:
        return net_->has(net_client::Entry::kMakeVDevice);
      case InnerEntry::kSetNetAttr:
        return net_->has(net_client::Entry::kSetNetAttr);
    }
    return false;
  }
  ncclResult_t set_net_attr(ncclNetAttr_v12_t* attr) override { return net_->set_net_attr(ctx_, attr); }
  ncclResult_t make_vdevice(int* d, ncclNetVDeviceProps_v12_t* props) override {
    return net_->make_vdevice(d, props);
  }

 private:
  std::unique_ptr<net_client::Net> net_;
  std::string opened_;
  void* ctx_ = nullptr;
};

}  // namespace

std::unique_ptr<InnerNet> open_inner_net(const std::string& name, std::string* error) {
  std::string opened;
  std::unique_ptr<net_client::Net> net = net_client::load(name, error, net_client::kNewestVersion, &opened);
  if (!net) return nullptr;  // the library, if it opened, stays loaded: nothing of it ran
  return std::unique_ptr<InnerNet>(new ClientInner(std::move(net), opened));
}

}  // namespace net
}  // namespace zipccl
