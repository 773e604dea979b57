// The verbs layer (rdma_verbs.cpp) against fake libibverbs and CUDA driver tables (no RDMA device or
// GPU here): which registration path a buffer takes and the fallbacks when one fails, the WARN when
// none works; the queue pair attributes ibv_modify_qp receives (NCCL_IB_TC/SL/TIMEOUT/RETRY_CNT); the
// flush queue pair connected to itself and the RDMA read posted on it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "common/log.h"
#include "rdma/rdma_proto.h"
#include "rdma/rdma_verbs.h"

using namespace zipccl::net;

namespace {

struct Modify {
  uint32_t qpn;
  ibv_qp_attr attr;
  int mask;
};

struct Call {
  std::string fn;  // "reg_mr", "reg_dmabuf_mr", "export"
  uint64_t addr = 0, len = 0, offset = 0;
  int fd = -1;
};

// The fake verbs provider and CUDA driver: records every call, fails on request.
struct Fake {
  ibv_context ctx{};
  ibv_pd pd{};
  ibv_cq cq{};
  std::vector<std::unique_ptr<ibv_qp>> qps;
  std::vector<std::unique_ptr<ibv_mr>> mrs;
  std::vector<Modify> modifies;
  std::vector<Call> calls;
  std::vector<ibv_send_wr> sends;
  std::vector<ibv_sge> send_sges;
  std::vector<uint32_t> send_qpn;
  std::deque<ibv_wc> cq_entries;
  bool reg_mr_fails = false;
  bool dmabuf_fails = false;
  int export_result = 0;  // CUresult of cuMemGetHandleForAddressRange
  int exported_fd = -1;
  int modify_fails_on = -1;  // index of the modify_qp call that fails
  uint32_t next_qpn = 100;
  int destroyed_qps = 0;
  std::vector<std::string> log;
};
Fake* g = nullptr;

void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (g) g->log.push_back(std::string(level == NCCL_LOG_WARN ? "WARN " : "INFO ") + buf);
}

ibv_cq* f_create_cq(ibv_context* ctx, int, void*, ibv_comp_channel*, int) {
  g->cq.context = ctx;
  return &g->cq;
}
int f_destroy_cq(ibv_cq*) { return 0; }
ibv_qp* f_create_qp(ibv_pd*, ibv_qp_init_attr*) {
  g->qps.emplace_back(new ibv_qp{});
  ibv_qp* qp = g->qps.back().get();
  qp->context = &g->ctx;
  qp->qp_num = g->next_qpn++;
  return qp;
}
int f_destroy_qp(ibv_qp*) {
  ++g->destroyed_qps;
  return 0;
}
int f_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  int index = static_cast<int>(g->modifies.size());
  g->modifies.push_back(Modify{qp->qp_num, *a, mask});
  return index == g->modify_fails_on ? EINVAL : 0;
}
ibv_mr* new_mr() {
  g->mrs.emplace_back(new ibv_mr{});
  ibv_mr* m = g->mrs.back().get();
  m->lkey = 1000 + static_cast<uint32_t>(g->mrs.size());
  m->rkey = 2000 + static_cast<uint32_t>(g->mrs.size());
  return m;
}
ibv_mr* f_reg_mr(ibv_pd*, void* addr, size_t len, int) {
  g->calls.push_back(Call{"reg_mr", reinterpret_cast<uintptr_t>(addr), len});
  if (g->reg_mr_fails) {
    errno = EFAULT;
    return nullptr;
  }
  return new_mr();
}
ibv_mr* f_reg_dmabuf_mr(ibv_pd*, uint64_t offset, size_t len, uint64_t iova, int fd, int) {
  g->calls.push_back(Call{"reg_dmabuf_mr", iova, len, offset, fd});
  if (g->dmabuf_fails) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return new_mr();
}
int f_dereg_mr(ibv_mr*) { return 0; }
const char* f_wc_status_str(ibv_wc_status s) { return s == IBV_WC_SUCCESS ? "success" : "remote access error"; }
int f_post_send(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  *bad = nullptr;
  g->sends.push_back(*wr);
  g->send_sges.push_back(wr->num_sge ? wr->sg_list[0] : ibv_sge{});
  g->send_qpn.push_back(qp->qp_num);
  return 0;
}
int f_post_recv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr** bad) {
  *bad = nullptr;
  return 0;
}
int f_poll_cq(ibv_cq*, int n, ibv_wc* wc) {
  int k = 0;
  while (k < n && !g->cq_entries.empty()) {
    wc[k++] = g->cq_entries.front();
    g->cq_entries.pop_front();
  }
  return k;
}
int f_export(void* handle, unsigned long long dptr, size_t size, int type, unsigned long long flags) {
  Call c{"export", dptr, size};
  c.fd = type;
  c.offset = flags;
  g->calls.push_back(c);
  if (g->export_result != 0) return g->export_result;
  *static_cast<int*>(handle) = g->exported_fd;
  return 0;
}
int f_error_string(int, const char** text) {
  *text = "operation not supported";
  return 0;
}

