// The inner-plugin transport: each transport message (kMetaBytes of frame header + payload) travels as
// two messages of the inner plugin, a fixed-size header (the metadata and the payload's length) and
// the payload. Why two and not a prefix in one message: the receiver must post its inner receive
// before anything arrives, and only a receive into NCCL's own buffer keeps raw messages zero-copy; a
// prefix would shift the payload out of place and could push a raw message of exactly the posted size
// past it. With two messages the payload receive is posted into NCCL's buffer with the posted size at
// irecv time (post_target), next to the header receive, so the sender never waits for a round trip;
// a raw payload is at most the posted size (NCCL's rule) and a codec frame is smaller than its data
// (the compressing layer sends raw otherwise), so no message ever exceeds what the receiver posted.
// A codec frame that landed in NCCL's buffer is copied (compressed bytes) to the compressing layer's
// staging before it is decoded into that buffer.
//
// Grouped receives (NCCL's irecv with n > 1, when the inner has maxRecvs > 1): one grouped inner receive
// for the n headers, then one for the n payloads, with tags derived from NCCL's (2t, 2t+1), so the inner's
// tag matching puts each message's header and payload at the index of the receive with its tag
// (docs/notes/inner.md, "Grouped receives").
//
// Memory: NCCL's regMr of a comm is forwarded to the inner plugin (BufferRegistry), and so is the GPU
// path's staging (pins_staging: pinned host staging; device staging, posts_device, when the inner device
// takes device memory: through regMrDmaBuf with a dma-buf fd of the range when it has NCCL_PTR_DMABUF,
// else as NCCL_PTR_CUDA; with neither, device data goes through the pinned host staging); a payload in
// memory the inner does not know (the compressing layer's staging for host messages, or an unregistered
// user buffer) goes through a bounce buffer of the connection, registered once and grown when a larger
// message comes. Every call here is non-blocking: a NULL request from the inner is retried on the next
// call.
#include "inner/inner_transport.h"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <strings.h>
#include <unistd.h>

#include "common/log.h"
#include "common/settings.h"
#include "gpu/gpu_path.h"
#include "inner/inner_net.h"

