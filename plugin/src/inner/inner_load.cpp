// Loading the inner plugin: NCCL's name resolution, the table, and the InnerNet adapter over it.
#include <dlfcn.h>

#include <cstring>

#include "../../nccl/net_v11.h"
#include "inner_net.h"

namespace zipccl {
namespace net {
namespace {

// dladdr base of this object, to recognise ZIPCCL_NET_INNER naming the library we run in.
void* own_base() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_base), &info)) return nullptr;
  return info.dli_fbase;
}

class InnerV11 final : public InnerNet {
 public:
  InnerV11(void* lib, const ncclNet_v11_t* t, std::string opened) : lib_(lib), t_(t), opened_(std::move(opened)) {}
  const char* name() const override { return t_->name ? t_->name : "(unnamed)"; }
  int version() const override { return 11; }
  const std::string& library() const override { return opened_; }
  bool is_self() const override {
    Dl_info info{};
    return dladdr(const_cast<ncclNet_v11_t*>(t_), &info) && info.dli_fbase == own_base();
  }
  ncclResult_t init(ncclDebugLogger_t logger) override {
    ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    return t_->init(&ctx_, 0, &cfg, logger, nullptr);
  }
  ncclResult_t finalize() override { return t_->finalize ? t_->finalize(ctx_) : ncclSuccess; }
  ncclResult_t devices(int* n) override { return t_->devices(n); }
  ncclResult_t properties(int dev, InnerProps* p) override {
    ncclNetProperties_v11_t q;
    std::memset(&q, 0, sizeof q);
    ncclResult_t r = t_->getProperties(dev, &q);
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
    return r;
  }
  ncclResult_t listen(int dev, void* handle, void** l) override { return t_->listen(ctx_, dev, handle, l); }
  ncclResult_t connect(int dev, void* handle, void** sc) override {
    ncclNetDeviceHandle_v11_t* dh = nullptr;
    return t_->connect(ctx_, dev, handle, sc, &dh);
  }
  ncclResult_t accept(void* l, void** rc) override {
    ncclNetDeviceHandle_v11_t* dh = nullptr;
    return t_->accept(l, rc, &dh);
  }
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) override {
    return t_->regMr(comm, data, size, type, mh);
  }
  ncclResult_t reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                             void** mh) override {
    if (fd < 0) return reg_mr(comm, data, size, type, mh);
    if (!t_->regMrDmaBuf) return ncclInternalError;
    return t_->regMrDmaBuf(comm, data, size, type, offset, fd, mh);
  }
  ncclResult_t dereg_mr(void* comm, void* mh) override { return t_->deregMr(comm, mh); }
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) override {
    return t_->isend(sc, data, size, tag, mh, nullptr, req);
  }
  ncclResult_t irecv(void* rc, int n, void** data, size_t* sizes, int* tags, void** mhs, void** req) override {
    void* ph[8] = {};
    return t_->irecv(rc, n, data, sizes, tags, mhs, ph, req);
  }
  ncclResult_t iflush(void* rc, int n, void** data, int* sizes, void** mhs, void** req) override {
    *req = nullptr;
    return t_->iflush ? t_->iflush(rc, n, data, sizes, mhs, req) : ncclSuccess;
  }
  ncclResult_t test(void* req, int* done, size_t* size) override {
    int s = 0;
    ncclResult_t r = t_->test(req, done, &s);
    if (size) *size = s < 0 ? 0 : static_cast<size_t>(s);
    return r;
  }
  ncclResult_t close_send(void* c) override { return t_->closeSend(c); }
  ncclResult_t close_recv(void* c) override { return t_->closeRecv(c); }
  ncclResult_t close_listen(void* c) override { return t_->closeListen(c); }

 private:
  void* lib_;
  const ncclNet_v11_t* t_;
  std::string opened_;
  void* ctx_ = nullptr;
};

}  // namespace

std::unique_ptr<InnerNet> open_inner_net(const std::string& name, std::string* error) {
  std::string candidates[2] = {name, ""};
  bool bare = name.find('/') == std::string::npos &&
              !(name.size() > 6 && name.compare(0, 3, "lib") == 0 && name.compare(name.size() - 3, 3, ".so") == 0);
  if (bare) candidates[1] = "libnccl-net-" + name + ".so";
  std::string why;
  for (const std::string& c : candidates) {
    if (c.empty()) continue;
    void* lib = dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* e = dlerror();
      if (why.empty() || (e && !std::strstr(e, "No such file"))) why = e ? e : c;
      continue;
    }
    auto* t = static_cast<const ncclNet_v11_t*>(dlsym(lib, "ncclNetPlugin_v11"));
    if (!t) {
      *error = "cannot use NCCL net plugin " + c + ": it exports no ncclNetPlugin_v11 table";
      return nullptr;  // stays loaded: a plugin's threads may run its code
    }
    return std::unique_ptr<InnerNet>(new InnerV11(lib, t, c));
  }
  *error = "cannot load NCCL net plugin " + name + ": " + why;
  return nullptr;
}

}  // namespace net
}  // namespace zipccl
