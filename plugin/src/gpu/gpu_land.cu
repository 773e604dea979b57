// The LL128-safe landing copy (gpu_path.h land_lines): one thread per 128-byte line writes the line's
// first 120 bytes, fences, then its last 8 bytes (the LL128 flag word), so a NCCL receive kernel that
// polls the flag on this GPU never sees it before the data. Same order as line_order() in gpu_path.h,
// which the CPU tests check.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace zipccl {
namespace net {
namespace gpu {
namespace {

constexpr unsigned kLine = 128;
constexpr unsigned kFlag = 8;

__global__ void land_lines_kernel(char* __restrict__ dst, const char* __restrict__ src, size_t n) {
  size_t lines = (n + kLine - 1) / kLine;
  for (size_t line = blockIdx.x * (size_t)blockDim.x + threadIdx.x; line < lines;
       line += (size_t)gridDim.x * blockDim.x) {
    size_t off = line * kLine;
    size_t len = n - off < kLine ? n - off : kLine;
    char* d = dst + off;
    const char* s = src + off;
    // 8-byte stores whenever both ends allow them: NCCL's LL lines pair 4 data bytes with a 4-byte flag
    // in each 8-byte word, and a word written byte by byte can show a new flag beside old data.
    bool words = ((reinterpret_cast<uintptr_t>(d) | reinterpret_cast<uintptr_t>(s) | len) & 7) == 0;
    size_t body = len > kFlag ? len - kFlag : len;
    if (words) {
      const uint64_t* s8 = reinterpret_cast<const uint64_t*>(s);
      uint64_t* d8 = reinterpret_cast<uint64_t*>(d);
      for (size_t i = 0; i < body / 8; ++i) d8[i] = s8[i];
      if (len > kFlag) {
        __threadfence();
        reinterpret_cast<volatile uint64_t*>(d8)[len / 8 - 1] = s8[len / 8 - 1];
      }
    } else {
      for (size_t i = 0; i < body; ++i) d[i] = s[i];
      if (len > kFlag) {
        __threadfence();
        for (size_t i = body; i < len; ++i) reinterpret_cast<volatile char*>(d)[i] = s[i];
      }
    }
  }
}

}  // namespace

// Loads the kernel's module now (CUDA loads lazily, and a load on the proxy thread while NCCL's kernel
// spins can deadlock): called at regMr time with the codec's prepare_device().
cudaError_t prepare_land_lines() {
  cudaFuncAttributes a{};
  return cudaFuncGetAttributes(&a, land_lines_kernel);
}

cudaError_t launch_land_lines(void* dst, const void* src, size_t n, int max_sms, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  size_t lines = (n + kLine - 1) / kLine;
  unsigned threads = 256;
  size_t blocks = (lines + threads - 1) / threads;
  size_t cap = static_cast<size_t>(max_sms > 0 ? max_sms : 16) * 4;  // bounded grid, grid-stride loop
  if (blocks > cap) blocks = cap;
  land_lines_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(static_cast<char*>(dst),
                                                                           static_cast<const char*>(src), n);
  return cudaGetLastError();
}

}  // namespace gpu
}  // namespace net
}  // namespace zipccl