class RdmaVerbsFake : public ::testing::Test {
 protected:
  void SetUp() override {
    g = &fake_;
    set_logger(logger);
    api_ = IbvApi{};
    api_.create_cq = f_create_cq;
    api_.destroy_cq = f_destroy_cq;
    api_.create_qp = f_create_qp;
    api_.destroy_qp = f_destroy_qp;
    api_.modify_qp = f_modify_qp;
    api_.reg_mr = f_reg_mr;
    api_.dereg_mr = f_dereg_mr;
    api_.reg_dmabuf_mr = f_reg_dmabuf_mr;
    api_.wc_status_str = f_wc_status_str;
    fake_.ctx.ops.post_send = f_post_send;
    fake_.ctx.ops.post_recv = f_post_recv;
    fake_.ctx.ops.poll_cq = f_poll_cq;
    cuda_.mem_get_handle_for_address_range = f_export;
    cuda_.get_error_string = f_error_string;
    port_.name = "fake0:1";
    port_.dev_name = "fake0";
    port_.port = 1;
    port_.ctx = &fake_.ctx;
    port_.pd = &fake_.pd;
    port_.ethernet = true;
    port_.gid_index = 3;
    port_.lid = 0;
    port_.mtu = IBV_MTU_4096;
    for (int i = 0; i < 16; ++i) port_.gid.raw[i] = static_cast<uint8_t>(0xa0 + i);
    opt_.cuda = &cuda_;
  }
  void TearDown() override {
    set_logger(nullptr);
    g = nullptr;
  }
  std::unique_ptr<VerbsFabric> fabric(int nqps = 2) {
    std::unique_ptr<VerbsFabric> f;
    EXPECT_EQ(VerbsFabric::create(&api_, &port_, nqps, 16, -1, opt_, &f), ncclSuccess);
    return f;
  }
  bool warned(const std::string& what) const {
    for (const std::string& l : fake_.log) {
      if (l.rfind("WARN ", 0) == 0 && l.find(what) != std::string::npos) return true;
    }
    return false;
  }
  static MemDesc device(void* p, size_t n, int fd = -1, uint64_t offset = 0) {
    MemDesc d;
    d.data = p;
    d.size = n;
    d.device = true;
    d.dmabuf_fd = fd;
    d.dmabuf_offset = offset;
    return d;
  }

  Fake fake_;
  IbvApi api_{};
  CudaDriverApi cuda_{};
  IbPort port_;
  VerbsOptions opt_;
  alignas(4096) char buf_[4 * 4096];
};

// ---- registration ----

TEST_F(RdmaVerbsFake, HostMemoryIsIbvRegMr) {
  auto f = fabric();
  MemRegion mr;
  ASSERT_EQ(f->reg(buf_, 100, &mr), ncclSuccess);
  ASSERT_EQ(fake_.calls.size(), 1u);
  EXPECT_EQ(fake_.calls[0].fn, "reg_mr");
  EXPECT_EQ(mr.lkey, fake_.mrs[0]->lkey);
  EXPECT_EQ(mr.rkey, fake_.mrs[0]->rkey);
  f->dereg(&mr);
}

// regMrDmaBuf: NCCL's fd and offset go to ibv_reg_dmabuf_mr with the virtual address as iova; the
// CUDA driver is not asked.
TEST_F(RdmaVerbsFake, DeviceMemoryWithNcclsFdIsRegDmabufMr) {
  auto f = fabric();
  MemRegion mr;
  ASSERT_EQ(f->reg_mem(device(buf_, 8192, 42, 4096), &mr), ncclSuccess);
  ASSERT_EQ(fake_.calls.size(), 1u);
  const Call& c = fake_.calls[0];
  EXPECT_EQ(c.fn, "reg_dmabuf_mr");
  EXPECT_EQ(c.fd, 42);
  EXPECT_EQ(c.offset, 4096u);
  EXPECT_EQ(c.addr, reinterpret_cast<uintptr_t>(buf_));
  EXPECT_EQ(c.len, 8192u);
  EXPECT_EQ(mr.rkey, fake_.mrs[0]->rkey);
}

