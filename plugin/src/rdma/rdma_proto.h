// The RDMA transport's protocol, independent of libibverbs: it speaks only to a Fabric (rdma_fabric.h),
// so the CPU tests run it through the loopback fabric.
//
// Flow (one connection, messages in order, sequence numbers from 0):
// - The receive comm announces each receive with post_target(dst, capacity, staged_capacity). For
//   sequence s the receiver writes a clear-to-send entry (CtsEntry) with an immediate into slot
//   s % depth of the sender's CTS ring. It carries two targets: the posted buffer (raw frames land
//   there, zero copy) and a staging slot of the receiver's (compressed frames land there).
// - The sender, for message s, picks a target (post_staged -> slot when it fits; post -> the posted
//   buffer when it fits), writes the DataHdr (meta, length, landing, pieces) into slot s % depth of
//   the receiver's header ring, then the payload as 1..qp_count pieces, each an RDMA write with
//   immediate on its own QP (piece i on QP (s + i) % qp_count; the header precedes piece 0 on the
//   same QP, so piece 0's arrival means the header is in place).
// - A message fits neither target: only the header goes, marked refused, and the receiver's recv()
//   fails - no byte is written to the receiver's memory.
// - Flow control: the receiver clears s only once s - depth has been consumed (its ring entries are
//   free) and a staging slot is free; slots stay held while the receive comm decodes from them.
//
// Immediate value (32 bits): bit 31 = 1: CTS, bits 0..15 = seq & 0xffff. Bit 31 = 0: data, bits
// 0..15 = seq & 0xffff, bits 16..23 = piece index, bits 24..25 = landing (0 posted buffer, 1 staging
// slot, 2 refused). The full sequence number is recovered from the window (depth <= 1024).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "rdma/rdma_fabric.h"
#include "transport.h"

namespace zipccl {
namespace net {

enum class Landing : uint32_t { kPosted = 0, kStaged = 1, kRefused = 2 };

constexpr uint32_t kImmCts = 1u << 31;
constexpr int kMaxDepth = 1024;

inline uint32_t imm_data(uint64_t seq, unsigned piece, Landing where) {
  return static_cast<uint32_t>(seq & 0xffff) | (piece & 0xffu) << 16 | static_cast<uint32_t>(where) << 24;
}
inline uint32_t imm_cts(uint64_t seq) {
  return kImmCts | static_cast<uint32_t>(seq & 0xffff);
}
inline bool imm_is_cts(uint32_t imm) {
  return imm & kImmCts;
}
inline unsigned imm_piece(uint32_t imm) {
  return (imm >> 16) & 0xff;
}
inline uint32_t imm_landing(uint32_t imm) {
  return (imm >> 24) & 0x7f;
}
// The sequence number >= base whose low 16 bits are those of imm.
inline uint64_t imm_seq(uint32_t imm, uint64_t base) {
  return base + static_cast<uint16_t>(static_cast<uint16_t>(imm & 0xffff) - static_cast<uint16_t>(base));
}

// Written by the receiver into the sender's CTS ring.
struct CtsEntry {
  uint64_t seq;
  uint64_t posted_addr;
  uint64_t posted_cap;
  uint64_t slot_addr;
  uint64_t slot_cap;
  uint32_t posted_rkey;
  uint32_t slot_rkey;
  uint64_t reserved[2];
};
static_assert(sizeof(CtsEntry) == 64, "CTS entry layout");

// Written by the sender into the receiver's header ring, before the payload.
struct DataHdr {
  uint64_t seq;
  uint64_t len;
  uint32_t landing;
  uint32_t pieces;
  uint64_t reserved;
  uint8_t meta[kMetaBytes];
};
static_assert(sizeof(DataHdr) == 64, "data header layout");

// A ring one side exposes to the other (exchanged at connection setup).
struct RingInfo {
  uint64_t addr;
  uint32_t rkey;
  uint32_t depth;
};

struct RdmaParams {
  int depth = 16;                // CTS / header ring entries (power of two, <= kMaxDepth)
  int slots = 16;                // receiver staging slots
  int max_ops = 64;              // ops in flight per connection (the comms' request count)
  size_t min_chunk = 128 << 10;  // smallest piece when a message is spread over the QPs
};

// Registrations of one connection. Buffers NCCL registers (pin: regMr / regMrDmaBuf) are registered
// as whole pages and shared: a pin inside a range already registered (same memory kind) only counts a
// reference, so repeated regMr of the same buffer costs no verbs call; the range is deregistered when
// its last pin goes. Any other range gets a temporary registration for one operation (memory the
// plugin does not own may be freed and its addresses reused, so it is never cached).
// Thread-safe: NCCL pins and unpins (regMr/deregMr of user buffers) on its proxy service thread while
// its progress thread looks ranges up for the data path. Fabric registration and deregistration run
// outside the lock, so a large registration does not stall the data path.
class MrCache {
 public:
  // page: the registration granularity (a power of two); 0: the host page size.
  explicit MrCache(Fabric* f, size_t page = 0);
  ~MrCache();
  ncclResult_t pin(const MemDesc& mem);
  void unpin(void* addr);  // one pin made at addr (no-op when there is none)
  // A region covering [addr, addr + len): a pinned one, or a new one (*temp) to hand to release().
  ncclResult_t get(const void* addr, size_t len, MemRegion* mr, bool* temp);
  void release(MemRegion* mr);
  uint64_t registrations() const { return registrations_.load(std::memory_order_relaxed); }  // made so far
  size_t ranges() const;  // registered pinned ranges
  int refs(const void* addr) const;  // pins sharing the range that pins at addr use (0: none)