namespace zipccl {
namespace net {
namespace {

constexpr size_t kHeaderBytes = kMetaBytes + 8;    // metadata + payload length (little-endian u64)

struct Inner {
  std::unique_ptr<InnerNet> net;
  std::vector<InnerProps> props;  // grows with makeVDevice: read and grown under g_mu
};
std::mutex g_mu;
Inner* g_inner = nullptr;  // the open inner plugin; finalized and freed by finalize_inner_transport()

const char* inner_name() { return g_inner ? g_inner->net->name() : "?"; }

// The inner tags of a message NCCL sent with `tag`: even for its header, odd for its payload, so that
// within one grouped inner receive a header can never take a payload's place (or the reverse), even
// when several of NCCL's receives in a group share a tag (docs/notes/inner.md, "Grouped receives").
int inner_tag(int tag, bool payload) {
  return static_cast<int>((static_cast<uint32_t>(tag) << 1) | (payload ? 1u : 0u));
}

// An inner call that failed: its own WARN is already in the log (it logs through NCCL's logger too);
// ours names the call, and the result code goes up unchanged.
#define INNER_CHECK(call, what, ...)                                                                   \
  do {                                                                                                 \
    ncclResult_t inner_res_ = (call);                                                                  \
    if (inner_res_ != ncclSuccess) {                                                                   \
      ZIPCCL_WARN("inner plugin %s: " what " failed (error %d; its own message, if any, is above)",     \
                  inner_name(), ##__VA_ARGS__, static_cast<int>(inner_res_));                          \
      return inner_res_;                                                                               \
    }                                                                                                  \
  } while (0)

// What a comm's inner device takes of device memory (devices of one inner may differ).
struct DeviceMemory {
  int dev = 0;
  bool cuda = false;    // NCCL_PTR_CUDA: regMr of GPU memory (GPUDirect through nvidia-peermem)
  bool dmabuf = false;  // NCCL_PTR_DMABUF: regMrDmaBuf with a dma-buf fd of the GPU memory
};

// How device memory of a comm (NCCL's device buffers, the GPU path's device staging) is registered with
// the inner, said once per device and outcome at the first device registration that decides it.
enum class DeviceReg { kUndecided, kHost, kCuda, kDmaBuf };
void say_device_reg(const DeviceMemory& d, DeviceReg how) {
  static std::mutex mu;
  static std::vector<std::pair<int, DeviceReg>>* said = new std::vector<std::pair<int, DeviceReg>>;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (std::find(said->begin(), said->end(), std::make_pair(d.dev, how)) != said->end()) return;
    said->emplace_back(d.dev, how);
  }
  const char* what = how == DeviceReg::kDmaBuf ? "registered with the inner through regMrDmaBuf (NCCL_PTR_DMABUF)"
                     : how == DeviceReg::kCuda ? "registered with the inner as NCCL_PTR_CUDA (regMr)"
                                               : "not registered with the inner: device data goes through zipccl's "
                                                 "pinned host staging";
  const char* why = how == DeviceReg::kDmaBuf ? ""
                    : d.dmabuf ? (how == DeviceReg::kCuda ? " (its NCCL_PTR_DMABUF: GPU memory could not be "
                                                            "exported as a dma-buf, see above)"
                                                          : " (its NCCL_PTR_DMABUF: GPU memory could not be "
                                                            "exported as a dma-buf, see above; no NCCL_PTR_CUDA)")
                    : how == DeviceReg::kHost ? " (it takes neither NCCL_PTR_CUDA nor NCCL_PTR_DMABUF)"
                                              : "";
  ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "inner plugin %s, device %d: zipccl's device staging (and NCCL's device "
              "buffers) %s%s", inner_name(), d.dev, what, why);
}

// Registrations with the inner plugin on one comm: NCCL's buffers (pinned through the compressing
// layer, counted per address) and the connection's own buffers. Thread-safe: NCCL registers user
// buffers (regMr/deregMr) on its proxy service thread while the progress thread's isend/irecv look
// handles up here; regMr is rare, so one mutex per comm costs the data path an uncontended lock.
class Registrations {
 public:
  Registrations(InnerNet* net, void* comm, const DeviceMemory& dm)
      : net_(net),
        comm_(comm),
        dm_(dm),
        how_(dm.dmabuf ? DeviceReg::kUndecided : dm.cuda ? DeviceReg::kCuda : DeviceReg::kHost) {}
  // Moved only by a closing connection (into the registrations left open for the inner), when no other
  // thread uses it any more.
  Registrations(Registrations&& o) noexcept
      : net_(o.net_), comm_(o.comm_), dm_(o.dm_), how_(o.how_), regs_(std::move(o.regs_)), empty_(std::move(o.empty_)) {}
  // NCCL's regMr through the compressing layer, and the GPU path's staging. Device memory is registered
  // with the inner only when the comm's device takes it: with a dma-buf fd when it has NCCL_PTR_DMABUF
  // (NCCL's own fd from regMrDmaBuf, else one exported for the range; NCCL prefers dma-buf too), else as
  // NCCL_PTR_CUDA; otherwise zipccl's GPU path stages it through host memory and the inner never sees
  // it. The first device registration (NCCL's buffer: the staging is made right after it) decides
  // between dma-buf and the fallback: an export that fails there leaves the comm on NCCL_PTR_CUDA or on
  // host staging (a buffer NCCL gave its own fd for is still forwarded with it); one that fails later
  // fails the registration.
  ncclResult_t pin(const MemDesc& m) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!m.device) return add_locked(m);
    if (m.size == 0 && how_ != DeviceReg::kCuda) {  // nothing to export, nothing the inner would read
      ++empty_[reinterpret_cast<uintptr_t>(m.data)];
      return ncclSuccess;
    }
    int fd = -1;
    uint64_t offset = 0;
    if (how_ == DeviceReg::kUndecided) {
      how_ = export_dmabuf(m, &fd, &offset) == ncclSuccess ? DeviceReg::kDmaBuf
             : dm_.cuda                                    ? DeviceReg::kCuda
                                                           : DeviceReg::kHost;
    } else if (how_ == DeviceReg::kDmaBuf && m.dmabuf_fd < 0 && !held(m)) {
      ZIPCCL_CHECK(export_dmabuf(m, &fd, &offset));
    }
    say_device_reg(dm_, how_);
    if (how_ == DeviceReg::kHost) return m.dmabuf_fd >= 0 && dm_.dmabuf ? add_locked(m) : ncclSuccess;  // NCCL's fd
    MemDesc r = m;
    if (how_ == DeviceReg::kCuda) {
      r.dmabuf_fd = dm_.dmabuf ? m.dmabuf_fd : -1;  // NCCL's fd where the device takes one
    } else if (m.dmabuf_fd < 0) {
      r.dmabuf_fd = fd;
      r.dmabuf_offset = offset;
    }
    const ncclResult_t res = add_locked(r);
    if (fd >= 0) close(fd);  // the inner's registration holds its own reference
    return res;
  }
  // Whether device memory is registered with the inner (the GPU path's device staging may be posted).
  bool device() const {
    std::lock_guard<std::mutex> lock(mu_);
    return how_ == DeviceReg::kCuda || how_ == DeviceReg::kDmaBuf;
  }
  // Deregisters nothing by itself: clear() first where that is safe (see the connections' destructors).
  // Deregisters everything (before the comm closes).
  void clear() {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& r : regs_) net_->dereg_mr(comm_, r.second.mh);
    regs_.clear();
  }
  // The connection's own buffers.
  ncclResult_t add(const MemDesc& m) {
    std::lock_guard<std::mutex> lock(mu_);
    return add_locked(m);
  }
  void remove(void* data) {
    std::lock_guard<std::mutex> lock(mu_);
    // An empty device pin kept here first: with a registration at the same address, either order
    // leaves the same registrations once both are unpinned, and none is released early.
    auto e = empty_.find(reinterpret_cast<uintptr_t>(data));
    if (e != empty_.end()) {
      if (--e->second == 0) empty_.erase(e);
      return;
    }
    auto it = regs_.find(reinterpret_cast<uintptr_t>(data));
    if (it == regs_.end() || --it->second.count > 0) return;
    net_->dereg_mr(comm_, it->second.mh);
    regs_.erase(it);
  }
  // The inner's handle of a registration covering [p, p + n), or nullptr.
  void* find(const void* p, size_t n) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto a = reinterpret_cast<uintptr_t>(p);
    auto it = regs_.upper_bound(a);
    if (it == regs_.begin()) return nullptr;
    --it;
    return a + n <= it->first + it->second.size ? it->second.mh : nullptr;
  }

 private:
  // Whether a registration at m's address already covers it (add_locked() then only counts it).
  bool held(const MemDesc& m) const {
    auto it = regs_.find(reinterpret_cast<uintptr_t>(m.data));
    return it != regs_.end() && it->second.size >= m.size;
  }
  ncclResult_t add_locked(const MemDesc& m) {
    auto key = reinterpret_cast<uintptr_t>(m.data);
    auto it = regs_.find(key);
    if (it != regs_.end() && it->second.size >= m.size) {
      ++it->second.count;
      return ncclSuccess;
    }
    void* mh = nullptr;
    int type = m.device ? NCCL_PTR_CUDA : NCCL_PTR_HOST;
    INNER_CHECK(net_->reg_mr_dmabuf(comm_, m.data, m.size, type, m.dmabuf_offset, m.dmabuf_fd, &mh),
                "%s of %zu bytes of %s memory", m.dmabuf_fd >= 0 ? "regMrDmaBuf" : "regMr", m.size,
                m.device ? "CUDA" : "host");
    if (it != regs_.end()) {  // the same address again, larger: keep the larger registration
      net_->dereg_mr(comm_, it->second.mh);
      it->second.mh = mh;
      it->second.size = m.size;
      ++it->second.count;
    } else {
      regs_[key] = Reg{m.size, mh, 1};
    }
    return ncclSuccess;
  }
  struct Reg {
    size_t size;
    void* mh;
    int count;
  };
  // A dma-buf fd of m's range from the GPU path's device operations (the caller closes it).
  ncclResult_t export_dmabuf(const MemDesc& m, int* fd, uint64_t* offset) const {
    *fd = -1;
    *offset = 0;
    gpu::DeviceOps* ops = gpu::device_ops();
    const ncclResult_t r = ops ? ops->dmabuf_fd(m.data, m.size, fd, offset) : ncclInternalError;
    if (r != ncclSuccess && how_ == DeviceReg::kDmaBuf) {
      ZIPCCL_WARN("inner plugin %s, device %d: exporting %zu bytes of GPU memory at %p as a dma-buf failed "
                  "(see above); the inner takes GPU memory only that way",
                  inner_name(), dm_.dev, m.size, m.data);
    }
    return r;
  }
  InnerNet* net_;
  void* comm_;
  DeviceMemory dm_;
  DeviceReg how_;
  std::map<uintptr_t, Reg> regs_;
  std::map<uintptr_t, int> empty_;  // 0-byte device pins not forwarded (pin()), counted per address
  mutable std::mutex mu_;
};

