// Thin __global__ wrappers: bind the bodies (kernel_bodies.h) to the device CTA and shared memory.
// Included by exactly one translation unit; the anonymous namespace gives the kernel symbols internal
// linkage, so they never clash with another library's.
#pragma once

#include "kernel_bodies.h"

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
