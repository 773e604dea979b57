#include "testing/rdma_loopback.h"

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <random>
#include <vector>

#include "common/log.h"

namespace zipccl {
namespace net {
namespace {
std::atomic<uint32_t> g_next_key{1};  // process-wide: ends move between links when they pair up
}  // namespace

struct LoopbackOp {
  bool is_read;
  uint64_t wr_id;
  char* local;
  uint32_t lkey;
  size_t len;
  uint64_t raddr;
  uint32_t rkey;
  bool with_imm;
  uint32_t imm;
  bool signaled;
};

struct LoopbackEnd {
  std::map<uint32_t, std::pair<uintptr_t, size_t>> regions;  // key -> [start, len)
  std::vector<std::deque<LoopbackOp>> sq;                    // per QP (+ the loopback QP last), posted
  std::vector<std::deque<uint64_t>> rq;                      // per QP, posted receives
  std::vector<char> qp_error;
  std::deque<Completion> cq;
  int fail_countdown = -1;
  const char* fail_status = nullptr;
  bool gone = false;
  uint64_t bytes_written = 0;
  uint64_t flush_reads = 0;  // posted on the loopback QP
  std::vector<MemDesc> reg_mems;  // what reg_mem() was asked to register
};

struct LoopbackLink {
  std::mutex mu;
  int qps;
  std::mt19937 rng;
  bool shuffle;
  LoopbackEnd end[2];

  LoopbackLink(int n, uint32_t seed) : qps(n), rng(seed), shuffle(seed != 0) {
    for (LoopbackEnd& e : end) {
      e.sq.resize(n + 1);  // sq[n]: the queue pair connected to itself (flush reads)
      e.rq.resize(n);
      e.qp_error.assign(n + 1, 0);
    }
  }

  static bool covers(const LoopbackEnd& e, uint32_t key, uintptr_t a, size_t len) {
    if (!len) return true;
    auto it = e.regions.find(key);
    return it != e.regions.end() && a >= it->second.first && a - it->second.first + len <= it->second.second;
  }

  void complete(int side, int qp, const LoopbackOp& op, bool ok, const char* status) {
    if (!ok || op.signaled) {
      Completion c;
      c.wr_id = op.wr_id;
      c.ok = ok;
      c.status = ok ? "success" : status;
      c.qp = qp == qps ? -1 : qp;
      end[side].cq.push_back(c);
    }
  }

  // Executes the oldest operation of `side`'s QP `qp`.
  void execute(int side, int qp) {
    LoopbackEnd& me = end[side];
    LoopbackEnd& peer = qp == qps ? end[side] : end[1 - side];  // the loopback QP reads its own end
    LoopbackOp op = me.sq[qp].front();
    me.sq[qp].pop_front();
    const char* err = nullptr;
    if (me.qp_error[qp]) {
      err = "Work Request Flushed Error";
    } else if (me.fail_countdown == 0) {
      err = me.fail_status;
    } else if (peer.gone || me.gone || (qp < qps && end[1 - side].gone)) {
      err = "transport retry counter exceeded";
    } else if (!covers(me, op.lkey, reinterpret_cast<uintptr_t>(op.local), op.len)) {
      err = "local protection error";
    } else if (!covers(peer, op.rkey, op.raddr, op.len)) {
      err = "remote access error";
    } else if (op.with_imm && peer.rq[qp].empty()) {
      err = "RNR retry counter exceeded";
    }
    if (me.fail_countdown >= 0) --me.fail_countdown;
    if (err) {
      me.qp_error[qp] = 1;
      complete(side, qp, op, false, err);
      return;
    }
    char* remote = reinterpret_cast<char*>(static_cast<uintptr_t>(op.raddr));
    if (op.len) {
      if (op.is_read)
        std::memcpy(op.local, remote, op.len);
      else
        std::memcpy(remote, op.local, op.len);
    }
    if (!op.is_read) me.bytes_written += op.len;
    if (op.with_imm) {
      Completion c;
      c.wr_id = peer.rq[qp].front();
      peer.rq[qp].pop_front();
      c.is_recv = true;
      c.imm = op.imm;
      c.status = "success";
      c.qp = qp;
      peer.cq.push_back(c);
    }
    complete(side, qp, op, true, nullptr);
  }

