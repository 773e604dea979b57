// Host emulation of the device operations, for tests on machines without a GPU (ZIPCCL_GPU_EMULATE=1).
// "Device memory" is host memory; each stream is a helper thread that runs its work in order, each item
// after ZIPCCL_GPU_EMULATE_DELAY_US, so a pipeline that reads a buffer before its copy finished, or
// reports completion before the decode, fails its tests (and shows under TSan). The codec is the CPU
// codec, whose frames are byte-identical to the CUDA codec's. ZIPCCL_GPU_EMULATE_FAIL_EVERY=N makes
// every Nth encode or decode report a codec error. emulated_fault() injects what a real device does
// on a kernel fault (sticky: nothing after it runs, every call fails) or a failed launch, and every
// call that may synchronise the device or load modules is counted (emulated_setup_calls), so the
// tests catch an allocation or a module load on the data path, which the CPU cannot feel.
// Several devices, as on an 8-GPU node: each thread has a current device (0 until it sets one, as in
// CUDA), streams, events and allocations belong to a device, and the emulation applies CUDA's
// documented rules for several devices (emulated_device_count() in gpu_emulated.h).
#include "testing/gpu_emulated.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "common/settings.h"

namespace zipccl {
namespace net {
namespace gpu {
namespace {

struct EmuStream {
  int dev = 0;  // the device it was created on
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<uint64_t, std::function<void()>>> work;  // (epoch, item)
  uint64_t submitted = 0;            // guarded by mu
  std::atomic<uint64_t> completed{0};
  uint64_t epoch = 0;                // guarded by mu: a device reset (emulated_fault) drops older work
  bool stop = false;
  std::thread thread;
};

// Every live stream: cudaFree/cudaFreeHost wait for all of them (device-wide synchronisation), and a
// device reset (emulated_fault) drops their pending work.
std::mutex g_streams_mu;
std::vector<EmuStream*> g_streams;  // guarded by g_streams_mu

// Test hooks (gpu_path.h): finished encodes and the gate on starting one.
std::mutex g_gate_mu;
std::condition_variable g_gate_cv;
uint64_t g_encodes_done = 0;             // guarded by g_gate_mu
uint64_t g_encode_allow = ~uint64_t{0};  // guarded by g_gate_mu

std::atomic<uint64_t> g_setup_calls{0};
std::atomic<uint64_t> g_sync_calls{0};
std::atomic<uint64_t> g_streams_created{0};
std::atomic<uint64_t> g_data_ops_done{0};
// Fault injection: stream operations (encode, decode, copy, land) left before the fault; ~0: none.
std::atomic<uint64_t> g_fault_after{~uint64_t{0}};
std::atomic<bool> g_fault_sticky{true};
std::atomic<bool> g_faulted{false};  // a sticky fault happened: the device is unusable
// What a real device guarantees once it reports a sticky fault: the context is torn down, so no kernel
// or copy of it is still running (and none starts) when any call returns the error. Stream items start
// and finish under g_run_mu's count; a fault halts new starts, waits for the running ones to finish and
// only then becomes visible (g_faulted); a device reset (emulated_fault) waits the same way. Without it a
// stream thread could still be encoding from a buffer the caller freed after seeing the error.
// Never destroyed: the shared streams' threads outlive static destruction at exit.
std::mutex& g_run_mu = *new std::mutex;
std::condition_variable& g_run_cv = *new std::condition_variable;
int g_running = 0;      // guarded by g_run_mu: stream items executing now
bool g_halting = false;  // guarded by g_run_mu: a fault is being raised: no item starts
void setup_call() { g_setup_calls.fetch_add(1, std::memory_order_relaxed); }
// A call that synchronises the device (CUDA's documented implicit synchronisation, emulated_sync_calls).
void sync_call() {
  setup_call();
  g_sync_calls.fetch_add(1, std::memory_order_relaxed);
}

struct EmuEvent {
  EmuStream* stream;
  int dev = 0;  // the device current at its creation (cudaEventCreate)
  uint64_t target = 0;
};

constexpr int kDevices = 8;  // an 8-GPU node

// Several devices. CUDA's rules (Programming Guide, "Stream and Event Behavior"): a kernel launch
// into a stream of another device than the current one fails; an event belongs to the device current
// at its creation and cudaEventRecord fails on a stream of another device; copies, event queries and
// frees succeed whatever the current device. Each thread starts on device 0, and the first runtime
// call of a thread on a device initialises that device's context (memory on a GPU the process does
// not use, and a refusal where GPUs are in exclusive-process mode): emulated_devices_touched().
thread_local int t_device = 0;
std::atomic<uint32_t> g_touched{0};   // bit d: some call ran with device d current
std::atomic<uint32_t> g_prepared{0};  // bit d: prepare(d) ran (the kernels are loaded there)
void touch(int dev) {
  g_touched.fetch_or(1u << dev, std::memory_order_relaxed);
}
// A call that runs in the calling thread's current device's context.
int in_context() {
  touch(t_device);
  return t_device;
}

// What the emulation allocated: device memory of a device, or pinned host memory (a device's host
// pool's, accessible to that device's kernels only, as make_pool grants; or portable: every device's).
// Memory it did not allocate (the tests' own buffers) counts as device 0's and is not checked.
struct Block {
  size_t size;
  int dev;  // the owning device, or for host memory the device whose kernels may use it (-1: all)
  bool host;
};
std::mutex g_blocks_mu;
std::map<uintptr_t, Block>& g_blocks = *new std::map<uintptr_t, Block>;  // by base; never destroyed
void add_block(const void* p, size_t n, int dev, bool host) {
  std::lock_guard<std::mutex> lock(g_blocks_mu);
  g_blocks[reinterpret_cast<uintptr_t>(p)] = Block{n, dev, host};
}
void remove_block(const void* p) {
  std::lock_guard<std::mutex> lock(g_blocks_mu);
  g_blocks.erase(reinterpret_cast<uintptr_t>(p));
}
bool find_block(const void* p, Block* out) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(g_blocks_mu);
  auto it = g_blocks.upper_bound(a);
  if (it == g_blocks.begin()) return false;
  --it;
  if (a >= it->first + std::max<size_t>(it->second.size, 1)) return false;
  *out = it->second;
  return true;
}

class EmulatedOps final : public DeviceOps {
 public:
  EmulatedOps() : delay_us_(emulation_settings().delay_us), fail_every_(emulation_settings().fail_every) {}
  const char* name() const override { return "host emulation (tests)"; }
  // cudaPointerGetAttributes: no context needed. Pinned host memory is not device memory (-1).
  int device_of(const void* p) override {
    Block b;
    if (!find_block(p, &b)) return 0;
    return b.host ? -1 : b.dev;
  }
  // cudaSetDevice initialises the device's primary context (CUDA 12).
  ncclResult_t make_current(int dev) override {
    if (dev < 0 || dev >= kDevices) {
      ZIPCCL_WARN("cudaSetDevice(%d) failed: invalid device ordinal (the emulation has %d)", dev, kDevices);
      return ncclUnhandledCudaError;
    }
    t_device = dev;
    touch(dev);
    return sticky("cudaSetDevice");
  }
  int current_device() override { return t_device; }
  ncclResult_t prepare(int dev) override {
    ZIPCCL_CHECK(make_current(dev));  // as the CUDA implementation's
    sync_call();  // module loads and cudaFuncSetAttribute: counted as synchronising
    ZIPCCL_CHECK(sticky("prepare_device"));
    g_prepared.fetch_or(1u << dev);
    return ncclSuccess;
  }
  // The CUDA implementation clears a new workspace with a kernel on the stream: a launch.
  ncclResult_t reserve_workspace(void* stream, size_t) override {
    setup_call();
    return launch("cudaMalloc + init_workspace", stream, {}, false);
  }

