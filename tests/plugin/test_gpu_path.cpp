// The plugin's GPU path on the CPU: the flag-last line order and the LL/LL128 marker logic, the host
// emulation of the device operations, and SendComm/RecvComm moving device-typed buffers through the
// emulated pipeline over an in-process transport (many in flight, delayed stream work, raw fallback,
// failing encode/decode). Registered several times with different settings (--setenv, env_main.cpp):
// ZIPCCL_GPU_EMULATE=1 with ZIPCCL_COMPRESS, ZIPCCL_GPU_EMULATE_DELAY_US and
// ZIPCCL_GPU_EMULATE_FAIL_EVERY varied (tests needing another setting skip), and, where CUDA is built,
// as test_gpu_path_cuda with ZIPCCL_GPU=auto: the pipeline tests then use the CUDA device operations
// on a GPU (label gpu; they skip without one).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/settings.h"
#include "gpu/gpu_path.h"
#include "layer/comm.h"
#include "layer/frame.h"
#include "layer/worker_pool.h"
#include "plugin_data.h"
#include "testing/gpu_emulated.h"

using namespace zipccl::net;
using zipccl_test::DataKind;
using zipccl_test::make_data;

namespace {

// The comms' INFO lines (their GPU-path counters at close). Never destroyed: a plugin thread may still
// log while the process exits.
std::mutex& g_log_mu = *new std::mutex;
std::vector<std::string>& g_log = *new std::vector<std::string>;
std::atomic<int> g_warns{0};
void capture(ncclDebugLogLevel level, unsigned long, const char* file, int line, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN) {
    std::fprintf(stderr, "[WARN %s:%d] %s\n", file, line, buf);
    g_warns.fetch_add(1);
  }
  std::lock_guard<std::mutex> lock(g_log_mu);
  g_log.push_back(buf);
}
// From the last "GPU path (send): N device messages, M sent as device-encoded frames" line.
std::pair<long, long> last_send_counters() {
  std::lock_guard<std::mutex> lock(g_log_mu);
  for (auto it = g_log.rbegin(); it != g_log.rend(); ++it) {
    long n = -1, m = -1;
    const char* p = std::strstr(it->c_str(), "GPU path (send): ");
    if (p && std::sscanf(p, "GPU path (send): %ld device messages, %ld", &n, &m) == 2) return {n, m};
  }
  return {-1, -1};
}

// ---- flag-last line order ----

TEST(GpuPathLines, EveryByteOnceFlagLastAfterAFence) {
  for (size_t n : {size_t{0}, size_t{1}, size_t{8}, size_t{9}, size_t{120}, size_t{127}, size_t{128},
                   size_t{129}, size_t{136}, size_t{1000}, size_t{4800} * 128, size_t{4800} * 128 + 77}) {
    std::vector<int> writes(n, 0);
    std::vector<gpu::Piece> pieces;
    gpu::line_order(n, [&](const gpu::Piece& p) { pieces.push_back(p); });
    for (const gpu::Piece& p : pieces) {
      for (size_t i = p.offset; i < p.offset + p.length; ++i) ++writes[i];
    }
    EXPECT_TRUE(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; })) << n;
    // Within each line: the body first, then (after a fence) the line's last 8 bytes.
    std::map<size_t, std::vector<gpu::Piece>> by_line;
    for (const gpu::Piece& p : pieces) by_line[p.offset / gpu::kLineBytes].push_back(p);
    for (auto& [line, ps] : by_line) {
      size_t end = std::min(n, (line + 1) * gpu::kLineBytes);
      if (end - line * gpu::kLineBytes > gpu::kFlagBytes) {
        ASSERT_EQ(ps.size(), 2u) << n;
        EXPECT_FALSE(ps[0].fence_before);
        EXPECT_TRUE(ps[1].fence_before);
        EXPECT_EQ(ps[1].offset + ps[1].length, end);
        EXPECT_EQ(ps[1].length, gpu::kFlagBytes);
        EXPECT_LT(ps[0].offset, ps[1].offset);
      } else {
        ASSERT_EQ(ps.size(), 1u);
      }
    }
  }
}

TEST(GpuPathLines, MarkerAndLandingDecision) {
  void* none = nullptr;
  void* marked = reinterpret_cast<void*>(gpu::kOptionalRecvCompletion);
  int x = 0;
  void* stale = &x;  // a previous request pointer left in NCCL's slot is not a mark
  void* two = reinterpret_cast<void*>(uintptr_t{2});
  EXPECT_FALSE(gpu::marks_flag_protocol(nullptr));
  EXPECT_FALSE(gpu::marks_flag_protocol(&none));
  EXPECT_TRUE(gpu::marks_flag_protocol(&marked));
  EXPECT_FALSE(gpu::marks_flag_protocol(&stale));
  EXPECT_FALSE(gpu::marks_flag_protocol(&two));
  EXPECT_TRUE(gpu::needs_ordered_landing(gpu::Landing::kOrdered, false));
  EXPECT_TRUE(gpu::needs_ordered_landing(gpu::Landing::kOrdered, true));
  EXPECT_TRUE(gpu::needs_ordered_landing(gpu::Landing::kMarked, true));
  EXPECT_FALSE(gpu::needs_ordered_landing(gpu::Landing::kMarked, false));
}

// ---- the emulated device operations ----

TEST(GpuPathEmulation, StreamOrderEventsAndCodec) {
  if (!gpu::emulation_settings().enabled) GTEST_SKIP() << "emulation only (host pointers as device memory)";
  gpu::DeviceOps* ops = gpu::device_ops();
  ASSERT_NE(ops, nullptr);
  void* stream = nullptr;
  ASSERT_EQ(ops->create_stream(0, &stream), ncclSuccess);
  void* ev = nullptr;
  ASSERT_EQ(ops->create_event(stream, &ev), ncclSuccess);
  const size_t n = (256 << 10) + 6;
  std::vector<uint8_t> src = make_data(DataKind::kBf16Gauss, n, 3);
  size_t cap = zipccl::codec::max_encoded_size(n);
  void *frame = nullptr, *host = nullptr, *dev2 = nullptr, *out = nullptr, *res_mem = nullptr;
  ASSERT_EQ(ops->alloc_device(cap, &frame), ncclSuccess);
  ASSERT_EQ(ops->alloc_host(cap, &host), ncclSuccess);
  ASSERT_EQ(ops->alloc_device(cap, &dev2), ncclSuccess);
  ASSERT_EQ(ops->alloc_device(n, &out), ncclSuccess);
  ASSERT_EQ(ops->alloc_host(2 * sizeof(gpu::Result), &res_mem), ncclSuccess);
  auto* res = static_cast<gpu::Result*>(res_mem);
  gpu::result_clear(res);
  gpu::result_clear(res + 1);
  // encode -> D2H (whole bound) -> H2D -> decode -> land: each step reads what the previous wrote, so
  // the result is only right if the stream keeps its order.
  ASSERT_EQ(ops->encode(stream, src.data(), n, frame, cap, zipccl::codec::ElemType::kBf16, 0, res), ncclSuccess);
  ASSERT_EQ(ops->copy(stream, host, frame, cap, gpu::Copy::kDeviceToHost), ncclSuccess);
  ASSERT_EQ(ops->copy(stream, dev2, host, cap, gpu::Copy::kHostToDevice), ncclSuccess);
  std::vector<uint8_t> dst(n + 64, 0xA5);
  ASSERT_EQ(ops->record(stream, ev), ncclSuccess);
  bool done = false;
  while (!done) ASSERT_EQ(ops->query(ev, &done), ncclSuccess);
  ASSERT_TRUE(gpu::result_ready(res));
  ASSERT_EQ(res->status, 0);
  ASSERT_LT(res->size, n);
  ASSERT_EQ(ops->decode(stream, dev2, res->size, out, n, 0, res + 1), ncclSuccess);
  ASSERT_EQ(ops->land_lines(stream, dst.data(), out, n), ncclSuccess);
  ASSERT_EQ(ops->record(stream, ev), ncclSuccess);
  done = false;
  while (!done) ASSERT_EQ(ops->query(ev, &done), ncclSuccess);
  ASSERT_TRUE(gpu::result_ready(res + 1));
  EXPECT_EQ(res[1].size, n);
  EXPECT_TRUE(std::equal(src.begin(), src.end(), dst.begin()));
  for (size_t i = n; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xA5);
  ops->destroy_event(ev);
  ops->destroy_stream(stream);
  for (void* p : {frame, dev2, out}) ops->free_device(p);
  ops->free_host(host);
  ops->free_host(res_mem);
}