// A host buffer of the connection, registered with the inner plugin; grows (re-registered) on demand.
class Bounce {
 public:
  ncclResult_t reserve(Registrations* regs, size_t n) {
    if (n <= cap_ && buf_) return ncclSuccess;
    if (buf_) regs->remove(buf_.get());
    size_t cap = n < 4096 ? 4096 : n;
    buf_.reset(new char[cap]);
    cap_ = cap;
    MemDesc m;
    m.data = buf_.get();
    m.size = cap;
    ncclResult_t r = regs->add(m);
    if (r != ncclSuccess) {
      buf_.reset();
      cap_ = 0;
    }
    return r;
  }
  char* data() const { return buf_.get(); }

 private:
  std::unique_ptr<char[]> buf_;
  size_t cap_ = 0;
};

// A connection closed with inner requests in flight (after a failure, or receives still posted when
// the caller gave up on them). The inner comm, its registrations and the buffers they cover are left as
// they are: closing or deregistering under in-flight requests crashed libfabric inside aws-ofi-nccl's
// closeSend, and the inner may still write into the buffers. Such a close leaks a little instead of
// crashing.
// What such a connection leaves behind stays reachable here, for the process's lifetime.
struct LeftOpen {
  void* comm;
  Registrations regs;
  std::unique_ptr<char[]> headers;
  std::vector<Bounce> bounces;
};
void leave_open(const char* what, int inflight, LeftOpen* left) {
  ZIPCCL_WARN("inner plugin %s: closing a %s connection with %d inner request(s) in flight; its inner comm "
              "and buffers are left open",
              inner_name(), what, inflight);
  static std::mutex mu;
  static std::vector<std::unique_ptr<LeftOpen>>* kept = new std::vector<std::unique_ptr<LeftOpen>>;
  std::lock_guard<std::mutex> lock(mu);
  kept->emplace_back(left);
}

