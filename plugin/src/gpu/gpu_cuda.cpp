// CUDA implementation of the device operations (built only with the toolkit: ZIPCCL_PLUGIN_CUDA).
// The runtime is linked statically and loads the driver (libcuda.so.1) itself at the first call, so
// the plugin still loads on a machine without a driver; cuda_ops() then returns nullptr and the
// plugin advertises host memory only. Opt-in (ZIPCCL_GPU=on) until tests/gpu/run_device_checks.sh
// passes on a GPU (docs/notes/gpu.md).
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "common/log.h"
#include "common/settings.h"
#include "gpu/gpu_path.h"
#include "zipccl/codec_cuda.h"

namespace zipccl {
namespace net {
namespace gpu {

cudaError_t launch_land_lines(void* dst, const void* src, size_t n, int max_sms, cudaStream_t stream);
cudaError_t prepare_land_lines();

namespace {

namespace cg = codec::gpu;
static_assert(sizeof(Result) == sizeof(cg::CodecResult), "Result mirrors CodecResult");
static_assert(offsetof(Result, ready) == offsetof(cg::CodecResult, ready), "Result mirrors CodecResult");

// A failing CUDA call fails the request with ncclUnhandledCudaError. It is logged as a WARN the first
// time each error code is seen in the process, naming the call: a kernel fault is sticky, so every
// later call of every comm fails with the same code, and those repeats go to INFO.
ncclResult_t cuda_failed(const char* call, cudaError_t e, const char* file, int line) {
  static std::mutex mu;
  static std::vector<cudaError_t>& seen = *new std::vector<cudaError_t>;
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    first = std::find(seen.begin(), seen.end(), e) == seen.end();
    if (first) seen.push_back(e);
  }
  // A job that exits without destroying its communicators unloads the CUDA runtime while NCCL's proxy
  // thread still calls in: every later call fails with cudaErrorCudartUnloading. That is the end of the
  // process, not a fault of the job, and a WARN as its last line would send users looking for one.
  if (first && e != cudaErrorCudartUnloading) {
    ZIPCCL_WARN("%s failed: %s (%s:%d)", call, cudaGetErrorString(e), file, line);
  } else {
    ZIPCCL_INFO(NCCL_NET, "%s failed%s: %s (%s:%d)", call, first ? "" : " again", cudaGetErrorString(e), file,
                line);
  }
  return ncclUnhandledCudaError;
}

#define ZIPCCL_CUDA_CHECK(call)                                                          \
  do {                                                                                   \
    cudaError_t zipccl_err_ = (call);                                                    \
    if (zipccl_err_ != cudaSuccess) return cuda_failed(#call, zipccl_err_, __FILE__, __LINE__); \
  } while (0)

// cuMemGetHandleForAddressRange (CUDA >= 11.7), resolved from the driver at run time as the RDMA
// transport resolves it (rdma_verbs.cpp): no driver-API link, and a driver without it only loses the
// dma-buf export. CUresult is an int (0: success), CUdeviceptr an unsigned long long.
constexpr int kCuMemRangeHandleTypeDmaBufFd = 1;  // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
struct DmaBufExport {
  int (*get_handle)(void* handle, unsigned long long dptr, size_t size, int type, unsigned long long flags) = nullptr;
  int (*error_string)(int error, const char** text) = nullptr;  // cuGetErrorString; optional
  const char* missing = nullptr;                                // why get_handle is null
};
const DmaBufExport& dmabuf_export() {
  static const DmaBufExport api = [] {
    DmaBufExport a;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // already loaded by the runtime
    if (!lib) {
      a.missing = "libcuda.so.1 not found";
      return a;
    }
    a.get_handle = reinterpret_cast<decltype(a.get_handle)>(dlsym(lib, "cuMemGetHandleForAddressRange"));
    a.error_string = reinterpret_cast<decltype(a.error_string)>(dlsym(lib, "cuGetErrorString"));
    if (!a.get_handle) a.missing = "libcuda.so.1 has no cuMemGetHandleForAddressRange (CUDA < 11.7)";
    return a;
  }();
  return api;
}

struct CudaStream {
  cudaStream_t stream = nullptr;
  int dev = 0;
  void* enc_ws = nullptr;
  size_t enc_ws_size = 0;
  void* dec_ws = nullptr;
  size_t dec_ws_size = 0;
  cg::CodecResult* dev_results = nullptr;  // [0] encode, [1] decode (stream-ordered reuse)
  // The stream is shared by every comm on the device: reserve_workspace (a service thread) replaces
  // the workspaces while encode/decode (progress threads) launch with them.
  std::mutex mu;
};

// Per device, created with its first stream (the path's init): pools for stream-ordered allocation of
// device memory and of pinned host memory the device can access, so that regMr and close never call
// cudaMalloc/cudaHostAlloc/cudaFree/cudaFreeHost (each synchronises the device). Freed memory stays
// in the pools (release threshold: unlimited) for the next comm.
struct DevicePools {
  cudaMemPool_t device = nullptr;
  cudaMemPool_t host = nullptr;
};
std::mutex g_pools_mu;
std::vector<DevicePools>* g_pools = new std::vector<DevicePools>;  // by ordinal; process lifetime

cudaError_t make_pool(int dev, bool host, cudaMemPool_t* pool) {
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = host ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  props.location.id = host ? 0 : dev;
  cudaError_t e = cudaMemPoolCreate(pool, &props);
  if (e != cudaSuccess) return e;
  uint64_t keep = ~uint64_t{0};
  e = cudaMemPoolSetAttribute(*pool, cudaMemPoolAttrReleaseThreshold, &keep);
  if (e == cudaSuccess && host) {  // the codec writes its results and copies into host memory
    cudaMemAccessDesc d{};
    d.location.type = cudaMemLocationTypeDevice;
    d.location.id = dev;
    d.flags = cudaMemAccessFlagsProtReadWrite;
    e = cudaMemPoolSetAccess(*pool, &d, 1);
  }
  return e;
}

cudaError_t pools_of(int dev, DevicePools* out) {
  std::lock_guard<std::mutex> lock(g_pools_mu);
  if (g_pools->size() <= static_cast<size_t>(dev)) g_pools->resize(static_cast<size_t>(dev) + 1);
  DevicePools& p = (*g_pools)[static_cast<size_t>(dev)];
  if (!p.device) {
    DevicePools made;
    cudaError_t e = make_pool(dev, false, &made.device);
    if (e == cudaSuccess) e = make_pool(dev, true, &made.host);
    if (e != cudaSuccess) return e;
    p = made;
  }
  *out = p;
  return cudaSuccess;
}

class CudaOps final : public DeviceOps {
 public:
  const char* name() const override { return "CUDA"; }

  int device_of(const void* p) override {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // unregistered host memory on old runtimes: not an error for us
      return -1;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged ? a.device : -1;
  }
  ncclResult_t make_current(int dev) override {
    ZIPCCL_CUDA_CHECK(cudaSetDevice(dev));
    return ncclSuccess;
  }
  int current_device() override {
    int dev = -1;
    if (cudaGetDevice(&dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return dev;
  }
  ncclResult_t prepare(int dev) override {
    ZIPCCL_CUDA_CHECK(cudaSetDevice(dev));
    cudaError_t e = cudaSuccess;
    cg::LaunchOptions l;
    l.cuda_error = &e;
    const cg::GpuStatus st = cg::prepare_device(l);
    if (st != cg::GpuStatus::kOk) {
      ZIPCCL_WARN("loading the codec kernels on GPU %d failed: %s%s%s", dev, cg::gpu_status_string(st),
                  st == cg::GpuStatus::kCudaError ? ": " : "", st == cg::GpuStatus::kCudaError ? cudaGetErrorString(e) : "");
      return st == cg::GpuStatus::kCudaError ? ncclUnhandledCudaError : ncclInternalError;
    }
    ZIPCCL_CUDA_CHECK(prepare_land_lines());
    return ncclSuccess;
  }
  ncclResult_t create_stream(int dev, void** stream) override {
    ZIPCCL_CUDA_CHECK(cudaSetDevice(dev));
    auto* s = new CudaStream;
    s->dev = dev;
    DevicePools pools;
    cudaError_t e = pools_of(dev, &pools);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
      e = cudaMallocFromPoolAsync(reinterpret_cast<void**>(&s->dev_results), 2 * sizeof(cg::CodecResult),
                                  pools.device, s->stream);
    if (e == cudaSuccess) e = cudaMemsetAsync(s->dev_results, 0, 2 * sizeof(cg::CodecResult), s->stream);
    if (e != cudaSuccess) {
      ZIPCCL_WARN("creating the GPU path's stream on GPU %d failed: %s", dev, cudaGetErrorString(e));
      if (s->stream) cudaStreamDestroy(s->stream);
      delete s;
      return ncclUnhandledCudaError;
    }
    *stream = s;
    return ncclSuccess;
  }
  void destroy_stream(void* stream) override {
    auto* s = static_cast<CudaStream*>(stream);
    cudaSetDevice(s->dev);
    // Tests only (the GPU path's streams live as long as the process).
    if (s->enc_ws) cudaFreeAsync(s->enc_ws, s->stream);
    if (s->dec_ws) cudaFreeAsync(s->dec_ws, s->stream);
    cudaFreeAsync(s->dev_results, s->stream);
    cudaStreamSynchronize(s->stream);
    cudaStreamDestroy(s->stream);
    delete s;
  }
  ncclResult_t create_event(void*, void** event) override {
    cudaEvent_t e = nullptr;
    ZIPCCL_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    *event = e;
    return ncclSuccess;
  }
  void destroy_event(void* event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
  ncclResult_t alloc_device(size_t n, void** p) override {
    ZIPCCL_CUDA_CHECK(cudaMalloc(p, n));
    return ncclSuccess;
  }
  void free_device(void* p) override { cudaFree(p); }
  ncclResult_t alloc_host(size_t n, void** p) override {
    ZIPCCL_CUDA_CHECK(cudaHostAlloc(p, n, cudaHostAllocMapped | cudaHostAllocPortable));
    return ncclSuccess;
  }
  void free_host(void* p) override { cudaFreeHost(p); }
  ncclResult_t dmabuf_fd(const void* p, size_t n, int* fd, uint64_t* offset) override {
    *fd = -1;
    *offset = 0;
    const DmaBufExport& api = dmabuf_export();
    if (!api.get_handle) {
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "no dma-buf export of GPU memory: %s", api.missing);
      return ncclInvalidUsage;
    }
    const int dev = device_of(p);
    if (dev < 0) {
      ZIPCCL_WARN("dma-buf export of %zu bytes at %p: not device memory", n, p);
      return ncclInternalError;
    }
    ZIPCCL_CUDA_CHECK(cudaSetDevice(dev));  // the driver call runs in the device's primary context
    // The driver takes host-page-aligned ranges only (as NCCL aligns its own exports).
    const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    const uintptr_t a = reinterpret_cast<uintptr_t>(p), base = a & ~(page - 1);
    const uintptr_t end = (a + n + page - 1) & ~(page - 1);
    int handle = -1;
    const int r = api.get_handle(&handle, base, end - base, kCuMemRangeHandleTypeDmaBufFd, 0);
    if (r != 0 || handle < 0) {
      const char* text = nullptr;
      if (api.error_string) api.error_string(r, &text);
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET,
                  "cuMemGetHandleForAddressRange of %zu bytes at %p on GPU %d failed: CUDA error %d (%s)",
                  static_cast<size_t>(end - base), reinterpret_cast<void*>(base), dev, r, text ? text : "?");
      return ncclSystemError;
    }
    *fd = handle;
    *offset = a - base;
    return ncclSuccess;
  }
  ncclResult_t alloc_device_async(void* stream, size_t n, void** p) override {
    return pool_alloc(static_cast<CudaStream*>(stream), false, n, p);
  }
  // Pinned host memory from the device's host pool: accessible to the device at the same address (UVA),
  // which is how encode/decode hand the codec its Result. The host touches it at once (result_clear,
  // the transport): safe, since a block returns to the pool only after its last user's events
  // completed (Channel::~Channel frees it then).
  ncclResult_t alloc_host_async(void* stream, size_t n, void** p) override {
    return pool_alloc(static_cast<CudaStream*>(stream), true, n, p);
  }
  void free_async(void* stream, void* p) override { cudaFreeAsync(p, static_cast<CudaStream*>(stream)->stream); }
  ncclResult_t reserve_workspace(void* stream, size_t bytes) override {
    auto* s = static_cast<CudaStream*>(stream);
    std::lock_guard<std::mutex> lock(s->mu);
    ZIPCCL_CHECK(workspace(s, cg::encode_workspace_size(bytes), &s->enc_ws, &s->enc_ws_size));
    return workspace(s, cg::decode_workspace_size(1), &s->dec_ws, &s->dec_ws_size);
  }

  ncclResult_t encode(void* stream, const void* src, size_t n, void* dst, size_t cap, codec::ElemType type,
                      int max_sms, Result* out) override {
    auto* s = static_cast<CudaStream*>(stream);
    auto* host = reinterpret_cast<cg::CodecResult*>(out);  // pool memory: the same address on the device
    std::lock_guard<std::mutex> lock(s->mu);
    cg::GpuEncodeOptions opt;
    opt.type = type;
    cudaError_t e = cudaSuccess;
    return launched("encode_async", cg::encode_async(src, n, dst, cap, s->dev_results, host, s->enc_ws,
                                                     s->enc_ws_size, opt, launch(s, max_sms, &e)), e);
  }
  ncclResult_t decode(void* stream, const void* src, size_t n, void* dst, size_t cap, int max_sms,
                      Result* out) override {
    auto* s = static_cast<CudaStream*>(stream);
    auto* host = reinterpret_cast<cg::CodecResult*>(out);  // pool memory: the same address on the device
    std::lock_guard<std::mutex> lock(s->mu);
    cudaError_t e = cudaSuccess;
    return launched("decode_async", cg::decode_async(src, n, dst, cap, s->dev_results + 1, host, s->dec_ws,
                                                     s->dec_ws_size, launch(s, max_sms, &e)), e);
  }
  ncclResult_t copy(void* stream, void* dst, const void* src, size_t n, Copy kind) override {
    if (!n) return ncclSuccess;
    cudaMemcpyKind k = kind == Copy::kDeviceToHost   ? cudaMemcpyDeviceToHost
                       : kind == Copy::kHostToDevice ? cudaMemcpyHostToDevice
                                                     : cudaMemcpyDeviceToDevice;
    ZIPCCL_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, k, static_cast<CudaStream*>(stream)->stream));
    return ncclSuccess;
  }
  ncclResult_t land_lines(void* stream, void* dst, const void* src, size_t n) override {
    ZIPCCL_CUDA_CHECK(launch_land_lines(dst, src, n, max_sms_, static_cast<CudaStream*>(stream)->stream));
    return ncclSuccess;
  }
  ncclResult_t record(void* stream, void* event) override {
    ZIPCCL_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<CudaStream*>(stream)->stream));
    return ncclSuccess;
  }
  ncclResult_t query(void* event, bool* done) override {
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaErrorNotReady) {
      // NotReady can be left as this thread's last error (PyTorch clears it too, pytorch#18584): the
      // next launch's cudaGetLastError() check on this proxy thread would report it as a failure.
      (void)cudaGetLastError();
      *done = false;
      return ncclSuccess;
    }
    ZIPCCL_CUDA_CHECK(e);
    *done = true;
    return ncclSuccess;
  }