// No fd: the CUDA driver exports one for the range (type DMA_BUF_FD, flags 0); it is registered and
// then closed (the MR keeps its own reference).
TEST_F(RdmaVerbsFake, DeviceMemoryWithoutFdUsesTheDriversExport) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  close(p[1]);
  fake_.exported_fd = p[0];
  auto f = fabric();
  MemRegion mr;
  ASSERT_EQ(f->reg_mem(device(buf_, 4096), &mr), ncclSuccess);
  ASSERT_EQ(fake_.calls.size(), 2u);
  EXPECT_EQ(fake_.calls[0].fn, "export");
  EXPECT_EQ(fake_.calls[0].addr, reinterpret_cast<uintptr_t>(buf_));
  EXPECT_EQ(fake_.calls[0].len, 4096u);
  EXPECT_EQ(fake_.calls[0].fd, kCuMemRangeHandleTypeDmaBufFd);
  EXPECT_EQ(fake_.calls[0].offset, 0u);  // flags
  EXPECT_EQ(fake_.calls[1].fn, "reg_dmabuf_mr");
  EXPECT_EQ(fake_.calls[1].fd, p[0]);
  EXPECT_EQ(fake_.calls[1].offset, 0u);
  EXPECT_EQ(fake_.calls[1].addr, reinterpret_cast<uintptr_t>(buf_));
  errno = 0;
  EXPECT_EQ(fcntl(p[0], F_GETFD), -1) << "the exported fd is closed after the registration";
  EXPECT_EQ(errno, EBADF);
}

// The dma-buf paths fail (old kernel, no support): the device pointer goes to ibv_reg_mr
// (nvidia-peermem), with an INFO naming what failed first.
TEST_F(RdmaVerbsFake, FallsBackToPeerMemory) {
  fake_.export_result = 801;  // CUDA_ERROR_NOT_SUPPORTED
  auto f = fabric();
  MemRegion mr;
  ASSERT_EQ(f->reg_mem(device(buf_, 4096), &mr), ncclSuccess);
  ASSERT_EQ(fake_.calls.size(), 2u);
  EXPECT_EQ(fake_.calls[0].fn, "export");
  EXPECT_EQ(fake_.calls[1].fn, "reg_mr");
  EXPECT_EQ(fake_.calls[1].addr, reinterpret_cast<uintptr_t>(buf_));
  fake_.calls.clear();
  fake_.dmabuf_fails = true;
  ASSERT_EQ(f->reg_mem(device(buf_, 4096, 7, 0), &mr), ncclSuccess);
  ASSERT_EQ(fake_.calls.size(), 2u);
  EXPECT_EQ(fake_.calls[0].fn, "reg_dmabuf_mr");
  EXPECT_EQ(fake_.calls[1].fn, "reg_mr");
  bool info = false;
  for (const std::string& l : fake_.log) info |= l.find("nvidia-peermem") != std::string::npos;
  EXPECT_TRUE(info);
}

// libibverbs without ibv_reg_dmabuf_mr (rdma-core < 34), or no CUDA driver export: straight to
// ibv_reg_mr of the device pointer; the driver is not even asked in the first case.
TEST_F(RdmaVerbsFake, WithoutDmaBufSupportOnlyPeerMemory) {
  api_.reg_dmabuf_mr = nullptr;
  auto f = fabric();
  MemRegion mr;
  ASSERT_EQ(f->reg_mem(device(buf_, 4096), &mr), ncclSuccess);
  ASSERT_EQ(f->reg_mem(device(buf_, 4096, 9, 0), &mr), ncclSuccess);
  ASSERT_EQ(fake_.calls.size(), 2u);
  EXPECT_EQ(fake_.calls[0].fn, "reg_mr");
  EXPECT_EQ(fake_.calls[1].fn, "reg_mr");
  api_.reg_dmabuf_mr = f_reg_dmabuf_mr;
  cuda_.mem_get_handle_for_address_range = nullptr;
  fake_.calls.clear();
  auto f2 = fabric();
  ASSERT_EQ(f2->reg_mem(device(buf_, 4096), &mr), ncclSuccess);
  ASSERT_EQ(fake_.calls.size(), 1u);
  EXPECT_EQ(fake_.calls[0].fn, "reg_mr");
}