// ZIPCCL_IO_TIMEOUT_MS over an inner plugin: a connection that has a transfer under way (a send
// posted, or a receive whose header arrived) and sees no inner request complete for that long fails.
// Some plugins never report a dead peer (aws-ofi-nccl over tcp;ofi_rxm leaves the requests pending).
class Stall {
 public:
  void progressed() { last_ = std::chrono::steady_clock::now(); }
  // True (after one WARN) when `busy` has lasted the timeout without progress.
  bool check(bool busy, const char* what) {
    const int ms = settings().io_timeout_ms;
    if (!busy || ms <= 0) {
      progressed();
      return false;
    }
    if (std::chrono::steady_clock::now() - last_ < std::chrono::milliseconds(ms)) return false;
    ZIPCCL_WARN("inner plugin %s: no %s progress for %d ms (ZIPCCL_IO_TIMEOUT_MS); failing the connection",
                inner_name(), what, ms);
    return true;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

// One inner request: posted (non-null), then tested until done (the inner frees it then).
struct InnerReq {
  void* req = nullptr;
  bool posted = false, done = false;
  size_t size[kMaxRecvs] = {};  // bytes the inner reported at completion, per receive of a group
  void reset() { *this = InnerReq{}; }
  bool in_flight() const { return posted && !done; }
  ncclResult_t poll(InnerNet* net, const char* what, Stall* stall, int n = 1) {
    if (!posted || done) return ncclSuccess;
    int d = 0;
    INNER_CHECK(net->test(req, &d, size, n), "test of a %s", what);
    if (d) {
      done = true;
      stall->progressed();
    }
    return ncclSuccess;
  }
};

class InnerSendConn final : public SendConn, public BufferRegistry {
 public:
  // grouped: the inner's device takes grouped receives (maxRecvs > 1), so it matches sends to
  // receives by tag and messages with different tags need not be posted in order.
  InnerSendConn(InnerNet* net, void* comm, bool grouped, const DeviceMemory& dm)
      : net_(net), comm_(comm), regs_(net, comm, dm), ops_(static_cast<size_t>(settings().max_requests)),
        grouped_(grouped) {}
  ~InnerSendConn() override {
    ZIPCCL_INFO(NCCL_NET,
                "inner transport: send connection closes: %llu payload(s) posted in place, %llu through "
                "its bounce buffers",
                (unsigned long long)in_place_, (unsigned long long)bounced_);
    const int inflight = inflight_count();
    if (inflight) {
      auto* left = new LeftOpen{comm_, std::move(regs_), std::move(headers_), {}};
      for (Op& o : ops_) left->bounces.push_back(std::move(o.bounce));
      leave_open("send", inflight, left);
      return;
    }
    regs_.clear();
    if (net_->close_send(comm_) != ncclSuccess) ZIPCCL_WARN("inner plugin %s: closeSend failed", inner_name());
  }
  ncclResult_t init() {
    held_.reserve(2 * ops_.size());
    headers_.reset(new char[kHeaderBytes * ops_.size()]);
    MemDesc m;
    m.data = headers_.get();
    m.size = kHeaderBytes * ops_.size();
    return regs_.add(m);
  }

  ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) override {
    *op = kNoOp;
    if (failed_) return ncclSystemError;
    int i = 0;
    while (i < slots() && ops_[i].used) ++i;
    if (i == slots()) return progress(kNoOp);
    Op& o = ops_[i];
    char* h = header(i);
    std::memcpy(h, meta, kMetaBytes);
    uint64_t n = len;
    std::memcpy(h + kMetaBytes, &n, sizeof n);
    o.data = const_cast<void*>(payload);
    o.len = len;
    o.mh = len ? regs_.find(payload, len) : nullptr;
    if (!len) {
      o.data = h;  // a zero-byte message still needs a valid, registered address for some plugins
      o.mh = regs_.find(h, kHeaderBytes);
    } else if (!o.mh) {  // memory the inner does not know: the compressing layer's staging
      ncclResult_t r = o.bounce.reserve(&regs_, len);
      if (r != ncclSuccess) return fail(r);
      std::memcpy(o.bounce.data(), payload, len);
      o.data = o.bounce.data();
      o.mh = regs_.find(o.data, len);
      ++bounced_;
    } else {
      ++in_place_;
    }
    o.used = true;
    o.tag = tag_;
    o.counted = false;
    o.hdr.reset();
    o.pay.reset();
    queue_.push_back(i);
    backlog_ += len;
    *op = i;
    return progress(kNoOp);
  }

  ncclResult_t test(int op, bool* done) override {
    *done = false;
    if (op < 0 || op >= slots() || !ops_[op].used) return ncclInternalError;
    ncclResult_t r = progress(op);
    if (r != ncclSuccess) return r;
    Op& o = ops_[op];
    if (o.hdr.done && o.pay.done) {
      o.used = false;
      *done = true;
    }
    return ncclSuccess;
  }

  void link_progress(uint64_t* delivered, uint64_t* backlog) override {
    *delivered = delivered_;
    *backlog = backlog_;
  }
  // One transport message per NCCL receive: its inner receives are posted at irecv, the payload's
  // straight into NCCL's buffer, so a message cannot be cut into segments here.
  bool carries_segments() const override { return false; }
  void set_tag(int tag) override { tag_ = tag; }

  ncclResult_t pin(const MemDesc& mem) override { return regs_.pin(mem); }
  void unpin(void* data) override { regs_.remove(data); }
  bool pins_staging() const override { return true; }
  // Codec frames from the GPU path's device staging, registered with the inner (dma-buf or NCCL_PTR_CUDA):
  // the inner's NIC reads them (GPUDirect), so they need no copy to pinned host memory first.
  bool posts_device() const override { return regs_.device(); }
  bool in_flight() const override { return inflight_count() > 0; }

 private:
  int inflight_count() const {
    int n = 0;
    for (const Op& o : ops_) n += o.hdr.in_flight() + o.pay.in_flight();
    return n;
  }
  struct Op {
    bool used = false;
    void* data = nullptr;
    size_t len = 0;
    void* mh = nullptr;
    int tag = 0;
    InnerReq hdr, pay;
    bool counted = false;
    Bounce bounce;
  };
  char* header(int i) { return headers_.get() + kHeaderBytes * i; }
  // As many as the compressing layer's requests (ZIPCCL_MAX_REQUESTS): with grouped receives, sends the
  // inner cannot take yet (a later group's) wait here, and must not keep out the message they wait for.
  int slots() const { return static_cast<int>(ops_.size()); }
  ncclResult_t fail(ncclResult_t r) {
    failed_ = true;
    return r;
  }
  // Posts queued messages (header, then payload), then tests op `poll`'s requests (kNoOp: none). Only
  // those: a plugin's test progresses all of its traffic, and testing every request on every call cost
  // a core's worth of polling at 8 in flight.
  // A NULL request from the inner holds back what follows until the next call: everything over an inner
  // without grouped receives (it matches by order); over one with them only the later messages with
  // the same inner tag. There a NULL means the send belongs to a later grouped receive than the one the
  // inner is filling (NCCL's IB semantics), and that one may still wait for a message posted after it:
  // another tag's, or the next header of the same tag when a group has the tag twice.
  ncclResult_t progress(int poll) {
    held_.clear();
    auto is_held = [&](int t) { return std::find(held_.begin(), held_.end(), t) != held_.end(); };
    for (auto it = queue_.begin(); it != queue_.end();) {
      int i = *it;
      Op& o = ops_[i];
      const int htag = inner_tag(o.tag, false), ptag = inner_tag(o.tag, true);
      if (!o.hdr.posted && !is_held(htag)) {
        ncclResult_t r = net_->isend(comm_, header(i), kHeaderBytes, htag, regs_.find(header(i), kHeaderBytes),
                                     &o.hdr.req);
        if (r != ncclSuccess) {
          ZIPCCL_WARN("inner plugin %s: isend of a header failed (error %d)", inner_name(), static_cast<int>(r));
          return fail(r);
        }
        o.hdr.posted = o.hdr.req != nullptr;
      }
      if (o.hdr.posted && !is_held(ptag)) {
        ncclResult_t r = net_->isend(comm_, o.data, o.len, ptag, o.mh, &o.pay.req);
        if (r != ncclSuccess) {
          ZIPCCL_WARN("inner plugin %s: isend of %zu bytes failed (error %d)", inner_name(), o.len,
                      static_cast<int>(r));
          return fail(r);
        }
        o.pay.posted = o.pay.req != nullptr;
      }
      if (o.pay.posted) {
        it = queue_.erase(it);
        continue;
      }
      if (!grouped_) break;
      if (!o.hdr.posted && !is_held(htag)) held_.push_back(htag);
      if (!is_held(ptag)) held_.push_back(ptag);
      ++it;
    }
    if (poll != kNoOp) {
      Op& o = ops_[poll];
      ncclResult_t r = o.hdr.poll(net_, "header send", &stall_);
      if (r == ncclSuccess) r = o.pay.poll(net_, "payload send", &stall_);
      if (r != ncclSuccess) return fail(r);
      if (o.pay.done && !o.counted) {
        o.counted = true;
        delivered_ += o.len;
        backlog_ -= o.len;
      }
    }
    bool busy = false;
    for (const Op& o : ops_) busy = busy || (o.used && !o.pay.done);
    if (stall_.check(busy, "send")) return fail(ncclSystemError);
    return ncclSuccess;
  }

  InnerNet* net_;
  void* comm_;
  Registrations regs_;
  std::unique_ptr<char[]> headers_;  // one header per op, registered
  std::vector<Op> ops_;
  std::deque<int> queue_;  // ops not fully posted, in post order
  Stall stall_;
  uint64_t delivered_ = 0, backlog_ = 0;
  int tag_ = 0;  // set_tag()
  uint64_t in_place_ = 0, bounced_ = 0;  // payloads posted from registered memory / copied to a bounce buffer
  std::vector<int> held_;  // progress(): inner tags held back this call (capacity kept)
  bool grouped_;
  bool failed_ = false;
};

// Receives are posted in groups (one per irecv of the compressing layer: NCCL's grouped irecv, or a
// single receive): one grouped inner receive for the group's headers, then one for its payloads, each
// receive's pair with its tag's inner tags. Headers land in registered slots; payloads in NCCL's
// buffers. peek/recv/test then take the receives in posted order.
// No DeviceFlusher: NCCL's iflush is not forwarded. The inner writes device memory only into the GPU
// path's device staging (posts_device), which zipccl's own kernels read after flushing it itself
// (flush_pinned); zipccl's stream work into NCCL's buffer completes before the receive does, so NCCL's
// iflush has nothing to make visible; forwarding it would add the inner's flush (an RDMA read on IB) to
// every device receive.
class InnerRecvConn final : public RecvConn, public BufferRegistry {
 public:
  InnerRecvConn(InnerNet* net, void* comm, int max_group, const DeviceMemory& dm)
      : net_(net),
        comm_(comm),
        regs_(net, comm, dm),
        slots_(static_cast<size_t>(settings().max_requests)),
        groups_(slots_.size()),
        max_group_(max_group) {}
  ~InnerRecvConn() override {
    ZIPCCL_INFO(NCCL_NET,
                "inner transport: receive connection closes: %llu payload(s) landed in place, %llu "
                "through its bounce buffers, %llu flush(es) of device memory",
                (unsigned long long)in_place_, (unsigned long long)bounced_, (unsigned long long)flushed_);
    const int inflight = inflight_count();
    if (inflight) {
      auto* left = new LeftOpen{comm_, std::move(regs_), std::move(headers_), {}};
      for (Slot& s : slots_) left->bounces.push_back(std::move(s.bounce));
      leave_open("receive", inflight, left);
      return;
    }
    regs_.clear();
    if (net_->close_recv(comm_) != ncclSuccess) ZIPCCL_WARN("inner plugin %s: closeRecv failed", inner_name());
  }
  ncclResult_t init() {
    headers_.reset(new char[kHeaderBytes * slots_.size()]);
    MemDesc m;
    m.data = headers_.get();
    m.size = kHeaderBytes * slots_.size();
    return regs_.add(m);
  }

