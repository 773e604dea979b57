// libibverbs through dlopen, port discovery and the verbs Fabric (see rdma_verbs.h).
#include "rdma/rdma_verbs.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>

#include "common/log.h"
#include "common/settings.h"
#include "rdma/rdma_select.h"
#include "rdma/rdma_transport.h"

namespace zipccl {
namespace net {
namespace {

// Versioned lookups first (the library exports IBVERBS_1.0 compat versions of many functions with
// other layouts), the default version otherwise.
template <typename F>
bool resolve(void* lib, const char* name, const char* version, F* out) {
  void* p = dlvsym(lib, name, version);
  if (!p) p = dlsym(lib, name);
  *out = reinterpret_cast<F>(p);
  return p != nullptr;
}

IbvApi g_api;
const char* g_api_error = nullptr;

void load_api() {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    g_api_error = "libibverbs.so.1 not found";
    return;
  }
  IbvApi& a = g_api;
  bool ok = resolve(lib, "ibv_get_device_list", "IBVERBS_1.1", &a.get_device_list) &&
            resolve(lib, "ibv_free_device_list", "IBVERBS_1.1", &a.free_device_list) &&
            resolve(lib, "ibv_get_device_name", "IBVERBS_1.1", &a.get_device_name) &&
            resolve(lib, "ibv_get_device_guid", "IBVERBS_1.1", &a.get_device_guid) &&
            resolve(lib, "ibv_open_device", "IBVERBS_1.1", &a.open_device) &&
            resolve(lib, "ibv_close_device", "IBVERBS_1.1", &a.close_device) &&
            resolve(lib, "ibv_query_device", "IBVERBS_1.1", &a.query_device) &&
            resolve(lib, "ibv_query_port", "IBVERBS_1.1", &a.query_port) &&
            resolve(lib, "ibv_query_gid", "IBVERBS_1.1", &a.query_gid) &&
            resolve(lib, "ibv_alloc_pd", "IBVERBS_1.1", &a.alloc_pd) &&
            resolve(lib, "ibv_dealloc_pd", "IBVERBS_1.1", &a.dealloc_pd) &&
            resolve(lib, "ibv_reg_mr", "IBVERBS_1.1", &a.reg_mr) &&
            resolve(lib, "ibv_dereg_mr", "IBVERBS_1.1", &a.dereg_mr) &&
            resolve(lib, "ibv_create_cq", "IBVERBS_1.1", &a.create_cq) &&
            resolve(lib, "ibv_destroy_cq", "IBVERBS_1.1", &a.destroy_cq) &&
            resolve(lib, "ibv_create_qp", "IBVERBS_1.1", &a.create_qp) &&
            resolve(lib, "ibv_destroy_qp", "IBVERBS_1.1", &a.destroy_qp) &&
            resolve(lib, "ibv_modify_qp", "IBVERBS_1.1", &a.modify_qp) &&
            resolve(lib, "ibv_wc_status_str", "IBVERBS_1.1", &a.wc_status_str);
  if (!ok) {
    g_api_error = "libibverbs.so.1 lacks a needed function";
    dlclose(lib);
    return;
  }
  resolve(lib, "ibv_reg_dmabuf_mr", "IBVERBS_1.12", &a.reg_dmabuf_mr);  // optional
  // The library stays loaded for the life of the process (ports and QPs live that long).
}

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

int gid_type(const std::string& dev, int port, int index) {
  std::string t = read_line("/sys/class/infiniband/" + dev + "/ports/" + std::to_string(port) +
                            "/gid_attrs/types/" + std::to_string(index));
  if (t.find("v2") != std::string::npos) return kGidRoceV2;
  if (!t.empty()) return kGidRoceV1;
  return kGidUnknown;
}

bool open_port(const IbvApi& api, ibv_context* ctx, const std::string& dev, int port, const ibv_port_attr& pa,
               int gid_index_setting, IbPort* out) {
  out->ethernet = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
  int n = pa.gid_tbl_len > 0 ? (pa.gid_tbl_len < 256 ? pa.gid_tbl_len : 256) : 0;
  std::vector<GidEntry> table(n);
  for (int i = 0; i < n; ++i) {
    ibv_gid g{};
    if (api.query_gid(ctx, static_cast<uint8_t>(port), i, &g) != 0) std::memset(&g, 0, sizeof g);
    std::memcpy(table[i].raw, g.raw, 16);
    table[i].type = out->ethernet ? gid_type(dev, port, i) : kGidRoceV1;
  }
  const char* why = nullptr;
  int idx = choose_gid(table, out->ethernet, gid_index_setting, &why);
  if (idx < 0) {
    ZIPCCL_WARN("RDMA: skipping %s port %d: %s", dev.c_str(), port, why);
    return false;
  }
  out->gid_index = idx;
  std::memcpy(out->gid.raw, table[idx].raw, 16);
  out->lid = pa.lid;
  out->mtu = pa.active_mtu;
  out->speed_mbps = ib_speed_mbps(pa.active_speed, pa.active_width);
  return true;
}

}  // namespace

// A library table loaded once by `load`, which leaves `error` null on success.
template <class Api>
const Api* load_once(std::once_flag* once, void (*load)(), const char* const* error, const Api* api,
                     const char** why) {
  std::call_once(*once, load);
  if (*error) {
    *why = *error;
    return nullptr;
  }
  return api;
}

const IbvApi* ibv_api(const char** why) {
  static std::once_flag once;
  return load_once(&once, load_api, &g_api_error, &g_api, why);
}

namespace {
CudaDriverApi g_cuda{};
const char* g_cuda_error = nullptr;

void load_cuda() {
  // The CUDA runtime already loaded it in a GPU process; RTLD_LOCAL keeps our lookups private.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    g_cuda_error = "libcuda.so.1 not found";
    return;
  }
  g_cuda.mem_get_handle_for_address_range =
      reinterpret_cast<decltype(g_cuda.mem_get_handle_for_address_range)>(
          dlsym(lib, "cuMemGetHandleForAddressRange"));
  g_cuda.get_error_string =
      reinterpret_cast<decltype(g_cuda.get_error_string)>(dlsym(lib, "cuGetErrorString"));
  if (!g_cuda.mem_get_handle_for_address_range) {
    g_cuda_error = "libcuda.so.1 has no cuMemGetHandleForAddressRange (CUDA < 11.7)";
    dlclose(lib);
  }
}
}  // namespace