// Nothing works: one WARN naming every attempt and what to check, ncclSystemError, no abort.
TEST_F(RdmaVerbsFake, NoPathWorksIsAWarnAndSystemError) {
  fake_.dmabuf_fails = true;
  fake_.reg_mr_fails = true;
  auto f = fabric();
  MemRegion mr;
  EXPECT_EQ(f->reg_mem(device(buf_, 4096, 5, 0), &mr), ncclSystemError);
  EXPECT_TRUE(warned("cannot register 4096 bytes of CUDA memory"));
  EXPECT_TRUE(warned("NCCL's dma-buf fd): Operation not supported"));
  EXPECT_TRUE(warned("nvidia-peermem): Bad address"));
  EXPECT_TRUE(warned("nvidia-peermem kernel module"));
  fake_.export_result = 801;
  EXPECT_EQ(f->reg_mem(device(buf_, 4096), &mr), ncclSystemError);
  EXPECT_TRUE(warned("cuMemGetHandleForAddressRange failed: CUDA error 801 (operation not supported)"));
  EXPECT_EQ(f->reg(buf_, 64, &mr), ncclSystemError);
  EXPECT_TRUE(warned("ulimit -l"));
}

// NCCL's regMr of the same buffer, again and again, through the connection's cache: one verbs
// registration of the whole pages; a deregistration once the last pin goes.
TEST_F(RdmaVerbsFake, RepeatedRegMrIsOneRegistration) {
  auto f = fabric();
  {
    MrCache cache(f.get(), 4096);
    for (int i = 0; i < 10; ++i) ASSERT_EQ(cache.pin(device(buf_ + 64, 5000, 11, 64)), ncclSuccess);
    ASSERT_EQ(fake_.calls.size(), 1u);
    EXPECT_EQ(fake_.calls[0].fn, "reg_dmabuf_mr");
    EXPECT_EQ(fake_.calls[0].addr, reinterpret_cast<uintptr_t>(buf_));
    EXPECT_EQ(fake_.calls[0].len, 8192u);
    EXPECT_EQ(fake_.calls[0].offset, 0u);
    EXPECT_EQ(cache.refs(buf_ + 64), 10);
    for (int i = 0; i < 10; ++i) cache.unpin(buf_ + 64);
    EXPECT_EQ(cache.ranges(), 0u);
  }
}

// ---- queue pair attributes ----

TEST_F(RdmaVerbsFake, QpAttributesFollowTheSettings) {
  opt_.qp = IbQpSettings{106, 3, 22, 5};
  auto f = fabric(2);
  ASSERT_EQ(fake_.modifies.size(), 2u);  // both QPs to INIT
  EXPECT_EQ(fake_.modifies[0].attr.qp_state, IBV_QPS_INIT);
  EXPECT_TRUE(fake_.modifies[0].attr.qp_access_flags & IBV_ACCESS_REMOTE_READ);
  QpEndpoint remote{};
  remote.nqps = 2;
  remote.qpn[0] = 7001;
  remote.qpn[1] = 7002;
  remote.psn = 0x1234;
  remote.mtu = IBV_MTU_1024;
  remote.lid = 0;
  for (int i = 0; i < 16; ++i) remote.gid[i] = static_cast<uint8_t>(i);
  ASSERT_EQ(f->connect(remote), ncclSuccess);
  ASSERT_EQ(fake_.modifies.size(), 6u);
  for (int q = 0; q < 2; ++q) {
    const Modify& rtr = fake_.modifies[2 + 2 * q];
    const Modify& rts = fake_.modifies[3 + 2 * q];
    EXPECT_EQ(rtr.attr.qp_state, IBV_QPS_RTR);
    EXPECT_EQ(rtr.attr.dest_qp_num, remote.qpn[q]);
    EXPECT_EQ(rtr.attr.rq_psn, 0x1234u);
    EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_1024);
    EXPECT_EQ(rtr.attr.ah_attr.sl, 3);
    EXPECT_EQ(rtr.attr.ah_attr.is_global, 1);
    EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 106);
    EXPECT_EQ(rtr.attr.ah_attr.grh.sgid_index, 3);
    EXPECT_EQ(rtr.attr.ah_attr.grh.hop_limit, 255);
    EXPECT_EQ(std::memcmp(rtr.attr.ah_attr.grh.dgid.raw, remote.gid, 16), 0);
    EXPECT_TRUE(rtr.mask & IBV_QP_AV);
    EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(rts.attr.timeout, 22);
    EXPECT_EQ(rts.attr.retry_cnt, 5);
    EXPECT_EQ(rts.attr.rnr_retry, 7);
    EXPECT_EQ(rts.attr.sq_psn, f->local().psn);
    EXPECT_TRUE(rts.mask & IBV_QP_TIMEOUT);
    EXPECT_TRUE(rts.mask & IBV_QP_RETRY_CNT);
  }
}