  int max_group() const override { return max_group_; }
  ncclResult_t post_target(void* dst, size_t capacity, size_t staged_capacity) override {
    const int tag = 0;
    return post_group(1, &dst, &capacity, &staged_capacity, &tag);
  }
  // One per irecv, in receive order: the group's header and payload inner receives.
  ncclResult_t post_group(int n, void* const* dst, const size_t* capacity, const size_t* /*staged_capacity*/,
                          const int* tags) override {
    if (failed_) return ncclSystemError;
    if (n < 1 || n > max_group_) return ncclInternalError;
    size_t gi = 0;
    while (gi < groups_.size() && groups_[gi].used) ++gi;
    size_t idx[kMaxRecvs];
    int found = 0;
    for (size_t i = 0; i < slots_.size() && found < n; ++i) {
      if (!slots_[i].used) idx[found++] = i;
    }
    if (gi == groups_.size() || found < n) {
      ZIPCCL_WARN("inner transport: more receives posted than ZIPCCL_MAX_REQUESTS=%zu", slots_.size());
      return ncclInternalError;
    }
    Group& g = groups_[gi];
    g.used = true;
    g.n = n;
    g.open = n;
    g.hdr.reset();
    g.pay.reset();
    for (int k = 0; k < n; ++k) {
      const size_t i = idx[k];
      Slot& s = slots_[i];
      g.slot[k] = static_cast<int>(i);
      g.tag[k] = tags ? tags[k] : 0;
      s.used = true;
      s.group = static_cast<int>(gi);
      s.k = k;
      s.capacity = capacity[k];
      s.copy_to = nullptr;
      s.consumed = false;
      s.landing = static_cast<char*>(dst[k]);
      s.mh = capacity[k] ? regs_.find(dst[k], capacity[k]) : nullptr;
      if (!capacity[k]) {
        s.landing = header(i);
        s.mh = regs_.find(header(i), kHeaderBytes);
      } else if (!s.mh) {  // not registered with us (unregistered user buffers, tests without regMr)
        ncclResult_t r = s.bounce.reserve(&regs_, capacity[k]);
        if (r != ncclSuccess) return fail(r);
        s.landing = s.bounce.data();
        s.mh = regs_.find(s.landing, capacity[k]);
        ++bounced_;
      } else {
        ++in_place_;
      }
      arriving_.push_back(static_cast<int>(i));
    }
    posting_.push_back(static_cast<int>(gi));
    return progress(kNoOp);
  }

  ncclResult_t peek(uint8_t* meta, uint64_t* payload_len, bool* ready) override {
    *ready = false;
    if (failed_) return ncclSystemError;
    ncclResult_t r = progress(arriving_.empty() ? kNoOp : arriving_.front());
    if (r != ncclSuccess || arriving_.empty()) return r;
    const Slot& s = slots_[arriving_.front()];
    const Group& g = groups_[s.group];
    if (!g.hdr.done) return ncclSuccess;
    if (g.hdr.size[s.k] != kHeaderBytes) {
      ZIPCCL_WARN("inner plugin %s delivered a %zu-byte header (expected %zu): the peer is not a zipccl "
                  "inner transport",
                  inner_name(), g.hdr.size[s.k], kHeaderBytes);
      return fail(ncclSystemError);
    }
    const char* h = header(arriving_.front());
    std::memcpy(meta, h, kMetaBytes);
    std::memcpy(payload_len, h + kMetaBytes, sizeof *payload_len);
    *ready = true;
    return ncclSuccess;
  }

  ncclResult_t recv(void* dst, size_t capacity, int* op) override {
    *op = kNoOp;
    if (arriving_.empty()) return ncclInternalError;
    int i = arriving_.front();
    Slot& s = slots_[i];
    uint64_t len = 0;
    std::memcpy(&len, header(i) + kMetaBytes, sizeof len);
    if (len > capacity || len > s.capacity) {
      ZIPCCL_WARN("inner transport: a %llu-byte payload for a %zu-byte receive", (unsigned long long)len,
                  capacity < s.capacity ? capacity : s.capacity);
      return fail(ncclSystemError);
    }
    s.len = len;
    s.copy_to = dst == s.landing ? nullptr : static_cast<char*>(dst);
    s.consumed = true;
    arriving_.pop_front();
    *op = i;
    return progress(kNoOp);
  }

  ncclResult_t test(int op, bool* done) override {
    *done = false;
    if (op < 0 || op >= static_cast<int>(slots_.size()) || !slots_[op].consumed) return ncclInternalError;
    ncclResult_t r = progress(op);
    if (r != ncclSuccess) return r;
    Slot& s = slots_[op];
    Group& g = groups_[s.group];
    if (!g.pay.done) return ncclSuccess;
    if (g.pay.size[s.k] != s.len) {
      ZIPCCL_WARN("inner plugin %s delivered %zu bytes where the header announced %llu", inner_name(),
                  g.pay.size[s.k], (unsigned long long)s.len);
      return fail(ncclSystemError);
    }
    if (s.copy_to && s.len) std::memcpy(s.copy_to, s.landing, s.len);
    s.used = s.consumed = false;
    if (--g.open == 0) g.used = false;
    *done = true;
    return ncclSuccess;
  }

