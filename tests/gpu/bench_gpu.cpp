// GPU codec throughput (uncompressed bytes per second), timed with CUDA events, launch included.
// Usage: zipccl_gpu_bench [--quick]. Prints one line per measurement and a table last.
// Data: the `zipccl bench` sets (tools/zipccl/datasets.cpp) when built with them, else seeded Gaussians;
// inputs above 256 MiB repeat a 256 MiB pattern. Rows marked b16K encode bf16 in the CPU's
// 16384-element blocks instead of the GPU's default 8192.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "test_data.h"
#include "zipccl/codec.h"
#include "zipccl/codec_cuda.h"
#ifdef ZIPCCL_BENCH_DATASETS
#include "datasets.h"
#endif

namespace {

using namespace zipccl;
using codec::ElemType;
using codec::gpu::CodecResult;

#define CHECK_CUDA(x)                                                                       \
  do {                                                                                      \
    const cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                                \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(2);                                                                         \
    }                                                                                       \
  } while (0)
#define CHECK_GPU(x)                                                                         \
  do {                                                                                       \
    const codec::gpu::GpuStatus s_ = (x);                                                    \
    if (s_ != codec::gpu::GpuStatus::kOk) {                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, codec::gpu::gpu_status_string(s_)); \
      std::exit(2);                                                                          \
    }                                                                                        \
  } while (0)

struct Row {
  std::string set, what, grid;
  size_t bytes;
  double ratio, enc_gbs, dec_gbs;
  bool exact;
};

std::vector<uint8_t> make_data(ElemType t, size_t bytes, std::string* name) {
#ifdef ZIPCCL_BENCH_DATASETS
  const char* set = t == ElemType::kBf16 ? "gauss-bf16-s1e-3" : t == ElemType::kFp16 ? "gauss-fp16" : "grads-fp32-lo16zero";
  std::vector<uint8_t> v;
  if (tools::make_dataset(set, bytes, &v, 0)) {
    *name = set;
    return v;
  }
#endif
  *name = std::string("gauss-") + codec::elem_type_name(t);
  if (t == ElemType::kBf16) return testing::gaussian_bf16(bytes / 2, 1e-3, 1);
  if (t == ElemType::kFp16) return testing::gaussian_fp16(bytes / 2, 1.0, 2);
  return testing::gaussian_fp32(bytes / 4, 1.0, 3, true);
}

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `reps` runs of fn (after one warm-up) on stream s; returns the median milliseconds.
template <class F>
double time_ms(cudaStream_t s, int reps, F fn) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  fn();
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a, s));
    fn();
    CHECK_CUDA(cudaEventRecord(b, s));
    CHECK_CUDA(cudaEventSynchronize(b));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(a));
  CHECK_CUDA(cudaEventDestroy(b));
  return median(ms);
}

struct Dev {
  uint8_t* p = nullptr;
  explicit Dev(size_t n) { CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&p), n ? n : 1)); }
  ~Dev() { cudaFree(p); }
};