// The emulation applies CUDA's rules for several devices (gpu_emulated.h), so that the tests below can
// fail where a process with several GPUs would.
TEST(GpuPathEmulation, SeveralDevicesFollowCudasRules) {
  if (!gpu::emulation_settings().enabled) GTEST_SKIP() << "emulation only";
  set_logger(capture);
  gpu::DeviceOps* ops = gpu::device_ops();
  ASSERT_GE(gpu::emulated_device_count(), 3);
  void *s1 = nullptr, *s2 = nullptr, *e1 = nullptr, *e2 = nullptr;
  ASSERT_EQ(ops->create_stream(1, &s1), ncclSuccess);
  EXPECT_EQ(ops->current_device(), 1);  // create_stream makes its device current, as cudaSetDevice does
  ASSERT_EQ(ops->create_event(s1, &e1), ncclSuccess);
  ASSERT_EQ(ops->create_stream(2, &s2), ncclSuccess);
  ASSERT_EQ(ops->create_event(s2, &e2), ncclSuccess);
  ASSERT_EQ(ops->prepare(1), ncclSuccess);
  ASSERT_EQ(ops->prepare(2), ncclSuccess);
  const size_t n = 64 << 10, cap = zipccl::codec::max_encoded_size(n);
  void *in1 = nullptr, *frame1 = nullptr, *res1 = nullptr, *in2 = nullptr;
  ASSERT_EQ(ops->alloc_device_async(s1, n, &in1), ncclSuccess);
  ASSERT_EQ(ops->alloc_device_async(s1, cap, &frame1), ncclSuccess);
  ASSERT_EQ(ops->alloc_host_async(s1, sizeof(gpu::Result), &res1), ncclSuccess);
  ASSERT_EQ(ops->alloc_device_async(s2, n, &in2), ncclSuccess);
  EXPECT_EQ(ops->device_of(in1), 1);
  EXPECT_EQ(ops->device_of(in2), 2);
  EXPECT_EQ(ops->device_of(res1), -1) << "pinned host memory is no device's";
  std::vector<uint8_t> src = make_data(DataKind::kBf16Gauss, n, 4);
  auto* res = static_cast<gpu::Result*>(res1);
  const auto bf16 = zipccl::codec::ElemType::kBf16;
  ASSERT_EQ(ops->make_current(2), ncclSuccess);
  EXPECT_NE(ops->encode(s1, in1, n, frame1, cap, bf16, 0, res), ncclSuccess)
      << "a launch into GPU 1's stream from GPU 2";
  EXPECT_NE(ops->record(s1, e2), ncclSuccess) << "GPU 2's event recorded on GPU 1's stream";
  EXPECT_EQ(ops->copy(s1, in1, src.data(), n, gpu::Copy::kHostToDevice), ncclSuccess) << "copies go anywhere";
  ASSERT_EQ(ops->make_current(1), ncclSuccess);
  EXPECT_NE(ops->encode(s1, in2, n, frame1, cap, bf16, 0, res), ncclSuccess)
      << "GPU 2's memory in GPU 1's kernel";
  void* res2 = nullptr;
  ASSERT_EQ(ops->alloc_host_async(s2, sizeof(gpu::Result), &res2), ncclSuccess);
  EXPECT_NE(ops->encode(s1, in1, n, frame1, cap, bf16, 0, static_cast<gpu::Result*>(res2)), ncclSuccess)
      << "pinned memory of GPU 2's pool in GPU 1's kernel";
  gpu::result_clear(res);
  ASSERT_EQ(ops->encode(s1, in1, n, frame1, cap, bf16, 0, res), ncclSuccess);
  ASSERT_EQ(ops->record(s1, e1), ncclSuccess);
  bool done = false;
  while (!done) ASSERT_EQ(ops->query(e1, &done), ncclSuccess);
  EXPECT_TRUE(gpu::result_ready(res));
  EXPECT_EQ(res->status, 0);
  EXPECT_EQ(ops->make_current(gpu::emulated_device_count()), ncclUnhandledCudaError);
  gpu::emulated_forget_touched();
  ASSERT_EQ(ops->query(e2, &done), ncclSuccess);
  EXPECT_EQ(gpu::emulated_devices_touched(), 1u << 1) << "a call runs in the current device's context";
  for (void* p : {in1, frame1, res1}) ops->free_async(s1, p);
  for (void* p : {in2, res2}) ops->free_async(s2, p);
  ops->destroy_event(e1);
  ops->destroy_event(e2);
  ops->destroy_stream(s1);
  ops->destroy_stream(s2);
}

// A poll that finds its event not ready leaves nothing behind for the next launch on the same thread:
// cudaErrorNotReady can be left as the thread's last error, and a launch's cudaGetLastError() check
// would report it as a failed launch (issue 33, defect 7). Only the CUDA device operations
// (test_gpu_path_cuda on a GPU) can fail this; the emulation has no runtime and no last error.
TEST(GpuPathDevice, NotReadyPollLeavesTheNextLaunchClean) {
  gpu::DeviceOps* ops = gpu::device_ops();
  if (!ops) GTEST_SKIP() << "no device operations (ZIPCCL_GPU_EMULATE=1, or a usable GPU)";
  if (gpu::emulation_settings().fail_every != 0) GTEST_SKIP() << "run without failure injection";
  void *busy = nullptr, *land = nullptr;
  ASSERT_EQ(ops->create_stream(0, &busy), ncclSuccess);
  ASSERT_EQ(ops->create_stream(0, &land), ncclSuccess);
  void* ev = nullptr;
  ASSERT_EQ(ops->create_event(busy, &ev), ncclSuccess);
  const size_t big = size_t{64} << 20, line = 4096;  // a 64 MiB D2H: over a millisecond on PCIe 5
  void *dev = nullptr, *host = nullptr, *a = nullptr, *b = nullptr;
  ASSERT_EQ(ops->alloc_device(big, &dev), ncclSuccess);
  ASSERT_EQ(ops->alloc_host(big, &host), ncclSuccess);
  ASSERT_EQ(ops->alloc_device(line, &a), ncclSuccess);
  ASSERT_EQ(ops->alloc_device(line, &b), ncclSuccess);
  int not_ready = 0;
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(ops->copy(busy, host, dev, big, gpu::Copy::kDeviceToHost), ncclSuccess);
    ASSERT_EQ(ops->record(busy, ev), ncclSuccess);
    // A launch after each of the round's first 20 not-ready polls (the emulation's queue stays short).
    for (int polls = 0;; ++polls) {
      bool done = false;
      ASSERT_EQ(ops->query(ev, &done), ncclSuccess);
      if (done) break;
      if (polls >= 20) continue;
      ++not_ready;
      ASSERT_EQ(ops->land_lines(land, b, a, line), ncclSuccess) << "launch after not-ready poll #" << not_ready;
    }
  }
  ops->destroy_event(ev);
  ops->destroy_stream(busy);
  ops->destroy_stream(land);
  for (void* p : {dev, a, b}) ops->free_device(p);
  ops->free_host(host);
  std::printf("%s: %d not-ready polls, each followed by a launch\n", ops->name(), not_ready);
  if (not_ready == 0) GTEST_SKIP() << "every poll found the copy done: nothing was checked";
}

