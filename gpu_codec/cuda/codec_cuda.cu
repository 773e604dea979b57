// Dispatch of the CUDA codec: argument checks, parameter blocks, grid sizes from occupancy (capped
// by max_sms), launches on the caller's stream. Nothing here synchronises or allocates.
#include <mutex>
#include <vector>

#include "kernels.cuh"
#include "launch_config.h"
#include "zipccl/codec_cuda.h"

namespace zipccl {
namespace codec {
namespace gpu {

using namespace detail;

namespace {

GpuStatus cuda_fail(cudaError_t e, const LaunchOptions& launch) {
  if (launch.cuda_error) *launch.cuda_error = e;
  return GpuStatus::kCudaError;
}

#define ZIPCCL_CUDA_TRY(expr)                         \
  do {                                                \
    const cudaError_t zipccl_e_ = (expr);             \
    if (zipccl_e_ != cudaSuccess) return cuda_fail(zipccl_e_, launch); \
  } while (0)

enum KernelId { kDetect, kEncode, kFinalize, kDecode, kKernels };

struct DeviceInfo {
  int device = -1;
  int sms = 0;
  int smem_optin = 0;
  bool attributes_set = false;
  // Occupancy (CTAs per SM) by kernel and dynamic shared memory bytes.
  std::vector<std::pair<uint64_t, int>> occupancy;
};

std::mutex g_mutex;
std::vector<DeviceInfo> g_devices;  // one entry per device seen; never shrinks

const void* kernel_ptr(KernelId k) {
  switch (k) {
    case kDetect: return reinterpret_cast<const void*>(&kernels::detect_kernel);
    case kEncode: return reinterpret_cast<const void*>(&kernels::encode_kernel);
    case kFinalize: return reinterpret_cast<const void*>(&kernels::finalize_kernel);
    default: return reinterpret_cast<const void*>(&kernels::decode_kernel);
  }
}

// SM count and CTAs per SM for kernel k with `smem` dynamic bytes on the current device. Fails with
// kUnsupported when the kernel cannot run with that much shared memory.
GpuStatus occupancy(KernelId k, size_t smem, const LaunchOptions& launch, int* sms, int* per_sm) {
  int dev = 0;
  ZIPCCL_CUDA_TRY(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(g_mutex);
  DeviceInfo* info = nullptr;
  for (auto& d : g_devices) {
    if (d.device == dev) info = &d;
  }
  if (!info) {
    DeviceInfo d;
    d.device = dev;
    ZIPCCL_CUDA_TRY(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
    ZIPCCL_CUDA_TRY(cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    g_devices.push_back(d);
    info = &g_devices.back();
  }
  if (!info->attributes_set) {
    // Once per device: allow each kernel the device's whole opt-in shared memory.
    for (int i = 0; i < kKernels; ++i) {
      ZIPCCL_CUDA_TRY(cudaFuncSetAttribute(kernel_ptr(KernelId(i)), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           info->smem_optin));
    }
    info->attributes_set = true;
  }
  if (smem > size_t(info->smem_optin)) return GpuStatus::kUnsupported;
  const uint64_t key = (uint64_t(k) << 32) | smem;
  for (auto& o : info->occupancy) {
    if (o.first == key) {
      *sms = info->sms, *per_sm = o.second;
      return GpuStatus::kOk;
    }
  }
  int n = 0;
  ZIPCCL_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_ptr(k), kThreads, smem));
  if (n < 1) return GpuStatus::kUnsupported;
  info->occupancy.emplace_back(key, n);
  *sms = info->sms, *per_sm = n;
  return GpuStatus::kOk;
}

#define ZIPCCL_TRY(expr)                   \
  do {                                     \
    const GpuStatus zipccl_s_ = (expr);    \
    if (zipccl_s_ != GpuStatus::kOk) return zipccl_s_; \
  } while (0)

GpuStatus launch_encode(EncodeParams& prm, int max_planes, bool any_auto, const LaunchOptions& launch) {
  int sms = 0, per_sm = 0;
  cudaStream_t s = launch.stream;
  if (any_auto) {
    ZIPCCL_TRY(occupancy(kDetect, sizeof(DetectShared), launch, &sms, &per_sm));
    kernels::detect_kernel<<<prm.count, kThreads, sizeof(DetectShared), s>>>(prm);
    ZIPCCL_CUDA_TRY(cudaGetLastError());
  }
  if (prm.total_slots) {
    const EncodeSmemLayout lay = encode_smem_layout(max_planes, prm.block_log2);
    ZIPCCL_TRY(occupancy(kEncode, lay.total, launch, &sms, &per_sm));
    const uint32_t grid = grid_size(prm.total_slots, sms, per_sm, launch.max_sms);
    kernels::encode_kernel<<<grid, kThreads, lay.total, s>>>(prm, lay);
    ZIPCCL_CUDA_TRY(cudaGetLastError());
  }
  ZIPCCL_TRY(occupancy(kFinalize, 0, launch, &sms, &per_sm));
  const uint32_t grid = grid_size(prm.total_units, sms, per_sm, launch.max_sms);
  kernels::finalize_kernel<<<grid, kThreads, 0, s>>>(prm);
  ZIPCCL_CUDA_TRY(cudaGetLastError());
  return GpuStatus::kOk;
}

}  // namespace

const char* gpu_status_string(GpuStatus s) {
  switch (s) {
    case GpuStatus::kOk: return "ok";
    case GpuStatus::kInvalidArgument: return "invalid argument";
    case GpuStatus::kDstTooSmall: return "destination smaller than max_encoded_size(n)";
    case GpuStatus::kTooLarge: return "input larger than one frame carries (4 GiB - 1)";
    case GpuStatus::kWorkspaceTooSmall: return "workspace too small";
    case GpuStatus::kUnsupported: return "the device cannot run the codec kernels";
    case GpuStatus::kCudaError: return "CUDA error";
  }
  return "unknown status";
}

size_t encode_workspace_size(size_t n, int block_log2) { return encode_batch_workspace_size(&n, 1, block_log2); }

size_t encode_batch_workspace_size(const size_t* sizes, size_t count, int block_log2) {
  if (!valid_block_log2(block_log2) || (count && !sizes)) return 0;
  const int bl = clamp_block_log2(block_log2);
  uint64_t most = 0;
  for (size_t c0 = 0; c0 < count; c0 += kMaxBatch) {
    uint64_t slots = 0;
    for (size_t i = c0; i < count && i < c0 + kMaxBatch; ++i) slots += item_slots(sizes[i], kTypeAuto, bl);
    most = slots > most ? slots : most;
  }
  return encode_workspace_bytes(most);
}

size_t decode_workspace_size(size_t) { return decode_workspace_bytes(); }

GpuStatus init_workspace(void* workspace, size_t bytes, const LaunchOptions& launch) {
  if (!workspace && bytes) return GpuStatus::kInvalidArgument;
  if (bytes) ZIPCCL_CUDA_TRY(cudaMemsetAsync(workspace, 0, bytes, launch.stream));
  return GpuStatus::kOk;
}

GpuStatus encode_batch_async(const EncodeItem* items, size_t count, CodecResult* results, CodecResult* host_results,
                             void* workspace, size_t workspace_bytes, int block_log2, const LaunchOptions& launch) {
  if (launch.cuda_error) *launch.cuda_error = cudaSuccess;
  if (!items || !count || !results || !workspace) return GpuStatus::kInvalidArgument;
  for (size_t c0 = 0; c0 < count; c0 += kMaxBatch) {
    const size_t n = count - c0 < size_t(kMaxBatch) ? count - c0 : size_t(kMaxBatch);
    EncodeParams prm;
    int max_planes = 2;
    bool any_auto = false;
    ZIPCCL_TRY(build_encode_params(items + c0, n, block_log2, &prm, &max_planes, &any_auto));
    if (encode_workspace_bytes(prm.total_slots) > workspace_bytes) return GpuStatus::kWorkspaceTooSmall;
    prm.workspace = static_cast<uint8_t*>(workspace);
    prm.results = results + c0;
    prm.host_results = host_results ? host_results + c0 : nullptr;
    ZIPCCL_TRY(launch_encode(prm, max_planes, any_auto, launch));
  }
  return GpuStatus::kOk;
}

GpuStatus encode_async(const void* src, size_t n, void* dst, size_t dst_capacity, CodecResult* results,
                       CodecResult* host_results, void* workspace, size_t workspace_bytes, const GpuEncodeOptions& opt,
                       const LaunchOptions& launch) {
  const EncodeItem item{src, n, dst, dst_capacity, opt.type};
  return encode_batch_async(&item, 1, results, host_results, workspace, workspace_bytes, opt.block_log2, launch);
}

GpuStatus decode_batch_async(const DecodeItem* items, size_t count, CodecResult* results, CodecResult* host_results,
                             void* workspace, size_t workspace_bytes, const LaunchOptions& launch) {
  if (launch.cuda_error) *launch.cuda_error = cudaSuccess;
  if (!items || !count || !results || !workspace) return GpuStatus::kInvalidArgument;
  if (workspace_bytes < decode_workspace_bytes()) return GpuStatus::kWorkspaceTooSmall;
  for (size_t c0 = 0; c0 < count; c0 += kMaxBatch) {
    const size_t n = count - c0 < size_t(kMaxBatch) ? count - c0 : size_t(kMaxBatch);
    DecodeParams prm;
    uint64_t unit_bound = 0;
    ZIPCCL_TRY(build_decode_params(items + c0, n, &prm, &unit_bound));
    prm.workspace = static_cast<uint8_t*>(workspace);
    prm.results = results + c0;
    prm.host_results = host_results ? host_results + c0 : nullptr;
    int sms = 0, per_sm = 0;
    ZIPCCL_TRY(occupancy(kDecode, sizeof(DecodeShared), launch, &sms, &per_sm));
    const uint32_t grid = grid_size(unit_bound, sms, per_sm, launch.max_sms);
    kernels::decode_kernel<<<grid, kThreads, sizeof(DecodeShared), launch.stream>>>(prm);
    ZIPCCL_CUDA_TRY(cudaGetLastError());
  }
  return GpuStatus::kOk;
}

GpuStatus decode_async(const void* src, size_t src_size, void* dst, size_t dst_capacity, CodecResult* results,
                       CodecResult* host_results, void* workspace, size_t workspace_bytes, const LaunchOptions& launch) {
  const DecodeItem item{src, src_size, dst, dst_capacity};
  return decode_batch_async(&item, 1, results, host_results, workspace, workspace_bytes, launch);
}

}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
