// GpuCodec (gpu_tool.h): the CUDA codec behind `--gpu`. Compiled with the CUDA codec when the build
// found a toolkit (ZIPCCL_TOOL_CUDA); otherwise open() says the build has none.
#include "gpu_tool.h"

#include <cstring>

#if ZIPCCL_TOOL_CUDA
#include <cuda_runtime_api.h>

#include <algorithm>

#include "zipccl/codec_cuda.h"
#endif

namespace zipccl {
namespace tools {

#if ZIPCCL_TOOL_CUDA

namespace cg = codec::gpu;

namespace {

// A device allocation that grows; contents are not kept across growth.
struct DeviceBuffer {
  void* p = nullptr;
  size_t cap = 0;
  ~DeviceBuffer() { release(); }
  void release() {
    if (p) cudaFree(p);
    p = nullptr;
    cap = 0;
  }
  cudaError_t reserve(size_t n) {
    if (n <= cap && p) return cudaSuccess;
    release();
    const cudaError_t e = cudaMalloc(&p, std::max<size_t>(n, 256));
    if (e == cudaSuccess) cap = std::max<size_t>(n, 256);
    return e;
  }
};

bool cuda_ok(cudaError_t e, const char* what, std::string* err) {
  if (e == cudaSuccess) return true;
  *err = std::string(what) + ": " + cudaGetErrorString(e);
  return false;
}

bool gpu_ok(cg::GpuStatus s, cudaError_t cuda_error, const char* what, std::string* err) {
  if (s == cg::GpuStatus::kOk) return true;
  *err = std::string(what) + ": " + cg::gpu_status_string(s);
  if (s == cg::GpuStatus::kCudaError) *err += std::string(" (") + cudaGetErrorString(cuda_error) + ")";
  return false;
}

}  // namespace

struct GpuCodec::Impl {
  int device = -1;
  std::string name;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  DeviceBuffer src, frame, out, workspace, result;

  ~Impl() {
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (stream) cudaStreamDestroy(stream);
  }

  // The workspace serves encode and decode; it is cleared whenever it is (re)allocated.
  bool reserve_workspace(size_t n, std::string* err) {
    if (n <= workspace.cap && workspace.p) return true;
    if (!cuda_ok(workspace.reserve(n), "cudaMalloc (workspace)", err)) return false;
    cudaError_t ce = cudaSuccess;
    cg::LaunchOptions lo;
    lo.stream = stream;
    lo.cuda_error = &ce;
    return gpu_ok(cg::init_workspace(workspace.p, workspace.cap, lo), ce, "init_workspace", err);
  }