  ncclResult_t pin(const MemDesc& mem) override { return regs_.pin(mem); }
  void unpin(void* data) override { regs_.remove(data); }
  bool pins_staging() const override { return true; }
  // Device receives land in the GPU path's device staging when it is registered with the inner (dma-buf
  // or NCCL_PTR_CUDA).
  bool posts_device() const override { return regs_.device(); }
  bool in_flight() const override { return inflight_count() > 0; }
  // The inner's iflush on a region of a CUDA registration of ours (as NCCL calls it before its own
  // kernels read what the NIC wrote); one flush request per op slot.
  ncclResult_t flush_pinned(void* data, size_t size, int* op) override {
    *op = kNoOp;
    if (failed_) return ncclSystemError;
    void* mh = regs_.find(data, size);
    if (!mh || size > static_cast<size_t>(INT32_MAX)) {
      ZIPCCL_WARN("inner transport: flush of %zu bytes outside a registration of this connection", size);
      return fail(ncclInternalError);
    }
    size_t i = 0;
    while (i < flushes_.size() && flushes_[i]) ++i;
    if (i == flushes_.size()) flushes_.push_back(nullptr);
    void* req = nullptr;
    ncclResult_t r = net_->iflush(comm_, data, static_cast<int>(size), mh, &req);
    if (r != ncclSuccess) {
      ZIPCCL_WARN("inner plugin %s: iflush of %zu bytes failed (error %d)", inner_name(), size,
                  static_cast<int>(r));
      return fail(r);
    }
    ++flushed_;
    if (!req) return ncclSuccess;  // the inner needs no flush here
    flushes_[i] = req;
    *op = static_cast<int>(i);
    return ncclSuccess;
  }
  ncclResult_t test_flush_pinned(int op, bool* done) override {
    *done = false;
    if (op < 0 || op >= static_cast<int>(flushes_.size()) || !flushes_[op]) return ncclInternalError;
    int d = 0;
    ncclResult_t r = net_->test(flushes_[op], &d, nullptr, 0);
    if (r != ncclSuccess) {
      ZIPCCL_WARN("inner plugin %s: test of a flush failed (error %d)", inner_name(), static_cast<int>(r));
      return fail(r);
    }
    if (!d) return ncclSuccess;
    flushes_[op] = nullptr;
    *done = true;
    return ncclSuccess;
  }

 private:
  int inflight_count() const {
    int n = 0;
    for (void* f : flushes_) n += f != nullptr;
    for (const Group& g : groups_) n += g.used ? g.hdr.in_flight() + g.pay.in_flight() : 0;
    return n;
  }
  struct Slot {
    bool used = false, consumed = false;
    int group = 0, k = 0;     // its group, and its place there
    char* landing = nullptr;  // where the payload's inner receive writes: NCCL's buffer, or the bounce
    size_t capacity = 0;
    void* mh = nullptr;
    uint64_t len = 0;
    char* copy_to = nullptr;  // recv()'s destination when it is not `landing`
    Bounce bounce;
  };
  // The receives of one post_group(): their two grouped inner receives.
  struct Group {
    bool used = false;
    int n = 0, open = 0;  // open: receives not yet completed by test()
    int slot[kMaxRecvs] = {};
    int tag[kMaxRecvs] = {};
    InnerReq hdr, pay;
  };
  char* header(size_t i) { return headers_.get() + kHeaderBytes * i; }
  ncclResult_t fail(ncclResult_t r) {
    failed_ = true;
    return r;
  }
  // Posts pending grouped inner receives in order (a group's headers, then its payloads), then tests
  // slot `poll`'s group (kNoOp: none), as on the send side.
  ncclResult_t progress(int poll) {
    while (!posting_.empty()) {
      Group& g = groups_[posting_.front()];
      void* data[kMaxRecvs];
      size_t size[kMaxRecvs];
      int tag[kMaxRecvs];
      void* mh[kMaxRecvs];
      if (!g.hdr.posted) {
        for (int k = 0; k < g.n; ++k) {
          data[k] = header(g.slot[k]);
          size[k] = kHeaderBytes;
          tag[k] = inner_tag(g.tag[k], false);
          mh[k] = regs_.find(data[k], kHeaderBytes);
        }
        ncclResult_t r = net_->irecv(comm_, g.n, data, size, tag, mh, &g.hdr.req);
        if (r != ncclSuccess) {
          ZIPCCL_WARN("inner plugin %s: irecv of %d header(s) failed (error %d)", inner_name(), g.n,
                      static_cast<int>(r));
          return fail(r);
        }
        if (!g.hdr.req) break;
        g.hdr.posted = true;
      }
      for (int k = 0; k < g.n; ++k) {
        const Slot& s = slots_[g.slot[k]];
        data[k] = s.landing;
        size[k] = s.capacity;
        tag[k] = inner_tag(g.tag[k], true);
        mh[k] = s.mh;
      }
      ncclResult_t r = net_->irecv(comm_, g.n, data, size, tag, mh, &g.pay.req);
      if (r != ncclSuccess) {
        ZIPCCL_WARN("inner plugin %s: irecv of %d payload(s) of %zu bytes (first) failed (error %d)", inner_name(),
                    g.n, size[0], static_cast<int>(r));
        return fail(r);
      }
      if (!g.pay.req) break;
      g.pay.posted = true;
      posting_.pop_front();
    }
    if (poll != kNoOp) {
      Group& g = groups_[slots_[poll].group];
      ncclResult_t r = g.hdr.poll(net_, "header receive", &stall_, g.n);
      if (r == ncclSuccess && g.hdr.done) r = g.pay.poll(net_, "payload receive", &stall_, g.n);
      if (r != ncclSuccess) return fail(r);
    }
    bool busy = false;  // a message whose header arrived and whose payload has not
    for (const Group& g : groups_) busy = busy || (g.used && g.hdr.done && !g.pay.done);
    if (stall_.check(busy, "receive")) return fail(ncclSystemError);
    return ncclSuccess;
  }

