// Faults: the peer process dies mid-transfer, a process exits with traffic in flight, and garbage
// arrives on a connection (wrong magic, lying lengths, corrupt frames). The survivor must report an
// error within a bounded time, never hang, crash or write outside the posted receive buffer.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "layer/frame.h"
#include "plugin_data.h"
#include "plugin_driver.h"
#include "socket/socket_wire.h"
#include "zipccl/codec.h"

using namespace zipccl_test;
namespace zn = zipccl::net;

namespace {

constexpr uint8_t kCanary = 0xA5;

class Faults : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!inner_plugin_absent().empty()) GTEST_SKIP() << inner_plugin_absent();
    api_ = load_api(9);
    ASSERT_TRUE(api_);
    ASSERT_EQ(api_->init(), ncclSuccess);
  }
  // The net client's init hands out a context (before v11 its own) that finalize releases.
  void TearDown() override {
    if (api_) api_->finalize();
  }
  std::unique_ptr<NetApi> api_;
};

struct Child {
  pid_t pid = -1;
  FILE* out = nullptr;
  ~Child() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    if (out) fclose(out);
  }
};

bool spawn(Child* c, std::vector<std::string> args) {
  int fds[2];
  if (pipe(fds) != 0) return false;
  const pid_t parent = getpid();
  c->pid = fork();
  if (c->pid == 0) {
    // The peer holds ctest's output pipe (stderr): should this test be killed, at a ctest --timeout,
    // the peer must die with it, or ctest waits on the pipe for ever.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(fds[1], 1);
    close(fds[0]);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(ZIPCCL_PEER_PATH));
    for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(ZIPCCL_PEER_PATH, argv.data());
    _exit(127);
  }
  close(fds[1]);
  c->out = fdopen(fds[0], "r");
  return c->pid > 0;
}

// The peer's next line, or "" when it prints none within 30 s (a peer that hangs fails the test).
std::string read_line(FILE* f) {
  pollfd p{fileno(f), POLLIN, 0};
  if (poll(&p, 1, 30000) != 1) return "";
  char buf[512];
  if (!fgets(buf, sizeof buf, f)) return "";
  std::string s(buf);
  while (!s.empty() && s.back() == '\n') s.pop_back();
  return s;
}

// Polls `req` until it completes or fails; returns the result and sets *seconds.
ncclResult_t poll_until(NetApi* api, void* req, double limit_s, double* seconds, int* size = nullptr) {
  auto t0 = Clock::now();
  int done = 0, n = 0;
  ncclResult_t r = ncclSuccess;
  while (r == ncclSuccess && !done) {
    r = api->test(req, &done, &n);
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    if (*seconds > limit_s) break;
  }
  if (size) *size = n;
  return r;
}

TEST_F(Faults, SenderDiesMidTransfer) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* lc = nullptr;
  ASSERT_EQ(api_->listen(0, handle, &lc), ncclSuccess);
  std::string hex;
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; ++i) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", static_cast<unsigned char>(handle[i]));
    hex += b;
  }
  Child child;
  ASSERT_TRUE(spawn(&child, {"send", hex}));
  void* rc = nullptr;
  auto t0 = Clock::now();
  while (!rc && std::chrono::duration<double>(Clock::now() - t0).count() < 10) {
    ASSERT_EQ(api_->accept(lc, &rc), ncclSuccess);
  }
  ASSERT_TRUE(rc);
  std::vector<uint8_t> buf((16 << 20) + 64, kCanary);
  void* mh = nullptr;
  ASSERT_EQ(api_->reg_mr(rc, buf.data(), 16 << 20, NCCL_PTR_HOST, &mh), ncclSuccess);
  void* req = nullptr;
  ASSERT_EQ(api_->irecv(rc, buf.data(), 16 << 20, 0, mh, &req), ncclSuccess);
  double s = 0;
  int size = 0;
  ASSERT_EQ(poll_until(api_.get(), req, 10, &s, &size), ncclSuccess);
  EXPECT_EQ(size, 16 << 20);
  // Kill it while the next message is on its way.
  ASSERT_EQ(api_->irecv(rc, buf.data(), 16 << 20, 0, mh, &req), ncclSuccess);
  usleep(2000);
  kill(child.pid, SIGKILL);
  ncclResult_t r = poll_until(api_.get(), req, 15, &s, &size);
  if (r == ncclSuccess) {  // that message made it whole; the next one cannot
    ASSERT_EQ(api_->irecv(rc, buf.data(), 16 << 20, 0, mh, &req), ncclSuccess);
    r = poll_until(api_.get(), req, 15, &s, &size);
  }
  EXPECT_NE(r, ncclSuccess);
  EXPECT_LT(s, 10.0) << "error took too long";
  for (size_t i = 16 << 20; i < buf.size(); ++i) ASSERT_EQ(buf[i], kCanary);
  api_->dereg_mr(rc, mh);
  api_->close_recv(rc);
  api_->close_listen(lc);
}

