// Dispatch of the CUDA codec: argument checks, parameter blocks, grid sizes from occupancy (capped
// by max_sms), launches on the caller's stream. Nothing here synchronises or allocates.
// prepare_device does every module load and attribute call once per device; afterwards a launch is a
// table lookup under g_mutex and the launch itself, so that nothing loads a module on a thread that
// NCCL's spinning kernels wait on (CUDA's lazy loading warns that this can deadlock).
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

#define ZIPCCL_TRY(expr)                   \
  do {                                     \
    const GpuStatus zipccl_s_ = (expr);    \
    if (zipccl_s_ != GpuStatus::kOk) return zipccl_s_; \
  } while (0)

// Launch shapes (kernel, dynamic shared memory) the dispatch uses: detect, finalize, decode, and
// encode for each plane count (2, 4) and block size (fmt::kMinBlockLog2..kMaxBlockLog2).
constexpr int kBlockSizes = fmt::kMaxBlockLog2 - fmt::kMinBlockLog2 + 1;
constexpr int kShapes = 3 + 2 * kBlockSizes;

int shape_index(KernelId k, int planes, int block_log2) {
  switch (k) {
    case kDetectKernel: return 0;
    case kFinalizeKernel: return 1;
    case kDecodeKernel: return 2;
    default: return 3 + (planes > 2 ? kBlockSizes : 0) + (block_log2 - fmt::kMinBlockLog2);
  }
}

// What prepare_device learnt and set on one device. Written once, read under g_mutex afterwards.
struct DeviceInfo {
  int device = -1;
  int sms = 0;
  int smem_optin = 0;
  size_t max_dynamic[kKernelCount] = {};  // MaxDynamicSharedMemorySize as set
  int per_sm[kShapes] = {};               // CTAs per SM by shape; 0: the shape does not fit
};

std::mutex g_mutex;
std::vector<DeviceInfo> g_devices;  // one entry per prepared device; never shrinks

const void* kernel_ptr(KernelId k) {
  switch (k) {
    case kDetectKernel: return reinterpret_cast<const void*>(&kernels::detect_kernel);
    case kEncodeKernel: return reinterpret_cast<const void*>(&kernels::encode_kernel);
    case kFinalizeKernel: return reinterpret_cast<const void*>(&kernels::finalize_kernel);
    default: return reinterpret_cast<const void*>(&kernels::decode_kernel);
  }
}

// Loads the kernels on device `dev` (cudaFuncGetAttributes forces the module load), sets each one's
// dynamic shared memory limit and measures the occupancy of every launch shape. Called without
// g_mutex held: a module load takes milliseconds and must not stall launches on other devices.
// A kernel without an image for this device is kUnsupported (cuda_error set).
GpuStatus configure_device(int dev, DeviceInfo* info, const LaunchOptions& launch) {
  info->device = dev;
  ZIPCCL_CUDA_TRY(cudaDeviceGetAttribute(&info->sms, cudaDevAttrMultiProcessorCount, dev));
  ZIPCCL_CUDA_TRY(cudaDeviceGetAttribute(&info->smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  for (int i = 0; i < kKernelCount; ++i) {
    const KernelId k = KernelId(i);
    cudaFuncAttributes attr;
    const cudaError_t e = cudaFuncGetAttributes(&attr, kernel_ptr(k));
    if (e == cudaErrorNoKernelImageForDevice) {
      cuda_fail(e, launch);
      return GpuStatus::kUnsupported;
    }
    ZIPCCL_CUDA_TRY(e);
    info->max_dynamic[i] = dynamic_smem_attribute(info->smem_optin, attr.sharedSizeBytes, largest_dynamic_smem(k));
    ZIPCCL_CUDA_TRY(cudaFuncSetAttribute(kernel_ptr(k), cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(info->max_dynamic[i])));
  }
  for (int i = 0; i < kKernelCount; ++i) {
    const KernelId k = KernelId(i);
    const int shapes = k == kEncodeKernel ? 2 * kBlockSizes : 1;
    for (int j = 0; j < shapes; ++j) {
      const int planes = j < kBlockSizes ? 2 : 4;
      const int bl = fmt::kMinBlockLog2 + j % kBlockSizes;
      const size_t smem = kernel_dynamic_smem(k, planes, bl);
      int n = 0;
      if (smem <= info->max_dynamic[i]) {
        ZIPCCL_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel_ptr(k), kThreads, smem));
      }
      info->per_sm[shape_index(k, planes, bl)] = n;
    }
  }
  return GpuStatus::kOk;
}

