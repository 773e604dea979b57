// The CUDA codec on a real GPU: byte-identical frames to the CPU codec, cross decoding, batches,
// malformed frames, polling through mapped memory, a bounded grid. Skips without a device.
#include <gtest/gtest.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "emulate.h"
#include "kernels.cuh"
#include "test_data.h"
#include "zipccl/codec_cuda.h"

namespace zipccl {
namespace testing {
namespace {

using codec::ElemType;
using codec::gpu::CodecResult;
using codec::gpu::GpuStatus;

bool have_device(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    *why = e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device";
    return false;
  }
  return true;
}

#define REQUIRE_DEVICE()                                   \
  do {                                                     \
    std::string why_;                                      \
    if (!have_device(&why_)) GTEST_SKIP() << "no GPU: " << why_; \
  } while (0)

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

// Device buffer owned by a test.
struct DevBuf {
  uint8_t* p = nullptr;
  size_t n = 0;
  explicit DevBuf(size_t bytes) : n(bytes) {
    if (cudaMalloc(reinterpret_cast<void**>(&p), bytes ? bytes : 1) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

// Cleared on `stream` (init_workspace's cudaMemsetAsync): a kernel on a non-blocking stream does not
// wait for the legacy default stream, so the clear must be ordered on the stream that uses it.
struct Workspace {
  DevBuf buf;
  explicit Workspace(size_t bytes, cudaStream_t stream = nullptr) : buf(bytes) {
    codec::gpu::LaunchOptions lo;
    lo.stream = stream;
    codec::gpu::init_workspace(buf.p, bytes, lo);
  }
};

// Encodes a batch on the GPU (src copied at `offset` bytes into its buffer) and returns the frames.
// block_log2 0 means 8192 elements to the GPU encoder and 16384 to the CPU's: the CPU reference of a
// default GPU frame is encoded at the GPU's default.
constexpr int kGpuDefault = codec::gpu::kDefaultBlockLog2;

std::vector<std::vector<uint8_t>> gpu_encode(const std::vector<EmuInput>& in, int block_log2, int max_sms = 0) {
  std::vector<std::unique_ptr<DevBuf>> src, dst;
  std::vector<codec::gpu::EncodeItem> items;
  std::vector<size_t> sizes;
  for (auto& m : in) {
    src.emplace_back(new DevBuf(m.bytes.size() + m.offset));
    dst.emplace_back(new DevBuf(codec::max_encoded_size(m.bytes.size()) + m.offset));
    if (!m.bytes.empty()) cudaMemcpy(src.back()->p + m.offset, m.bytes.data(), m.bytes.size(), cudaMemcpyHostToDevice);
    items.push_back({src.back()->p + m.offset, m.bytes.size(), dst.back()->p + m.offset,
                     codec::max_encoded_size(m.bytes.size()), m.type});
    sizes.push_back(m.bytes.size());
  }
  const size_t wsb = codec::gpu::encode_batch_workspace_size(sizes.data(), sizes.size(), block_log2);
  Workspace ws(wsb);
  DevBuf res(sizeof(CodecResult) * in.size());
  codec::gpu::LaunchOptions lo;
  lo.max_sms = max_sms;
  cudaError_t ce = cudaSuccess;
  lo.cuda_error = &ce;
  const GpuStatus s = codec::gpu::encode_batch_async(items.data(), items.size(), reinterpret_cast<CodecResult*>(res.p),
                                                     nullptr, ws.buf.p, wsb, block_log2, lo);
  EXPECT_EQ(s, GpuStatus::kOk) << codec::gpu::gpu_status_string(s) << " " << cudaGetErrorString(ce);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<CodecResult> r(in.size());
  cudaMemcpy(r.data(), res.p, sizeof(CodecResult) * in.size(), cudaMemcpyDeviceToHost);
  std::vector<std::vector<uint8_t>> frames(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(r[i].status, 0);
    frames[i].resize(r[i].size);
    cudaMemcpy(frames[i].data(), dst[i]->p + in[i].offset, r[i].size, cudaMemcpyDeviceToHost);
  }
  return frames;
}

std::vector<EmuDecoded> gpu_decode(const std::vector<std::vector<uint8_t>>& frames, const std::vector<size_t>& cap,
                                   int max_sms = 0) {
  constexpr size_t kGuard = 64;
  std::vector<std::unique_ptr<DevBuf>> src, dst;
  std::vector<codec::gpu::DecodeItem> items;
  for (size_t i = 0; i < frames.size(); ++i) {
    src.emplace_back(new DevBuf(frames[i].size()));
    dst.emplace_back(new DevBuf(cap[i] + kGuard));
    if (!frames[i].empty()) cudaMemcpy(src.back()->p, frames[i].data(), frames[i].size(), cudaMemcpyHostToDevice);
    cudaMemset(dst.back()->p, 0x5A, cap[i] + kGuard);
    items.push_back({src.back()->p, frames[i].size(), dst.back()->p, cap[i]});
  }
  Workspace ws(codec::gpu::decode_workspace_size(frames.size()));
  DevBuf res(sizeof(CodecResult) * frames.size());
  codec::gpu::LaunchOptions lo;
  lo.max_sms = max_sms;
  EXPECT_EQ(codec::gpu::decode_batch_async(items.data(), items.size(), reinterpret_cast<CodecResult*>(res.p), nullptr,
                                           ws.buf.p, ws.buf.n, lo),
            GpuStatus::kOk);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<CodecResult> r(frames.size());
  cudaMemcpy(r.data(), res.p, sizeof(CodecResult) * frames.size(), cudaMemcpyDeviceToHost);
  std::vector<EmuDecoded> out(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    std::vector<uint8_t> all(cap[i] + kGuard);
    cudaMemcpy(all.data(), dst[i]->p, all.size(), cudaMemcpyDeviceToHost);
    for (size_t j = cap[i]; j < all.size(); ++j) EXPECT_EQ(all[j], 0x5A) << "write past dst, message " << i;
    out[i].status = r[i].status;
    if (r[i].status == 0) out[i].bytes.assign(all.begin(), all.begin() + r[i].size);
  }
  return out;
}

std::vector<EmuInput> corpus(size_t elems) {
  std::vector<EmuInput> in = {
      {gaussian_bf16(elems, 1e-3, 1), ElemType::kBf16},
      {gaussian_fp16(elems, 1.0, 2), ElemType::kFp16},
      {gaussian_fp32(elems, 0.1, 3, false), ElemType::kFp32},
      {gaussian_fp32(elems, 0.1, 4, true), ElemType::kFp32},
      {special_bf16(elems, 5), ElemType::kBf16},
      {random_bytes(2 * elems, 6), ElemType::kBf16},
      {std::vector<uint8_t>(2 * elems, 0), ElemType::kBf16},
      {gaussian_bf16(elems, 1.0, 7), ElemType::kAuto},
      {gaussian_fp32(elems, 1.0, 8, true), ElemType::kAuto},
      {random_bytes(elems, 9), ElemType::kNone},
  };
  auto odd = gaussian_bf16(elems, 1.0, 10);
  odd.push_back(0x42);
  in.push_back({odd, ElemType::kBf16, 3});
  return in;
}

TEST(Device, FramesMatchCpuAndRoundTrip) {
  REQUIRE_DEVICE();
  for (size_t elems : {size_t(1), size_t(1000), size_t(8192), size_t(8193), size_t(100000), size_t(1) << 20}) {
    for (int bl : {10, 13, 14}) {
      const auto in = corpus(elems);
      const auto gpu = gpu_encode(in, bl);
      std::vector<size_t> cap;
      for (size_t i = 0; i < in.size(); ++i) {
        const auto cpu = cpu_encode(in[i].bytes, in[i].type, bl);
        ASSERT_TRUE(gpu[i] == cpu) << "frame differs: message " << i << " elems " << elems << " block_log2 " << bl
                                   << " sizes " << gpu[i].size() << " vs " << cpu.size();
        cap.push_back(in[i].bytes.size());
      }
      const auto back = gpu_decode(gpu, cap);
      for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_EQ(back[i].status, 0);
        ASSERT_TRUE(back[i].bytes == in[i].bytes) << "message " << i;
      }
    }
  }
}

// Random shapes (test_data.h random_shape), 16 messages a launch: frames equal to the CPU's and
// decoding back, as in the emulated test of the same name.
TEST(Device, FramesMatchCpuOnRandomShapes) {
  REQUIRE_DEVICE();
  const ElemType types[] = {ElemType::kBf16, ElemType::kFp16, ElemType::kFp32};
  for (uint32_t batch = 0; batch < 10; ++batch) {
    const int bl = 10 + int(batch % 5);
    std::vector<EmuInput> in;
    std::vector<size_t> cap;
    for (uint32_t i = 0; i < 16; ++i) {
      Shape sh = random_shape(9000 + 16 * batch + i);
      cap.push_back(sh.bytes.size());
      in.push_back({std::move(sh.bytes), types[sh.kind]});
    }
    const auto gpu = gpu_encode(in, bl);
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_TRUE(gpu[i] == cpu_encode(in[i].bytes, in[i].type, bl)) << "batch " << batch << " message " << i;
    }
    const auto back = gpu_decode(gpu, cap);
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(back[i].status, 0);
      ASSERT_TRUE(back[i].bytes == in[i].bytes) << "batch " << batch << " message " << i;
    }
  }
}

// Small enough for compute-sanitizer: every type, fallback and block size, encode and decode.
TEST(Device, SmallCorpusForSanitizers) {
  REQUIRE_DEVICE();
  for (int bl : {10, 13}) {
    const auto in = corpus(3000);
    const auto gpu = gpu_encode(in, bl, 2);
    std::vector<size_t> cap;
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_TRUE(gpu[i] == cpu_encode(in[i].bytes, in[i].type, bl)) << "message " << i;
      cap.push_back(in[i].bytes.size());
    }
    const auto back = gpu_decode(gpu, cap, 2);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_TRUE(back[i].bytes == in[i].bytes) << "message " << i;
  }
}

TEST(Device, LargeMessagesAndSmallGrid) {
  REQUIRE_DEVICE();
  std::vector<EmuInput> in = {{gaussian_bf16(size_t(64) << 20, 1e-3, 20), ElemType::kBf16},
                              {gaussian_fp32(size_t(8) << 20, 1.0, 21, true), ElemType::kFp32}};
  for (int sms : {0, 1, 16}) {
    const auto gpu = gpu_encode(in, 0, sms);
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_TRUE(gpu[i] == cpu_encode(in[i].bytes, in[i].type, kGpuDefault)) << i;
    const auto back = gpu_decode(gpu, {in[0].bytes.size(), in[1].bytes.size()}, sms);
    for (size_t i = 0; i < in.size(); ++i) ASSERT_TRUE(back[i].bytes == in[i].bytes);
  }
}

TEST(Device, BatchOfMoreThanOneLaunch) {
  REQUIRE_DEVICE();
  std::vector<EmuInput> in;
  std::mt19937 rng(30);
  for (int i = 0; i < 150; ++i) in.push_back({gaussian_bf16(1 + rng() % 40000, 1e-2, 100 + i), ElemType::kBf16});
  const auto gpu = gpu_encode(in, 0);
  std::vector<size_t> cap;
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_TRUE(gpu[i] == cpu_encode(in[i].bytes, in[i].type, kGpuDefault)) << i;
    cap.push_back(in[i].bytes.size());
  }
  const auto back = gpu_decode(gpu, cap);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_TRUE(back[i].bytes == in[i].bytes) << i;
}