// ---- the pipeline over an in-process transport ----

// Messages travel through a shared queue. post() copies the payload only when the op "completes",
// several test() calls later, so a sender that reuses or frees a payload too early is caught; recv()
// likewise fills the destination late.
struct Wire {
  std::mutex mu;
  std::deque<std::pair<std::vector<uint8_t>, const void*>> queue;  // meta + payload pointer
  std::deque<size_t> lens;
  std::deque<std::vector<uint8_t>> payloads;  // filled when the send op completes
  std::vector<FrameMeta> posted;              // every header, at post() time
};

class FakeSend final : public SendConn {
 public:
  explicit FakeSend(Wire* w) : w_(w) {}
  bool carries_segments() const override { return true; }
  ncclResult_t post(const uint8_t* meta, const void* payload, size_t len, int* op) override {
    {
      std::lock_guard<std::mutex> lock(w_->mu);
      FrameMeta m;
      std::memcpy(&m, meta, sizeof m);
      w_->posted.push_back(m);
    }
    *op = next_++;
    ops_[*op] = Pending{std::vector<uint8_t>(meta, meta + kMetaBytes), payload, len, 3};
    return ncclSuccess;
  }
  ncclResult_t test(int op, bool* done) override {
    *done = false;
    // Complete in order, one per call, after a few calls: the payload is read only now.
    auto it = ops_.begin();
    if (it != ops_.end() && --it->second.countdown <= 0) {
      std::lock_guard<std::mutex> lock(w_->mu);
      const uint8_t* p = static_cast<const uint8_t*>(it->second.payload);
      w_->payloads.emplace_back(p, p + it->second.len);
      w_->queue.emplace_back(it->second.meta, nullptr);
      w_->lens.push_back(it->second.len);
      ops_.erase(it);
    }
    *done = ops_.find(op) == ops_.end();
    return ncclSuccess;
  }
  void link_progress(uint64_t* d, uint64_t* b) override { *d = *b = 0; }

 private:
  struct Pending {
    std::vector<uint8_t> meta;
    const void* payload;
    size_t len;
    int countdown;
  };
  Wire* w_;
  int next_ = 0;
  std::map<int, Pending> ops_;
};

class FakeRecv final : public RecvConn {
 public:
  explicit FakeRecv(Wire* w) : w_(w) {}
  ncclResult_t peek(uint8_t* meta, uint64_t* len, bool* ready) override {
    std::lock_guard<std::mutex> lock(w_->mu);
    *ready = !w_->queue.empty();
    if (*ready) {
      std::memcpy(meta, w_->queue.front().first.data(), kMetaBytes);
      *len = w_->lens.front();
    }
    return ncclSuccess;
  }
  ncclResult_t recv(void* dst, size_t cap, int* op) override {
    std::lock_guard<std::mutex> lock(w_->mu);
    if (w_->payloads.front().size() > cap) return ncclSystemError;
    *op = next_++;
    ops_[*op] = Pending{std::move(w_->payloads.front()), dst, 2};
    w_->payloads.pop_front();
    w_->queue.pop_front();
    w_->lens.pop_front();
    return ncclSuccess;
  }
  ncclResult_t test(int op, bool* done) override {
    auto it = ops_.find(op);
    if (it == ops_.end()) return ncclInternalError;
    *done = --it->second.countdown <= 0;
    if (*done) {
      if (!it->second.bytes.empty())  // an empty message may come with a null destination
        std::memcpy(it->second.dst, it->second.bytes.data(), it->second.bytes.size());
      ops_.erase(it);
    }
    return ncclSuccess;
  }

 private:
  struct Pending {
    std::vector<uint8_t> bytes;
    void* dst;
    int countdown;
  };
  Wire* w_;
  int next_ = 0;
  std::map<int, Pending> ops_;
};

struct Outcome {
  std::string error;     // first failure, "" when every message arrived bit-exact
  bool recv_failed = false;
};

// Device buffers through the device operations under test (host memory in the emulation, cudaMalloc
// on a GPU), filled and read back on a scratch stream of their own, on device `dev` (made current on
// the calling thread by the constructor and by upload()).
class DeviceMem {
 public:
  explicit DeviceMem(int dev = 0) : ops_(gpu::device_ops()), dev_(dev) {
    if (!ops_) return;
    ops_->make_current(dev);
    ops_->create_stream(dev, &stream_);
    ops_->create_event(stream_, &event_);
  }
  ~DeviceMem() {
    if (!ops_) return;
    ops_->destroy_event(event_);
    ops_->destroy_stream(stream_);
    for (void* p : bufs_) ops_->free_device(p);
  }
  void* upload(const uint8_t* p, size_t n) {
    void* d = nullptr;
    if (ops_->make_current(dev_) != ncclSuccess ||
        ops_->alloc_device(std::max<size_t>(n, 1), &d) != ncclSuccess)
      return nullptr;
    bufs_.push_back(d);
    ops_->copy(stream_, d, p, n, gpu::Copy::kHostToDevice);
    sync();
    return d;
  }
  // False when the device failed (the test's own copy met an injected fault).
  bool download(uint8_t* p, const void* d, size_t n) {
    return ops_->copy(stream_, p, d, n, gpu::Copy::kDeviceToHost) == ncclSuccess && sync();
  }

 private:
  bool sync() {
    if (ops_->record(stream_, event_) != ncclSuccess) return false;
    bool done = false;
    while (!done) {
      if (ops_->query(event_, &done) != ncclSuccess) return false;
    }
    return true;
  }
  gpu::DeviceOps* ops_;
  int dev_;
  void* stream_ = nullptr;
  void* event_ = nullptr;
  std::vector<void*> bufs_;
};

Outcome exchange(SendComm& send, RecvComm& recv, DeviceMem& mem, const std::vector<std::vector<uint8_t>>& msgs,
                 std::vector<std::vector<uint8_t>>& dst, const std::vector<void*>& sbuf, const std::vector<void*>& rbuf,
                 int window, bool device_send, bool device_recv, bool mark_odd, size_t kGuard);

