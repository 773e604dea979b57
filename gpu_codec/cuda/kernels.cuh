// Thin __global__ wrappers: bind the bodies (kernel_bodies.h) to the device CTA and shared memory,
// and the dynamic shared memory each kernel's launches ask for. The kernels are compiled into exactly
// one translation unit (codec_cuda.cu); the anonymous namespace gives their symbols internal linkage,
// so they never clash with another library's. The requests are plain host/device code: the CPU test
// of the shared memory budget (tests/gpu/test_smem_budget.cpp) checks them against ptxas's report.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernel_bodies.h"
#include "launch_config.h"

namespace zipccl {
namespace codec {
namespace gpu {
namespace detail {

// Dynamic shared memory of one launch of kernel k; `planes` and `block_log2` matter to encode only.
ZIPCCL_HD size_t kernel_dynamic_smem(KernelId k, int planes, int block_log2) {
  switch (k) {
    case kDetectKernel: return sizeof(DetectShared);
    case kEncodeKernel: return encode_smem_layout(planes, block_log2).total;
    case kDecodeKernel: return sizeof(DecodeShared);
    default: return 0;  // finalize: static shared memory only
  }
}

// The most dynamic shared memory kernel k asks for over every block size the encoder accepts and
// both plane counts an encode launch sizes for (2: bf16, fp16, bytes; 4: fp32, auto).
ZIPCCL_HD size_t largest_dynamic_smem(KernelId k) {
  size_t most = 0;
  for (int bl = fmt::kMinBlockLog2; bl <= fmt::kMaxBlockLog2; ++bl) {
    for (int planes = 2; planes <= 4; planes += 2) {
      const size_t b = kernel_dynamic_smem(k, planes, bl);
      most = b > most ? b : most;
    }
  }
  return most;
}

// The runtime's attributes of kernel k on the current device (cudaFuncGetAttributes), for the
// device test of what prepare_device configured. Defined in codec_cuda.cu.
cudaError_t kernel_attributes(KernelId k, cudaFuncAttributes* attr);

}  // namespace detail
}  // namespace gpu
}  // namespace codec
}  // namespace zipccl

#if defined(__CUDACC__)
namespace {
namespace kernels {

using zipccl::codec::gpu::detail::DecodeParams;
using zipccl::codec::gpu::detail::DeviceCta;
using zipccl::codec::gpu::detail::EncodeParams;
using zipccl::codec::gpu::detail::EncodeSmemLayout;
using zipccl::codec::gpu::detail::kThreads;

__global__ void __launch_bounds__(kThreads) detect_kernel(const __grid_constant__ EncodeParams prm) {
  extern __shared__ __align__(16) uint8_t smem[];
  zipccl::codec::gpu::detail::detect_body(DeviceCta{}, prm, smem);
}

__global__ void __launch_bounds__(kThreads) encode_kernel(const __grid_constant__ EncodeParams prm,
                                                          const EncodeSmemLayout lay) {
  extern __shared__ __align__(16) uint8_t smem[];
  zipccl::codec::gpu::detail::encode_body(DeviceCta{}, prm, smem, lay);
}

__global__ void __launch_bounds__(kThreads) finalize_kernel(const __grid_constant__ EncodeParams prm) {
  __shared__ uint32_t last;
  zipccl::codec::gpu::detail::finalize_body(DeviceCta{}, prm, &last);
}

__global__ void __launch_bounds__(kThreads) decode_kernel(const __grid_constant__ DecodeParams prm) {
  extern __shared__ __align__(16) uint8_t smem[];
  zipccl::codec::gpu::detail::decode_body(DeviceCta{}, prm, smem);
}

}  // namespace kernels
}  // namespace
#endif  // __CUDACC__