// InfiniBand with LIDs: no GRH (so no traffic class), the SL still applies; NCCL's defaults.
TEST_F(RdmaVerbsFake, InfiniBandDefaults) {
  port_.ethernet = false;
  port_.lid = 17;
  QpEndpoint remote{};
  remote.lid = 23;
  remote.mtu = IBV_MTU_4096;
  QpTransition rtr = rtr_transition(port_, remote, 99, IbQpSettings{});
  EXPECT_EQ(rtr.attr.ah_attr.is_global, 0);
  EXPECT_EQ(rtr.attr.ah_attr.dlid, 23);
  EXPECT_EQ(rtr.attr.ah_attr.sl, 0);
  EXPECT_EQ(rtr.attr.dest_qp_num, 99u);
  EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_4096);
  rtr = rtr_transition(port_, remote, 99, IbQpSettings{200, 9, 20, 7});
  EXPECT_EQ(rtr.attr.ah_attr.sl, 9);
  EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 0);
  QpTransition rts = rts_transition(77, IbQpSettings{});
  EXPECT_EQ(rts.attr.timeout, 20);
  EXPECT_EQ(rts.attr.retry_cnt, 7);
  EXPECT_EQ(rts.attr.sq_psn, 77u);
}

TEST_F(RdmaVerbsFake, InvalidSettingsAreRefused) {
  opt_.qp.timeout = 0;
  std::unique_ptr<VerbsFabric> f;
  EXPECT_EQ(VerbsFabric::create(&api_, &port_, 1, 16, -1, opt_, &f), ncclInvalidUsage);
  EXPECT_TRUE(warned("NCCL_IB_TIMEOUT=0 is out of range"));
  EXPECT_TRUE(fake_.qps.empty());
}

TEST_F(RdmaVerbsFake, FailedTransitionNamesTheSettings) {
  opt_.qp.sl = 4;
  auto f = fabric(1);
  fake_.modify_fails_on = 1;  // the RTR transition
  QpEndpoint remote{};
  remote.nqps = 1;
  EXPECT_EQ(f->connect(remote), ncclSystemError);
  EXPECT_TRUE(warned("connecting QP 0 on fake0:1 failed"));
  EXPECT_TRUE(warned("NCCL_IB_SL=4"));
}

// ---- flush ----