  // Moves the network along: everything queued (in order), or with a seed a random share of it,
  // from random QPs of either end.
  void step() {
    std::vector<std::pair<int, int>> heads;
    for (int s = 0; s < 2; ++s) {
      for (int q = 0; q <= qps; ++q) {
        if (!end[s].sq[q].empty()) heads.emplace_back(s, q);
      }
    }
    if (heads.empty()) return;
    if (!shuffle) {
      for (auto& h : heads) {
        while (!end[h.first].sq[h.second].empty()) execute(h.first, h.second);
      }
      return;
    }
    int budget = 1 + static_cast<int>(rng() % 8);
    while (budget-- > 0 && !heads.empty()) {
      size_t i = rng() % heads.size();
      execute(heads[i].first, heads[i].second);
      if (end[heads[i].first].sq[heads[i].second].empty()) heads.erase(heads.begin() + i);
    }
  }
};

LoopbackFabric::LoopbackFabric(std::shared_ptr<LoopbackLink> link, int side)
    : link_(std::move(link)), side_(side) {}

LoopbackFabric::~LoopbackFabric() = default;

int LoopbackFabric::qp_count() const {
  return link_->qps;
}

ncclResult_t LoopbackFabric::reg(void* addr, size_t len, MemRegion* mr) {
  std::lock_guard<std::mutex> lock(link_->mu);
  uint32_t key = g_next_key++;
  link_->end[side_].regions[key] = {reinterpret_cast<uintptr_t>(addr), len};
  *mr = MemRegion{addr, len, key, key, reinterpret_cast<void*>(static_cast<uintptr_t>(key))};
  return ncclSuccess;
}

ncclResult_t LoopbackFabric::reg_mem(const MemDesc& mem, MemRegion* mr) {
  {
    std::lock_guard<std::mutex> lock(link_->mu);
    link_->end[side_].reg_mems.push_back(mem);
  }
  return reg(mem.data, mem.size, mr);  // "device" memory is host memory here
}

std::vector<MemDesc> LoopbackFabric::reg_mems() const {
  std::lock_guard<std::mutex> lock(link_->mu);
  return link_->end[side_].reg_mems;
}

void LoopbackFabric::dereg(MemRegion* mr) {
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->end[side_].regions.erase(mr->lkey);
  *mr = MemRegion{};
}

ncclResult_t LoopbackFabric::write(int qp, uint64_t wr_id, const void* src, uint32_t lkey, size_t len,
                                   uint64_t raddr, uint32_t rkey, bool with_imm, uint32_t imm,
                                   bool signaled) {
  if (qp < 0 || qp >= link_->qps) return ncclInternalError;
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->end[side_].sq[qp].push_back(LoopbackOp{false, wr_id,
                                                const_cast<char*>(static_cast<const char*>(src)), lkey, len,
                                                raddr, rkey, with_imm, imm, signaled});
  return ncclSuccess;
}

ncclResult_t LoopbackFabric::read(int qp, uint64_t wr_id, void* dst, uint32_t lkey, size_t len,
                                  uint64_t raddr, uint32_t rkey) {
  if (qp < 0 || qp >= link_->qps) return ncclInternalError;
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->end[side_].sq[qp].push_back(
      LoopbackOp{true, wr_id, static_cast<char*>(dst), lkey, len, raddr, rkey, false, 0, true});
  return ncclSuccess;
}

ncclResult_t LoopbackFabric::flush_read(uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t addr,
                                        uint32_t rkey) {
  std::lock_guard<std::mutex> lock(link_->mu);
  LoopbackEnd& me = link_->end[side_];
  me.sq[link_->qps].push_back(LoopbackOp{true, wr_id, static_cast<char*>(dst), lkey, len, addr, rkey, false, 0, true});
  ++me.flush_reads;
  return ncclSuccess;
}

uint64_t LoopbackFabric::flush_reads() const {
  std::lock_guard<std::mutex> lock(link_->mu);
  return link_->end[side_].flush_reads;
}

ncclResult_t LoopbackFabric::post_recv(int qp, uint64_t wr_id) {
  if (qp < 0 || qp >= link_->qps) return ncclInternalError;
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->end[side_].rq[qp].push_back(wr_id);
  return ncclSuccess;
}

ncclResult_t LoopbackFabric::poll(Completion* out, int max, int* n) {
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->step();
  std::deque<Completion>& cq = link_->end[side_].cq;
  *n = 0;
  while (*n < max && !cq.empty()) {
    out[(*n)++] = cq.front();
    cq.pop_front();
  }
  return ncclSuccess;
}

bool LoopbackFabric::peer_alive(const char** why) {
  std::lock_guard<std::mutex> lock(link_->mu);
  if (!link_->end[1 - side_].gone) return true;
  *why = "loopback peer vanished";
  return false;
}

void LoopbackFabric::inject_failure(int after, const char* status) {
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->end[side_].fail_countdown = after;
  link_->end[side_].fail_status = status;
}

void LoopbackFabric::vanish() {
  std::lock_guard<std::mutex> lock(link_->mu);
  link_->end[side_].gone = true;
}

int LoopbackFabric::registrations_live() const {
  std::lock_guard<std::mutex> lock(link_->mu);
  return static_cast<int>(link_->end[side_].regions.size());
}

uint64_t LoopbackFabric::bytes_written() const {
  std::lock_guard<std::mutex> lock(link_->mu);
  return link_->end[side_].bytes_written;
}

std::pair<std::unique_ptr<LoopbackFabric>, std::unique_ptr<LoopbackFabric>> make_loopback_pair(
    int qps, uint32_t seed) {
  auto link = std::make_shared<LoopbackLink>(qps, seed);
  return {std::unique_ptr<LoopbackFabric>(new LoopbackFabric(link, 0)),
          std::unique_ptr<LoopbackFabric>(new LoopbackFabric(link, 1))};
}

}  // namespace net
}  // namespace zipccl