TEST(Device, MalformedFramesGetCpuStatus) {
  REQUIRE_DEVICE();
  std::mt19937 rng(40);
  const auto in = gaussian_bf16(20000, 1.0, 41);
  const auto good = cpu_encode(in, ElemType::kBf16, 10);
  std::vector<std::vector<uint8_t>> frames;
  std::vector<size_t> cap;
  for (int t = 0; t < 300; ++t) {
    auto f = good;
    if (t % 4 == 0) f.resize(rng() % f.size());
    const int flips = 1 + int(rng() % 4);
    for (int j = 0; j < flips && !f.empty(); ++j) f[rng() % f.size()] ^= uint8_t(1u << (rng() % 8));
    frames.push_back(f), cap.push_back(t % 9 == 0 ? in.size() - 2 : in.size());
  }
  const auto out = gpu_decode(frames, cap);
  for (size_t i = 0; i < frames.size(); ++i) {
    std::vector<uint8_t> back(cap[i]);
    size_t got = 0;
    const codec::Status s = codec::decode(frames[i].data(), frames[i].size(), back.data(), cap[i], &got);
    ASSERT_EQ(out[i].status, int(s)) << "frame " << i;
  }
}

// Everything the encode reads is ordered on its own non-blocking stream (the input copy and the
// workspace clear included), and the host polls the mapped result against a wall-clock deadline, long
// enough for a run under compute-sanitizer.
TEST(Device, MappedResultsCanBePolled) {
  REQUIRE_DEVICE();
  const auto in = gaussian_bf16(1 << 19, 1e-3, 50);
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  DevBuf src(in.size()), dst(codec::max_encoded_size(in.size())), res(sizeof(CodecResult));
  CUDA_OK(cudaMemcpyAsync(src.p, in.data(), in.size(), cudaMemcpyHostToDevice, s));
  CodecResult* host = nullptr;
  CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&host), sizeof(CodecResult), cudaHostAllocMapped));
  host->ready = 0;
  CodecResult* host_dev = nullptr;
  CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&host_dev), host, 0));
  Workspace ws(codec::gpu::encode_workspace_size(in.size()), s);
  codec::gpu::LaunchOptions lo;
  lo.stream = s;
  codec::gpu::GpuEncodeOptions eo;
  eo.type = ElemType::kBf16;
  ASSERT_EQ(codec::gpu::encode_async(src.p, in.size(), dst.p, dst.n, reinterpret_cast<CodecResult*>(res.p), host_dev,
                                     ws.buf.p, ws.buf.n, eo, lo),
            GpuStatus::kOk);
  volatile uint32_t* ready = &host->ready;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!*ready && std::chrono::steady_clock::now() < deadline) {
  }
  ASSERT_EQ(*ready, 1u) << "no result published within 10 s";
  EXPECT_EQ(host->status, 0);
  EXPECT_EQ(host->size, cpu_encode(in, ElemType::kBf16, kGpuDefault).size());
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaStreamDestroy(s));
  CUDA_OK(cudaFreeHost(host));
}