// C++17 has no std::barrier.
class Meeting {
 public:
  explicit Meeting(int parties) : parties_(parties) {}
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t round = round_;
    if (++arrived_ == parties_) {
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return round_ != round; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int parties_, arrived_ = 0;
  uint64_t round_ = 0;
};

// Sends msgs[i] device-typed (or host, per `device`) with up to `window` in flight per side, checks
// every completed receive immediately (a completion before the decode shows as wrong bytes).
// after_regmr runs between the registrations and the first message (fault injection). The sender's
// device buffers are on GPU send_dev, the receiver's on recv_dev; the calling thread's current device
// is left as it was after the buffers are made. With `meet` (threads running pipelines at once), it is
// waited for after the registrations and after the traffic, so that every thread's count of setup calls
// between the two sees no other thread's registration or close.
Outcome run_pipeline(const std::vector<std::vector<uint8_t>>& msgs, int window, bool device_send,
                     bool device_recv, bool mark_odd, const std::function<void()>& after_regmr = nullptr,
                     int send_dev = 0, int recv_dev = 0, Meeting* meet = nullptr) {
  set_logger(capture);
  // Destroyed in reverse: the comms first (their close waits for their streams), then the scratch
  // streams' buffers, then the host buffers every stream may still be writing into.
  const size_t kGuard = 64;
  std::vector<std::vector<uint8_t>> dst(msgs.size());
  const int current = gpu::device_ops()->current_device();
  DeviceMem send_mem(send_dev), recv_mem(recv_dev);
  Wire wire;
  DeviceInfo dev;
  dev.name = "fake";
  SendComm send(new FakeSend(&wire), dev);
  RecvComm recv(new FakeRecv(&wire), dev);
  Outcome out;
  for (size_t i = 0; i < msgs.size(); ++i) dst[i].assign(msgs[i].size() + 100 + kGuard, 0xA5);
  std::vector<void*> sbuf(msgs.size()), rbuf(msgs.size());
  for (size_t i = 0; i < msgs.size() && out.error.empty(); ++i) {
    sbuf[i] =
        device_send ? send_mem.upload(msgs[i].data(), msgs[i].size()) : const_cast<uint8_t*>(msgs[i].data());
    rbuf[i] = device_recv ? recv_mem.upload(dst[i].data(), dst[i].size()) : dst[i].data();
    if ((device_send && !sbuf[i]) || (device_recv && !rbuf[i])) out.error = "device allocation failed";
  }
  gpu::device_ops()->make_current(current);
  // regMr: everything device messages need is allocated here, nothing from here to close.
  for (size_t i = 0; i < msgs.size() && out.error.empty(); ++i) {
    if ((device_send && send.reserve_device(sbuf[i], msgs[i].size()) != ncclSuccess) ||
        (device_recv && recv.reserve_device(rbuf[i], dst[i].size() - kGuard) != ncclSuccess)) {
      out.error = "regMr failed";
    }
  }
  if (meet) meet->wait();
  const bool counted = gpu::emulation_settings().enabled;
  const uint64_t setup_calls = counted ? gpu::emulated_setup_calls() : 0;
  if (after_regmr) after_regmr();
  if (out.error.empty()) {
    out = exchange(send, recv, recv_mem, msgs, dst, sbuf, rbuf, window, device_send, device_recv, mark_odd,
                   kGuard);
  }
  if (out.error.empty() && counted && gpu::emulated_setup_calls() != setup_calls) {
    out.error = std::to_string(gpu::emulated_setup_calls() - setup_calls) +
                " allocation/stream/event/module calls between regMr and close";
  }
  if (meet) meet->wait();
  return out;
}

// The message loop of run_pipeline: up to `window` in flight per side, NCCL-like retries of
// isend/irecv that hand back no request.
Outcome exchange(SendComm& send, RecvComm& recv, DeviceMem& mem, const std::vector<std::vector<uint8_t>>& msgs,
                 std::vector<std::vector<uint8_t>>& dst, const std::vector<void*>& sbuf, const std::vector<void*>& rbuf,
                 int window, bool device_send, bool device_recv, bool mark_odd, size_t kGuard) {
  std::vector<void*> sreq(msgs.size()), rreq(msgs.size());
  size_t ps = 0, pr = 0, ds = 0, dr = 0;
  Outcome out;
  auto t0 = std::chrono::steady_clock::now();
  while (ds < msgs.size() || dr < msgs.size()) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(60)) {
      out.error = "timeout (hang)";
      return out;
    }
    if (pr < msgs.size() && pr < dr + window) {
      void* req = mark_odd && pr % 2 ? reinterpret_cast<void*>(gpu::kOptionalRecvCompletion) : nullptr;
      bool marked = gpu::marks_flag_protocol(&req);
      req = nullptr;
      if (recv.irecv(rbuf[pr], dst[pr].size() - kGuard, 0, device_recv, marked, &req) != ncclSuccess) {
        out.error = "irecv failed";
        out.recv_failed = true;
        return out;
      }
      if (req) rreq[pr++] = req;
    }
    if (ps < msgs.size() && ps < ds + window) {
      void* req = nullptr;
      if (send.isend(sbuf[ps], msgs[ps].size(), 0, device_send, &req) != ncclSuccess) {
        out.error = "isend failed";
        return out;
      }
      if (req) sreq[ps++] = req;
    }
    for (size_t i = ds; i < ps; ++i) {  // any order: NCCL tests the oldest, but may test others
      if (!sreq[i]) continue;
      int done = 0;
      size_t size = 0;
      if (send.test(sreq[i], &done, &size) != ncclSuccess) {
        out.error = "send test failed";
        return out;
      }
      if (done) {
        if (size != msgs[i].size()) out.error = "send size";
        sreq[i] = nullptr;
      }
      if (i == ds && !sreq[i]) ++ds;
    }
    while (ds < ps && !sreq[ds]) ++ds;
    if (dr < pr) {
      int done = 0;
      size_t size = 0;
      if (recv.test(rreq[dr], &done, &size) != ncclSuccess) {
        out.error = "recv test failed";
        out.recv_failed = true;
        return out;
      }
      if (done) {
        if (device_recv && !mem.download(dst[dr].data(), rbuf[dr], dst[dr].size())) {
          out.error = "reading the received device buffer failed";
          return out;
        }
        if (size != msgs[dr].size()) {
          out.error = "recv size " + std::to_string(size) + " of " + std::to_string(msgs[dr].size());
          return out;
        }
        if (!std::equal(msgs[dr].begin(), msgs[dr].end(), dst[dr].begin())) {
          out.error = "payload differs at completion (message " + std::to_string(dr) + ")";
          return out;
        }
        for (size_t k = msgs[dr].size(); k < dst[dr].size(); ++k) {
          if (dst[dr][k] != 0xA5) {
            out.error = "byte past the message written (message " + std::to_string(dr) + ")";
            return out;
          }
        }
        ++dr;
      }
    }
  }
  return out;
}

std::vector<std::vector<uint8_t>> mixed_messages(int count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const size_t sizes[] = {0, 1, 7, 127, 128, 129, 4097, 65535, 65537, (256 << 10) + 3, 1 << 20, (3 << 20) + 5};
  std::vector<std::vector<uint8_t>> msgs;
  for (int i = 0; i < count; ++i) {
    size_t n = sizes[rng() % (sizeof sizes / sizeof sizes[0])];
    if (rng() % 4 == 0) n = rng() % (700 << 10);
    auto kind = static_cast<DataKind>(rng() % static_cast<int>(DataKind::kCount));
    msgs.push_back(make_data(kind, n, seed * 1000 + i));
  }
  return msgs;
}

class GpuPathPipeline : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::device_ops()) GTEST_SKIP() << "no device operations (ZIPCCL_GPU_EMULATE=1, or a usable GPU)";
    if (gpu::emulation_settings().fail_every != 0) GTEST_SKIP() << "run without failure injection";
  }
};

TEST_F(GpuPathPipeline, DeviceToDeviceManyInFlightBitExact) {
  auto msgs = mixed_messages(60, 1);
  Outcome o = run_pipeline(msgs, 8, true, true, false);
  EXPECT_EQ(o.error, "");
}

TEST_F(GpuPathPipeline, DeepWindowAndMarkedReceives) {
  auto msgs = mixed_messages(120, 2);
  Outcome o = run_pipeline(msgs, 40, true, true, true);  // window above 32, odd receives LL-marked
  EXPECT_EQ(o.error, "");
}

TEST_F(GpuPathPipeline, MixedHostAndDeviceEnds) {
  auto msgs = mixed_messages(30, 3);
  EXPECT_EQ(run_pipeline(msgs, 8, true, false, false).error, "");   // device send, host receive
  EXPECT_EQ(run_pipeline(msgs, 8, false, true, true).error, "");    // host send, device receive
  EXPECT_EQ(run_pipeline(msgs, 8, false, false, false).error, "");  // today's CPU path
}

TEST_F(GpuPathPipeline, IncompressibleGoesRawAndCompressibleAsFrames) {
  // Random bytes never shrink (raw fallback after the device encode); Gaussian bf16 does.
  std::vector<std::vector<uint8_t>> msgs;
  for (int i = 0; i < 6; ++i) msgs.push_back(make_data(DataKind::kRandom, (512 << 10) + i, 40 + i));
  for (int i = 0; i < 6; ++i) msgs.push_back(make_data(DataKind::kBf16Gauss, (512 << 10) + 2 * i, 50 + i));
  EXPECT_EQ(run_pipeline(msgs, 4, true, true, false).error, "");
  auto [device_msgs, encoded] = last_send_counters();
  EXPECT_EQ(device_msgs, 12);
  if (settings().compress == CompressMode::kNever) {
    EXPECT_EQ(encoded, 0);
  } else if (settings().compress == CompressMode::kAlways) {
    EXPECT_EQ(encoded, 6);  // the Gaussian half; the random half went raw after its device encode
  }
}