  int max_sms_ = 16;

 private:
  static ncclResult_t pool_alloc(CudaStream* s, bool host, size_t n, void** p) {
    DevicePools pools;
    ZIPCCL_CUDA_CHECK(pools_of(s->dev, &pools));
    ZIPCCL_CUDA_CHECK(cudaMallocFromPoolAsync(p, n, host ? pools.host : pools.device, s->stream));
    return ncclSuccess;
  }
  static cg::LaunchOptions launch(CudaStream* s, int max_sms, cudaError_t* e) {
    cg::LaunchOptions l;
    l.stream = s->stream;
    l.max_sms = max_sms;
    l.cuda_error = e;
    return l;
  }
  static ncclResult_t launched(const char* what, cg::GpuStatus st, cudaError_t e) {
    if (st == cg::GpuStatus::kOk) return ncclSuccess;
    if (st == cg::GpuStatus::kCudaError) return cuda_failed(what, e, __FILE__, __LINE__);
    ZIPCCL_WARN("GPU %s could not be launched: %s", what, cg::gpu_status_string(st));
    return ncclInternalError;
  }
  // Grow-only workspace, sized at regMr (reserve_workspace), stream-ordered: work enqueued before uses
  // the old one, which returns to the pool after it (cudaFreeAsync). encode/decode never call this: a
  // message larger than the registration fails with kWorkspaceTooSmall. Caller holds s->mu.
  static ncclResult_t workspace(CudaStream* s, size_t need, void** ws, size_t* size) {
    if (*ws && *size >= need) return ncclSuccess;
    size_t want = need < (1u << 20) ? (1u << 20) : need;
    DevicePools pools;
    ZIPCCL_CUDA_CHECK(pools_of(s->dev, &pools));
    void* p = nullptr;
    ZIPCCL_CUDA_CHECK(cudaMallocFromPoolAsync(&p, want, pools.device, s->stream));
    cg::LaunchOptions l;
    l.stream = s->stream;
    if (cg::init_workspace(p, want, l) != cg::GpuStatus::kOk) {
      cudaFreeAsync(p, s->stream);
      ZIPCCL_WARN("clearing a %zu-byte codec workspace failed", want);
      return ncclUnhandledCudaError;
    }
    if (*ws) cudaFreeAsync(*ws, s->stream);
    *ws = p;
    *size = want;
    return ncclSuccess;
  }
};

}  // namespace

DeviceOps* cuda_ops() {
  static std::once_flag once;
  static CudaOps* ops = nullptr;
  std::call_once(once, [] {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      (void)cudaGetLastError();
      ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "GPU path off: no usable CUDA device (%s)",
                  e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
      return;
    }
    ops = new CudaOps;  // process lifetime (nodelete library)
    ops->max_sms_ = settings().gpu_max_sms;
    ZIPCCL_INFO(NCCL_INIT | NCCL_NET, "CUDA for the GPU path: %d device(s)", n);  // "GPU path: " says on or off
  });
  return ops;
}

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