namespace zipccl {
namespace net {

class LoopbackConnectable final : public ConnectableFabric {
 public:
  LoopbackConnectable(int nqps, uint32_t seed, int alive_fd)
      : f_(std::make_shared<LoopbackLink>(nqps, seed), 0), alive_fd_(alive_fd) {
    std::lock_guard<std::mutex> lock(registry_mu());
    base_ = next_qpn() += 16;
    registry()[base_] = this;
  }
  ~LoopbackConnectable() override {
    {
      std::lock_guard<std::mutex> lock(registry_mu());
      registry().erase(base_);
    }
    if (alive_fd_ >= 0) close(alive_fd_);
  }
  QpEndpoint local() const override {
    QpEndpoint e{};
    e.nqps = static_cast<uint32_t>(f_.qp_count());
    for (int i = 0; i < f_.qp_count(); ++i) e.qpn[i] = base_ + i;
    return e;
  }
  // The end that connects second finds its peer already paired with it; the first moves itself into
  // the peer's link as side 1.
  ncclResult_t connect(const QpEndpoint& remote) override {
    std::lock_guard<std::mutex> lock(registry_mu());
    auto it = registry().find(remote.qpn[0]);
    if (it == registry().end() || remote.nqps != static_cast<uint32_t>(f_.qp_count())) {
      ZIPCCL_WARN("loopback: no peer with QP %u", remote.qpn[0]);
      return ncclSystemError;
    }
    LoopbackConnectable* peer = it->second;
    if (peer->f_.link_ == f_.link_) return ncclSuccess;
    std::shared_ptr<LoopbackLink> target = peer->f_.link_;
    std::shared_ptr<LoopbackLink> old = f_.link_;  // outlives the lock below (its mutex is in it)
    std::scoped_lock both(target->mu, old->mu);
    target->end[1] = std::move(old->end[f_.side_]);
    f_.link_ = target;
    f_.side_ = 1;
    return ncclSuccess;
  }
  int qp_count() const override { return f_.qp_count(); }
  ncclResult_t reg(void* addr, size_t len, MemRegion* mr) override { return f_.reg(addr, len, mr); }
  void dereg(MemRegion* mr) override { f_.dereg(mr); }
  ncclResult_t write(int qp, uint64_t wr_id, const void* src, uint32_t lkey, size_t len, uint64_t raddr,
                     uint32_t rkey, bool with_imm, uint32_t imm, bool signaled) override {
    return f_.write(qp, wr_id, src, lkey, len, raddr, rkey, with_imm, imm, signaled);
  }
  ncclResult_t read(int qp, uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t raddr,
                    uint32_t rkey) override {
    return f_.read(qp, wr_id, dst, lkey, len, raddr, rkey);
  }
  ncclResult_t reg_mem(const MemDesc& mem, MemRegion* mr) override { return f_.reg_mem(mem, mr); }
  ncclResult_t flush_read(uint64_t wr_id, void* dst, uint32_t lkey, size_t len, uint64_t addr,
                          uint32_t rkey) override {
    return f_.flush_read(wr_id, dst, lkey, len, addr, rkey);
  }
  ncclResult_t post_recv(int qp, uint64_t wr_id) override { return f_.post_recv(qp, wr_id); }
  ncclResult_t poll(Completion* out, int max, int* n) override { return f_.poll(out, max, n); }
  bool peer_alive(const char** why) override { return side_channel_alive(alive_fd_, why); }

 private:
  static std::mutex& registry_mu() {
    static std::mutex mu;
    return mu;
  }
  static std::map<uint32_t, LoopbackConnectable*>& registry() {
    static std::map<uint32_t, LoopbackConnectable*> r;
    return r;
  }
  static uint32_t& next_qpn() {
    static uint32_t n = 0;
    return n;
  }

  LoopbackFabric f_;
  int alive_fd_;
  uint32_t base_ = 0;
};

namespace {

class LoopbackPort final : public RdmaPort {
 public:
  LoopbackPort(std::string name, uint32_t seed) : name_(std::move(name)), seed_(seed) {}
  std::string name() const override { return name_; }
  std::string pci_path() const override { return ""; }
  int speed_mbps() const override { return 100000; }
  uint64_t guid() const override { return 0x10; }
  ncclResult_t make_fabric(int nqps, int /*depth*/, int alive_fd,
                           std::unique_ptr<ConnectableFabric>* out) override {
    out->reset(new LoopbackConnectable(nqps, seed_, alive_fd));
    return ncclSuccess;
  }

 private:
  std::string name_;
  uint32_t seed_;
};

}  // namespace

std::unique_ptr<RdmaPort> make_loopback_port(const std::string& name, uint32_t seed) {
  return std::unique_ptr<RdmaPort>(new LoopbackPort(name, seed));
}

}  // namespace net
}  // namespace zipccl