TEST_F(Faults, ReceiverDiesMidTransfer) {
  Child child;
  ASSERT_TRUE(spawn(&child, {"recv"}));
  std::string hex = read_line(child.out);
  ASSERT_EQ(hex.size(), 2u * NCCL_NET_HANDLE_MAXSIZE);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; ++i) {
    unsigned v;
    std::sscanf(hex.c_str() + 2 * i, "%2x", &v);
    handle[i] = static_cast<char>(v);
  }
  void* sc = nullptr;
  auto t0 = Clock::now();
  while (!sc && std::chrono::duration<double>(Clock::now() - t0).count() < 10) {
    ASSERT_EQ(api_->connect(0, handle, &sc), ncclSuccess);
  }
  ASSERT_TRUE(sc);
  std::vector<uint8_t> buf = make_data(DataKind::kBf16Gauss, 16 << 20, 3);
  bool killed = false;
  ncclResult_t r = ncclSuccess;
  auto t_kill = Clock::now();
  for (int n = 0; r == ncclSuccess && n < 1000; ++n) {
    void* req = nullptr;
    while (r == ncclSuccess && !req) r = api_->isend(sc, buf.data(), buf.size(), 0, nullptr, &req);
    double s;
    if (r == ncclSuccess) r = poll_until(api_.get(), req, 15, &s);
    if (!killed && n == 1) {
      kill(child.pid, SIGKILL);
      killed = true;
      t_kill = Clock::now();
    }
    if (killed && std::chrono::duration<double>(Clock::now() - t_kill).count() > 15) break;
  }
  EXPECT_NE(r, ncclSuccess);
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t_kill).count(), 10.0);
  api_->close_send(sc);
}

// A rank that calls exit() with traffic in flight and its comms open (plugin_peer exit): the process's
// static destructors run while the thread driving the plugin, the codec's workers and the live
// statistics' writer are still inside it. The process must end with status 0 (under the sanitizer
// builds: with no report either), and its last statistics snapshot, written at exit, must say so.
// Several delays, as what is running at the moment of exit differs.
TEST_F(Faults, ExitWithTrafficInFlight) {
  for (int ms : {0, 1, 3, 10, 30}) {
    char tmpl[] = "/tmp/zipccl-exit-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    const std::string dir = tmpl;
    Child child;
    ASSERT_TRUE(spawn(&child, {"exit", std::to_string(ms), dir}));
    const std::string line = read_line(child.out);
    EXPECT_EQ(line.rfind("exit after ", 0), 0u) << "delay " << ms << " ms: the peer said '" << line << "'";
    int status = -1;
    auto t0 = Clock::now();
    while (waitpid(child.pid, &status, WNOHANG) == 0) {
      ASSERT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 30.0)
          << "delay " << ms << " ms: the process did not end within 30 s of exit()";
      usleep(1000);
    }
    child.pid = -1;
    ASSERT_TRUE(WIFEXITED(status)) << "delay " << ms << " ms: killed by signal "
                                   << (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    EXPECT_EQ(WEXITSTATUS(status), 0) << "delay " << ms << " ms";
    std::string json;  // zipccl-HOST-PID.json, the one JSON file there
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() != ".json") continue;
      std::ifstream in(e.path());
      json.assign(std::istreambuf_iterator<char>(in), {});
    }
    EXPECT_NE(json.find("\"final\":true"), std::string::npos) << "delay " << ms << " ms: " << json;
    // Over an inner zipccl, the file is the inner's (the same name), and the inner codes nothing.
    const char* inner = std::getenv("ZIPCCL_NET_INNER");
    if (!inner || !*inner) {
      EXPECT_EQ(json.find("\"compressed\":0,"), std::string::npos) << "no message was compressed: " << json;
    }
    std::filesystem::remove_all(dir);
  }
}

