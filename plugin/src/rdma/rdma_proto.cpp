// The RDMA transport's protocol over a Fabric: clear-to-send ring, header ring, staging slots,
// pieces over several QPs, flow control, request lifetime and errors (see rdma_proto.h).
#include "rdma/rdma_proto.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/log.h"
#include "rdma/rdma_select.h"

namespace zipccl {
namespace net {
namespace {

constexpr size_t kEntryBytes = 64;  // sizeof(CtsEntry) == sizeof(DataHdr)
constexpr size_t kSlotAlign = 4096;
// How often a connection looks at its side channel for a vanished peer (a syscall for verbs).
constexpr uint64_t kAlivePollEvery = 64;

bool power_of_two(int v) {
  return v > 0 && (v & (v - 1)) == 0;
}

}  // namespace

bool side_channel_alive(int fd, const char** why) {
  char b;
  ssize_t r = ::recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return true;
  *why = r == 0 ? "the peer closed the side channel" : "the side channel failed";
  return false;
}

MrCache::MrCache(Fabric* f, size_t page) : f_(f), page_(page) {
  if (!page_) {
    long ps = sysconf(_SC_PAGESIZE);
    page_ = ps > 0 ? static_cast<size_t>(ps) : 4096;
  }
}

MrCache::~MrCache() {
  for (auto& kv : ranges_) f_->dereg(&kv.second.mr);
}

bool MrCache::share_locked(const MemDesc& mem, uint64_t* id) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(mem.data);
  for (auto& kv : ranges_) {
    Range& r = kv.second;
    if (r.device == mem.device && a >= r.base && a - r.base + mem.size <= r.len) {
      ++r.refs;
      *id = kv.first;
      return true;
    }
  }
  return false;
}

ncclResult_t MrCache::pin(const MemDesc& mem) {
  if (!mem.size) return ncclSuccess;
  const uintptr_t a = reinterpret_cast<uintptr_t>(mem.data);
  uint64_t id = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (share_locked(mem, &id)) {
      pins_.emplace(a, id);
      return ncclSuccess;
    }
  }
  // Pinning pages can take long; lookups of the data path go on meanwhile. Two pins of one new range at
  // once make two ranges, each counted and released on its own.
  const MemDesc want = page_align(mem, page_);
  MemRegion mr;
  ZIPCCL_CHECK(f_->reg_mem(want, &mr));
  registrations_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  id = next_id_++;
  ranges_.emplace(id, Range{reinterpret_cast<uintptr_t>(want.data), want.size, mem.device, mr, 1});
  pins_.emplace(a, id);
  return ncclSuccess;
}

void MrCache::unpin(void* addr) {
  MemRegion mr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto p = pins_.lower_bound(reinterpret_cast<uintptr_t>(addr));  // the oldest pin at addr
    if (p == pins_.end() || p->first != reinterpret_cast<uintptr_t>(addr)) return;
    auto it = ranges_.find(p->second);
    pins_.erase(p);
    if (it == ranges_.end() || --it->second.refs > 0) return;
    mr = it->second.mr;
    ranges_.erase(it);
  }
  f_->dereg(&mr);
}

int MrCache::refs(const void* addr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto p = pins_.lower_bound(reinterpret_cast<uintptr_t>(addr));
  if (p == pins_.end() || p->first != reinterpret_cast<uintptr_t>(addr)) return 0;
  auto it = ranges_.find(p->second);
  return it == ranges_.end() ? 0 : it->second.refs;
}

size_t MrCache::ranges() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ranges_.size();
}

ncclResult_t MrCache::get(const void* addr, size_t len, MemRegion* mr, bool* temp) {
  *temp = false;
  *mr = MemRegion{};
  if (!len) return ncclSuccess;  // nothing to access: no key needed
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& kv : ranges_) {
      const Range& r = kv.second;
      if (a >= r.base && a - r.base + len <= r.len) {
        *mr = r.mr;
        return ncclSuccess;
      }
    }
  }
  ZIPCCL_CHECK(f_->reg(const_cast<void*>(addr), len, mr));
  registrations_.fetch_add(1, std::memory_order_relaxed);
  *temp = true;
  return ncclSuccess;
}