  InnerNet* net_;
  void* comm_;
  Registrations regs_;
  std::unique_ptr<char[]> headers_;
  std::vector<Slot> slots_;
  std::vector<Group> groups_;
  std::deque<int> posting_;   // groups whose inner receives are not all posted, in order
  std::deque<int> arriving_;  // receives whose message recv() has not taken yet, in order
  Stall stall_;
  int max_group_;
  uint64_t in_place_ = 0, bounced_ = 0;  // receives posted into registered memory / into a bounce buffer
  uint64_t flushed_ = 0;                 // iflush calls (device staging landings)
  std::vector<void*> flushes_;           // flush requests in flight, by op
  bool failed_ = false;
};

class InnerListener final : public Listener {
 public:
  InnerListener(InnerNet* net, void* comm, int max_group, const DeviceMemory& dm)
      : net_(net), comm_(comm), max_group_(max_group), dm_(dm) {}
  ~InnerListener() override {
    if (net_->close_listen(comm_) != ncclSuccess) ZIPCCL_WARN("inner plugin %s: closeListen failed", inner_name());
  }
  ncclResult_t accept(RecvConn** conn) override {
    *conn = nullptr;
    void* rc = nullptr;
    INNER_CHECK(net_->accept(comm_, &rc), "accept");
    if (!rc) return ncclSuccess;
    std::unique_ptr<InnerRecvConn> c(new InnerRecvConn(net_, rc, max_group_, dm_));
    ZIPCCL_CHECK(c->init());
    *conn = c.release();
    return ncclSuccess;
  }

 private:
  InnerNet* net_;
  void* comm_;
  int max_group_;
  DeviceMemory dm_;
};

class InnerTransport final : public Transport {
 public:
  explicit InnerTransport(Inner* in) : in_(in) {}
  const char* name() const override { return "inner"; }
  int device_count() const override {
    std::lock_guard<std::mutex> lock(g_mu);
    return static_cast<int>(in_->props.size());
  }
  ncclResult_t device_info(int dev, DeviceInfo* info) const override {
    InnerProps p;
    if (!props_of(dev, &p)) return ncclInvalidArgument;
    info->name = std::string(in_->net->name()) + ":" + p.name;
    info->pci_path = p.pci_path;
    // 0: the inner could not tell (aws-ofi-nccl on lo or a veth). NCCL would rate the path at 0 GB/s;
    // like NCCL's socket transport for a speed it cannot read, report 10 Gbit/s.
    info->speed_mbps = p.speed > 0 ? p.speed : 10000;
    info->guid = p.guid;
    info->latency_us = p.latency;
    info->port = p.port;
    info->host_ptr = (p.ptr_support & NCCL_PTR_HOST) != 0;
    // A codec frame is never larger than its message, so the inner's limit is exactly ours.
    info->max_bytes = p.max_p2p_bytes;
    info->max_recvs = clamp_recvs(p.max_recvs);
    // A virtual device (the inner's makeVDevice): NCCL finds its physical devices in vProps.
    if (p.vdevs.size() > 1 || (p.vdevs.size() == 1 && p.vdevs[0] != dev)) info->vdevs = p.vdevs;
    return ncclSuccess;
  }
  // The handle is the inner plugin's own handle (both are NCCL_NET_HANDLE_MAXSIZE bytes).
  ncclResult_t listen(int dev, void* handle, Listener** listener) override {
    *listener = nullptr;
    void* lc = nullptr;
    INNER_CHECK(in_->net->listen(dev, handle, &lc), "listen on device %d", dev);
    *listener = new InnerListener(in_->net.get(), lc, max_recvs(dev), device_memory(dev));
    return ncclSuccess;
  }
  ncclResult_t connect(int dev, void* handle, SendConn** conn) override {
    *conn = nullptr;
    void* sc = nullptr;
    INNER_CHECK(in_->net->connect(dev, handle, &sc), "connect on device %d", dev);
    if (!sc) return ncclSuccess;
    std::unique_ptr<InnerSendConn> c(new InnerSendConn(in_->net.get(), sc, max_recvs(dev) > 1, device_memory(dev)));
    ZIPCCL_CHECK(c->init());
    *conn = c.release();
    return ncclSuccess;
  }

 private:
  // A copy of the inner's properties of `dev` (the list grows with makeVDevice, under g_mu); false when
  // there is no such device.
  bool props_of(int dev, InnerProps* p) const {
    std::lock_guard<std::mutex> lock(g_mu);
    if (dev < 0 || dev >= static_cast<int>(in_->props.size())) return false;
    *p = in_->props[dev];
    return true;
  }
  // Grouped receives as the inner offers them on `dev`, up to zipccl's own limit.
  static int clamp_recvs(int m) { return m < 1 ? 1 : m > kMaxRecvs ? kMaxRecvs : m; }
  int max_recvs(int dev) const {
    InnerProps p;
    return props_of(dev, &p) ? clamp_recvs(p.max_recvs) : 1;
  }
  // How the inner's device `dev` takes device buffers for registration (NCCL_PTR_CUDA, NCCL_PTR_DMABUF).
  DeviceMemory device_memory(int dev) const {
    DeviceMemory d;
    d.dev = dev;
    InnerProps p;
    if (!props_of(dev, &p)) return d;
    d.cuda = (p.ptr_support & NCCL_PTR_CUDA) != 0;
    d.dmabuf = (p.ptr_support & NCCL_PTR_DMABUF) != 0;
    return d;
  }
  Inner* in_;
};

InnerTransport* g_transport = nullptr;

// What zipccl's tables do not pass through from the inner (docs/notes/inner.md, "Optional entries"),
// said once per open so that a job's log explains why NCCL does not use them.
void refuse_device_side(const InnerNet& net, const std::vector<InnerProps>& props) {
  bool offload = net.has(InnerEntry::kGetDeviceMr) || net.has(InnerEntry::kIrecvConsumed);
  for (const InnerProps& p : props) offload = offload || p.net_device_type != NCCL_NET_DEVICE_HOST;
  if (offload) {
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
                "inner plugin %s offers device-side networking (netDeviceType/getDeviceMr/irecvConsumed); not "
                "used through zipccl: compression needs the bytes on the proxy path, so zipccl's devices are "
                "NCCL_NET_DEVICE_HOST and its tables have no getDeviceMr/irecvConsumed",
                net.name());
  }
}

}  // namespace

ncclResult_t inner_set_net_attr(ncclNetAttr_v12_t* attr) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_inner || !g_inner->net->has(InnerEntry::kSetNetAttr)) return ncclSuccess;
  INNER_CHECK(g_inner->net->set_net_attr(attr), "setNetAttr");
  return ncclSuccess;
}