// A hand-made peer speaking the socket transport's wire format directly, with no data streams.
class RawPeer {
 public:
  // Connects the control stream and `nstreams` data streams (which this peer never writes to).
  bool connect_to(const char* handle, uint32_t hello_magic = zn::kHelloMagic, uint32_t nstreams = 0) {
    zn::SocketHandle h;
    std::memcpy(&h, handle, sizeof h);
    socklen_t len = h.addr.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
    for (uint32_t i = 0; i <= nstreams; ++i) {
      int fd = socket(h.addr.sa.sa_family, SOCK_STREAM, 0);
      if (fd < 0 || ::connect(fd, &h.addr.sa, len) != 0) return false;
      zn::Hello hello{hello_magic, zn::kWireVersion, h.nonce, 0x1234567, i, nstreams};
      if (i == 0)
        fd_ = fd;
      else
        data_.push_back(fd);
      int target = fd;
      std::swap(fd_, target);
      bool ok = send_all(&hello, sizeof hello);
      std::swap(fd_, target);
      if (!ok) return false;
    }
    return true;
  }
  bool send_all(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    while (n) {
      ssize_t w = ::send(fd_, c, n, MSG_NOSIGNAL);
      if (w <= 0) return false;
      c += w;
      n -= static_cast<size_t>(w);
    }
    return true;
  }
  bool send_message(const zn::FrameMeta& meta, const void* payload, uint64_t wire_len, uint64_t seq = 0,
                    uint32_t magic = zn::kHeaderMagic, uint32_t flags = zn::kFlagInline,
                    uint64_t send_len = ~0ull) {
    zn::MsgHeader h{};
    h.magic = magic;
    h.flags = flags;
    h.seq = seq;
    h.payload_len = wire_len;
    std::memcpy(h.meta, &meta, sizeof meta);
    if (!send_all(&h, sizeof h)) return false;
    return send_all(payload, send_len == ~0ull ? wire_len : send_len);
  }
  // The header of a 100-byte message split over the data streams in pieces of `chunk` bytes (its piece
  // map, if any, is the caller's to send).
  bool send_split_header(uint64_t chunk) {
    zn::MsgHeader h{};
    h.magic = zn::kHeaderMagic;
    h.flags = 0;
    h.payload_len = 100;
    h.chunk = chunk;
    zn::FrameMeta m = zn::make_frame(zn::FrameKind::kRaw, 0, 100, 100);
    std::memcpy(h.meta, &m, sizeof m);
    return send_all(&h, sizeof h);
  }
  void close_now() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    for (int fd : data_) ::close(fd);
    data_.clear();
  }
  ~RawPeer() { close_now(); }

 private:
  int fd_ = -1;
  std::vector<int> data_;
};

class Garbage : public Faults {
 protected:
  void SetUp() override {
    Faults::SetUp();
    ASSERT_EQ(api_->listen(0, handle_, &lc_), ncclSuccess);
  }
  void TearDown() override {
    if (rc_) api_->close_recv(rc_);
    if (lc_) api_->close_listen(lc_);
    Faults::TearDown();
  }
  void accept_raw(RawPeer* p, uint32_t nstreams = 0) {
    ASSERT_TRUE(p->connect_to(handle_, zn::kHelloMagic, nstreams));
    auto t0 = Clock::now();
    while (!rc_ && std::chrono::duration<double>(Clock::now() - t0).count() < 5) {
      ASSERT_EQ(api_->accept(lc_, &rc_), ncclSuccess);
    }
    ASSERT_TRUE(rc_);
  }
  // Posts a receive of `cap` bytes into a canary-filled buffer and expects an error, no overflow.
  void expect_rejected(size_t cap) {
    std::vector<uint8_t> buf(cap + 256, kCanary);
    void* req = nullptr;
    ncclResult_t r = api_->irecv(rc_, buf.data(), cap, 0, nullptr, &req);
    double s = 0;
    if (r == ncclSuccess && req) r = poll_until(api_.get(), req, 10, &s);
    EXPECT_NE(r, ncclSuccess);
    EXPECT_LT(s, 10.0);
    for (size_t i = cap; i < buf.size(); ++i) ASSERT_EQ(buf[i], kCanary) << "write past the receive at " << i;
  }
  char handle_[NCCL_NET_HANDLE_MAXSIZE];
  void* lc_ = nullptr;
  void* rc_ = nullptr;
};

