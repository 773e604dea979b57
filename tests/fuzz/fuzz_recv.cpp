// libFuzzer entry point for the plugin's receive side: what a peer puts on the wire (each transport
// message's 32-byte frame header and its payload) is untrusted, and RecvComm must turn any of it into
// a completed receive or an error - never a crash, a write outside the posted buffer, or a receive that
// hangs while data is waiting. The transport under it (a stand-in) is trusted as the real ones are: it
// reports each payload's true length and refuses one larger than the receive's room.
//
// Input: [u8 r][u32 capacity] x (1 + r % 4), then messages [32-byte header][u32 length][payload]
// until the input ends (a payload shorter than its length takes what is left). Each capacity is
// reduced modulo 1 MiB + 1. The receives are posted one after another, each driven until it
// completes, fails, or has consumed every message and waits for more; with bit 6 of r set they are
// posted at once, as one grouped irecv (receive i takes tag i, as an inner plugin's grouped receives
// do; the stand-in delivers in input order, and a message whose tag is not its receive's fails it).
// With bit 7 set they are device receives (registered first, as NCCL's regMr does) through the GPU
// path on the host emulation (plugin/testing), whose decodes are the CPU codec's on the emulated
// stream.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "layer/comm.h"
#include "layer/frame.h"
#include "transport.h"

using namespace zipccl::net;

namespace {

// The seeds' segments (fuzz_recv_replay.cpp: 64 KiB), and the host emulation as the device operations
// of device receives. Set before the plugin reads its settings, unless the caller set them.
const bool g_env = [] {
  setenv("ZIPCCL_SEGMENT_BYTES", "64KiB", 0);
  setenv("ZIPCCL_GPU_EMULATE", "1", 0);
  return true;
}();

struct Message {
  uint8_t meta[kMetaBytes];
  std::vector<uint8_t> payload;
};

// Delivers the messages in order, each op complete at once.
class WireConn final : public RecvConn {
 public:
  explicit WireConn(std::vector<Message> m) : msgs_(std::move(m)) {}
  ncclResult_t peek(uint8_t* meta, uint64_t* len, bool* ready) override {
    *ready = next_ < msgs_.size();
    if (*ready) {
      std::memcpy(meta, msgs_[next_].meta, kMetaBytes);
      *len = msgs_[next_].payload.size();
    }
    return ncclSuccess;
  }
  ncclResult_t recv(void* dst, size_t capacity, int* op) override {
    if (next_ >= msgs_.size()) return ncclInternalError;  // recv() without a peeked message: a bug
    const std::vector<uint8_t>& p = msgs_[next_].payload;
    if (p.size() > capacity) return ncclSystemError;
    if (!p.empty()) std::memcpy(dst, p.data(), p.size());
    ++next_;
    *op = 0;
    return ncclSuccess;
  }
  ncclResult_t test(int, bool* done) override {
    *done = true;
    return ncclSuccess;
  }
  // A grouped irecv's receives take the messages in the order posted (the stand-in matches no tags).
  int max_group() const override { return kMaxRecvs; }
  ncclResult_t post_group(int, void* const*, const size_t*, const size_t*, const int*) override {
    return ncclSuccess;
  }
  bool exhausted() const { return next_ >= msgs_.size(); }
  // Whether the messages consumed since `from` make a whole message for each of n receives of
  // capacity[0..n), in turn, by the receive side's own rules (frame.h): if so the receives must
  // complete or fail; if not, they wait for more.
  bool whole_since(size_t from, const size_t* capacity, size_t n) const {
    size_t k = from;
    for (size_t i = 0; i < n; ++i) {
      Assembly a;
      a.reset(capacity[i]);
      while (!a.complete) {
        if (k >= next_) return false;
        FrameMeta m;
        std::memcpy(&m, msgs_[k].meta, sizeof m);
        if (a.accept(m, msgs_[k].payload.size())) return false;
        ++k;
      }
    }
    return true;
  }
  size_t consumed() const { return next_; }

 private:
  std::vector<Message> msgs_;
  size_t next_ = 0;
};

[[noreturn]] void fail(const char* what, size_t receive) {
  std::fprintf(stderr, "fuzz_recv: receive %zu: %s\n", receive, what);
  std::abort();
}

uint32_t read32(const uint8_t*& p, const uint8_t* end) {
  uint32_t v = 0;
  const size_t n = std::min<size_t>(4, static_cast<size_t>(end - p));
  std::memcpy(&v, p, n);
  p += n;
  return v;
}

constexpr size_t kGuard = 64;
constexpr uint8_t kGuardByte = 0xA5;
constexpr size_t kMaxCapacity = 1 << 20;

}  // namespace