  ncclResult_t create_stream(int dev, void** stream) override {
    ZIPCCL_CHECK(make_current(dev));  // as the CUDA implementation's
    setup_call();  // cudaStreamCreate: not in CUDA's implicit-synchronisation list
    g_streams_created.fetch_add(1, std::memory_order_relaxed);
    auto* s = new EmuStream;
    s->dev = dev;
    s->thread = std::thread([s, this] { run(s); });
    {
      std::lock_guard<std::mutex> lock(g_streams_mu);
      g_streams.push_back(s);
    }
    *stream = s;
    return ncclSuccess;
  }
  void destroy_stream(void* stream) override {
    sync_call();  // cudaStreamSynchronize + cudaFree (the GPU path's own no longer calls this)
    auto* s = static_cast<EmuStream*>(stream);
    {
      std::lock_guard<std::mutex> lock(g_streams_mu);
      g_streams.erase(std::find(g_streams.begin(), g_streams.end(), s));
    }
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->stop = true;
    }
    s->cv.notify_all();
    s->thread.join();  // drains the queue first, like cudaStreamSynchronize + destroy
    delete s;
  }
  // On the current device, like cudaEventCreate (the stream argument is the interface's, unused there).
  ncclResult_t create_event(void* stream, void** event) override {
    setup_call();
    *event = new EmuEvent{static_cast<EmuStream*>(stream), in_context()};
    return ncclSuccess;
  }
  void destroy_event(void* event) override {
    setup_call();
    delete static_cast<EmuEvent*>(event);
  }
  // cudaMalloc, cudaFree, cudaHostAlloc, cudaFreeHost: each synchronises the device.
  ncclResult_t alloc_device(size_t n, void** p) override {
    sync_call();
    ZIPCCL_CHECK(alloc(n, p));
    add_block(*p, n, in_context(), false);
    if (auto* f = device_memory_listener()) f(*p, (n + 255) / 256 * 256);
    return ncclSuccess;
  }
  void free_device(void* p) override {
    sync_call();
    in_context();
    synchronize_device();
    if (auto* f = device_memory_listener()) f(p, 0);
    remove_block(p);
    std::free(p);
  }
  ncclResult_t alloc_host(size_t n, void** p) override {
    sync_call();
    in_context();
    ZIPCCL_CHECK(alloc(n, p));
    add_block(*p, n, -1, true);  // cudaHostAllocPortable
    return ncclSuccess;
  }
  void free_host(void* p) override {
    sync_call();
    in_context();
    synchronize_device();
    remove_block(p);
    std::free(p);
  }
  // The emulated dma-buf is a memfd as long as the exported range (host pages around [p, p + n)), so
  // whoever registers it can check the fd (fstat) and that the range fits.
  ncclResult_t dmabuf_fd(const void* p, size_t n, int* fd, uint64_t* offset) override {
    *fd = -1;
    *offset = 0;
    ZIPCCL_CHECK(sticky("cuMemGetHandleForAddressRange"));
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), base = a & ~(page - 1);
    const uintptr_t end = (a + n + page - 1) & ~(page - 1);
    const int f = memfd_create("zipccl-emulated-dmabuf", MFD_CLOEXEC);
    if (f < 0 || ftruncate(f, static_cast<off_t>(end - base)) != 0) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "emulated dma-buf export of %zu bytes: %s", n, std::strerror(errno));
      if (f >= 0) close(f);
      return ncclSystemError;
    }
    *fd = f;
    *offset = a - base;
    return ncclSuccess;
  }
  // Stream-ordered (cudaMallocFromPoolAsync, cudaFreeAsync): no synchronisation; the free runs in the
  // stream's order, after the work enqueued before it.
  // From the pools of the stream's device: its device memory, or pinned host memory its kernels may use.
  ncclResult_t alloc_device_async(void* stream, size_t n, void** p) override {
    setup_call();
    in_context();
    ZIPCCL_CHECK(alloc(n, p));
    add_block(*p, n, static_cast<EmuStream*>(stream)->dev, false);
    if (auto* f = device_memory_listener()) f(*p, (n + 255) / 256 * 256);
    return ncclSuccess;
  }
  ncclResult_t alloc_host_async(void* stream, size_t n, void** p) override {
    setup_call();
    in_context();
    ZIPCCL_CHECK(alloc(n, p));
    add_block(*p, n, static_cast<EmuStream*>(stream)->dev, true);
    return ncclSuccess;
  }
  void free_async(void* stream, void* p) override {
    setup_call();
    in_context();
    submit(stream, [p] {
      if (auto* f = device_memory_listener()) f(p, 0);  // a host block is unknown to it: ignored
      remove_block(p);
      std::free(p);
    }, false);
  }

  ncclResult_t encode(void* stream, const void* src, size_t n, void* dst, size_t cap, codec::ElemType type,
                      int, Result* out) override {
    ZIPCCL_CHECK(launch("encode_async", stream, {src, dst, out}));
    bool fail = inject();
    submit(stream, [=] {
      {
        std::unique_lock<std::mutex> lock(g_gate_mu);
        g_gate_cv.wait(lock, [] { return g_encodes_done < g_encode_allow; });
      }
      size_t size = 0;
      codec::Status st = codec::Status::kInvalidArgument;
      if (!fail) {
        codec::EncodeOptions opt;
        opt.type = type;
        opt.threads = 1;
        opt.isa = codec_isa();
        st = codec::encode(src, n, dst, cap, &size, opt);
      }
      {
        std::lock_guard<std::mutex> lock(g_gate_mu);
        ++g_encodes_done;
      }
      g_gate_cv.notify_all();
      publish(out, size, st);
    });
    return ncclSuccess;
  }
  ncclResult_t decode(void* stream, const void* src, size_t n, void* dst, size_t cap, int,
                      Result* out) override {
    ZIPCCL_CHECK(launch("decode_async", stream, {src, dst, out}));
    bool fail = inject();
    submit(stream, [=] {
      size_t size = 0;
      codec::Status st = codec::Status::kCorrupt;
      if (!fail) {
        codec::DecodeOptions opt;
        opt.threads = 1;
        opt.isa = codec_isa();
        st = codec::decode(src, n, dst, cap, &size, opt);
      }
      publish(out, st == codec::Status::kOk ? size : 0, st);
    });
    return ncclSuccess;
  }
  // Succeeds on a stream of another device than the current one (CUDA's rule for copies).
  ncclResult_t copy(void* stream, void* dst, const void* src, size_t n, Copy) override {
    in_context();
    ZIPCCL_CHECK(sticky("cudaMemcpyAsync"));
    if (n) submit(stream, [=] { std::memcpy(dst, src, n); });
    return ncclSuccess;
  }
  ncclResult_t land_lines(void* stream, void* dst, const void* src, size_t n) override {
    ZIPCCL_CHECK(launch("launch_land_lines", stream, {src, dst}, false));
    submit(stream, [=] {
      line_order(n, [&](const Piece& p) {
        // The emulation only needs program order (one thread writes); the kernel uses __threadfence().
        if (p.fence_before) std::atomic_signal_fence(std::memory_order_seq_cst);
        std::memcpy(static_cast<char*>(dst) + p.offset, static_cast<const char*>(src) + p.offset, p.length);
      });
    });
    return ncclSuccess;
  }
  ncclResult_t record(void* stream, void* event) override {
    in_context();
    ZIPCCL_CHECK(sticky("cudaEventRecord"));
    auto* s = static_cast<EmuStream*>(stream);
    auto* e = static_cast<EmuEvent*>(event);
    if (e->dev != s->dev) {
      ZIPCCL_WARN(
          "cudaEventRecord failed: invalid resource handle (emulated: an event of GPU %d on a stream of "
          "GPU %d)",
          e->dev, s->dev);
      return ncclUnhandledCudaError;
    }
    std::lock_guard<std::mutex> lock(s->mu);
    e->target = s->submitted;
    return ncclSuccess;
  }
  ncclResult_t query(void* event, bool* done) override {
    in_context();
    ZIPCCL_CHECK(sticky("cudaEventQuery"));
    auto* e = static_cast<EmuEvent*>(event);
    *done = e->stream->completed.load(std::memory_order_acquire) >= e->target;
    return ncclSuccess;
  }

 private:
  // After a sticky fault every call fails, as CUDA's do; logged once per process, as gpu_cuda.cpp does.
  static ncclResult_t sticky(const char* call) {
    if (!g_faulted.load(std::memory_order_acquire)) return ncclSuccess;
    static std::once_flag once;
    std::call_once(once, [call] {
      ZIPCCL_WARN("%s failed: an illegal memory access was encountered (emulated sticky fault)", call);
    });
    return ncclUnhandledCudaError;
  }
  // A kernel launch into `stream` on buffers `args`: fails when the device is faulted, when the stream
  // is another device's than the current one, when an argument is memory its kernels cannot reach
  // (another device's, or a host block another device's pool gave: no peer access is enabled; on a
  // device the kernel would fault), or, for a codec kernel (`codec`), when a launch fault is armed and
  // due. On a device whose kernels were never loaded (prepare), CUDA's lazy loading would load the
  // module now, on the data path: counted as a synchronising call.
  static ncclResult_t launch(const char* call, void* stream, std::initializer_list<const void*> args,
                             bool codec = true) {
    ZIPCCL_CHECK(sticky(call));
    const int dev = static_cast<EmuStream*>(stream)->dev, current = in_context();
    if (dev != current) {
      ZIPCCL_WARN(
          "%s failed: invalid resource handle (emulated: a launch into a stream of GPU %d while GPU %d is "
          "current)",
          call, dev, current);
      return ncclUnhandledCudaError;
    }
    for (const void* p : args) {
      Block b;
      if (find_block(p, &b) && b.dev >= 0 && b.dev != dev) {
        ZIPCCL_WARN(
            "%s failed (emulated): a kernel on GPU %d given %s memory of GPU %d at %p, which it cannot "
            "reach (an illegal address on a device)",
            call, dev, b.host ? "pinned host" : "device", b.dev, p);
        return ncclUnhandledCudaError;
      }
    }
    if (!(g_prepared.load() & (1u << dev))) sync_call();
    if (!codec || g_fault_sticky.load()) return ncclSuccess;
    uint64_t left = g_fault_after.load();
    while (left != ~uint64_t{0} && !g_fault_after.compare_exchange_weak(left, left ? left - 1 : ~uint64_t{0})) {
    }
    if (left != 0) return ncclSuccess;
    ZIPCCL_WARN("%s failed: too many resources requested for launch (emulated launch fault)", call);
    return ncclUnhandledCudaError;
  }
  // ZIPCCL_GPU_EMULATE_TELL=<loaded library>: its fake_inner_device_memory(p, n) hears of every emulated
  // device allocation (n: its size) and free (n 0), so a stand-in inner plugin (tests/inner/fake_inner.c)
  // can tell "device" memory from host memory in the registrations and transfers it checks.
  using Listener = void (*)(const void*, size_t);
  static Listener device_memory_listener() {
    static const Listener f = [] {
      const char* lib = std::getenv("ZIPCCL_GPU_EMULATE_TELL");
      void* h = lib && *lib ? dlopen(lib, RTLD_NOW | RTLD_NOLOAD) : nullptr;
      return h ? reinterpret_cast<Listener>(dlsym(h, "fake_inner_device_memory")) : nullptr;
    }();
    return f;
  }
  static ncclResult_t alloc(size_t n, void** p) {
    ZIPCCL_CHECK(sticky("cudaMalloc"));
    *p = std::aligned_alloc(256, (n + 255) / 256 * 256);
    if (!*p) {
      ZIPCCL_WARN("emulated allocation of %zu bytes failed", n);
      return ncclSystemError;
    }
    return ncclSuccess;
  }
  bool inject() {
    if (fail_every_ <= 0) return false;
    return ++codec_ops_ % static_cast<uint64_t>(fail_every_) == 0;
  }
  static void publish(Result* out, size_t size, codec::Status st) {
    out->size = size;
    out->status = static_cast<int32_t>(st);
    __atomic_store_n(&out->ready, 1u, __ATOMIC_RELEASE);
  }
  // What cudaFree does before freeing: waits until every stream has run what was enqueued before
  // (not after a sticky fault: nothing runs any more).
  static void synchronize_device() {
    std::vector<std::pair<EmuStream*, uint64_t>> targets;
    std::lock_guard<std::mutex> lock(g_streams_mu);  // no stream is destroyed meanwhile
    for (EmuStream* s : g_streams) {
      std::lock_guard<std::mutex> l(s->mu);
      targets.emplace_back(s, s->submitted);
    }
    for (auto& t : targets) {
      // Faulted: nothing runs any more (raise_fault), nothing to wait for.
      while (!g_faulted.load() && t.first->completed.load() < t.second) {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }
  // `data`: an operation on the caller's buffers (encode, decode, copy, landing), counted by
  // emulated_data_ops_done() when it has run; not a stream-ordered free.
  void submit(void* stream, std::function<void()> fn, bool data = true) {
    if (data) {
      fn = [f = std::move(fn)] {
        f();
        g_data_ops_done.fetch_add(1, std::memory_order_relaxed);
      };
    }
    auto* s = static_cast<EmuStream*>(stream);
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->work.emplace_back(s->epoch, std::move(fn));
      ++s->submitted;
    }
    s->cv.notify_one();
  }
  // Counts down the armed sticky fault, one stream operation at a time.
  static bool faults_now() {
    if (!g_fault_sticky.load()) return false;
    uint64_t left = g_fault_after.load();
    while (left != ~uint64_t{0}) {
      if (g_fault_after.compare_exchange_weak(left, left ? left - 1 : ~uint64_t{0})) return left == 0;
    }
    return false;
  }
  // A faulted device runs nothing and completes nothing (events stay pending) until a reset
  // (emulated_fault) drops the old work: the streams are shared by every comm and outlive the fault.
  void run(EmuStream* s) {
    for (;;) {
      std::function<void()> fn;
      uint64_t epoch = 0;
      {
        std::unique_lock<std::mutex> lock(s->mu);
        s->cv.wait(lock, [s] { return s->stop || !s->work.empty(); });
        if (s->work.empty()) return;
        epoch = s->work.front().first;
        fn = std::move(s->work.front().second);
        s->work.pop_front();
      }
      if (delay_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay_us_));
      if (faults_now()) {  // this item faults: it never runs
        raise_fault();
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(g_run_mu);
        if (g_halting || g_faulted.load()) continue;  // the device is failing or failed
        {
          std::lock_guard<std::mutex> l(s->mu);
          if (epoch != s->epoch) continue;  // enqueued before a reset (even if taken before it): dropped
        }
        ++g_running;
      }
      fn();
      s->completed.fetch_add(1);
      {
        std::lock_guard<std::mutex> lock(g_run_mu);
        --g_running;
      }
      g_run_cv.notify_all();
    }
  }
  // The sticky fault becomes visible only once no stream item runs (see g_run_mu).
  static void raise_fault() {
    std::unique_lock<std::mutex> lock(g_run_mu);
    g_halting = true;
    g_run_cv.wait(lock, [] { return g_running == 0; });
    g_faulted.store(true);
    g_halting = false;
    lock.unlock();
    g_run_cv.notify_all();
  }

  const int delay_us_;
  const int fail_every_;
  std::atomic<uint64_t> codec_ops_{0};
};

}  // namespace