// ---- issue 33, defects 3-5: shared streams, no synchronising call after init, regMr under traffic ----

// regMr of every message's device buffers on both comms (the receive sizes without the guard).
bool reserve_all(SendComm& send, RecvComm& recv, const std::vector<std::vector<uint8_t>>& msgs,
                 const std::vector<std::vector<uint8_t>>& dst, const std::vector<void*>& sbuf,
                 const std::vector<void*>& rbuf, size_t guard) {
  for (size_t i = 0; i < msgs.size(); ++i) {
    if (send.reserve_device(sbuf[i], msgs[i].size()) != ncclSuccess ||
        recv.reserve_device(rbuf[i], dst[i].size() - guard) != ncclSuccess) {
      return false;
    }
  }
  return true;
}

// `comms` send/receive pairs, each registering device memory (regMr), moving `msgs` and closing; the
// emulation's counters of streams created and of device-synchronising calls, from the first regMr to
// the last close (the test's own buffers are made before and freed after).
struct CommsCounts {
  std::string error;
  uint64_t streams = 0, sync_calls = 0;
};
CommsCounts many_comms(int comms, const std::vector<std::vector<uint8_t>>& msgs) {
  set_logger(capture);
  CommsCounts c;
  const size_t kGuard = 64;
  DeviceMem mem;
  std::vector<std::vector<uint8_t>> dst(msgs.size());
  std::vector<void*> sbuf(msgs.size()), rbuf(msgs.size());
  for (size_t i = 0; i < msgs.size(); ++i) {
    dst[i].assign(msgs[i].size() + 100 + kGuard, 0xA5);
    sbuf[i] = mem.upload(msgs[i].data(), msgs[i].size());
    rbuf[i] = mem.upload(dst[i].data(), dst[i].size());
  }
  const uint64_t streams0 = gpu::emulated_streams_created(), sync0 = gpu::emulated_sync_calls();
  {
    DeviceInfo dev;
    dev.name = "fake";
    std::vector<std::unique_ptr<Wire>> wires;
    std::vector<std::unique_ptr<SendComm>> sends;
    std::vector<std::unique_ptr<RecvComm>> recvs;
    for (int k = 0; k < comms; ++k) {  // all open at once, as NCCL's channels are
      wires.emplace_back(new Wire);
      sends.emplace_back(new SendComm(new FakeSend(wires.back().get()), dev));
      recvs.emplace_back(new RecvComm(new FakeRecv(wires.back().get()), dev));
      if (!reserve_all(*sends.back(), *recvs.back(), msgs, dst, sbuf, rbuf, kGuard)) {
        c.error = "regMr failed";
        return c;
      }
    }
    for (int k = 0; k < comms && c.error.empty(); ++k) {
      for (auto& d : dst) std::fill(d.begin(), d.end(), 0xA5);
      c.error = exchange(*sends[k], *recvs[k], mem, msgs, dst, sbuf, rbuf, 4, true, true, false, kGuard).error;
    }
  }  // close
  c.streams = gpu::emulated_streams_created() - streams0;
  c.sync_calls = gpu::emulated_sync_calls() - sync0;
  return c;
}

class GpuPathShared : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (!gpu::emulation_settings().enabled) GTEST_SKIP() << "counts the emulation's calls";
    if (gpu::emulation_settings().fail_every != 0) GTEST_SKIP() << "run without failure injection";
  }
};

// Defect 3: every comm on a device shares kStreamsPerDevice streams, whatever the number of comms (the
// per-comm streams made 2 per comm: 16 for 8 comms, 128 for 64).
TEST_P(GpuPathShared, StreamsStayAtTheFixedNumber) {
  const int comms = GetParam();
  auto c = many_comms(comms, {make_data(DataKind::kBf16Gauss, 70000, 3), make_data(DataKind::kRandom, 5000, 4)});
  ASSERT_EQ(c.error, "");
  // The device's streams are made at the first registration in the process (this test or an earlier
  // one), never again.
  EXPECT_LE(c.streams, static_cast<uint64_t>(gpu::kStreamsPerDevice)) << "streams created for " << comms << " comms";
}

// Defect 5: after the device's init (its shared streams), nothing on NCCL's threads synchronises the
// device: not regMr (stream-ordered staging), not the data path, not close (no cudaStreamSynchronize,
// cudaFree or cudaFreeHost: memory returns to the pool after events recorded at close).
TEST_P(GpuPathShared, NoSynchronisingCallAfterInit) {
  gpu::SharedStreams s;
  ASSERT_EQ(gpu::shared_streams(gpu::device_ops(), 0, &s), ncclSuccess);  // the init
  auto c = many_comms(GetParam(), {make_data(DataKind::kBf16Gauss, 300000, 5), make_data(DataKind::kFp32Gauss, 4097, 6)});
  ASSERT_EQ(c.error, "");
  EXPECT_EQ(c.sync_calls, 0u) << "device-synchronising calls in regMr, traffic and close of " << GetParam()
                              << " comms";
}

INSTANTIATE_TEST_SUITE_P(Comms, GpuPathShared, ::testing::Values(1, 8, 64));