std::string inner_capability_lost(bool gpu_path) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_inner) return "";
  const InnerNet& net = *g_inner->net;
  for (const InnerProps& p : g_inner->props) {
    if (p.net_device_type != NCCL_NET_DEVICE_HOST || net.has(InnerEntry::kGetDeviceMr) ||
        net.has(InnerEntry::kIrecvConsumed))
      return "device-side networking (netDeviceType, getDeviceMr, irecvConsumed), which zipccl does not carry";
    if (!gpu_path && (p.ptr_support & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF)))
      return "GPUDirect RDMA (its device " + p.name +
             " takes GPU memory), which zipccl's GPU path is off for (ZIPCCL_GPU=on keeps it): NCCL would stage "
             "every device buffer through host memory";
  }
  return "";
}

bool inner_has_make_vdevice() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_inner && g_inner->net->has(InnerEntry::kMakeVDevice);
}

ncclResult_t inner_make_vdevice(int* d, ncclNetVDeviceProps_v12_t* props) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_inner) return ncclInternalError;
  INNER_CHECK(g_inner->net->make_vdevice(d, props), "makeVDevice of %d device(s)", props->ndevs);
  int n = 0;
  INNER_CHECK(g_inner->net->devices(&n), "devices after makeVDevice");
  for (int i = static_cast<int>(g_inner->props.size()); i < n; ++i) {
    InnerProps p;
    INNER_CHECK(g_inner->net->properties(i, &p), "getProperties of its new device %d", i);
    g_inner->props.push_back(std::move(p));
  }
  return ncclSuccess;
}

namespace {

// One candidate of ZIPCCL_NET_INNER: opened, recognised as this library (*self), or initialised with
// its devices listed. On failure: the error, and in *why the reason, naming the library.
ncclResult_t try_inner(const std::string& name, ncclDebugLogger_t logger, std::unique_ptr<InnerNet>* out,
                       std::vector<InnerProps>* props_out, bool* self, std::string* why) {
  std::string error;
  std::unique_ptr<InnerNet> net = open_inner_net(name, &error);
  if (!net) {
    *why = error;
    return ncclInvalidUsage;
  }
  if (net->is_self()) {
    *self = true;
    return ncclSuccess;
  }
  ncclResult_t r = net->init(logger);
  if (r != ncclSuccess) {
    *why = "init of " + net->library() + " (" + net->name() + ", ABI v" + std::to_string(net->version()) +
           ") failed with error " + std::to_string(static_cast<int>(r)) + " (its own message is above)";
    return r;
  }
  int n = 0;
  r = net->devices(&n);
  std::vector<InnerProps> props(n > 0 ? n : 0);
  for (int i = 0; r == ncclSuccess && i < n; ++i) r = net->properties(i, &props[i]);
  if (r != ncclSuccess || n <= 0) {
    *why = net->library() + " (" + net->name() + ") " +
           (r != ncclSuccess ? "failed to list its devices" : "has no devices");
    net->finalize();
    return r != ncclSuccess ? r : ncclSystemError;
  }
  *out = std::move(net);
  *props_out = std::move(props);
  return ncclSuccess;
}

}  // namespace

ncclResult_t open_inner_transport(const std::string& value, const std::string& origin, ncclDebugLogger_t logger,
                                  Transport** out, bool* self) {
  std::lock_guard<std::mutex> lock(g_mu);
  *out = nullptr;
  *self = false;
  if (g_transport) {
    *out = g_transport;
    return ncclSuccess;
  }
  // NCCL_NET_PLUGIN's convention: names in order of preference, the first that loads, initialises and
  // has a device is the one.
  const std::vector<std::string> names = inner_plugin_list(value);
  std::unique_ptr<InnerNet> net;
  std::vector<InnerProps> props;
  std::string failures;
  ncclResult_t r = ncclInvalidUsage;
  for (const std::string& name : names) {
    std::string why;
    r = try_inner(name, logger, &net, &props, self, &why);
    if (r == ncclSuccess) break;
    if (names.size() > 1) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "%s: %s; trying the next", origin.c_str(), why.c_str());
    }
    failures += (failures.empty() ? "" : "; ") + why;
  }
  if (r != ncclSuccess) {
    ZIPCCL_WARN("%s: %s%s; zipccl does not initialise (NCCL falls back to its own transports)", origin.c_str(),
                names.size() > 1 ? "no plugin of the list could be used: " : "",
                names.empty() ? "names no plugin" : failures.c_str());
    return r;
  }
  if (*self) return ncclSuccess;
  const int n = static_cast<int>(props.size());
  ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "inner plugin %s (%s), ABI v%d, %d device(s)", net->library().c_str(),
              net->name(), net->version(), n);
  for (int i = 0; i < n; ++i) {
    const InnerProps& p = props[i];
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
                "inner device %d: %s speed %d Mbit/s latency %g us ptrSupport 0x%x maxRecvs %d regIsGlobal %d "
                "forceFlush %d maxComms %d maxP2pBytes %zu pci %s",
                i, p.name.c_str(), p.speed, p.latency, p.ptr_support, p.max_recvs, p.reg_is_global, p.force_flush,
                p.max_comms, p.max_p2p_bytes, p.pci_path.empty() ? "-" : p.pci_path.c_str());
  }
  refuse_device_side(*net, props);
  if (net->has(InnerEntry::kMakeVDevice)) {
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
                "inner plugin %s can fuse devices (makeVDevice): forwarded, a fused device becomes a zipccl device",
                net->name());
  }
  g_inner = new Inner{std::move(net), std::move(props)};
  g_transport = new InnerTransport(g_inner);
  *out = g_transport;
  return ncclSuccess;
}

void finalize_inner_transport() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_inner) return;
  ncclResult_t r = g_inner->net->finalize();
  if (r != ncclSuccess) ZIPCCL_WARN("inner plugin %s: finalize failed (error %d)", g_inner->net->name(), (int)r);
  delete g_transport;
  g_transport = nullptr;
  delete g_inner;  // the library itself stays loaded: its threads may still run its code
  g_inner = nullptr;
}

bool inner_transport_info(std::string* library, std::string* name, int* abi_version) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_inner) return false;
  *library = g_inner->net->library();
  *name = g_inner->net->name();
  *abi_version = g_inner->net->version();
  return true;
}

}  // namespace net
}  // namespace zipccl