void MrCache::release(MemRegion* mr) {
  f_->dereg(mr);
  *mr = MemRegion{};
}

RdmaEndpoint::RdmaEndpoint(std::unique_ptr<Fabric> fabric, const RdmaParams& p, size_t ring_bytes)
    : fabric_(std::move(fabric)),
      mrs_(new MrCache(fabric_.get())),
      params_(p),
      depth_(static_cast<uint32_t>(p.depth)),
      ring_bytes_(ring_bytes) {}

RdmaEndpoint::~RdmaEndpoint() {
  if (ring_mr_.handle) fabric_->dereg(&ring_mr_);
  if (out_mr_.handle) fabric_->dereg(&out_mr_);
  mrs_.reset();  // registrations go before the fabric (its protection domain)
}

ncclResult_t RdmaEndpoint::init() {
  if (!power_of_two(params_.depth) || params_.depth > kMaxDepth || params_.slots < 1 || params_.max_ops < 1) {
    ZIPCCL_WARN("RDMA: bad connection parameters (depth %d, slots %d, ops %d)", params_.depth, params_.slots,
                params_.max_ops);
    return ncclInternalError;
  }
  ring_.reset(new char[ring_bytes_]());
  out_.reset(new char[ring_bytes_]());
  ZIPCCL_CHECK(fabric_->reg(ring_.get(), ring_bytes_, &ring_mr_));
  ZIPCCL_CHECK(fabric_->reg(out_.get(), ring_bytes_, &out_mr_));
  for (int q = 0; q < fabric_->qp_count(); ++q) {
    for (int i = 0; i < params_.depth; ++i) ZIPCCL_CHECK(repost(q));
  }
  return ncclSuccess;
}

ncclResult_t RdmaEndpoint::fail(const char* fmt, ...) {
  if (error_.empty()) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    error_ = buf;
    ZIPCCL_WARN("RDMA: %s; the connection is unusable", buf);
  }
  return ncclSystemError;
}

ncclResult_t RdmaEndpoint::poll_all() {
  if (!error_.empty()) return ncclSystemError;
  if (++polls_ % kAlivePollEvery == 0) {
    const char* why = nullptr;
    if (!fabric_->peer_alive(&why)) return fail("peer vanished (%s)", why ? why : "side channel closed");
  }
  Completion wc[kPollBatch];
  for (;;) {
    int n = 0;
    if (fabric_->poll(wc, kPollBatch, &n) != ncclSuccess) return fail("polling the completion queue failed");
    for (int i = 0; i < n; ++i) {
      const Completion& c = wc[i];
      if (!c.ok) {
        static const char* kWhat[] = {"?", "receive", "write", "header write", "clear-to-send write",
                                      "flush read (loopback queue pair)"};
        WrKind k = wr_kind(c.wr_id);
        return fail("%s on QP %d completed with error: %s", k <= kWrFlush ? kWhat[k] : "operation", c.qp,
                    c.status ? c.status : "?");
      }
      ZIPCCL_CHECK(on_completion(c));
    }
    if (n < kPollBatch) return ncclSuccess;
  }
}

// ---- sender ----

RdmaSendConn::RdmaSendConn(std::unique_ptr<Fabric> fabric, const RdmaParams& p)
    : RdmaEndpoint(std::move(fabric), p, p.depth * kEntryBytes),
      ops_(p.max_ops),
      cts_(p.depth),
      cts_valid_(p.depth, 0) {
  for (int i = p.max_ops - 1; i >= 0; --i) free_ops_.push_back(i);
}

RdmaSendConn::~RdmaSendConn() {
  for (Op& o : ops_) {
    if (o.has_temp) mrs_->release(&o.temp);
  }
}