// The device can run the codec: every kernel fits, encode at the default block size for 4 planes.
GpuStatus device_status(const DeviceInfo& info) {
  const int needed[] = {shape_index(kDetectKernel, 0, 0), shape_index(kFinalizeKernel, 0, 0),
                        shape_index(kDecodeKernel, 0, 0), shape_index(kEncodeKernel, 4, kDefaultBlockLog2)};
  for (int s : needed) {
    if (info.per_sm[s] < 1) return GpuStatus::kUnsupported;
  }
  return GpuStatus::kOk;
}

const DeviceInfo* find_device(int dev) {
  for (const auto& d : g_devices) {
    if (d.device == dev) return &d;
  }
  return nullptr;
}

// Prepares the current device unless it is prepared; *dev receives its ordinal. Nothing is recorded
// unless every CUDA call succeeded, so a failure is retried by the next call.
GpuStatus ensure_prepared(int* dev, const LaunchOptions& launch) {
  ZIPCCL_CUDA_TRY(cudaGetDevice(dev));
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (find_device(*dev)) return GpuStatus::kOk;
  }
  DeviceInfo info;
  const GpuStatus s = configure_device(*dev, &info, launch);
  if (s != GpuStatus::kOk) {
    // The error is returned here; consume it so the next launch's cudaGetLastError does not report
    // it again (a sticky error stays).
    (void)cudaGetLastError();
    return s;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!find_device(*dev)) g_devices.push_back(info);
  return GpuStatus::kOk;
}

// SM count and CTAs per SM of kernel k's launch shape on the current device. kUnsupported when the
// shape's shared memory exceeds what the kernel may have there.
GpuStatus occupancy(KernelId k, int planes, int block_log2, const LaunchOptions& launch, int* sms, int* per_sm) {
  int dev = 0;
  ZIPCCL_TRY(ensure_prepared(&dev, launch));
  std::lock_guard<std::mutex> lock(g_mutex);
  const DeviceInfo* info = find_device(dev);
  *sms = info->sms;
  *per_sm = info->per_sm[shape_index(k, planes, block_log2)];
  return *per_sm > 0 ? GpuStatus::kOk : GpuStatus::kUnsupported;
}

GpuStatus launch_encode(EncodeParams& prm, int max_planes, bool any_auto, const LaunchOptions& launch) {
  int sms = 0, per_sm = 0;
  cudaStream_t s = launch.stream;
  if (any_auto) {
    ZIPCCL_TRY(occupancy(kDetectKernel, 0, 0, launch, &sms, &per_sm));
    kernels::detect_kernel<<<prm.count, kThreads, kernel_dynamic_smem(kDetectKernel, 0, 0), s>>>(prm);
    ZIPCCL_CUDA_TRY(cudaGetLastError());
  }
  if (prm.total_slots) {
    const EncodeSmemLayout lay = encode_smem_layout(max_planes, prm.block_log2);
    ZIPCCL_TRY(occupancy(kEncodeKernel, max_planes, prm.block_log2, launch, &sms, &per_sm));
    const uint32_t grid = grid_size(prm.total_slots, sms, per_sm, launch.max_sms);
    kernels::encode_kernel<<<grid, kThreads, lay.total, s>>>(prm, lay);
    ZIPCCL_CUDA_TRY(cudaGetLastError());
  }
  ZIPCCL_TRY(occupancy(kFinalizeKernel, 0, 0, launch, &sms, &per_sm));
  const uint32_t grid = grid_size(prm.total_units, sms, per_sm, launch.max_sms);
  kernels::finalize_kernel<<<grid, kThreads, 0, s>>>(prm);
  ZIPCCL_CUDA_TRY(cudaGetLastError());
  return GpuStatus::kOk;
}

}  // namespace

namespace detail {
cudaError_t kernel_attributes(KernelId k, cudaFuncAttributes* attr) {
  return cudaFuncGetAttributes(attr, kernel_ptr(k));
}
}  // namespace detail

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

GpuStatus prepare_device(const LaunchOptions& launch) {
  if (launch.cuda_error) *launch.cuda_error = cudaSuccess;
  int dev = 0;
  ZIPCCL_TRY(ensure_prepared(&dev, launch));
  std::lock_guard<std::mutex> lock(g_mutex);
  return device_status(*find_device(dev));
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
    ZIPCCL_TRY(occupancy(kDecodeKernel, 0, 0, launch, &sms, &per_sm));
    const uint32_t grid = grid_size(unit_bound, sms, per_sm, launch.max_sms);
    kernels::decode_kernel<<<grid, kThreads, kernel_dynamic_smem(kDecodeKernel, 0, 0), launch.stream>>>(prm);
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