  bool read_result(cg::CodecResult* r, std::string* err) {
    if (!cuda_ok(cudaMemcpyAsync(r, result.p, sizeof(*r), cudaMemcpyDeviceToHost, stream), "cudaMemcpyAsync", err) ||
        !cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize", err))
      return false;
    if (r->status != static_cast<int32_t>(codec::Status::kOk)) {
      *err = std::string("the GPU codec reports: ") + codec::status_string(static_cast<codec::Status>(r->status));
      return false;
    }
    return true;
  }

  // Encodes src.p[0, n) (already on the device) into frame.p; the launch only.
  bool launch_encode(size_t n, codec::ElemType type, int block_log2, int max_sms, std::string* err) {
    cudaError_t ce = cudaSuccess;
    cg::LaunchOptions lo;
    lo.stream = stream;
    lo.max_sms = max_sms;
    lo.cuda_error = &ce;
    cg::GpuEncodeOptions eo;
    eo.type = type;
    eo.block_log2 = block_log2;
    return gpu_ok(cg::encode_async(src.p, n, frame.p, frame.cap, static_cast<cg::CodecResult*>(result.p), nullptr,
                                   workspace.p, workspace.cap, eo, lo),
                  ce, "encode", err);
  }
  bool launch_decode(size_t frame_bytes, size_t cap, int max_sms, std::string* err) {
    cudaError_t ce = cudaSuccess;
    cg::LaunchOptions lo;
    lo.stream = stream;
    lo.max_sms = max_sms;
    lo.cuda_error = &ce;
    return gpu_ok(cg::decode_async(frame.p, frame_bytes, out.p, cap, static_cast<cg::CodecResult*>(result.p),
                                   nullptr, workspace.p, workspace.cap, lo),
                  ce, "decode", err);
  }
  bool prepare_encode(size_t n, int block_log2, std::string* err) {
    return cuda_ok(src.reserve(n), "cudaMalloc (input)", err) &&
           cuda_ok(frame.reserve(codec::max_encoded_size(n)), "cudaMalloc (frame)", err) &&
           cuda_ok(result.reserve(sizeof(cg::CodecResult)), "cudaMalloc (result)", err) &&
           reserve_workspace(std::max(cg::encode_workspace_size(n, block_log2), cg::decode_workspace_size(1)), err);
  }
  // Milliseconds of the work enqueued by f, between two events.
  template <class F>
  bool timed(F&& f, float* ms, std::string* err) {
    if (!cuda_ok(cudaEventRecord(start, stream), "cudaEventRecord", err) || !f() ||
        !cuda_ok(cudaEventRecord(stop, stream), "cudaEventRecord", err) ||
        !cuda_ok(cudaEventSynchronize(stop), "cudaEventSynchronize", err))
      return false;
    return cuda_ok(cudaEventElapsedTime(ms, start, stop), "cudaEventElapsedTime", err);
  }
};

GpuCodec::GpuCodec() = default;
GpuCodec::~GpuCodec() = default;

bool GpuCodec::open(std::string* why) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    *why = std::string("no usable CUDA driver or device (") + cudaGetErrorString(e) + ")";
    return false;
  }
  if (count == 0) {
    *why = "no CUDA device";
    return false;
  }
  auto impl = std::make_unique<Impl>();
  impl->device = 0;
  cudaDeviceProp prop;
  if (!cuda_ok(cudaSetDevice(0), "cudaSetDevice", why) || !cuda_ok(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties", why) ||
      !cuda_ok(cudaStreamCreateWithFlags(&impl->stream, cudaStreamNonBlocking), "cudaStreamCreate", why) ||
      !cuda_ok(cudaEventCreate(&impl->start), "cudaEventCreate", why) ||
      !cuda_ok(cudaEventCreate(&impl->stop), "cudaEventCreate", why))
    return false;
  impl->name = std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
               std::to_string(prop.multiProcessorCount) + " SMs)";
  impl_ = std::move(impl);
  return true;
}

std::string GpuCodec::device() const { return impl_ ? impl_->name : std::string(); }

bool GpuCodec::encode(const uint8_t* src, size_t n, codec::ElemType type, int block_log2,
                      std::vector<uint8_t>* frame, std::string* err) {
  Impl& g = *impl_;
  if (!g.prepare_encode(n, block_log2, err)) return false;
  if (n && !cuda_ok(cudaMemcpyAsync(g.src.p, src, n, cudaMemcpyHostToDevice, g.stream), "cudaMemcpyAsync", err))
    return false;
  cg::CodecResult r{};
  if (!g.launch_encode(n, type, block_log2, 0, err) || !g.read_result(&r, err)) return false;
  frame->resize(static_cast<size_t>(r.size));
  return cuda_ok(cudaMemcpy(frame->data(), g.frame.p, frame->size(), cudaMemcpyDeviceToHost), "cudaMemcpy", err);
}

bool GpuCodec::decode(const uint8_t* frame, size_t n, uint8_t* dst, size_t cap, size_t* out, std::string* err) {
  Impl& g = *impl_;
  if (!cuda_ok(g.frame.reserve(n), "cudaMalloc (frame)", err) || !cuda_ok(g.out.reserve(cap), "cudaMalloc (output)", err) ||
      !cuda_ok(g.result.reserve(sizeof(cg::CodecResult)), "cudaMalloc (result)", err) ||
      !g.reserve_workspace(cg::decode_workspace_size(1), err))
    return false;
  if (!cuda_ok(cudaMemcpyAsync(g.frame.p, frame, n, cudaMemcpyHostToDevice, g.stream), "cudaMemcpyAsync", err))
    return false;
  cg::CodecResult r{};
  if (!g.launch_decode(n, cap, 0, err) || !g.read_result(&r, err)) return false;
  *out = static_cast<size_t>(r.size);
  return cuda_ok(cudaMemcpy(dst, g.out.p, *out, cudaMemcpyDeviceToHost), "cudaMemcpy", err);
}

bool GpuCodec::time(const uint8_t* src, size_t n, codec::ElemType type, int max_sms, int reps, Timing* t,
                    std::string* err) {
  Impl& g = *impl_;
  // The reference: the CPU codec's frame for the same input, type and block size (the GPU's default).
  std::vector<uint8_t> cpu(codec::max_encoded_size(n));
  size_t cpu_bytes = 0;
  codec::EncodeOptions eo;
  eo.type = type;
  eo.block_log2 = cg::kDefaultBlockLog2;
  if (codec::encode(src, n, cpu.data(), cpu.size(), &cpu_bytes, eo) != codec::Status::kOk) {
    *err = "the CPU codec failed on this input";
    return false;
  }
  if (!g.prepare_encode(n, 0, err) || !cuda_ok(g.out.reserve(n), "cudaMalloc (output)", err)) return false;
  if (n && !cuda_ok(cudaMemcpy(g.src.p, src, n, cudaMemcpyHostToDevice), "cudaMemcpy", err)) return false;

  float best_enc = 0, best_dec = 0;
  cg::CodecResult r{};
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    if (!g.timed([&] { return g.launch_encode(n, type, 0, max_sms, err); }, &ms, err) || !g.read_result(&r, err))
      return false;
    best_enc = i == 0 ? ms : std::min(best_enc, ms);
  }
  t->frame_bytes = static_cast<size_t>(r.size);
  std::vector<uint8_t> gpu(t->frame_bytes);
  if (!cuda_ok(cudaMemcpy(gpu.data(), g.frame.p, gpu.size(), cudaMemcpyDeviceToHost), "cudaMemcpy", err)) return false;
  if (gpu.size() != cpu_bytes || std::memcmp(gpu.data(), cpu.data(), cpu_bytes) != 0) {
    *err = "the GPU frame differs from the CPU codec's (" + std::to_string(gpu.size()) + " vs " +
           std::to_string(cpu_bytes) + " bytes)";
    return false;
  }
  for (int i = 0; i < reps; ++i) {
    float ms = 0;
    if (!g.timed([&] { return g.launch_decode(t->frame_bytes, n, max_sms, err); }, &ms, err) ||
        !g.read_result(&r, err))
      return false;
    best_dec = i == 0 ? ms : std::min(best_dec, ms);
  }
  if (r.size != n) {
    *err = "the GPU decoded " + std::to_string(r.size) + " bytes of " + std::to_string(n);
    return false;
  }
  std::vector<uint8_t> back(n);
  if (!cuda_ok(cudaMemcpy(back.data(), g.out.p, n, cudaMemcpyDeviceToHost), "cudaMemcpy", err)) return false;
  if (n && std::memcmp(back.data(), src, n) != 0) {
    *err = "the GPU round trip differs from the input";
    return false;
  }
  t->encode_s = best_enc / 1e3;
  t->decode_s = best_dec / 1e3;
  return true;
}

#else  // no CUDA toolkit in this build

struct GpuCodec::Impl {};
GpuCodec::GpuCodec() = default;
GpuCodec::~GpuCodec() = default;
bool GpuCodec::open(std::string* why) {
  *why = "this zipccl was built without the CUDA toolkit (configure with nvcc on PATH or -DZIPCCL_CUDA=ON)";
  return false;
}
std::string GpuCodec::device() const { return std::string(); }
bool GpuCodec::encode(const uint8_t*, size_t, codec::ElemType, int, std::vector<uint8_t>*, std::string* err) {
  *err = "no CUDA codec in this build";
  return false;
}
bool GpuCodec::decode(const uint8_t*, size_t, uint8_t*, size_t, size_t*, std::string* err) {
  *err = "no CUDA codec in this build";
  return false;
}
bool GpuCodec::time(const uint8_t*, size_t, codec::ElemType, int, int, Timing*, std::string* err) {
  *err = "no CUDA codec in this build";
  return false;
}

#endif

}  // namespace tools
}  // namespace zipccl