ncclResult_t RdmaSendConn::post(const uint8_t* meta, const void* payload, size_t len, int* op) {
  return enqueue(meta, payload, len, false, op);
}

ncclResult_t RdmaSendConn::post_staged(const uint8_t* meta, const void* payload, size_t len, int* op) {
  return enqueue(meta, payload, len, true, op);
}

ncclResult_t RdmaSendConn::enqueue(const uint8_t* meta, const void* payload, size_t len, bool staged,
                                   int* op) {
  *op = kNoOp;
  if (!error_.empty()) return ncclSystemError;
  if (free_ops_.empty()) return ncclSuccess;
  int id = free_ops_.back();
  free_ops_.pop_back();
  ops_[id] = Op{};
  ops_[id].used = true;
  ops_[id].len = len;
  Pending p{id, {}, static_cast<const char*>(payload), len, staged};
  std::memcpy(p.meta, meta, kMetaBytes);
  queue_.push_back(p);
  *op = id;
  return progress();
}

ncclResult_t RdmaSendConn::on_completion(const Completion& c) {
  if (c.is_recv) {
    if (!imm_is_cts(c.imm)) return fail("the receiver sent a data immediate (0x%08x) to the sender", c.imm);
    uint64_t seq = imm_seq(c.imm, next_seq_);
    if (seq >= next_seq_ + depth_)
      return fail("clear-to-send for message %llu outside the window", (unsigned long long)seq);
    CtsEntry e;
    std::memcpy(&e, ring_entry(seq, kEntryBytes), sizeof e);
    if (e.seq != seq)
      return fail("clear-to-send entry carries sequence %llu, expected %llu", (unsigned long long)e.seq,
                  (unsigned long long)seq);
    cts_[seq & (depth_ - 1)] = e;
    cts_valid_[seq & (depth_ - 1)] = 1;
    return repost(c.qp);
  }
  if (wr_kind(c.wr_id) == kWrPiece) {
    uint64_t id = wr_value(c.wr_id);
    if (id >= ops_.size() || !ops_[id].used || ops_[id].pending <= 0)
      return fail("completion for an unknown write");
    Op& o = ops_[id];
    if (--o.pending == 0) {
      delivered_ += o.len;
      if (o.has_temp) mrs_->release(&o.temp);
      o.has_temp = false;
    }
  }
  return ncclSuccess;
}