TEST_F(Garbage, WrongHelloMagicIsDroppedAndListenerStaysUsable) {
  RawPeer bad;
  ASSERT_TRUE(bad.connect_to(handle_, 0xdeadbeef));
  auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < 0.3) {
    ASSERT_EQ(api_->accept(lc_, &rc_), ncclSuccess);
    ASSERT_EQ(rc_, nullptr);
  }
  void* sc = nullptr;
  api_->close_listen(lc_);
  ASSERT_TRUE(make_pair(api_.get(), &sc, &rc_, &lc_));  // a fresh listener works too
  api_->close_send(sc);
}

TEST_F(Garbage, WrongMessageMagic) {
  RawPeer p;
  accept_raw(&p);
  char payload[100] = {};
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 100, 100), payload, 100, 0, 0x12345678));
  expect_rejected(4096);
}

TEST_F(Garbage, WrongFrameMagic) {
  RawPeer p;
  accept_raw(&p);
  char payload[100] = {};
  zn::FrameMeta m = zn::make_frame(zn::FrameKind::kRaw, 0, 100, 100);
  m.magic = 0;
  ASSERT_TRUE(p.send_message(m, payload, 100));
  expect_rejected(4096);
}

TEST_F(Garbage, LyingLengthLargerThanReceive) {
  RawPeer p;
  accept_raw(&p);
  std::vector<char> payload(64 << 10, 'x');
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 1ull << 30, 1ull << 30), payload.data(),
                             1ull << 30, 0, zn::kHeaderMagic, zn::kFlagInline, payload.size()));
  expect_rejected(4096);
}

TEST_F(Garbage, LyingRawFrameSize) {
  RawPeer p;
  accept_raw(&p);
  std::vector<char> payload(4096, 'x');
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 100, 4096), payload.data(), 4096));
  expect_rejected(8192);
}

TEST_F(Garbage, SplitMessageWithoutStreams) {
  RawPeer p;
  accept_raw(&p);
  char payload[16] = {};
  ASSERT_TRUE(
      p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 16, 16), payload, 16, 0, zn::kHeaderMagic, 0));
  expect_rejected(4096);
}

TEST_F(Garbage, ChunkSizeThatWouldOverflowThePieceCount) {
  RawPeer p;
  accept_raw(&p, 1);
  ASSERT_TRUE(p.send_split_header(~0ull));
  expect_rejected(4096);
}

TEST_F(Garbage, PieceMapNamingAStreamThatDoesNotExist) {
  RawPeer p;
  accept_raw(&p, 2);
  ASSERT_TRUE(p.send_split_header(50));  // the piece map follows
  const uint8_t map[2] = {1, 2};  // streams 0 and 1 exist
  ASSERT_TRUE(p.send_all(map, sizeof map));
  expect_rejected(4096);
}

TEST_F(Garbage, MorePiecesThanTheStreamsMayCarry) {
  RawPeer p;
  accept_raw(&p, 2);
  ASSERT_TRUE(p.send_split_header(1));  // 100 pieces over 2 streams
  expect_rejected(4096);
}

TEST_F(Garbage, OutOfSequence) {
  RawPeer p;
  accept_raw(&p);
  char payload[16] = {};
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 16, 16), payload, 16, 5));
  expect_rejected(4096);
}

TEST_F(Garbage, PeerClosesMidPayload) {
  RawPeer p;
  accept_raw(&p);
  std::vector<char> payload(1000, 'x');
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 4000, 4000), payload.data(), 4000, 0,
                             zn::kHeaderMagic, zn::kFlagInline, payload.size()));
  p.close_now();
  expect_rejected(4096);
}

std::vector<uint8_t> codec_frame(size_t n, size_t* original) {
  std::vector<uint8_t> src = make_data(DataKind::kBf16Gauss, n, 11);
  std::vector<uint8_t> frame(zipccl::codec::max_encoded_size(n));
  size_t out = 0;
  zipccl::codec::EncodeOptions opt;
  opt.type = zipccl::codec::ElemType::kBf16;
  EXPECT_EQ(zipccl::codec::encode(src.data(), n, frame.data(), frame.size(), &out, opt),
            zipccl::codec::Status::kOk);
  frame.resize(out);
  *original = n;
  return frame;
}