// prepare_device sets each kernel's dynamic shared memory limit within what the device allows
// beside the kernel's static shared memory (cudaFuncSetAttribute rejects more), and the codec works
// afterwards, fp32 at the largest block size included (it fits sm_80 and sm_90).
TEST(Device, PrepareDeviceConfiguresEveryKernelWithinTheOptIn) {
  REQUIRE_DEVICE();
  namespace gd = codec::gpu::detail;
  cudaError_t ce = cudaErrorUnknown;
  codec::gpu::LaunchOptions lo;
  lo.cuda_error = &ce;
  ASSERT_EQ(codec::gpu::prepare_device(lo), GpuStatus::kOk) << cudaGetErrorString(ce);
  EXPECT_EQ(ce, cudaSuccess);
  ASSERT_EQ(codec::gpu::prepare_device(lo), GpuStatus::kOk) << "a second call";
  int dev = 0, optin = 0;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  size_t encode_max_dynamic = 0;
  for (int i = 0; i < gd::kKernelCount; ++i) {
    const auto k = gd::KernelId(i);
    cudaFuncAttributes attr;
    CUDA_OK(gd::kernel_attributes(k, &attr));
    std::printf("kernel %d: %zu static, %d max dynamic, %d registers, %zu local bytes (opt-in %d)\n", i,
                attr.sharedSizeBytes, attr.maxDynamicSharedSizeBytes, attr.numRegs, attr.localSizeBytes, optin);
    EXPECT_LE(attr.sharedSizeBytes + size_t(attr.maxDynamicSharedSizeBytes), size_t(optin)) << "kernel " << i;
    EXPECT_EQ(size_t(attr.maxDynamicSharedSizeBytes),
              gd::dynamic_smem_attribute(optin, attr.sharedSizeBytes, gd::largest_dynamic_smem(k)))
        << "kernel " << i;
    if (k == gd::kEncodeKernel) encode_max_dynamic = size_t(attr.maxDynamicSharedSizeBytes);
  }
  const size_t elems = 3 * 16384 + 5;
  const std::vector<EmuInput> in = {{gaussian_fp32(elems, 0.1, 11, false), ElemType::kFp32},
                                    {gaussian_bf16(elems, 1.0, 12), ElemType::kBf16},
                                    {gaussian_fp32(elems, 1.0, 13, true), ElemType::kAuto}};
  for (int bl : {0, 14}) {
    if (bl == 14 && gd::kernel_dynamic_smem(gd::kEncodeKernel, 4, bl) > encode_max_dynamic) {
      std::printf("fp32 at block_log2 14 does not fit this device (sm_86/sm_89); not run\n");
      continue;
    }
    const auto frames = gpu_encode(in, bl);
    ASSERT_EQ(frames.size(), in.size());
    const int cpu_bl = bl ? bl : kGpuDefault;
    EXPECT_EQ(frames[0], cpu_encode(in[0].bytes, ElemType::kFp32, cpu_bl)) << "block_log2 " << bl;
    EXPECT_EQ(frames[1], cpu_encode(in[1].bytes, ElemType::kBf16, cpu_bl)) << "block_log2 " << bl;
    std::vector<size_t> cap;
    for (const auto& m : in) cap.push_back(m.bytes.size());
    const auto dec = gpu_decode(frames, cap);
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(dec[i].status, 0) << "message " << i << ", block_log2 " << bl;
      EXPECT_EQ(dec[i].bytes, in[i].bytes) << "message " << i << ", block_log2 " << bl;
    }
  }
}

TEST(Device, ArgumentErrorsAreReturnedNotRaised) {
  REQUIRE_DEVICE();
  DevBuf d(1024), res(sizeof(CodecResult)), ws(codec::gpu::decode_workspace_size());
  auto* r = reinterpret_cast<CodecResult*>(res.p);
  EXPECT_EQ(codec::gpu::encode_async(d.p, 1000, d.p, 100, r, nullptr, ws.p, ws.n), GpuStatus::kDstTooSmall);
  EXPECT_EQ(codec::gpu::encode_async(d.p, 1000, d.p, 1024 * 1024, r, nullptr, ws.p, 1), GpuStatus::kWorkspaceTooSmall);
  EXPECT_EQ(codec::gpu::decode_async(d.p, 10, d.p, 10, r, nullptr, ws.p, 1), GpuStatus::kWorkspaceTooSmall);
  EXPECT_EQ(codec::gpu::decode_async(d.p, 10, d.p, 10, nullptr, nullptr, ws.p, ws.n), GpuStatus::kInvalidArgument);
}

}  // namespace
}  // namespace testing
}  // namespace zipccl