ncclResult_t RdmaSendConn::send_one(const Pending& p, const CtsEntry& cts) {
  Op& o = ops_[p.op];
  Landing where = Landing::kRefused;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  // A staged payload (compressed frame) goes to the slot, or to the posted buffer when the slot is too
  // small (the receiver copies it out before decoding); anything else only to the posted buffer.
  if (p.staged && p.len <= cts.slot_cap) {
    where = Landing::kStaged;
  } else if (p.len <= cts.posted_cap) {
    where = Landing::kPosted;
  }
  if (where == Landing::kStaged) {
    raddr = cts.slot_addr;
    rkey = cts.slot_rkey;
  } else if (where == Landing::kPosted) {
    raddr = cts.posted_addr;
    rkey = cts.posted_rkey;
  } else {
    ZIPCCL_WARN(
        "RDMA: message %llu of %zu bytes fits neither the posted receive (%llu B) nor the staging slot "
        "(%llu B); refusing it",
        (unsigned long long)next_seq_, p.len, (unsigned long long)cts.posted_cap,
        (unsigned long long)cts.slot_cap);
  }
  size_t len = where == Landing::kRefused ? 0 : p.len;
  int nqp = fabric_->qp_count();
  int pieces = 1;
  if (len > params_.min_chunk) {
    size_t want = (len + params_.min_chunk - 1) / params_.min_chunk;
    pieces = want < static_cast<size_t>(nqp) ? static_cast<int>(want) : nqp;
  }
  if (len && !o.has_temp) {
    MemRegion mr;
    bool temp = false;
    ZIPCCL_CHECK(mrs_->get(p.payload, len, &mr, &temp));
    o.temp = mr;
    o.has_temp = temp;
  }
  DataHdr* h = reinterpret_cast<DataHdr*>(out_.get() + (next_seq_ & (depth_ - 1)) * kEntryBytes);
  *h = DataHdr{};
  h->seq = next_seq_;
  h->len = p.len;
  h->landing = static_cast<uint32_t>(where);
  h->pieces = static_cast<uint32_t>(pieces);
  std::memcpy(h->meta, p.meta, kMetaBytes);
  int q0 = static_cast<int>(next_seq_ % nqp);
  uint64_t hdr_raddr = peer_ring_.addr + (next_seq_ & (depth_ - 1)) * kEntryBytes;
  o.pending = pieces;
  o.sent = true;
  ZIPCCL_CHECK(fabric_->write(q0, wr(kWrHeader, p.op), h, out_mr_.lkey, sizeof *h, hdr_raddr, peer_ring_.rkey,
                              false, 0, false));
  size_t chunk = (len + pieces - 1) / pieces;
  for (int i = 0; i < pieces; ++i) {
    size_t off = static_cast<size_t>(i) * chunk;
    size_t n = off >= len ? 0 : (len - off < chunk ? len - off : chunk);
    ZIPCCL_CHECK(fabric_->write((q0 + i) % nqp, wr(kWrPiece, p.op), p.payload + off, o.temp.lkey, n,
                                raddr + off, rkey, true, imm_data(next_seq_, i, where), true));
  }
  written_ += len;
  cts_valid_[next_seq_ & (depth_ - 1)] = 0;
  ++next_seq_;
  if (where == Landing::kRefused) return fail("message larger than the receiver's buffers (see above)");
  return ncclSuccess;
}

ncclResult_t RdmaSendConn::progress() {
  ZIPCCL_CHECK(poll_all());
  while (!queue_.empty() && cts_valid_[next_seq_ & (depth_ - 1)]) {
    Pending p = queue_.front();
    queue_.pop_front();
    ZIPCCL_CHECK(send_one(p, cts_[next_seq_ & (depth_ - 1)]));
  }
  return ncclSuccess;
}

ncclResult_t RdmaSendConn::test(int op, bool* done) {
  *done = false;
  if (op < 0 || op >= static_cast<int>(ops_.size()) || !ops_[op].used) {
    ZIPCCL_WARN("RDMA: test on an unknown send op %d", op);
    return ncclInternalError;
  }
  ZIPCCL_CHECK(progress());
  Op& o = ops_[op];
  if (o.sent && o.pending == 0) {
    *done = true;
    o.used = false;
    free_ops_.push_back(op);
  }
  return ncclSuccess;
}

void RdmaSendConn::link_progress(uint64_t* delivered, uint64_t* backlog) {
  *delivered = delivered_;
  *backlog = written_ - delivered_;  // bytes on the wire; messages waiting for a CTS wait for the receiver
}

// ---- receiver ----

RdmaRecvConn::RdmaRecvConn(std::unique_ptr<Fabric> fabric, const RdmaParams& p)
    : RdmaEndpoint(std::move(fabric), p, p.depth * kEntryBytes),
      entries_(p.depth),
      slots_(p.slots),
      op_used_(p.max_ops, 0),
      flushes_(p.max_ops < Fabric::kMaxFlushReads ? p.max_ops : Fabric::kMaxFlushReads) {}

RdmaRecvConn::~RdmaRecvConn() {
  for (Entry& e : entries_) {
    if (e.posted_temp) mrs_->release(&e.posted_mr);
  }
  for (FlushOp& f : flushes_) {
    if (f.has_temp) mrs_->release(&f.temp);
  }
  if (flush_mr_.handle) fabric_->dereg(&flush_mr_);
  for (Slot& s : slots_) free_slot_memory(&s);
}