TEST_F(Garbage, TruncatedCodecFrame) {
  RawPeer p;
  accept_raw(&p);
  size_t n;
  std::vector<uint8_t> f = codec_frame(12000, &n);
  ASSERT_LT(f.size(), n);
  size_t cut = f.size() - 100;
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kCodec, 0, n, cut), f.data(), cut));
  expect_rejected(n);
}

TEST_F(Garbage, CodecFrameLargerThanItsHeaderSays) {
  RawPeer p;
  accept_raw(&p);
  size_t n;
  std::vector<uint8_t> f = codec_frame(12000, &n);
  // The frame header claims fewer bytes than the codec frame decodes to: the decoder has only that room.
  ASSERT_TRUE(
      p.send_message(zn::make_frame(zn::FrameKind::kCodec, 0, n - 2000, f.size()), f.data(), f.size()));
  expect_rejected(n);  // posted n, but only n-2000 may be written (checked by the canaries past n)
}

TEST_F(Garbage, RandomlyCorruptedCodecFramesNeverWriteOutOfBounds) {
  size_t n;
  std::vector<uint8_t> good = codec_frame(40000, &n);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 12; ++trial) {
    std::vector<uint8_t> f = good;
    for (int k = 0; k < 8; ++k)
      f[rng() % std::min<size_t>(f.size(), trial % 2 ? 64 : f.size())] ^= 1u << (rng() % 8);
    RawPeer p;
    accept_raw(&p);
    ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kCodec, 0, n, f.size()), f.data(), f.size()));
    std::vector<uint8_t> buf(n + 256, kCanary);
    void* req = nullptr;
    ncclResult_t r = api_->irecv(rc_, buf.data(), n, 0, nullptr, &req);
    double s;
    int size = -1;
    if (r == ncclSuccess) r = poll_until(api_.get(), req, 10, &s, &size);
    // Flipped mantissa bits can decode "successfully" (they are not checksummed); then the size is right.
    if (r == ncclSuccess) {
      EXPECT_EQ(static_cast<size_t>(size), n);
    }
    for (size_t i = n; i < buf.size(); ++i) ASSERT_EQ(buf[i], kCanary) << "trial " << trial;
    api_->close_recv(rc_);
    rc_ = nullptr;
  }
}

// ---- segments (frame.h): one receive assembled from several transport messages ----

// Sends the segments of one message as consecutive transport messages starting at sequence `*seq`.
struct SegSpec {
  zn::FrameKind kind;
  uint32_t index;
  bool last;
  std::vector<uint8_t> payload;
  uint64_t original;
};
bool send_segments(RawPeer* p, const std::vector<SegSpec>& segs, uint64_t* seq) {
  for (const SegSpec& g : segs) {
    zn::FrameMeta m = zn::make_segment(g.kind, 0, g.index, g.last, g.original, g.payload.size());
    if (!p->send_message(m, g.payload.data(), g.payload.size(), (*seq)++)) return false;
  }
  return true;
}
SegSpec raw_seg(uint32_t index, bool last, size_t n, uint8_t fill) {
  return SegSpec{zn::FrameKind::kRaw, index, last, std::vector<uint8_t>(n, fill), n};
}

TEST_F(Garbage, SegmentsAssembleAtTheirOffsets) {
  // The positive control for the fault cases below: raw, codec and raw segments land in order.
  RawPeer p;
  accept_raw(&p);
  size_t n = 0;
  std::vector<uint8_t> f = codec_frame(12000, &n);
  std::vector<uint8_t> middle = make_data(DataKind::kBf16Gauss, n, 11);  // what codec_frame encoded
  uint64_t seq = 0;
  ASSERT_TRUE(send_segments(
      &p,
      {raw_seg(0, false, 4096, 1), SegSpec{zn::FrameKind::kCodec, 1, false, f, n}, raw_seg(2, true, 100, 3)},
      &seq));
  size_t total = 4096 + n + 100, cap = total + 1000;
  std::vector<uint8_t> buf(cap + 256, kCanary);
  void* req = nullptr;
  ASSERT_EQ(api_->irecv(rc_, buf.data(), cap, 0, nullptr, &req), ncclSuccess);
  double s = 0;
  int size = -1;
  ASSERT_EQ(poll_until(api_.get(), req, 10, &s, &size), ncclSuccess);
  EXPECT_EQ(static_cast<size_t>(size), total);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.begin() + 4096, [](uint8_t b) { return b == 1; }));
  EXPECT_TRUE(std::equal(middle.begin(), middle.end(), buf.begin() + 4096));
  EXPECT_TRUE(std::all_of(buf.begin() + 4096 + n, buf.begin() + total, [](uint8_t b) { return b == 3; }));
  EXPECT_TRUE(std::all_of(buf.begin() + total, buf.end(), [](uint8_t b) { return b == kCanary; }));
  // The next message on the same connection starts at segment 0 again (here: a whole message).
  char payload[100];
  std::memset(payload, 7, sizeof payload);
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 100, 100), payload, 100, seq++));
  ASSERT_EQ(api_->irecv(rc_, buf.data(), cap, 0, nullptr, &req), ncclSuccess);
  ASSERT_EQ(poll_until(api_.get(), req, 10, &s, &size), ncclSuccess);
  EXPECT_EQ(size, 100);
}