// Defect 4: NCCL registers user buffers (ncclCommRegister, local and graph registration) on its
// service thread while the progress thread runs isend/irecv/test on the same comm. A thread registers
// ever larger buffers (new arenas, more segments: new results and events) while traffic flows; TSan
// reports a race on the Channel's state if registration is not ordered against the data path.
TEST_F(GpuPathPipeline, RegistrationWhileTrafficFlows) {
  set_logger(capture);
  const size_t kGuard = 64;
  auto msgs = mixed_messages(40, 9);
  std::vector<std::vector<uint8_t>> dst(msgs.size());
  DeviceMem mem;
  std::vector<void*> sbuf(msgs.size()), rbuf(msgs.size());
  for (size_t i = 0; i < msgs.size(); ++i) {
    dst[i].assign(msgs[i].size() + 100 + kGuard, 0xA5);
    sbuf[i] = mem.upload(msgs[i].data(), msgs[i].size());
    rbuf[i] = mem.upload(dst[i].data(), dst[i].size());
  }
  std::vector<uint8_t> big(8 << 20);
  void* extra = mem.upload(big.data(), big.size());
  ASSERT_NE(extra, nullptr);
  Wire wire;
  DeviceInfo dev;
  dev.name = "fake";
  SendComm send(new FakeSend(&wire), dev);
  RecvComm recv(new FakeRecv(&wire), dev);
  ASSERT_TRUE(reserve_all(send, recv, msgs, dst, sbuf, rbuf, kGuard));
  std::atomic<bool> stop{false};
  std::atomic<int> registrations{0};
  std::thread service([&] {
    size_t n = 4 << 20;
    while (!stop.load() && n <= big.size()) {
      if (send.reserve_device(extra, n) != ncclSuccess || recv.reserve_device(extra, n) != ncclSuccess) break;
      registrations.fetch_add(1);
      n += 256 << 10;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  Outcome out = exchange(send, recv, mem, msgs, dst, sbuf, rbuf, 8, true, true, false, kGuard);
  stop.store(true);
  service.join();
  EXPECT_EQ(out.error, "");
  EXPECT_GT(registrations.load(), 0);
}

// A comm closed with requests NCCL stopped waiting for (an error elsewhere, an abort) must not leave
// device work behind that reads or writes its buffers: NCCL and the application free them once close
// returns. Messages are posted on both sides, the receives are driven until the first completes (the
// encodes, copies and decodes of the rest are queued or running on the shared streams), then both comms
// close; no stream operation on a caller's buffer may run after that.
TEST_F(GpuPathPipeline, CloseLeavesNoDeviceWorkOnItsBuffers) {
  if (!gpu::emulation_settings().enabled) GTEST_SKIP() << "counts the emulation's stream operations";
  set_logger(capture);
  std::vector<std::vector<uint8_t>> msgs;
  for (int i = 0; i < 16; ++i) msgs.push_back(make_data(DataKind::kBf16Gauss, (300 << 10) + i, 40 + i));
  const size_t kGuard = 64;
  std::vector<std::vector<uint8_t>> dst(msgs.size());
  DeviceMem mem;
  std::vector<void*> sbuf(msgs.size()), rbuf(msgs.size());
  for (size_t i = 0; i < msgs.size(); ++i) {
    dst[i].assign(msgs[i].size() + kGuard, 0xA5);
    sbuf[i] = mem.upload(msgs[i].data(), msgs[i].size());
    rbuf[i] = mem.upload(dst[i].data(), dst[i].size());
    ASSERT_TRUE(sbuf[i] && rbuf[i]);
  }
  uint64_t after_close = 0;
  {
    Wire wire;
    DeviceInfo dev;
    dev.name = "fake";
    SendComm send(new FakeSend(&wire), dev);
    RecvComm recv(new FakeRecv(&wire), dev);
    ASSERT_TRUE(reserve_all(send, recv, msgs, dst, sbuf, rbuf, kGuard));
    std::vector<void*> sreq(msgs.size()), rreq(msgs.size());
    auto t0 = std::chrono::steady_clock::now();
    bool first_done = false;  // then the pipeline is full: close now
    for (size_t i = 0; i < msgs.size() && !first_done; ++i) {
      while (!first_done && (!rreq[i] || !sreq[i])) {
        ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
        if (!rreq[i]) {
          ASSERT_EQ(recv.irecv(rbuf[i], dst[i].size() - kGuard, 0, true, false, &rreq[i]), ncclSuccess);
        }
        if (!sreq[i]) {
          ASSERT_EQ(send.isend(sbuf[i], msgs[i].size(), 0, true, &sreq[i]), ncclSuccess);
        }
        for (size_t k = 0; k < i; ++k) {  // drives both sides, as NCCL's progress thread does
          int done = 0;
          size_t size = 0;
          if (!sreq[k]) continue;
          ASSERT_EQ(send.test(sreq[k], &done, &size), ncclSuccess);
          if (done) sreq[k] = nullptr;
        }
        if (i) {
          int done = 0;
          size_t size = 0;
          ASSERT_EQ(recv.test(rreq[0], &done, &size), ncclSuccess);
          first_done = done != 0;
        }
      }
    }
    ASSERT_TRUE(first_done);
  }  // close, with requests in flight
  after_close = gpu::emulated_data_ops_done();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(gpu::emulated_data_ops_done(), after_close) << "device work on the buffers of closed comms ran after close";
}

// device_ops() offers the CUDA path only once this passes on the current device: here on the emulation,
// in the device step's gpu.cuda.* run on the GPU.
TEST_F(GpuPathPipeline, SelfTestPassesOnAWorkingDevice) {
  gpu::DeviceOps* ops = gpu::device_ops();
  std::string why;
  EXPECT_EQ(gpu::self_test(ops, ops->current_device(), &why), ncclSuccess) << why;
  EXPECT_EQ(why, "");
}

// Whether memory exports as a dma-buf, which an inner plugin without nvidia-peermem needs to register
// it: a buffer from the device operations' allocator (as NCCL's own) and the GPU path's device staging
// (CUDA pool memory, which CUDA does not document as exportable). Either answer is handled
// (docs/notes/inner.md); the export's contract is checked and the answer printed, on a GPU the fact
// that decides whether codec frames can leave from device memory.
TEST_F(GpuPathPipeline, DmaBufExportOfBuffersAndStaging) {
  gpu::DeviceOps* ops = gpu::device_ops();
  DeviceMem mem;
  std::vector<uint8_t> b(1 << 20, 1);
  void* d = mem.upload(b.data(), b.size());
  ASSERT_NE(d, nullptr);
  std::unique_ptr<gpu::Channel> ch;
  ASSERT_EQ(gpu::Channel::reserve_for(&ch, 8, d, b.size(), 1, true), ncclSuccess);
  std::pair<void*, size_t> staging{nullptr, 0};
  ch->for_each_arena(gpu::Channel::Buf::kDevice, [&](void* p, size_t n) { staging = {p, n}; });
  ASSERT_NE(staging.first, nullptr);
  const long page = sysconf(_SC_PAGESIZE);
  for (auto what : {std::make_pair("a device buffer", std::make_pair(d, b.size())),
                    std::make_pair("the device staging", staging)}) {
    int fd = -2;
    uint64_t offset = ~uint64_t{0};
    const ncclResult_t r = ops->dmabuf_fd(what.second.first, what.second.second, &fd, &offset);
    if (r == ncclSuccess) {
      struct stat st;
      EXPECT_EQ(fstat(fd, &st), 0) << what.first << ": not an open file";
      EXPECT_LT(offset, static_cast<uint64_t>(page)) << what.first;
      close(fd);
    } else {
      EXPECT_EQ(fd, -1) << what.first << ": a refused export leaves no fd";
    }
    std::printf("[ dma-buf  ] %s (%s, %zu bytes): %s\n", what.first, ops->name(), what.second.second,
                r == ncclSuccess ? "exported" : "refused");
  }
}

// Defect 4's sizing: a user buffer registers its whole memory segment, and NCCL posts up to 1 GiB at
// once from a registered buffer whatever maxP2pBytes says. A registration above
// kMaxStagedRegistration is refused (NCCL then uses its own buffers for it) and allocates no staging.
TEST_F(GpuPathPipeline, HugeRegistrationAllocatesNoStaging) {
  set_logger(capture);
  DeviceMem mem;
  std::vector<uint8_t> b(4096, 1);
  void* d = mem.upload(b.data(), b.size());
  ASSERT_NE(d, nullptr);
  auto staged = [](const gpu::Channel& ch) {
    size_t total = 0;
    for (auto k : {gpu::Channel::Buf::kHost, gpu::Channel::Buf::kDevice, gpu::Channel::Buf::kLand}) {
      ch.for_each_arena(k, [&](void*, size_t n) { total += n; });
    }
    return total;
  };
  const size_t huge = size_t{6} << 30;  // a 6 GiB segment (ncclCommRegister of a caching allocator's block)
  std::unique_ptr<gpu::Channel> ch;
  EXPECT_EQ(gpu::Channel::reserve_for(&ch, 8, d, huge, 1, true), ncclInvalidUsage);
  EXPECT_EQ(ch ? staged(*ch) : 0u, 0u);
  EXPECT_EQ(gpu::Channel::reserve_for(&ch, 8, d, gpu::kMaxStagedRegistration + 1, 1, true), ncclInvalidUsage);
  EXPECT_EQ(ch ? staged(*ch) : 0u, 0u);
  // A registration of NCCL's own buffer size is staged, about twice per kind.
  ASSERT_EQ(gpu::Channel::reserve_for(&ch, 8, d, 4 << 20, 1, true), ncclSuccess);
  EXPECT_GE(staged(*ch), 3u * 2 * (4 << 20));
  EXPECT_LE(staged(*ch), 3u * 2 * zipccl::codec::max_encoded_size((4 << 20) + 4096));
  // Through the comms (regMr of device memory): refused on both sides.
  Wire wire;
  DeviceInfo dev;
  dev.name = "fake";
  SendComm send(new FakeSend(&wire), dev);
  RecvComm recv(new FakeRecv(&wire), dev);
  EXPECT_EQ(send.reserve_device(d, huge), ncclInvalidUsage);
  EXPECT_EQ(recv.reserve_device(d, huge), ncclInvalidUsage);
}

// ---- several GPUs in one process (a JAX process drives all of its node's GPUs; a torchrun rank uses
// GPU <local rank>, never GPU 0's context) ----

class GpuPathDevices : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!gpu::emulation_settings().enabled) GTEST_SKIP() << "the emulation's several devices";
    if (gpu::emulation_settings().fail_every != 0) GTEST_SKIP() << "run without failure injection";
    set_logger(capture);
    gpu::device_ops();  // its WARN that the emulation is in use comes before the count
    warns_ = g_warns.load();
  }
  // No WARN: a call refused for its device at close fails nothing the test sees, but leaves the comm's
  // staging allocated for the rest of the process; the WARN is its only trace.
  void TearDown() override {
    if (!IsSkipped()) {
      EXPECT_EQ(g_warns.load(), warns_) << "WARNs logged (above)";
    }
  }
  int warns_ = 0;
};