void RdmaRecvConn::free_slot_memory(Slot* s) {
  if (s->mr.handle) fabric_->dereg(&s->mr);
  std::free(s->mem);
  *s = Slot{};
}

int RdmaRecvConn::free_slots() const {
  int n = 0;
  for (const Slot& s : slots_) n += !s.busy;
  return n;
}

ncclResult_t RdmaRecvConn::post_target(void* dst, size_t capacity, size_t staged_capacity) {
  if (!error_.empty()) return ncclSystemError;
  targets_.push_back(Target{dst, capacity, staged_capacity});
  return progress();
}

// Clears the next announced receive: registers its buffer, attaches a staging slot (grown to the
// size asked for) and writes the CTS entry into the sender's ring.
ncclResult_t RdmaRecvConn::clear_next() {
  Target t = targets_.front();
  int si = -1;
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    if (!slots_[i].busy) {
      si = i;
      break;
    }
  }
  Slot& s = slots_[si];
  if (s.cap < t.staged_cap) {
    free_slot_memory(&s);
    size_t cap = (t.staged_cap + kSlotAlign - 1) / kSlotAlign * kSlotAlign;
    s.mem = static_cast<char*>(std::aligned_alloc(kSlotAlign, cap));
    if (!s.mem) return fail("cannot allocate a %zu-byte staging slot", cap);
    s.cap = cap;
    ZIPCCL_CHECK(fabric_->reg(s.mem, cap, &s.mr));
  }
  Entry& e = entries_[next_cts_ & (depth_ - 1)];
  e = Entry{};
  ZIPCCL_CHECK(mrs_->get(t.dst, t.cap, &e.posted_mr, &e.posted_temp));
  s.busy = true;
  e.cleared = true;
  e.seq = next_cts_;
  e.target = t;
  e.slot = si;
  CtsEntry* c = reinterpret_cast<CtsEntry*>(out_.get() + (next_cts_ & (depth_ - 1)) * kEntryBytes);
  *c = CtsEntry{};
  c->seq = next_cts_;
  c->posted_addr = reinterpret_cast<uintptr_t>(t.dst);
  c->posted_cap = t.cap;
  c->posted_rkey = e.posted_mr.rkey;
  c->slot_addr = reinterpret_cast<uintptr_t>(s.mem);
  c->slot_cap = t.staged_cap;  // not the slot's size: a frame bigger than asked for is refused
  c->slot_rkey = s.mr.rkey;
  uint64_t raddr = peer_ring_.addr + (next_cts_ & (depth_ - 1)) * kEntryBytes;
  ZIPCCL_CHECK(fabric_->write(0, wr(kWrCts, next_cts_), c, out_mr_.lkey, sizeof *c, raddr, peer_ring_.rkey,
                              true, imm_cts(next_cts_), true));
  targets_.pop_front();
  ++next_cts_;
  return ncclSuccess;
}