const CudaDriverApi* cuda_driver_api(const char** why) {
  static std::once_flag once;
  return load_once(&once, load_cuda, &g_cuda_error, &g_cuda, why);
}

std::vector<IbPort> discover_ports(const IbvApi& api, const std::string& hca_spec, int gid_index) {
  std::vector<IbPort> ports;
  HcaFilter filter = parse_hca_filter(hca_spec);
  int ndev = 0;
  ibv_device** devs = api.get_device_list(&ndev);
  if (!devs) return ports;
  for (int d = 0; d < ndev; ++d) {
    std::string name = api.get_device_name(devs[d]);
    ibv_context* ctx = api.open_device(devs[d]);
    if (!ctx) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "RDMA: cannot open %s; skipping it", name.c_str());
      continue;
    }
    ibv_device_attr da{};
    bool used = false;
    ibv_pd* pd = nullptr;
    if (api.query_device(ctx, &da) == 0) {
      for (int p = 1; p <= da.phys_port_cnt; ++p) {
        ibv_port_attr pa{};
        if (api.query_port(ctx, static_cast<uint8_t>(p), &pa) != 0 || pa.state != IBV_PORT_ACTIVE) continue;
        if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND && pa.link_layer != IBV_LINK_LAYER_ETHERNET) continue;
        if (!hca_selected(filter, name, p)) continue;
        IbPort port;
        if (!open_port(api, ctx, name, p, pa, gid_index, &port)) continue;
        if (!pd) pd = api.alloc_pd(ctx);
        if (!pd) {
          ZIPCCL_WARN("RDMA: cannot allocate a protection domain on %s", name.c_str());
          break;
        }
        port.name = name + ":" + std::to_string(p);
        port.dev_name = name;
        port.port = p;
        port.ctx = ctx;
        port.pd = pd;
        char path[PATH_MAX];
        std::string link = "/sys/class/infiniband/" + name + "/device";
        port.pci_path = realpath(link.c_str(), path) ? path : "";
        port.guid = api.get_device_guid(devs[d]);
        ports.push_back(port);
        used = true;
      }
    }
    if (!used) api.close_device(ctx);  // ports in use keep their device open for the process
  }
  api.free_device_list(devs);
  return ports;
}