// Two ranks of one process on GPUs 1 and 2, each on its own thread with its device current (NCCL's
// proxy threads call cudaSetDevice first), moving messages at the same time: each device's path is
// set up at its rank's first regMr (kernels loaded there: a launch on a device whose kernels were
// never loaded would load them on the data path), bit-exact, no setup call between the regMr and the
// close, and no call ever made in GPU 0's context (on a node, memory taken on a GPU no rank of the
// process uses; a refusal where GPUs are in exclusive-process mode).
TEST_F(GpuPathDevices, EachRankOnItsOwnGpu) {
  const std::vector<int> gpus = {1, 2};
  Meeting meet(static_cast<int>(gpus.size()));
  std::vector<Outcome> outs(gpus.size());
  gpu::emulated_forget_touched();
  std::vector<std::thread> ranks;
  for (size_t k = 0; k < gpus.size(); ++k) {
    ranks.emplace_back([&, k] {
      gpu::device_ops()->make_current(gpus[k]);
      outs[k] =
          run_pipeline(mixed_messages(30, 70 + k), 8, true, true, false, nullptr, gpus[k], gpus[k], &meet);
    });
  }
  for (auto& t : ranks) t.join();
  for (size_t k = 0; k < gpus.size(); ++k) EXPECT_EQ(outs[k].error, "") << "the rank on GPU " << gpus[k];
  EXPECT_EQ(gpu::emulated_devices_touched(), (1u << 1) | (1u << 2))
      << "contexts the process created (bit = GPU)";
}

// One thread driving a sender on GPU 1 and a receiver on GPU 2: stricter than NCCL (a proxy thread
// serves one device), so the plugin never relies on the calling thread's current device for a launch.
// The receiver's decodes are launched from test(), after the sender's isend made GPU 1 current.
TEST_F(GpuPathDevices, SenderOnOneGpuReceiverOnAnotherFromOneThread) {
  gpu::device_ops()->make_current(1);
  EXPECT_EQ(run_pipeline(mixed_messages(30, 80), 8, true, true, false, nullptr, 1, 2).error, "");
}

// Registered with ZIPCCL_GPU_EMULATE_FAIL_EVERY: a failing device encode sends raw (the data still
// arrives), a failing device decode is an error on the receive - never a hang.
TEST(GpuPathFaults, FailingCodecIsAnErrorNotAHang) {
  if (!gpu::emulation_settings().enabled || gpu::emulation_settings().fail_every == 0) {
    GTEST_SKIP() << "needs ZIPCCL_GPU_EMULATE=1 and ZIPCCL_GPU_EMULATE_FAIL_EVERY";
  }
  if (settings().compress != CompressMode::kAlways) GTEST_SKIP() << "needs ZIPCCL_COMPRESS=always";
  std::vector<std::vector<uint8_t>> msgs;
  for (int i = 0; i < 12; ++i) msgs.push_back(make_data(DataKind::kBf16Gauss, (300 << 10) + i, 70 + i));
  // Device send, host receive: every failure is an encode (the receiver decodes on the CPU): all arrive.
  EXPECT_EQ(run_pipeline(msgs, 4, true, false, false).error, "");
  // Host send, device receive: the failures hit device decodes: the receive errors out.
  Outcome o = run_pipeline(msgs, 4, false, true, false);
  EXPECT_TRUE(o.recv_failed) << o.error;
  EXPECT_NE(o.error, "timeout (hang)");
}

// A kernel that faults on a real GPU never publishes its result, and CUDA's error is sticky: every later
// call of the process fails. The emulation does the same; the transfer must end in an error on both
// sides, soon, whichever stream operation faults - never in a wait for a result that cannot come.
TEST(GpuPathDeviceFaults, StickyFaultIsAnErrorNotAHang) {
  if (!gpu::emulation_settings().enabled || gpu::emulation_settings().fail_every != 0) {
    GTEST_SKIP() << "needs ZIPCCL_GPU_EMULATE=1 without ZIPCCL_GPU_EMULATE_FAIL_EVERY";
  }
  std::vector<std::vector<uint8_t>> msgs;
  for (int i = 0; i < 16; ++i) msgs.push_back(make_data(DataKind::kBf16Gauss, (300 << 10) + i, 90 + i));
  for (int run = 0; run < 9; ++run) {
    const uint64_t after = run == 8 ? 0 : (run / 2) * 4;  // 0, 4, 8, 12 (of >= 16); then one message
    const bool device_recv = run % 2 && run < 8;       // a host receiver only sees the sender's failure
    std::vector<std::vector<uint8_t>> one(msgs.begin(), msgs.begin() + (run == 8 ? 1 : msgs.size()));
    std::chrono::steady_clock::time_point t0;
    Outcome o = run_pipeline(one, 4, true, device_recv, false, [&] {
      t0 = std::chrono::steady_clock::now();
      gpu::emulated_fault(after, true);
    });
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    gpu::emulated_fault(~uint64_t{0}, true);  // the next run starts on a healthy device
    EXPECT_NE(o.error, "") << "fault after " << after << " stream operations went unnoticed";
    EXPECT_NE(o.error, "timeout (hang)") << after;
    std::printf("sticky fault after %llu stream operations (%s receive): \"%s\" after %.1f ms\n",
                (unsigned long long)after, device_recv ? "device" : "host", o.error.c_str(), ms);
  }
}

// A launch that fails (not sticky) fails its isend or receive at once.
// A device that fails the self-test is not offered to NCCL (which would then register device buffers
// that the path cannot move): each failure is an error with its reason, never a hang.
TEST(GpuPathDeviceFaults, SelfTestNamesWhatFailed) {
  if (!gpu::emulation_settings().enabled || gpu::emulation_settings().fail_every != 0) {
    GTEST_SKIP() << "needs ZIPCCL_GPU_EMULATE=1 without ZIPCCL_GPU_EMULATE_FAIL_EVERY";
  }
  gpu::DeviceOps* ops = gpu::device_ops();
  std::string why;
  gpu::emulated_fault(0, false);  // the next launch fails
  EXPECT_NE(gpu::self_test(ops, 0, &why), ncclSuccess);
  EXPECT_NE(why.find("encode"), std::string::npos) << why;
  gpu::emulated_fault(~uint64_t{0}, true);
  EXPECT_EQ(gpu::self_test(ops, 0, &why), ncclSuccess) << why;
  gpu::emulated_fault(0, true);  // the device faults at the self-test's first stream operation (sticky)
  EXPECT_NE(gpu::self_test(ops, 0, &why), ncclSuccess);
  EXPECT_NE(why, "");
  gpu::emulated_fault(~uint64_t{0}, true);
}

TEST(GpuPathDeviceFaults, FailedLaunchIsAnError) {
  if (!gpu::emulation_settings().enabled || gpu::emulation_settings().fail_every != 0) {
    GTEST_SKIP() << "needs ZIPCCL_GPU_EMULATE=1 without ZIPCCL_GPU_EMULATE_FAIL_EVERY";
  }
  if (settings().compress != CompressMode::kAlways) GTEST_SKIP() << "needs ZIPCCL_COMPRESS=always";
  std::vector<std::vector<uint8_t>> msgs;
  for (int i = 0; i < 8; ++i) msgs.push_back(make_data(DataKind::kBf16Gauss, (300 << 10) + i, 110 + i));
  Outcome o = run_pipeline(msgs, 4, true, true, false, [] { gpu::emulated_fault(3, false); });
  gpu::emulated_fault(~uint64_t{0}, true);
  EXPECT_TRUE(o.error == "isend failed" || o.error == "recv test failed") << o.error;
}