TEST_F(Garbage, SegmentOutOfSequence) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  ASSERT_TRUE(send_segments(&p, {raw_seg(0, false, 1000, 1), raw_seg(2, true, 1000, 2)}, &seq));
  expect_rejected(8192);
}

TEST_F(Garbage, MissingLastSegmentThenANewMessage) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  ASSERT_TRUE(send_segments(&p, {raw_seg(0, false, 1000, 1), raw_seg(0, true, 1000, 2)}, &seq));
  expect_rejected(8192);
}

TEST_F(Garbage, WholeMessageFrameInsideASegmentedMessage) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  ASSERT_TRUE(send_segments(&p, {raw_seg(0, false, 1000, 1)}, &seq));
  char payload[100] = {};
  ASSERT_TRUE(p.send_message(zn::make_frame(zn::FrameKind::kRaw, 0, 100, 100), payload, 100, seq++));
  expect_rejected(8192);
}

TEST_F(Garbage, SegmentsAddUpToMoreThanThePostedReceive) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  // Each fits alone; together they overrun the 4096-byte receive: the second is refused unwritten.
  ASSERT_TRUE(send_segments(&p, {raw_seg(0, false, 3000, 1), raw_seg(1, true, 3000, 2)}, &seq));
  expect_rejected(4096);
}

TEST_F(Garbage, ExtraSegmentAfterTheLast) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  ASSERT_TRUE(send_segments(&p, {raw_seg(0, true, 1000, 1), raw_seg(1, true, 1000, 2)}, &seq));
  std::vector<uint8_t> buf(8192);
  void* req = nullptr;
  ASSERT_EQ(api_->irecv(rc_, buf.data(), buf.size(), 0, nullptr, &req), ncclSuccess);
  double s = 0;
  int size = -1;
  ASSERT_EQ(poll_until(api_.get(), req, 10, &s, &size), ncclSuccess);  // segment 0 alone is a message
  EXPECT_EQ(size, 1000);
  expect_rejected(8192);  // the stray segment 1 cannot start the next one
}

TEST_F(Garbage, EmptySegmentThatIsNotTheLast) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  ASSERT_TRUE(send_segments(&p, {raw_seg(0, false, 0, 1), raw_seg(1, true, 10, 2)}, &seq));
  expect_rejected(8192);
}

TEST_F(Garbage, CodecSegmentNotSmallerThanItsData) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  size_t n = 0;
  std::vector<uint8_t> f = codec_frame(12000, &n);
  // Claims fewer bytes than its own frame: a codec segment must be smaller than the range it fills.
  ASSERT_TRUE(send_segments(
      &p, {raw_seg(0, false, 100, 1), SegSpec{zn::FrameKind::kCodec, 1, true, f, f.size() - 1}}, &seq));
  expect_rejected(n + 200);
}

TEST_F(Garbage, CorruptCodecSegment) {
  RawPeer p;
  accept_raw(&p);
  uint64_t seq = 0;
  size_t n = 0;
  std::vector<uint8_t> f = codec_frame(12000, &n);
  f.resize(f.size() - 100);  // truncated
  ASSERT_TRUE(
      send_segments(&p, {raw_seg(0, false, 100, 1), SegSpec{zn::FrameKind::kCodec, 1, true, f, n}}, &seq));
  expect_rejected(n + 100);
}

}  // namespace