 private:
  struct Range {
    uintptr_t base;
    size_t len;
    bool device;
    MemRegion mr;
    int refs;
  };
  Fabric* f_;
  size_t page_;
  bool share_locked(const MemDesc& mem, uint64_t* id);  // a pinned range of mem's kind covering mem
  mutable std::mutex mu_;                       // ranges_, pins_, next_id_
  std::map<uint64_t, Range> ranges_;            // by id
  std::multimap<uintptr_t, uint64_t> pins_;     // pinned address -> range id
  uint64_t next_id_ = 1;
  std::atomic<uint64_t> registrations_{0};
};

// Shared by both directions: the fabric, the error state and the receive-queue bookkeeping.
class RdmaEndpoint : public BufferRegistry {
 public:
  RdmaEndpoint(std::unique_ptr<Fabric> fabric, const RdmaParams& p, size_t ring_bytes);
  virtual ~RdmaEndpoint();
  // Registers the local ring and posts the receives; call once before use.
  ncclResult_t init();
  RingInfo ring() const { return RingInfo{reinterpret_cast<uintptr_t>(ring_.get()), ring_mr_.rkey, depth_}; }
  void set_peer_ring(const RingInfo& r) { peer_ring_ = r; }
  MrCache& mrs() { return *mrs_; }
  ncclResult_t pin(const MemDesc& mem) override { return mrs_->pin(mem); }
  void unpin(void* data) override { mrs_->unpin(data); }
  // zipccl's own send staging (the CPU codec's, the GPU path's pinned host staging) is registered once
  // per buffer, not for every message posted from it.
  bool pins_staging() const override { return true; }
  const std::string& error() const { return error_; }

 protected:
  static constexpr int kPollBatch = 32;
  enum WrKind : uint64_t { kWrRecv = 1, kWrPiece = 2, kWrHeader = 3, kWrCts = 4, kWrFlush = 5 };
  static uint64_t wr(WrKind k, uint64_t v) {
    return static_cast<uint64_t>(k) << 56 | (v & 0xffffffffffffull);
  }
  static WrKind wr_kind(uint64_t id) { return static_cast<WrKind>(id >> 56); }
  static uint64_t wr_value(uint64_t id) { return id & 0xffffffffffffull; }

  // Polls the fabric, handing each good completion to on_completion(); marks the connection failed
  // on a bad one or a vanished peer.
  ncclResult_t poll_all();
  virtual ncclResult_t on_completion(const Completion& c) = 0;
  ncclResult_t fail(const char* fmt, ...) __attribute__((format(printf, 2, 3)));
  ncclResult_t repost(int qp) { return fabric_->post_recv(qp, wr(kWrRecv, qp)); }
  char* ring_entry(uint64_t seq, size_t size) { return ring_.get() + (seq & (depth_ - 1)) * size; }