ncclResult_t RdmaRecvConn::on_completion(const Completion& c) {
  if (!c.is_recv && wr_kind(c.wr_id) == kWrFlush) {
    uint64_t id = wr_value(c.wr_id);
    if (id >= flushes_.size() || !flushes_[id].used || flushes_[id].done)
      return fail("completion for an unknown flush read");
    FlushOp& f = flushes_[id];
    f.done = true;
    if (f.has_temp) mrs_->release(&f.temp);
    f.has_temp = false;
    return ncclSuccess;
  }
  if (!c.is_recv) return ncclSuccess;  // a CTS write went out
  if (imm_is_cts(c.imm)) return fail("the sender sent a clear-to-send immediate (0x%08x)", c.imm);
  uint64_t seq = imm_seq(c.imm, next_peek_);
  if (seq >= next_cts_)
    return fail("data for message %llu, which was never cleared", (unsigned long long)seq);
  Entry& e = entries_[seq & (depth_ - 1)];
  uint32_t where = imm_landing(c.imm);
  if (!e.cleared || e.seq != seq || where > static_cast<uint32_t>(Landing::kRefused)) {
    return fail("inconsistent immediate 0x%08x for message %llu", c.imm, (unsigned long long)seq);
  }
  ++e.pieces_seen;
  if (imm_piece(c.imm) == 0) {
    if (e.header_seen) return fail("message %llu: piece 0 arrived twice", (unsigned long long)seq);
    e.header_seen = true;
    std::memcpy(&e.hdr, ring_entry(seq, kEntryBytes), sizeof e.hdr);
    const DataHdr& h = e.hdr;
    const char* bad = nullptr;
    uint64_t cap = h.landing == static_cast<uint32_t>(Landing::kStaged) ? e.target.staged_cap : e.target.cap;
    if (h.seq != seq)
      bad = "wrong sequence number";
    else if (h.landing != where)
      bad = "header and immediate disagree on the landing";
    else if (h.pieces < 1 || h.pieces > static_cast<uint32_t>(fabric_->qp_count()))
      bad = "bad piece count";
    else if (h.landing != static_cast<uint32_t>(Landing::kRefused) && h.len > cap)
      bad = "more bytes than the target holds";
    if (bad) return fail("corrupt header for message %llu: %s", (unsigned long long)seq, bad);
  }
  if (imm_piece(c.imm) >= static_cast<unsigned>(fabric_->qp_count()) ||
      (e.header_seen && static_cast<uint32_t>(e.pieces_seen) > e.hdr.pieces)) {
    return fail("message %llu: more pieces than announced", (unsigned long long)seq);
  }
  return repost(c.qp);
}

ncclResult_t RdmaRecvConn::progress() {
  ZIPCCL_CHECK(poll_all());
  while (!targets_.empty() && next_cts_ < next_peek_ + depth_ && free_slots() > 0) ZIPCCL_CHECK(clear_next());
  return ncclSuccess;
}

RdmaRecvConn::Entry* RdmaRecvConn::arrived() {
  Entry& e = entries_[next_peek_ & (depth_ - 1)];
  if (!e.cleared || e.seq != next_peek_ || !e.header_seen) return nullptr;
  return static_cast<uint32_t>(e.pieces_seen) == e.hdr.pieces ? &e : nullptr;
}

void RdmaRecvConn::consume(Entry* e, bool keep_slot) {
  if (e->posted_temp) mrs_->release(&e->posted_mr);
  if (!keep_slot) slots_[e->slot].busy = false;
  *e = Entry{};
  ++next_peek_;
}

ncclResult_t RdmaRecvConn::peek(uint8_t* meta, uint64_t* payload_len, bool* ready) {
  *ready = false;
  ZIPCCL_CHECK(progress());
  Entry* e = arrived();
  if (!e) return ncclSuccess;
  std::memcpy(meta, e->hdr.meta, kMetaBytes);
  *payload_len = e->hdr.len;
  *ready = true;
  return ncclSuccess;
}

ncclResult_t RdmaRecvConn::recv(void* dst, size_t capacity, int* op) {
  *op = kNoOp;
  if (!error_.empty()) return ncclSystemError;
  Entry* e = arrived();
  if (!e) {
    ZIPCCL_WARN("RDMA: recv without a peeked message");
    return ncclInternalError;
  }
  if (e->hdr.landing == static_cast<uint32_t>(Landing::kRefused)) {
    return fail("the sender refused message %llu of %llu bytes: larger than the posted receive (%zu B)",
                (unsigned long long)e->seq, (unsigned long long)e->hdr.len, e->target.cap);
  }
  if (e->hdr.len > capacity) {
    return fail("incoming message carries %llu bytes but the receive buffer holds %zu; refusing it",
                (unsigned long long)e->hdr.len, capacity);
  }
  int id = -1;
  for (int i = 0; i < static_cast<int>(op_used_.size()); ++i) {
    if (!op_used_[i]) {
      id = i;
      break;
    }
  }
  if (id < 0) return ncclSuccess;
  const char* src = e->hdr.landing == static_cast<uint32_t>(Landing::kStaged)
                        ? slots_[e->slot].mem
                        : static_cast<char*>(e->target.dst);
  if (e->hdr.len && src != dst) std::memcpy(dst, src, e->hdr.len);
  consume(e, false);
  op_used_[id] = 1;
  *op = id;
  return progress();  // the freed ring entry and slot may clear the next receive
}