// Where each transport message of an input starts (its header) and its payload's length: the input's
// format, for fuzz_recv_one and for the replay's mutations.
std::vector<std::pair<size_t, size_t>> fuzz_recv_messages(const uint8_t* data, size_t size) {
  std::vector<std::pair<size_t, size_t>> out;
  if (size < 1) return out;
  const uint8_t* const end = data + size;
  const uint8_t* p = data + std::min<size_t>(size, 1 + 4 * (1 + data[0] % 4));
  while (end - p >= static_cast<ptrdiff_t>(kMetaBytes)) {
    const size_t at = static_cast<size_t>(p - data);
    p += kMetaBytes;
    const size_t len = std::min<size_t>(read32(p, end), static_cast<size_t>(end - p));
    out.emplace_back(at, len);
    p += len;
  }
  return out;
}

// One input; *received (when set) gets the bytes of each receive that completed, in order.
void fuzz_recv_one(const uint8_t* data, size_t size, std::vector<std::vector<uint8_t>>* received) {
  (void)g_env;
  if (size < 1) return;
  const uint8_t* p = data;
  const uint8_t* const end = data + size;
  const bool device = (*p & 0x80) != 0, grouped = (*p & 0x40) != 0;
  const size_t receives = 1 + *p++ % 4;
  std::vector<size_t> capacity(receives);
  for (size_t& c : capacity) c = read32(p, end) % (kMaxCapacity + 1);
  std::vector<Message> msgs;
  for (const auto& [at, len] : fuzz_recv_messages(data, size)) {
    Message m;
    std::memcpy(m.meta, data + at, kMetaBytes);
    const uint8_t* payload = data + std::min(size, at + kMetaBytes + 4);
    m.payload.assign(payload, payload + len);
    msgs.push_back(std::move(m));
  }
  auto* conn = new WireConn(std::move(msgs));
  DeviceInfo dev;
  dev.name = "fuzz";
  dev.max_recvs = kMaxRecvs;
  std::vector<std::unique_ptr<uint8_t[]>> bufs;
  for (size_t c : capacity) {
    bufs.emplace_back(new uint8_t[c + kGuard]);
    std::memset(bufs.back().get(), kGuardByte, c + kGuard);
  }
  {
    RecvComm comm(conn, dev);  // owns conn
    // Receives [i, i + n) in one irecv: all of them grouped, else one at a time.
    for (size_t i = 0, n = grouped ? receives : 1; i < receives; i += n) {
      void* buf[kMaxRecvs];
      int tag[kMaxRecvs];
      bool on_device[kMaxRecvs];
      for (size_t k = 0; k < n; ++k) {
        buf[k] = bufs[i + k].get();
        tag[k] = static_cast<int>(i + k);
        on_device[k] = device;
        if (device && comm.reserve_device(buf[k], capacity[i + k]) != ncclSuccess) {
          fail("regMr of device memory failed", i + k);
        }
      }
      const size_t first = conn->consumed();  // irecv may already take these receives' messages
      void* req = nullptr;
      if (comm.irecv(static_cast<int>(n), buf, &capacity[i], tag, on_device, false, nullptr, &req) !=
          ncclSuccess) {
        break;
      }
      if (!req) fail("irecv handed back no request with every slot free", i);
      // Every op completes at once; only the decodes take time. 10 s without an outcome is a hang,
      // unless every message is consumed and they do not make a whole message for each receive: then
      // they rightly wait for more, and the comm closes with them posted.
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      int done = 0, count = 0;
      size_t got[kMaxRecvs] = {};
      bool failed = false;
      while (!done) {
        if (comm.test(req, &done, got, &count) != ncclSuccess) {
          failed = true;
          break;
        }
        if (done) break;
        if (conn->exhausted() && !conn->whole_since(first, &capacity[i], n)) break;  // waits for data
        if (std::chrono::steady_clock::now() > deadline) fail("neither complete nor failed after 10 s", i);
        std::this_thread::yield();
      }
      if (done && static_cast<size_t>(count) != n) fail("completed with another number of receives", i);
      for (size_t k = 0; done && k < n; ++k) {
        if (got[k] > capacity[i + k]) fail("reported more bytes than the posted buffer holds", i + k);
        if (received) received->emplace_back(bufs[i + k].get(), bufs[i + k].get() + got[k]);
      }
      if (failed || !done) break;  // a failed comm is not used again; a waiting one cannot go on
    }
  }  // close, with the last receives possibly in flight
  for (size_t i = 0; i < bufs.size(); ++i) {
    for (size_t k = capacity[i]; k < capacity[i] + kGuard; ++k) {
      if (bufs[i][k] != kGuardByte) fail("wrote past the posted buffer", i);
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz_recv_one(data, size, nullptr);
  return 0;
}
