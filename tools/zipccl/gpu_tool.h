// The CUDA codec as the tool uses it: `zipccl compress --gpu`, `decompress --gpu`, `bench --gpu`.
// The same kernels as the plugin (zipccl::codec_cuda). In a build without the CUDA toolkit, or on a
// machine without a driver or device, open() fails with the reason and nothing else runs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "zipccl/codec.h"

namespace zipccl {
namespace tools {

// Exit status of a command that was asked to use a GPU where none can be used (as nccl-check).
constexpr int kExitNoGpu = 3;

class GpuCodec {
 public:
  GpuCodec();
  ~GpuCodec();
  GpuCodec(const GpuCodec&) = delete;
  GpuCodec& operator=(const GpuCodec&) = delete;

  // Picks device 0 and creates a stream. False with *why when this build has no CUDA codec or the
  // machine has no usable GPU.
  bool open(std::string* why);
  // "NVIDIA H200 (sm_90, 132 SMs)"; empty before open().
  std::string device() const;

  // Host in, host out, synchronous (the tool's own convenience; the codec itself is asynchronous).
  // The frame equals codec::encode's for the same type and block size.
  bool encode(const uint8_t* src, size_t n, codec::ElemType type, int block_log2, std::vector<uint8_t>* frame,
              std::string* err);
  // Decodes one frame of exactly `n` bytes into dst; *out = decoded bytes.
  bool decode(const uint8_t* frame, size_t n, uint8_t* dst, size_t cap, size_t* out, std::string* err);

  // Device-resident throughput: src is copied to the GPU once, then encode and decode each run
  // `reps` times (CUDA events around each launch, launch included); the best time counts.
  // max_sms bounds the grid (0: the whole GPU). The decoded bytes are checked against src and the
  // frame against codec::encode's; either difference is an error.
  struct Timing {
    double encode_s = 0, decode_s = 0;
    size_t frame_bytes = 0;
  };
  bool time(const uint8_t* src, size_t n, codec::ElemType type, int max_sms, int reps, Timing* t,
            std::string* err);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tools
}  // namespace zipccl