ncclResult_t RdmaRecvConn::test(int op, bool* done) {
  *done = false;
  if (op < 0 || op >= static_cast<int>(op_used_.size()) || !op_used_[op]) {
    ZIPCCL_WARN("RDMA: test on an unknown receive op %d", op);
    return ncclInternalError;
  }
  ZIPCCL_CHECK(progress());
  *done = true;  // the payload was in place (or copied) when recv() returned
  op_used_[op] = 0;
  return ncclSuccess;
}

const void* RdmaRecvConn::take_staged() {
  if (!error_.empty()) return nullptr;
  Entry* e = arrived();
  if (!e || e->hdr.landing != static_cast<uint32_t>(Landing::kStaged)) return nullptr;
  const char* p = slots_[e->slot].mem;
  consume(e, true);
  return p;
}

void RdmaRecvConn::release_staged(const void* payload) {
  for (Slot& s : slots_) {
    if (s.busy && s.mem == payload) {
      s.busy = false;
      break;
    }
  }
  if (error_.empty()) progress();  // the freed slot may clear the next receive; errors surface in test()
}

// ---- flush (NCCL's iflush after a GPUDirect receive) ----

ncclResult_t RdmaRecvConn::flush(void* data, size_t size, int* op) {
  *op = kNoOp;
  if (!error_.empty()) return ncclSystemError;
  if (!size) return ncclSuccess;  // nothing landed: nothing to flush
  int id = -1;
  for (int i = 0; i < static_cast<int>(flushes_.size()); ++i) {
    if (!flushes_[i].used) {
      id = i;
      break;
    }
  }
  if (id < 0) {
    ZIPCCL_WARN("RDMA: more than %zu flushes in flight on one connection", flushes_.size());
    return ncclInternalError;
  }
  if (!flush_buf_) {
    flush_buf_.reset(new char[64]());
    ncclResult_t r = fabric_->reg(flush_buf_.get(), 64, &flush_mr_);
    if (r != ncclSuccess) {
      flush_buf_.reset();
      return fail("cannot register the flush buffer");
    }
  }
  FlushOp& f = flushes_[id];
  f = FlushOp{};
  MemRegion mr;
  bool temp = false;
  ZIPCCL_CHECK(mrs_->get(data, 1, &mr, &temp));
  f.temp = mr;
  f.has_temp = temp;
  f.used = true;
  ncclResult_t r = fabric_->flush_read(wr(kWrFlush, id), flush_buf_.get(), flush_mr_.lkey, 1,
                                       reinterpret_cast<uintptr_t>(data), mr.rkey);
  if (r != ncclSuccess) {
    if (f.has_temp) mrs_->release(&f.temp);
    f = FlushOp{};
    return fail("posting the flush read failed");
  }
  *op = id;
  return ncclSuccess;
}

ncclResult_t RdmaRecvConn::test_flush(int op, bool* done) {
  *done = false;
  if (op < 0 || op >= static_cast<int>(flushes_.size()) || !flushes_[op].used) {
    ZIPCCL_WARN("RDMA: test on an unknown flush %d", op);
    return ncclInternalError;
  }
  ZIPCCL_CHECK(progress());
  FlushOp& f = flushes_[op];
  if (f.done) {
    *done = true;
    f = FlushOp{};
  }
  return ncclSuccess;
}

int RdmaRecvConn::flushes_in_flight() const {
  int n = 0;
  for (const FlushOp& f : flushes_) n += f.used;
  return n;
}

}  // namespace net
}  // namespace zipccl