// One message of `bytes` (or `batch` messages of `bytes` each), max_sms and block_log2 as given (0: the
// GPU encoder's default, 8192-element blocks).
Row run(ElemType t, const std::vector<uint8_t>& pattern, const std::string& set, size_t bytes, int batch,
        int max_sms, cudaStream_t s, int block_log2 = 0) {
  const size_t total = bytes * size_t(batch);
  Dev src(total), frame(codec::max_encoded_size(bytes) * size_t(batch)), out(total), res(sizeof(CodecResult) * batch);
  for (size_t at = 0; at < total; at += pattern.size())
    CHECK_CUDA(cudaMemcpy(src.p + at, pattern.data(), std::min(pattern.size(), total - at), cudaMemcpyHostToDevice));
  std::vector<codec::gpu::EncodeItem> enc(batch);
  std::vector<size_t> sizes(batch, bytes);
  const size_t fcap = codec::max_encoded_size(bytes);
  for (int i = 0; i < batch; ++i) enc[i] = {src.p + bytes * i, bytes, frame.p + fcap * i, fcap, t};
  const size_t wsb = std::max(codec::gpu::encode_batch_workspace_size(sizes.data(), batch, block_log2),
                              codec::gpu::decode_workspace_size(batch));
  Dev ws(wsb);
  codec::gpu::LaunchOptions lo;
  lo.stream = s;
  lo.max_sms = max_sms;
  CHECK_GPU(codec::gpu::init_workspace(ws.p, wsb, lo));
  auto* r = reinterpret_cast<CodecResult*>(res.p);
  const int reps = total >= (size_t(256) << 20) ? 5 : 20;
  const double enc_ms = time_ms(s, reps, [&] {
    CHECK_GPU(codec::gpu::encode_batch_async(enc.data(), batch, r, nullptr, ws.p, wsb, block_log2, lo));
  });
  std::vector<CodecResult> hr(batch);
  CHECK_CUDA(cudaMemcpy(hr.data(), r, sizeof(CodecResult) * batch, cudaMemcpyDeviceToHost));
  size_t coded = 0;
  std::vector<codec::gpu::DecodeItem> dec(batch);
  for (int i = 0; i < batch; ++i) dec[i] = {frame.p + fcap * i, hr[i].size, out.p + bytes * i, bytes}, coded += hr[i].size;
  const double dec_ms = time_ms(s, reps, [&] { CHECK_GPU(codec::gpu::decode_batch_async(dec.data(), batch, r, nullptr, ws.p, wsb, lo)); });
  CHECK_CUDA(cudaMemcpy(hr.data(), r, sizeof(CodecResult) * batch, cudaMemcpyDeviceToHost));
  bool exact = true;
  for (int i = 0; i < batch; ++i) exact &= hr[i].status == 0 && hr[i].size == bytes;
  // Bit-exact round trip (first 256 MiB) and, for the first message, the CPU codec's frame.
  const size_t check = std::min(total, size_t(256) << 20);
  std::vector<uint8_t> a(check), b(check);
  CHECK_CUDA(cudaMemcpy(a.data(), src.p, check, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(b.data(), out.p, check, cudaMemcpyDeviceToHost));
  exact &= a == b;
  if (bytes <= (size_t(64) << 20)) {
    std::vector<uint8_t> cpu(codec::max_encoded_size(bytes)), gpu(hr.empty() ? 0 : fcap);
    size_t n = 0;
    codec::EncodeOptions eo;
    eo.type = t;
    eo.threads = 8;
    eo.block_log2 = block_log2 ? block_log2 : codec::gpu::kDefaultBlockLog2;  // the GPU's block size
    exact &= codec::encode(a.data(), bytes, cpu.data(), cpu.size(), &n, eo) == codec::Status::kOk;
    CHECK_CUDA(cudaMemcpy(gpu.data(), frame.p, fcap, cudaMemcpyDeviceToHost));
    exact &= std::memcmp(cpu.data(), gpu.data(), n) == 0;
  }
  char what[64];
  const char* blocks = block_log2 == 14 ? " b16K" : "";  // rows at the CPU's block size
  if (batch > 1) {
    std::snprintf(what, sizeof(what), "%dx%zuKiB%s", batch, bytes >> 10, blocks);
  } else {
    std::snprintf(what, sizeof(what), "%zuKiB%s", bytes >> 10, blocks);
  }
  Row row{set, what, max_sms ? std::to_string(max_sms) + " SMs" : "full", total, double(total) / coded,
          total / (enc_ms * 1e6), total / (dec_ms * 1e6), exact};
  std::printf("%-22s %-12s %-8s ratio %.3f  encode %8.1f GB/s  decode %8.1f GB/s  %s\n", row.set.c_str(), what,
              row.grid.c_str(), row.ratio, row.enc_gbs, row.dec_gbs, exact ? "exact" : "MISMATCH");
  std::fflush(stdout);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::printf("no CUDA device: nothing measured\n");
    return 0;
  }
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  std::vector<Row> rows;
  const std::vector<size_t> sizes = quick ? std::vector<size_t>{size_t(1) << 20, size_t(256) << 20}
                                          : std::vector<size_t>{size_t(64) << 10, size_t(1) << 20, size_t(16) << 20,
                                                                size_t(256) << 20, size_t(1) << 30};
  bool all_exact = true;
  for (ElemType t : {ElemType::kBf16, ElemType::kFp16, ElemType::kFp32}) {
    std::string set;
    const auto pattern = make_data(t, size_t(256) << 20, &set);
    for (size_t n : sizes) {
      for (int sms : {0, 16}) rows.push_back(run(t, pattern, set, n, 1, sms, s)), all_exact &= rows.back().exact;
    }
    for (int sms : {0, 16}) rows.push_back(run(t, pattern, set, size_t(1) << 20, 64, sms, s)), all_exact &= rows.back().exact;
    // The GPU encoder's default block is 8192 elements, the CPU's 16384 (codec_cuda.h): bf16 at 16384
    // too, to see which the GPU prefers (fp32 at 16384 does not fit every GPU's shared memory).
    if (t == ElemType::kBf16) {
      for (size_t n : {size_t(1) << 20, size_t(256) << 20}) {
        for (int sms : {0, 16})
          rows.push_back(run(t, pattern, set, n, 1, sms, s, 14)), all_exact &= rows.back().exact;
      }
    }
  }
  std::printf("\n| set | message | grid | ratio | encode GB/s | decode GB/s | bit-exact |\n|---|---|---|---|---|---|---|\n");
  for (auto& r : rows)
    std::printf("| %s | %s | %s | %.3f | %.1f | %.1f | %s |\n", r.set.c_str(), r.what.c_str(), r.grid.c_str(), r.ratio,
                r.enc_gbs, r.dec_gbs, r.exact ? "yes" : "NO");
  CHECK_CUDA(cudaStreamDestroy(s));
  return all_exact ? 0 : 1;
}