uint64_t emulated_encodes_done() {
  std::lock_guard<std::mutex> lock(g_gate_mu);
  return g_encodes_done;
}

void emulated_gate_encodes(uint64_t allow) {
  {
    std::lock_guard<std::mutex> lock(g_gate_mu);
    g_encode_allow = allow;
  }
  g_gate_cv.notify_all();
}

uint64_t emulated_setup_calls() { return g_setup_calls.load(); }
uint64_t emulated_sync_calls() { return g_sync_calls.load(); }
uint64_t emulated_streams_created() { return g_streams_created.load(); }
uint64_t emulated_data_ops_done() { return g_data_ops_done.load(); }
int emulated_device_count() {
  return kDevices;
}
uint32_t emulated_devices_touched() {
  return g_touched.load();
}
void emulated_forget_touched() {
  g_touched.store(0);
}

void emulated_fault(uint64_t after, bool sticky) {
  std::unique_lock<std::mutex> run_lock(g_run_mu);
  g_run_cv.wait(run_lock, [] { return g_running == 0 && !g_halting; });  // a fault being raised finishes first
  if (g_faulted.load()) {  // a device reset: what the fault left on the streams never runs
    std::lock_guard<std::mutex> lock(g_streams_mu);
    for (EmuStream* s : g_streams) {
      std::lock_guard<std::mutex> l(s->mu);
      ++s->epoch;
      s->completed.store(s->submitted);
    }
  }
  g_faulted.store(false);
  g_fault_sticky.store(sticky);
  g_fault_after.store(after);
}