QpTransition rtr_transition(const IbPort& port, const QpEndpoint& remote, uint32_t qpn, const IbQpSettings& s) {
  QpTransition t{};
  ibv_qp_attr& a = t.attr;
  a.qp_state = IBV_QPS_RTR;
  uint32_t mtu = static_cast<uint32_t>(port.mtu);
  a.path_mtu = static_cast<ibv_mtu>(remote.mtu < mtu ? remote.mtu : mtu);
  a.dest_qp_num = qpn;
  a.rq_psn = remote.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = static_cast<uint8_t>(port.port);
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.sl = static_cast<uint8_t>(s.sl);
  if (port.ethernet || remote.lid == 0) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, 16);
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(port.gid_index);
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = static_cast<uint8_t>(s.tc);
  }
  t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

QpTransition rts_transition(uint32_t psn, const IbQpSettings& s) {
  QpTransition t{};
  ibv_qp_attr& a = t.attr;
  a.qp_state = IBV_QPS_RTS;
  a.timeout = static_cast<uint8_t>(s.timeout);  // 4.096 us * 2^timeout per try
  a.retry_cnt = static_cast<uint8_t>(s.retry_cnt);
  a.rnr_retry = 7;
  a.sq_psn = psn;
  a.max_rd_atomic = 1;
  t.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

ncclResult_t VerbsFabric::new_qp(int send_wr, int recv_wr, ibv_qp** out) {
  *out = nullptr;
  ibv_qp_init_attr ia{};
  ia.send_cq = cq_;
  ia.recv_cq = cq_;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = send_wr;
  ia.cap.max_recv_wr = recv_wr;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.sq_sig_all = 0;
  ibv_qp* qp = api_->create_qp(port_->pd, &ia);
  if (!qp) {
    ZIPCCL_WARN("RDMA: ibv_create_qp on %s failed: %s", port_->name.c_str(), std::strerror(errno));
    return ncclSystemError;
  }
  *out = qp;
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = static_cast<uint8_t>(port_->port);
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  int rc = api_->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) {
    ZIPCCL_WARN("RDMA: QP to INIT on %s failed: %s", port_->name.c_str(), std::strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t VerbsFabric::create(const IbvApi* api, const IbPort* port, int nqps, int depth, int alive_fd,
                                 const VerbsOptions& opt, std::unique_ptr<VerbsFabric>* out) {
  std::unique_ptr<VerbsFabric> f(new VerbsFabric(api, port, opt));  // takes alive_fd only on success
  if (nqps < 1 || nqps > QpEndpoint::kMaxQps) return ncclInternalError;
  std::string bad;
  if (!ib_qp_settings_valid(opt.qp, &bad)) {
    ZIPCCL_WARN("RDMA: %s", bad.c_str());
    return ncclInvalidUsage;
  }
  // Per QP: a header write and a payload write per message in the window, and the clear-to-sends;
  // plus the flush QP's reads.
  int send_wr = 3 * depth + 8, recv_wr = depth + 8;
  f->cq_ = api->create_cq(port->ctx, nqps * (send_wr + recv_wr) + kMaxFlushReads, nullptr, nullptr, 0);
  if (!f->cq_) {
    ZIPCCL_WARN("RDMA: ibv_create_cq on %s failed: %s", port->name.c_str(), std::strerror(errno));
    return ncclSystemError;
  }
  std::random_device rd;
  f->psn_ = rd() & 0xffffff;
  for (int i = 0; i < nqps; ++i) {
    ibv_qp* qp = nullptr;
    ncclResult_t r = f->new_qp(send_wr, recv_wr, &qp);
    if (qp) f->qps_.push_back(qp);
    if (r != ncclSuccess) return r;
  }
  f->alive_fd_ = alive_fd;
  *out = std::move(f);
  return ncclSuccess;
}

VerbsFabric::~VerbsFabric() {
  for (ibv_qp* qp : qps_) api_->destroy_qp(qp);
  if (flush_qp_) api_->destroy_qp(flush_qp_);
  if (cq_) api_->destroy_cq(cq_);
  if (alive_fd_ >= 0) close(alive_fd_);
}

QpEndpoint VerbsFabric::local() const {
  QpEndpoint e{};
  for (size_t i = 0; i < qps_.size(); ++i) e.qpn[i] = qps_[i]->qp_num;
  e.nqps = static_cast<uint32_t>(qps_.size());
  e.psn = psn_;
  e.mtu = port_->mtu;
  e.lid = port_->lid;
  std::memcpy(e.gid, port_->gid.raw, 16);
  return e;
}

ncclResult_t VerbsFabric::connect_qp(ibv_qp* qp, const QpEndpoint& remote, uint32_t qpn, const char* what) {
  QpTransition t = rtr_transition(*port_, remote, qpn, opt_.qp);
  int rc = api_->modify_qp(qp, &t.attr, t.mask);
  if (rc == 0) {
    t = rts_transition(psn_, opt_.qp);
    rc = api_->modify_qp(qp, &t.attr, t.mask);
  }
  if (rc != 0) {
    ZIPCCL_WARN(
        "RDMA: connecting %s on %s failed: %s (NCCL_IB_SL=%d NCCL_IB_TC=%d NCCL_IB_TIMEOUT=%d "
        "NCCL_IB_RETRY_CNT=%d)",
        what, port_->name.c_str(), std::strerror(rc), opt_.qp.sl, opt_.qp.tc, opt_.qp.timeout,
        opt_.qp.retry_cnt);
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t VerbsFabric::connect(const QpEndpoint& remote) {
  if (remote.nqps != qps_.size()) {
    ZIPCCL_WARN("RDMA: the peer has %u queue pairs, we have %zu", remote.nqps, qps_.size());
    return ncclSystemError;
  }
  for (size_t i = 0; i < qps_.size(); ++i) {
    char what[32];
    std::snprintf(what, sizeof what, "QP %zu", i);
    ZIPCCL_CHECK(connect_qp(qps_[i], remote, remote.qpn[i], what));
  }
  return ncclSuccess;
}

namespace {
constexpr int kMrAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
}  // namespace

ncclResult_t VerbsFabric::reg(void* addr, size_t len, MemRegion* mr) {
  MemDesc d;
  d.data = addr;
  d.size = len;
  return reg_mem(d, mr);
}

const CudaDriverApi* VerbsFabric::cuda() {
  if (!cuda_loaded_ && !opt_.cuda) {
    const char* why = nullptr;
    opt_.cuda = cuda_driver_api(&why);
    if (!opt_.cuda) ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "RDMA: no dma-buf export from the CUDA driver: %s", why);
  }
  cuda_loaded_ = true;
  return opt_.cuda;
}

ncclResult_t VerbsFabric::reg_mem(const MemDesc& d, MemRegion* mr) {
  RegCaps caps;
  caps.reg_dmabuf_mr = api_->reg_dmabuf_mr != nullptr;
  const CudaDriverApi* cu = nullptr;
  if (d.device && d.dmabuf_fd < 0 && caps.reg_dmabuf_mr) {
    cu = cuda();
    caps.cuda_export = cu && cu->mem_get_handle_for_address_range;
  }
  RegPath paths[3];
  int n = reg_paths(d, caps, paths);
  std::string failures;
  for (int i = 0; i < n; ++i) {
    ibv_mr* m = nullptr;
    std::string err;
    errno = 0;
    switch (paths[i]) {
      case RegPath::kHost:
      case RegPath::kPeerMem:
        m = api_->reg_mr(port_->pd, d.data, d.size, kMrAccess);
        if (!m) err = std::strerror(errno ? errno : EINVAL);
        break;
      case RegPath::kDmaBufFd:
        m = api_->reg_dmabuf_mr(port_->pd, d.dmabuf_offset, d.size, reinterpret_cast<uintptr_t>(d.data),
                                d.dmabuf_fd, kMrAccess);
        if (!m) err = std::strerror(errno ? errno : EINVAL);
        break;
      case RegPath::kDmaBufExport: {
        int fd = -1;
        int cr = cu->mem_get_handle_for_address_range(&fd, reinterpret_cast<uintptr_t>(d.data), d.size,
                                                      kCuMemRangeHandleTypeDmaBufFd, 0);
        if (cr != 0 || fd < 0) {
          const char* text = nullptr;
          if (cu->get_error_string) cu->get_error_string(cr, &text);
          err = "cuMemGetHandleForAddressRange failed: CUDA error " + std::to_string(cr) +
                (text ? std::string(" (") + text + ")" : std::string());
          break;
        }
        m = api_->reg_dmabuf_mr(port_->pd, 0, d.size, reinterpret_cast<uintptr_t>(d.data), fd, kMrAccess);
        if (!m) err = std::strerror(errno ? errno : EINVAL);
        close(fd);  // the MR holds its own reference to the dma-buf
        break;
      }
    }
    if (m) {
      if (i > 0) {
        ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "RDMA: registered %zu bytes at %p on %s with %s (after: %s)", d.size,
                    d.data, port_->name.c_str(), reg_path_name(paths[i]), failures.c_str());
      }
      *mr = MemRegion{d.data, d.size, m->lkey, m->rkey, m};
      return ncclSuccess;
    }
    if (!failures.empty()) failures += "; ";
    failures += std::string(reg_path_name(paths[i])) + ": " + err;
  }
  ZIPCCL_WARN("RDMA: cannot register %zu bytes of %s memory at %p on %s: %s%s", d.size,
              d.device ? "CUDA" : "host", d.data, port_->name.c_str(), failures.c_str(),
              d.device ? " (GPUDirect RDMA needs dma-buf support - Linux >= 5.12, rdma-core >= 34, "
                         "CUDA >= 11.7 - or the nvidia-peermem kernel module)"
                       : " (check the memlock limit, ulimit -l)");
  return ncclSystemError;
}

void VerbsFabric::dereg(MemRegion* mr) {
  if (mr->handle) api_->dereg_mr(static_cast<ibv_mr*>(mr->handle));
  *mr = MemRegion{};
}

ncclResult_t VerbsFabric::post(ibv_qp* qp, const char* what, ibv_send_wr* wr) {
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp, wr, &bad);
  if (rc != 0) {
    ZIPCCL_WARN("RDMA: ibv_post_send on %s %s failed: %s", port_->name.c_str(), what, std::strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t VerbsFabric::write(int qp, uint64_t wr_id, const void* src, uint32_t lkey, size_t len,
                                uint64_t raddr, uint32_t rkey, bool with_imm, uint32_t imm, bool signaled) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(src), static_cast<uint32_t>(len), lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = len ? &sge : nullptr;
  wr.num_sge = len ? 1 : 0;
  wr.opcode = with_imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  if (qp < 0 || qp >= qp_count()) return ncclInternalError;
  return post(qps_[qp], "a data QP", &wr);
}

ncclResult_t VerbsFabric::post_read(ibv_qp* qp, const char* what, uint64_t wr_id, void* dst, uint32_t lkey,
                                    size_t len, uint64_t raddr, uint32_t rkey) {
  ibv_sge sge{reinterpret_cast<uintptr_t>(dst), static_cast<uint32_t>(len), lkey};
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return post(qp, what, &wr);
}

ncclResult_t VerbsFabric::read(int qp, uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t raddr,
                               uint32_t rkey) {
  if (qp < 0 || qp >= qp_count()) return ncclInternalError;
  return post_read(qps_[qp], "a data QP", wr_id, dst, lkey, len, raddr, rkey);
}

ncclResult_t VerbsFabric::flush_read(uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t addr,
                                     uint32_t rkey) {
  if (!flush_qp_) {
    ibv_qp* qp = nullptr;
    ncclResult_t r = new_qp(kMaxFlushReads, 1, &qp);
    if (r == ncclSuccess) r = connect_qp(qp, local(), qp->qp_num, "the flush QP (connected to itself)");
    if (r != ncclSuccess) {
      if (qp) api_->destroy_qp(qp);
      return r;
    }
    flush_qp_ = qp;
  }
  return post_read(flush_qp_, "the flush QP", wr_id, dst, lkey, len, addr, rkey);
}

ncclResult_t VerbsFabric::post_recv(int qp, uint64_t wr_id) {
  if (qp < 0 || qp >= qp_count()) return ncclInternalError;
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_recv(qps_[qp], &wr, &bad);
  if (rc != 0) {
    ZIPCCL_WARN("RDMA: ibv_post_recv on %s QP %d failed: %s", port_->name.c_str(), qp, std::strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t VerbsFabric::poll(Completion* out, int max, int* n) {
  *n = 0;
  ibv_wc wc[32];
  int want = max < 32 ? max : 32;
  int got = ibv_poll_cq(cq_, want, wc);
  if (got < 0) {
    ZIPCCL_WARN("RDMA: ibv_poll_cq on %s failed", port_->name.c_str());
    return ncclSystemError;
  }
  for (int i = 0; i < got; ++i) {
    Completion& c = out[i];
    c = Completion{};
    c.wr_id = wc[i].wr_id;
    c.ok = wc[i].status == IBV_WC_SUCCESS;
    c.status = api_->wc_status_str(wc[i].status);
    c.is_recv = c.ok && wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM;
    c.imm = ntohl(wc[i].imm_data);
    c.qp = -1;
    for (size_t q = 0; q < qps_.size(); ++q) {
      if (qps_[q]->qp_num == wc[i].qp_num) c.qp = static_cast<int>(q);
    }
  }
  *n = got;
  return ncclSuccess;
}

bool VerbsFabric::peer_alive(const char** why) {
  return alive_fd_ < 0 || side_channel_alive(alive_fd_, why);
}

namespace {

class VerbsPort final : public RdmaPort {
 public:
  VerbsPort(const IbvApi* api, const IbPort& port) : api_(api), port_(port) {}
  std::string name() const override { return port_.name; }
  std::string pci_path() const override { return port_.pci_path; }
  int speed_mbps() const override { return port_.speed_mbps; }
  uint64_t guid() const override { return port_.guid; }
  ncclResult_t make_fabric(int nqps, int depth, int alive_fd,
                           std::unique_ptr<ConnectableFabric>* out) override {
    std::unique_ptr<VerbsFabric> f;
    VerbsOptions opt;
    const Settings& st = settings();
    opt.qp.tc = st.ib_tc;
    opt.qp.sl = st.ib_sl;
    opt.qp.timeout = st.ib_timeout;
    opt.qp.retry_cnt = st.ib_retry_cnt;
    ZIPCCL_CHECK(VerbsFabric::create(api_, &port_, nqps, depth, alive_fd, opt, &f));
    *out = std::move(f);
    return ncclSuccess;
  }

 private:
  const IbvApi* api_;
  IbPort port_;
};

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  return (end && !*end && x >= 0 && x < 256) ? static_cast<int>(x) : dflt;
}

}  // namespace

Transport* rdma_transport() {
  static Transport* instance = []() -> Transport* {
    const char* why = nullptr;
    const IbvApi* api = ibv_api(&why);
    std::vector<IbPort> found;
    const char* hca = std::getenv("NCCL_IB_HCA");
    if (!api) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "RDMA transport unavailable: %s", why);
    } else {
      found = discover_ports(*api, hca ? hca : "", env_int("NCCL_IB_GID_INDEX", -1));
      if (found.empty()) {
        ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "RDMA transport: no active port (NCCL_IB_HCA='%s')",
                    hca ? hca : "");
      }
    }
    std::vector<SocketIface> ifaces;
    if (!found.empty()) {
      const char* spec = std::getenv("NCCL_SOCKET_IFNAME");
      bool ok = true;
      ifaces = find_interfaces(spec ? spec : "", parse_family(std::getenv("NCCL_SOCKET_FAMILY"), &ok));
      if (ifaces.empty()) {
        ZIPCCL_WARN(
            "RDMA transport: no IP interface for the connection side channel (NCCL_SOCKET_IFNAME='%s')",
            spec ? spec : "");
        found.clear();
      }
    }
    std::vector<std::unique_ptr<RdmaPort>> ports;
    for (const IbPort& p : found) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "RDMA: %s %s, %d Mbit/s, GID index %d, %s", p.name.c_str(),
                  p.ethernet ? "RoCE" : "InfiniBand", p.speed_mbps, p.gid_index, p.pci_path.c_str());
      ports.emplace_back(new VerbsPort(api, p));
    }
    return make_rdma_transport(std::move(ports), std::move(ifaces));
  }();
  return instance;
}

}  // namespace net
}  // namespace zipccl