// The first flush creates a QP connected to itself (RTR towards its own QP number, the fabric's
// settings); every flush is a signaled RDMA read of the device buffer (its rkey) into the host buffer
// (its lkey) on that QP; its completion has qp -1.
TEST_F(RdmaVerbsFake, FlushIsAReadOnALoopbackQp) {
  opt_.qp = IbQpSettings{10, 2, 19, 6};
  auto f = fabric(2);
  ASSERT_EQ(fake_.qps.size(), 2u);
  char host[64];
  ASSERT_EQ(f->flush_read(555, host, 0x11, 1, reinterpret_cast<uintptr_t>(buf_), 0x22), ncclSuccess);
  ASSERT_EQ(fake_.qps.size(), 3u);
  const uint32_t flush_qpn = fake_.qps[2]->qp_num;
  ASSERT_EQ(fake_.modifies.size(), 5u);  // 2 INIT + the flush QP's INIT, RTR, RTS
  EXPECT_EQ(fake_.modifies[3].qpn, flush_qpn);
  EXPECT_EQ(fake_.modifies[3].attr.qp_state, IBV_QPS_RTR);
  EXPECT_EQ(fake_.modifies[3].attr.dest_qp_num, flush_qpn);
  EXPECT_EQ(fake_.modifies[3].attr.rq_psn, f->local().psn);
  EXPECT_EQ(std::memcmp(fake_.modifies[3].attr.ah_attr.grh.dgid.raw, port_.gid.raw, 16), 0);
  EXPECT_EQ(fake_.modifies[3].attr.ah_attr.sl, 2);
  EXPECT_EQ(fake_.modifies[4].attr.timeout, 19);
  EXPECT_EQ(fake_.modifies[4].attr.retry_cnt, 6);
  ASSERT_EQ(fake_.sends.size(), 1u);
  EXPECT_EQ(fake_.send_qpn[0], flush_qpn);
  EXPECT_EQ(fake_.sends[0].opcode, IBV_WR_RDMA_READ);
  EXPECT_TRUE(fake_.sends[0].send_flags & IBV_SEND_SIGNALED);
  EXPECT_EQ(fake_.sends[0].wr_id, 555u);
  EXPECT_EQ(fake_.sends[0].wr.rdma.remote_addr, reinterpret_cast<uintptr_t>(buf_));
  EXPECT_EQ(fake_.sends[0].wr.rdma.rkey, 0x22u);
  EXPECT_EQ(fake_.send_sges[0].addr, reinterpret_cast<uintptr_t>(host));
  EXPECT_EQ(fake_.send_sges[0].lkey, 0x11u);
  EXPECT_EQ(fake_.send_sges[0].length, 1u);
  ASSERT_EQ(f->flush_read(556, host, 0x11, 1, reinterpret_cast<uintptr_t>(buf_), 0x22), ncclSuccess);
  EXPECT_EQ(fake_.qps.size(), 3u);  // the same QP
  EXPECT_EQ(fake_.send_qpn[1], flush_qpn);
  ibv_wc wc{};
  wc.wr_id = 555;
  wc.status = IBV_WC_SUCCESS;
  wc.opcode = IBV_WC_RDMA_READ;
  wc.qp_num = flush_qpn;
  fake_.cq_entries.push_back(wc);
  Completion c[4];
  int n = 0;
  ASSERT_EQ(f->poll(c, 4, &n), ncclSuccess);
  ASSERT_EQ(n, 1);
  EXPECT_EQ(c[0].wr_id, 555u);
  EXPECT_TRUE(c[0].ok);
  EXPECT_FALSE(c[0].is_recv);
  EXPECT_EQ(c[0].qp, -1);
  f.reset();
  EXPECT_EQ(fake_.destroyed_qps, 3);
}

// The whole flush path of a receive connection over the fake verbs fabric: the read posted with the
// pinned device buffer's rkey; test_flush completes when the CQ says so.
TEST_F(RdmaVerbsFake, ReceiveConnectionFlushOverVerbs) {
  RdmaParams p;
  RdmaRecvConn r(fabric(1), p);
  ASSERT_EQ(r.init(), ncclSuccess);
  ASSERT_EQ(r.pin(device(buf_, 4096, 3, 0)), ncclSuccess);
  const uint32_t rkey = fake_.mrs.back()->rkey;
  int op = kNoOp;
  ASSERT_EQ(r.flush(buf_ + 100, 1000, &op), ncclSuccess);
  ASSERT_NE(op, kNoOp);
  const ibv_send_wr& wr = fake_.sends.back();
  EXPECT_EQ(wr.opcode, IBV_WR_RDMA_READ);
  EXPECT_EQ(wr.wr.rdma.rkey, rkey);
  EXPECT_EQ(wr.wr.rdma.remote_addr, reinterpret_cast<uintptr_t>(buf_ + 100));
  bool done = true;
  ASSERT_EQ(r.test_flush(op, &done), ncclSuccess);
  EXPECT_FALSE(done);
  ibv_wc wc{};
  wc.wr_id = wr.wr_id;
  wc.status = IBV_WC_SUCCESS;
  wc.qp_num = fake_.qps.back()->qp_num;
  fake_.cq_entries.push_back(wc);
  ASSERT_EQ(r.test_flush(op, &done), ncclSuccess);
  EXPECT_TRUE(done);
  ASSERT_EQ(r.flush(buf_, 10, &op), ncclSuccess);
  wc.wr_id = fake_.sends.back().wr_id;
  wc.status = IBV_WC_REM_ACCESS_ERR;
  fake_.cq_entries.push_back(wc);
  EXPECT_EQ(r.test_flush(op, &done), ncclSystemError);
  EXPECT_TRUE(warned("flush read (loopback queue pair) on QP -1 completed with error: remote access error"));
}

}  // namespace
