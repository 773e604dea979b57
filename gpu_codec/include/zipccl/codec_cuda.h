// zipccl CUDA codec: the v1 frame format (gpu_codec/FORMAT.md) encoded and decoded on the GPU.
//
// Frames are byte-identical to the CPU codec's (zipccl/codec.h) for the same input, element type and
// block size (lanes_log2 is 5 on both), and each side decodes the other's frames. The default block
// sizes differ (8192 elements here, 16384 on the CPU): pass block_log2 to both for equal bytes.
//
// Execution model (stream-ordered, asynchronous):
//  - Every function below only enqueues work on `LaunchOptions::stream` and returns; none
//    synchronises the host with the device, none allocates, none synchronises the whole device.
//  - Results (frame size or decoded size, and a per-message status) are written to device memory
//    (`results`) and optionally to host-mapped memory (`host_results`, a pointer the device can
//    write: cudaHostAlloc(..., cudaHostAllocMapped) on a UVA system) so that a proxy thread can
//    poll: a result's `ready` becomes 1 after its `size` and `status` are visible (the caller sets
//    it to 0 before the launch).
//  - `max_sms` bounds the grid to what that many SMs hold at full occupancy, so the codec can run
//    beside NCCL's persistent kernels. (The hardware scheduler decides placement: the bound is on
//    resident thread blocks, not on specific SMs.)
//  - The return value reports argument errors and CUDA launch errors only; frame errors found on
//    the device (a malformed frame) are reported in `CodecResult::status`. Nothing aborts.
//
// Workspace: a caller-owned device buffer sized by the *_workspace_size functions and cleared once
// with init_workspace() after allocation. The kernels leave it cleared again when they finish, so it
// can be reused by the next call in the same stream. One workspace serves one call at a time;
// after a kCudaError return (or a device fault) clear it again before reuse.
//
// Element types: pass the type when it is known (bf16, fp16, fp32). ElemType::kAuto detects the
// type on the device from the same sample as detect_elem_type() (one extra, small kernel); the
// decision uses double-precision log2 on the device, so in the rare case where a sample sits
// within rounding of a threshold the detected type - and so the frame - may differ from the
// CPU's. The frame is valid either way and decodes on both sides.
//
// Untrusted frames: decode validates every header field, offset, code table and lane, never reads
// outside [src, src + src_size) and never writes outside [dst, dst + dst_capacity). The GPU
// decoder additionally rejects a block larger than fmt::block_bound (4 + planes * roundup4(m)),
// which no conforming encoder writes (FORMAT.md section 4).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "zipccl/codec.h"