// ---- segments (ZIPCCL_SEGMENT_BYTES): a large message travels as several frames ----

// Host buffers: the worker pool encodes segment 1 only when the test lets it; segment 0 must be on the
// wire before that (ordering by events, not time).
std::mutex g_hook_mu;
std::condition_variable g_hook_cv;
int g_hook_jobs = 0;
bool g_hook_open = false;
void hold_second_job(Job*) {
  std::unique_lock<std::mutex> lock(g_hook_mu);
  if (++g_hook_jobs == 2) g_hook_cv.wait(lock, [] { return g_hook_open; });
}
void open_hook() {
  {
    std::lock_guard<std::mutex> lock(g_hook_mu);
    g_hook_open = true;
  }
  g_hook_cv.notify_all();
}

class Segments : public ::testing::Test {
 protected:
  void SetUp() override {
    if (effective_segment_bytes(settings().segment_bytes) == 0) GTEST_SKIP() << "needs ZIPCCL_SEGMENT_BYTES";
    if (settings().compress != CompressMode::kAlways) GTEST_SKIP() << "needs ZIPCCL_COMPRESS=always";
    if (gpu::emulation_settings().fail_every != 0) GTEST_SKIP() << "run without failure injection";
    seg_ = effective_segment_bytes(settings().segment_bytes);
    set_logger(capture);
  }
  // Sends one message (device or host buffer) and receives it on a host buffer, driving both comms
  // until done; `while_waiting` runs on every pass until it returns true (then the gate opens).
  template <typename Fn>
  std::string transfer(const std::vector<uint8_t>& msg, bool device, Wire* wire, Fn&& while_waiting) {
    DeviceMem mem;
    DeviceInfo dev;
    dev.name = "fake";
    SendComm send(new FakeSend(wire), dev);
    RecvComm recv(new FakeRecv(wire), dev);
    struct OpenGates {  // before the comms close (their streams would wait for a held encode)
      ~OpenGates() {
        open_hook();
        gpu::emulated_gate_encodes(~uint64_t{0});
      }
    } open_gates;
    void* src = device ? mem.upload(msg.data(), msg.size()) : const_cast<uint8_t*>(msg.data());
    if (device && send.reserve_device(src, msg.size()) != ncclSuccess) return "regMr";
    std::vector<uint8_t> dst(msg.size() + 64, 0xA5);
    void *sreq = nullptr, *rreq = nullptr;
    if (recv.irecv(dst.data(), msg.size(), 0, false, false, &rreq) != ncclSuccess || !rreq) return "irecv";
    if (send.isend(src, msg.size(), 0, device, &sreq) != ncclSuccess || !sreq) return "isend";
    int sdone = 0, rdone = 0;
    bool waited = false;
    auto t0 = std::chrono::steady_clock::now();
    while (!sdone || !rdone) {
      if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(20)) return "timeout (hang)";
      if (!waited) waited = while_waiting();
      size_t n = 0;
      if (!sdone && send.test(sreq, &sdone, &n) != ncclSuccess) return "send test";
      if (waited && !rdone && recv.test(rreq, &rdone, &n) != ncclSuccess) return "recv test";
      if (rdone && n != msg.size()) return "recv size";
    }
    if (!waited) return "never saw the awaited event";
    if (!std::equal(msg.begin(), msg.end(), dst.begin())) return "payload differs";
    for (size_t k = msg.size(); k < dst.size(); ++k) {
      if (dst[k] != 0xA5) return "byte past the message written";
    }
    return "";
  }
  uint64_t seg_ = 0;
};

TEST_F(Segments, HeadersOnTheWireCoverTheMessage) {
  for (bool device : {false, true}) {
    if (device && !gpu::emulation_settings().enabled) continue;
    for (size_t size : {size_t(seg_), size_t(seg_) + 1, size_t(seg_) * 5 + 77}) {
      Wire wire;
      std::vector<uint8_t> msg = make_data(DataKind::kBf16Gauss, size, 9);
      EXPECT_EQ(transfer(msg, device, &wire, [] { return true; }), "") << size;
      uint64_t n = segment_count(size, seg_), sum = 0;
      ASSERT_EQ(wire.posted.size(), n) << size;
      for (size_t j = 0; j < n; ++j) {
        const FrameMeta& m = wire.posted[j];
        if (n == 1) {
          EXPECT_EQ(m.version, kFrameVersion);  // a message of one segment's size goes whole
        } else {
          EXPECT_EQ(m.version, kFrameVersionSegment);
          EXPECT_EQ(m.segment, j);
          EXPECT_EQ((m.flags & kSegLast) != 0, j + 1 == n);
          EXPECT_EQ(m.original_len, segment_len(size, seg_, j));
        }
        if (m.original_len >= 4096) {  // Gaussian bf16 compresses (a 1- or 77-byte tail does not)
          EXPECT_EQ(m.kind, static_cast<uint8_t>(FrameKind::kCodec)) << j;
        }
        if (m.kind == static_cast<uint8_t>(FrameKind::kCodec)) {
          EXPECT_LT(m.wire_len, m.original_len);
        }
        sum += m.original_len;
      }
      EXPECT_EQ(sum, size);
    }
  }
}

TEST_F(Segments, HostSegmentIsPostedBeforeTheNextIsEncoded) {
  Wire wire;
  std::vector<uint8_t> msg = make_data(DataKind::kBf16Gauss, seg_ * 8, 21);
  g_hook_jobs = 0;
  g_hook_open = false;
  set_job_hook_for_tests(hold_second_job);
  struct Reset {
    ~Reset() {
      open_hook();
      set_job_hook_for_tests(nullptr);
    }
  } reset;
  size_t posted_while_held = 0;
  std::string err = transfer(msg, false, &wire, [&] {
    std::lock_guard<std::mutex> lock(wire.mu);
    if (wire.posted.empty()) return false;
    posted_while_held = wire.posted.size();  // segment 1's encode is still held
    open_hook();
    return true;
  });
  EXPECT_EQ(err, "");
  EXPECT_EQ(posted_while_held, 1u);
  EXPECT_EQ(wire.posted.size(), 8u);
}

// Device buffers: the emulated device encodes only one segment until the test opens the gate; that
// segment's D2H (copy stream) and post must not wait for the held encodes (one stream would: its copy
// would queue behind them).
TEST_F(Segments, DeviceSegmentIsPostedWhileLaterEncodesAreHeld) {
  if (!gpu::emulation_settings().enabled) GTEST_SKIP() << "needs the emulation's encode gate";
  Wire wire;
  std::vector<uint8_t> msg = make_data(DataKind::kBf16Gauss, seg_ * 6 + 5, 22);
  uint64_t base = gpu::emulated_encodes_done();
  gpu::emulated_gate_encodes(base + 1);
  struct Reset {
    ~Reset() { gpu::emulated_gate_encodes(~uint64_t{0}); }
  } reset;
  size_t posted_while_held = 0;
  uint64_t encoded_then = 0;
  std::string err = transfer(msg, true, &wire, [&] {
    std::lock_guard<std::mutex> lock(wire.mu);
    if (wire.posted.empty()) return false;
    posted_while_held = wire.posted.size();
    encoded_then = gpu::emulated_encodes_done() - base;
    gpu::emulated_gate_encodes(~uint64_t{0});
    return true;
  });
  EXPECT_EQ(err, "");
  EXPECT_EQ(posted_while_held, 1u);
  EXPECT_EQ(encoded_then, 1u);  // 1 of 7 segments encoded when segment 0 was posted
  EXPECT_EQ(wire.posted.size(), 7u);
}

}  // namespace