  std::unique_ptr<Fabric> fabric_;
  std::unique_ptr<MrCache> mrs_;
  RdmaParams params_;
  uint32_t depth_;
  size_t ring_bytes_;
  std::unique_ptr<char[]> ring_;  // CTS ring (sender) or header ring (receiver)
  MemRegion ring_mr_;
  std::unique_ptr<char[]> out_;  // what this side writes to the peer's ring, one entry per slot
  MemRegion out_mr_;
  RingInfo peer_ring_{};
  std::string error_;
  uint64_t polls_ = 0;
};

class RdmaSendConn final : public RdmaEndpoint, public SendConn {
 public:
  RdmaSendConn(std::unique_ptr<Fabric> fabric, const RdmaParams& p);
  ~RdmaSendConn() override;
  ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) override;
  ncclResult_t post_staged(const uint8_t* meta, const void* payload, size_t len, int* op) override;
  ncclResult_t test(int op, bool* done) override;
  void link_progress(uint64_t* delivered, uint64_t* backlog) override;
  // One post_target() per transport message on the receiving side: messages go whole.
  bool carries_segments() const override { return false; }

 private:
  struct Op {
    bool used = false;
    bool sent = false;
    int pending = 0;  // piece completions still to come
    size_t len = 0;
    MemRegion temp;
    bool has_temp = false;
  };
  struct Pending {
    int op;
    uint8_t meta[kMetaBytes];
    const char* payload;
    size_t len;
    bool staged;
  };
  ncclResult_t enqueue(const uint8_t* meta, const void* payload, size_t len, bool staged, int* op);
  ncclResult_t progress();
  ncclResult_t send_one(const Pending& p, const CtsEntry& cts);
  ncclResult_t on_completion(const Completion& c) override;

  std::vector<Op> ops_;
  std::vector<int> free_ops_;
  std::deque<Pending> queue_;
  std::vector<CtsEntry> cts_;  // copies of the entries received, by seq % depth
  std::vector<char> cts_valid_;
  uint64_t next_seq_ = 0;
  uint64_t written_ = 0, delivered_ = 0;
};

class RdmaRecvConn final : public RdmaEndpoint, public RecvConn, public DeviceFlusher {
 public:
  RdmaRecvConn(std::unique_ptr<Fabric> fabric, const RdmaParams& p);
  ~RdmaRecvConn() override;
  ncclResult_t post_target(void* dst, size_t capacity, size_t staged_capacity) override;
  ncclResult_t peek(uint8_t* meta, uint64_t* payload_len, bool* ready) override;
  ncclResult_t recv(void* dst, size_t capacity, int* op) override;
  ncclResult_t test(int op, bool* done) override;
  const void* take_staged() override;
  void release_staged(const void* payload) override;
  // NCCL's iflush: a one-byte RDMA read of `data` (which must be registered: pinned, or registered
  // for this flush only) through the fabric's loopback queue pair into a small host buffer.
  ncclResult_t flush(void* data, size_t size, int* op) override;
  ncclResult_t test_flush(int op, bool* done) override;
  int free_slots() const;
  int flushes_in_flight() const;

 private:
  struct Target {
    void* dst;
    size_t cap;
    size_t staged_cap;
  };
  struct Entry {
    bool cleared = false;  // CTS written, message not consumed yet
    uint64_t seq = 0;
    Target target{};
    MemRegion posted_mr;
    bool posted_temp = false;
    int slot = -1;
    int pieces_seen = 0;
    bool header_seen = false;
    DataHdr hdr{};
  };
  struct Slot {
    char* mem = nullptr;
    size_t cap = 0;
    MemRegion mr;
    bool busy = false;
  };
  ncclResult_t progress();
  ncclResult_t clear_next();
  ncclResult_t on_completion(const Completion& c) override;
  Entry* arrived();
  void consume(Entry* e, bool keep_slot);
  void free_slot_memory(Slot* s);

  std::deque<Target> targets_;
  std::vector<Entry> entries_;
  std::vector<Slot> slots_;
  std::vector<char> op_used_;
  struct FlushOp {
    bool used = false;
    bool done = false;
    MemRegion temp;
    bool has_temp = false;
  };
  std::vector<FlushOp> flushes_;
  std::unique_ptr<char[]> flush_buf_;  // where flush reads land (never read)
  MemRegion flush_mr_;
  uint64_t next_cts_ = 0;   // next sequence number to clear
  uint64_t next_peek_ = 0;  // oldest message not consumed
};

}  // namespace net
}  // namespace zipccl