DeviceOps* emulated_ops() {
  static EmulatedOps* ops = new EmulatedOps;  // lives as long as the process (the plugin is nodelete)
  return ops;
}

}  // namespace gpu
}  // namespace net
}  // namespace zipccl

namespace zipccl {
namespace net {
namespace gpu {
namespace {

// A test setting: an integer in [lo, hi] from the environment, else `fallback` (with a message).
int test_setting(const char* name, long lo, long hi, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (end == v || *end || x < lo || x > hi) {
    std::fprintf(stderr, "%s='%s' is not an integer in [%ld, %ld]; using %d\n", name, v, lo, hi, fallback);
    return fallback;
  }
  return static_cast<int>(x);
}

// The test doubles offer the emulation as the process's device operations; it is taken at the first
// device_ops() when ZIPCCL_GPU_EMULATE=1 (read then: the tests' main sets the environment after
// static initialisation).
DeviceOps* emulation_if_enabled() { return emulation_settings().enabled ? emulated_ops() : nullptr; }
const bool g_registered = [] {
  set_device_ops_factory(emulation_if_enabled,
                         "ZIPCCL_GPU_EMULATE=1: device buffers are host memory handled by a test emulation");
  return true;
}();

}  // namespace

const EmulationSettings& emulation_settings() {
  static const EmulationSettings s = [] {
    EmulationSettings e;
    e.enabled = test_setting("ZIPCCL_GPU_EMULATE", 0, 1, 0) != 0;
    e.delay_us = test_setting("ZIPCCL_GPU_EMULATE_DELAY_US", 0, 1000000, 0);
    e.fail_every = test_setting("ZIPCCL_GPU_EMULATE_FAIL_EVERY", 0, 1 << 30, 0);
    return e;
  }();
  return s;
}

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