namespace zipccl {
namespace codec {
namespace gpu {

// Written by the device for each message. status is a codec::Status value (kOk, kCorrupt,
// kTruncated, kBadMagic, kBadVersion, kDstTooSmall), as the CPU decode() would return it.
struct CodecResult {
  uint64_t size;    // encode: frame bytes; decode: decoded bytes (0 on error)
  int32_t status;   // static_cast<int32_t>(codec::Status)
  uint32_t ready;   // 1 once size and status are visible (host_results only; the caller zeroes it)
};

enum class GpuStatus : int {
  kOk = 0,
  kInvalidArgument,     // null pointer with non-zero size, bad block_log2, bad type, count 0
  kDstTooSmall,         // encode: dst_capacity < max_encoded_size(n)
  kTooLarge,            // input larger than codec::kMaxFrameInput
  kWorkspaceTooSmall,   // workspace smaller than the matching *_workspace_size()
  kUnsupported,         // this device cannot run the kernels (shared memory, no device)
  kCudaError,           // a CUDA call failed; LaunchOptions::cuda_error receives the error
};
const char* gpu_status_string(GpuStatus s);

struct LaunchOptions {
  cudaStream_t stream = nullptr;
  // Upper bound on SMs the grid may fill (0: all SMs of the current device).
  int max_sms = 0;
  // When non-null, receives the CUDA error behind a kCudaError return (cudaSuccess otherwise).
  cudaError_t* cuda_error = nullptr;
};

// The CUDA encoder's block size when block_log2 is 0: 8192 elements, half the CPU encoder's
// (codec::kDefaultBlockLog2). A thread block encodes a block in shared memory: fp32 blocks of 16384
// elements need ~140 KiB of it, more than the 99 KiB an sm_86/sm_89 thread block may have.
constexpr int kDefaultBlockLog2 = 13;

struct GpuEncodeOptions {
  ElemType type = ElemType::kAuto;  // pass the real type: kAuto is the slower path (see above)
  int block_log2 = 0;               // 10..14; 0 = kDefaultBlockLog2 (8192 elements)
};

// One message of a batch. Pointers are device pointers.
struct EncodeItem {
  const void* src;
  size_t n;
  void* dst;
  size_t dst_capacity;  // >= max_encoded_size(n)
  ElemType type;
};
struct DecodeItem {
  const void* src;
  size_t src_size;  // the frame's exact size (as received)
  void* dst;
  size_t dst_capacity;
};

// Loads and configures every codec kernel on the current device (module load, shared-memory limits,
// occupancy for every block size) so that later encode/decode calls on this device make no
// module-loading or attribute calls. Call once per device off the data path (the plugin calls it at
// connect time). Thread-safe, idempotent; kUnsupported when the device cannot run the kernels (no
// kernel image for it, or too little shared memory for the default block size), kCudaError
// (launch.cuda_error set) when a CUDA call fails. A failure records nothing: the next call retries.
// Only launch.cuda_error is used. The encode/decode functions call it themselves on a device not
// yet prepared; a block size whose shared memory this device lacks (fp32 at 16384 elements on
// sm_86/sm_89) is then kUnsupported at encode time.
GpuStatus prepare_device(const LaunchOptions& launch = LaunchOptions());

// Workspace bytes for encoding one n-byte message / a batch (sizes[i] = n of message i).
size_t encode_workspace_size(size_t n, int block_log2 = 0);
size_t encode_batch_workspace_size(const size_t* sizes, size_t count, int block_log2 = 0);
// Workspace bytes for decoding (any frame sizes); count = messages per batch call.
size_t decode_workspace_size(size_t count = 1);

// Clears a workspace (cudaMemsetAsync on the stream). Call once after allocating it.
GpuStatus init_workspace(void* workspace, size_t bytes, const LaunchOptions& launch = LaunchOptions());

// Encodes src[0, n) (device) into one frame at dst (device, >= max_encoded_size(n) bytes).
// results: device pointer to one CodecResult; host_results: optional mapped pointer (or null).
GpuStatus encode_async(const void* src, size_t n, void* dst, size_t dst_capacity, CodecResult* results,
                       CodecResult* host_results, void* workspace, size_t workspace_bytes,
                       const GpuEncodeOptions& opt = GpuEncodeOptions(),
                       const LaunchOptions& launch = LaunchOptions());

// Encodes `count` messages (host array of descriptors; copied before return) in as few launches as
// possible (96 messages per launch). results/host_results: arrays of `count`.
GpuStatus encode_batch_async(const EncodeItem* items, size_t count, CodecResult* results,
                             CodecResult* host_results, void* workspace, size_t workspace_bytes,
                             int block_log2 = 0, const LaunchOptions& launch = LaunchOptions());

// Decodes one frame src[0, src_size) (device) into dst (device, dst_capacity bytes).
GpuStatus decode_async(const void* src, size_t src_size, void* dst, size_t dst_capacity, CodecResult* results,
                       CodecResult* host_results, void* workspace, size_t workspace_bytes,
                       const LaunchOptions& launch = LaunchOptions());

GpuStatus decode_batch_async(const DecodeItem* items, size_t count, CodecResult* results,
                             CodecResult* host_results, void* workspace, size_t workspace_bytes,
                             const LaunchOptions& launch = LaunchOptions());

}  // namespace gpu
}  // namespace codec
}  // namespace zipccl
