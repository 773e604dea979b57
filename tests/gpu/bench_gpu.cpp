// GPU codec throughput (uncompressed bytes per second), timed with CUDA events, launch included.
// Usage: zipccl_gpu_bench [--quick] [--reps N] [--data FILE.bf16]... [--nvcomp LIBNVCOMP]
// Prints one line per measurement and two tables last: the codec's, and nvCOMP's beside it.
// Data: the `zipccl bench` sets (tools/zipccl/datasets.cpp) when built with them, else seeded Gaussians,
// and each --data file (a real bf16 tensor, repeated); inputs above 256 MiB repeat a 256 MiB pattern.
// Rows marked b16K encode bf16 in the CPU's 16384-element blocks instead of the GPU's default 8192.
// Each rep works on the next of enough copies of its buffers that together pass 3x the device's L2,
// so a small message is read from memory, as a message NCCL hands over is, not from the cache of the
// rep before. The bound: a device-to-device copy of the same bytes, timed the same way in the same run
// (the `copy` column; `of copy` is the codec's speed as a fraction of it).
// --nvcomp: nvCOMP's batched ANS (byte-wise and half-precision) and Bitcomp on the same 256 MiB bf16
// inputs, in 64 KiB chunks (the library of PyPI's nvidia-libnvcomp-cu13, loaded at run time).
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
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
  double ratio, enc_gbs, dec_gbs, copy_gbs;
  bool exact;
};

int g_reps = 20;            // timed reps per measurement (after one warm-up); the median is reported
size_t g_rotate_bytes = 0;  // 3x the device's L2: the buffers one measurement rotates through

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

// Times `reps` runs of fn(copy) (after one warm-up) on stream s, rep r on copy (r + 1) % copies;
// returns the median milliseconds.
template <class F>
double time_ms(cudaStream_t s, int reps, int copies, F fn) {
  cudaEvent_t a, b;
  CHECK_CUDA(cudaEventCreate(&a));
  CHECK_CUDA(cudaEventCreate(&b));
  fn(0);
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    CHECK_CUDA(cudaEventRecord(a, s));
    fn((r + 1) % copies);
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

// Fills `bytes` of device memory at dst with `pattern`, repeated.
void fill_repeated(uint8_t* dst, size_t bytes, const std::vector<uint8_t>& pattern) {
  for (size_t at = 0; at < bytes; at += pattern.size())
    CHECK_CUDA(cudaMemcpy(dst + at, pattern.data(), std::min(pattern.size(), bytes - at), cudaMemcpyHostToDevice));
}

// One message of `bytes` (or `batch` messages of `bytes` each), max_sms and block_log2 as given (0: the
// GPU encoder's default, 8192-element blocks).
Row run(ElemType t, const std::vector<uint8_t>& pattern, const std::string& set, size_t bytes, int batch,
        int max_sms, cudaStream_t s, int block_log2 = 0) {
  const size_t total = bytes * size_t(batch);
  const size_t fcap = codec::max_encoded_size(bytes);
  const size_t fbytes = fcap * size_t(batch);
  // Copies of the input, frames and output, rotated through rep by rep (copy 0 is the one checked).
  const int copies = int(std::max<size_t>(1, (g_rotate_bytes + total - 1) / total));
  Dev src(total * copies), frame(fbytes * copies), out(total * copies), res(sizeof(CodecResult) * batch);
  fill_repeated(src.p, total, pattern);
  for (int c = 1; c < copies; ++c) CHECK_CUDA(cudaMemcpy(src.p + total * c, src.p, total, cudaMemcpyDeviceToDevice));
  std::vector<std::vector<codec::gpu::EncodeItem>> enc(copies, std::vector<codec::gpu::EncodeItem>(batch));
  std::vector<size_t> sizes(batch, bytes);
  for (int c = 0; c < copies; ++c) {
    for (int i = 0; i < batch; ++i)
      enc[c][i] = {src.p + total * c + bytes * i, bytes, frame.p + fbytes * c + fcap * i, fcap, t};
  }
  const size_t wsb = std::max(codec::gpu::encode_batch_workspace_size(sizes.data(), batch, block_log2),
                              codec::gpu::decode_workspace_size(batch));
  Dev ws(wsb);
  codec::gpu::LaunchOptions lo;
  lo.stream = s;
  lo.max_sms = max_sms;
  CHECK_GPU(codec::gpu::init_workspace(ws.p, wsb, lo));
  auto* r = reinterpret_cast<CodecResult*>(res.p);
  // Every copy is encoded (the warm-up and the reps), so every copy's frames are complete for decode.
  for (int c = 0; c < copies; ++c)
    CHECK_GPU(codec::gpu::encode_batch_async(enc[c].data(), batch, r, nullptr, ws.p, wsb, block_log2, lo));
  const double enc_ms = time_ms(s, g_reps, copies, [&](int c) {
    CHECK_GPU(codec::gpu::encode_batch_async(enc[c].data(), batch, r, nullptr, ws.p, wsb, block_log2, lo));
  });
  std::vector<CodecResult> hr(batch);
  CHECK_CUDA(cudaMemcpy(hr.data(), r, sizeof(CodecResult) * batch, cudaMemcpyDeviceToHost));
  size_t coded = 0;
  std::vector<std::vector<codec::gpu::DecodeItem>> dec(copies, std::vector<codec::gpu::DecodeItem>(batch));
  for (int c = 0; c < copies; ++c) {
    for (int i = 0; i < batch; ++i)
      dec[c][i] = {frame.p + fbytes * c + fcap * i, hr[i].size, out.p + total * c + bytes * i, bytes};
  }
  for (int i = 0; i < batch; ++i) coded += hr[i].size;
  const double dec_ms = time_ms(s, g_reps, copies, [&](int c) {
    CHECK_GPU(codec::gpu::decode_batch_async(dec[c].data(), batch, r, nullptr, ws.p, wsb, lo));
  });
  CHECK_CUDA(cudaMemcpy(hr.data(), r, sizeof(CodecResult) * batch, cudaMemcpyDeviceToHost));
  // The bound: the same bytes copied device to device, rotated the same way (into `out`, checked below
  // only after decode has written copy 0 again).
  const double copy_ms = time_ms(s, g_reps, copies, [&](int c) {
    CHECK_CUDA(cudaMemcpyAsync(out.p + total * ((c + 1) % copies), src.p + total * c, total, cudaMemcpyDeviceToDevice, s));
  });
  CHECK_GPU(codec::gpu::decode_batch_async(dec[0].data(), batch, r, nullptr, ws.p, wsb, lo));
  CHECK_CUDA(cudaMemcpy(hr.data(), r, sizeof(CodecResult) * batch, cudaMemcpyDeviceToHost));
  bool exact = true;
  for (int i = 0; i < batch; ++i) exact &= hr[i].status == 0 && hr[i].size == bytes;
  // Bit-exact round trip (first 256 MiB) and, for the first message, the CPU codec's frame.
  const size_t check = std::min(total, size_t(256) << 20);
  std::vector<uint8_t> a(check), b(check);
  CHECK_CUDA(cudaMemcpy(a.data(), src.p, check, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(b.data(), out.p, check, cudaMemcpyDeviceToHost));
  exact &= a == b;
  if (bytes <= (size_t(256) << 20)) {  // the CPU codec on 8 threads: well under a second
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
          total / (enc_ms * 1e6), total / (dec_ms * 1e6), total / (copy_ms * 1e6), exact};
  std::printf("%-22s %-12s %-8s ratio %.3f  encode %8.1f GB/s  decode %8.1f GB/s  copy %8.1f GB/s  %d copies  %s\n",
              row.set.c_str(), what, row.grid.c_str(), row.ratio, row.enc_gbs, row.dec_gbs, row.copy_gbs, copies,
              exact ? "exact" : "MISMATCH");
  std::fflush(stdout);
  return row;
}

// ---- nvCOMP beside it ----------------------------------------------------------------------------
// nvCOMP's batched C API as nvCOMP 5-6 documents it (nvcomp/ans.h, nvcomp/bitcomp.h): each option
// struct is 64 bytes, passed by value; statuses are ints (nvcompSuccess 0).
struct AnsCompressOpts {
  int type = 0;       // nvcomp_rANS
  int data_type = 0;  // NVCOMP_TYPE_CHAR 0, NVCOMP_TYPE_FLOAT16 10 (any half-precision format)
  uint8_t max_sub_chunk_count = 0, states_per_lane = 0, histogram_reduction_log2 = 0;
  char reserved[53] = {};
};
struct AnsDecompressOpts {
  int backend = 0;       // NVCOMP_DECOMPRESS_BACKEND_DEFAULT
  int data_type = 0xff;  // NVCOMP_TYPE_BITS: read from the stream
  uint8_t max_sub_chunk_count = 0, states_per_lane = 0, skip_validate = 0;
  char reserved[53] = {};
};
struct BitcompCompressOpts {
  int algorithm = 0;  // the default algorithm
  int data_type = 3;  // NVCOMP_TYPE_USHORT: 2-byte words
  double delta = 0;
  int mode = 0;  // BITCOMP_LOSSLESS
  char reserved[44] = {};
};
struct BitcompDecompressOpts {
  int backend = 0;
  char reserved[60] = {};
};
static_assert(sizeof(AnsCompressOpts) == 64 && sizeof(AnsDecompressOpts) == 64, "nvCOMP's ANS options");
static_assert(sizeof(BitcompCompressOpts) == 64 && sizeof(BitcompDecompressOpts) == 64, "nvCOMP's Bitcomp options");

template <class C, class D>
struct NvcompCodec {
  using TempFn = int (*)(size_t, size_t, C, size_t*, size_t, cudaStream_t);
  using MaxOutFn = int (*)(size_t, C, size_t*);
  using CompressFn = int (*)(const void* const*, const size_t*, size_t, size_t, void*, size_t, void* const*, size_t*, C,
                             int*, cudaStream_t);
  using DTempFn = int (*)(size_t, size_t, D, size_t*, size_t, cudaStream_t);
  using DecompressFn = int (*)(const void* const*, const size_t*, const size_t*, size_t*, size_t, void*, size_t,
                               void* const*, D, int*, cudaStream_t);
  TempFn temp = nullptr;
  MaxOutFn max_out = nullptr;
  CompressFn compress = nullptr;
  DTempFn dtemp = nullptr;
  DecompressFn decompress = nullptr;

  // Resolves nvcompBatched<name>...; false (and why) when one is missing.
  bool load(void* lib, const std::string& name, std::string* why) {
    auto get = [&](auto* fn, const std::string& suffix) {
      const std::string sym = "nvcompBatched" + name + suffix;
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(dlsym(lib, sym.c_str()));
      if (!*fn) *why += (why->empty() ? "" : ", ") + sym;
      return *fn != nullptr;
    };
    bool ok = get(&temp, "CompressGetTempSize");
    ok &= get(&max_out, "CompressGetMaxOutputChunkSize");
    ok &= get(&compress, "CompressAsync");
    ok &= get(&dtemp, "DecompressGetTempSize");
    ok &= get(&decompress, "DecompressAsync");
    return ok;
  }
};

struct Nvcomp {
  void* lib = nullptr;
  NvcompCodec<AnsCompressOpts, AnsDecompressOpts> ans;
  NvcompCodec<BitcompCompressOpts, BitcompDecompressOpts> bitcomp;
};

// dlopen's answer and every missing entry, or "" when the library has what the bench calls.
std::string load_nvcomp(const char* path, Nvcomp* nv) {
  nv->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!nv->lib) return dlerror();
  std::string why;
  if (!nv->ans.load(nv->lib, "ANS", &why) || !nv->bitcomp.load(nv->lib, "Bitcomp", &why)) return "no " + why;
  return "";
}

struct NvRow {
  std::string set, codec;
  double ratio, comp_gbs, decomp_gbs;
  bool exact;
};

#define CHECK_NV(x)                                                                 \
  do {                                                                              \
    const int st_ = (x);                                                            \
    if (st_ != 0) {                                                                 \
      std::fprintf(stderr, "%s:%d %s: nvCOMP status %d\n", __FILE__, __LINE__, #x, st_); \
      return NvRow{set, name, 0, 0, 0, false};                                     \
    }                                                                               \
  } while (0)

// One nvCOMP codec on `src` (bytes on the device, already holding the input), in 64 KiB chunks: the
// compressed size over all chunks, compress and decompress speeds (uncompressed bytes per second),
// and whether every chunk decompressed bit-exact with status success.
template <class Codec, class C, class D>
NvRow run_nvcomp(const Codec& codec, C copts, D dopts, const std::string& set, const std::string& name,
                 const uint8_t* src, size_t bytes, cudaStream_t s) {
  constexpr size_t kChunk = 64 << 10;
  const size_t n = (bytes + kChunk - 1) / kChunk;
  size_t max_out = 0, ctemp = 0, dtemp = 0;
  CHECK_NV(codec.max_out(kChunk, copts, &max_out));
  max_out = (max_out + 255) / 256 * 256;  // each chunk's slot aligned as every codec wants
  CHECK_NV(codec.temp(n, kChunk, copts, &ctemp, bytes, s));
  CHECK_NV(codec.dtemp(n, kChunk, dopts, &dtemp, bytes, s));
  Dev comp(max_out * n), out(bytes), ct(ctemp), dt(dtemp);
  Dev ptrs(sizeof(void*) * n * 3), lens(sizeof(size_t) * n * 4), st(sizeof(int) * n);
  std::vector<const void*> in_p(n);
  std::vector<void*> comp_p(n), out_p(n);
  std::vector<size_t> in_len(n);
  for (size_t i = 0; i < n; ++i) {
    in_p[i] = src + kChunk * i;
    in_len[i] = std::min(kChunk, bytes - kChunk * i);
    comp_p[i] = comp.p + max_out * i;
    out_p[i] = out.p + kChunk * i;
  }
  auto* d_in = reinterpret_cast<const void**>(ptrs.p);
  auto* d_comp = reinterpret_cast<void**>(ptrs.p) + n;
  auto* d_out = reinterpret_cast<void**>(ptrs.p) + 2 * n;
  auto* d_in_len = reinterpret_cast<size_t*>(lens.p);
  auto* d_comp_len = d_in_len + n;
  auto* d_out_cap = d_in_len + 2 * n;
  auto* d_out_len = d_in_len + 3 * n;
  auto* d_st = reinterpret_cast<int*>(st.p);
  CHECK_CUDA(cudaMemcpy(d_in, in_p.data(), sizeof(void*) * n, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_comp, comp_p.data(), sizeof(void*) * n, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_out, out_p.data(), sizeof(void*) * n, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_in_len, in_len.data(), sizeof(size_t) * n, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(d_out_cap, in_len.data(), sizeof(size_t) * n, cudaMemcpyHostToDevice));
  int failed = 0;
  const double comp_ms = time_ms(s, g_reps, 1, [&](int) {
    failed |= codec.compress(d_in, d_in_len, kChunk, n, ct.p, ctemp, d_comp, d_comp_len, copts, d_st, s);
  });
  CHECK_NV(failed);
  std::vector<size_t> comp_len(n);
  std::vector<int> sts(n);
  CHECK_CUDA(cudaMemcpy(comp_len.data(), d_comp_len, sizeof(size_t) * n, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(sts.data(), d_st, sizeof(int) * n, cudaMemcpyDeviceToHost));
  bool exact = std::all_of(sts.begin(), sts.end(), [](int v) { return v == 0; });
  size_t coded = 0;
  for (size_t v : comp_len) coded += v;
  const double decomp_ms = time_ms(s, g_reps, 1, [&](int) {
    failed |= codec.decompress(d_comp, d_comp_len, d_out_cap, d_out_len, n, dt.p, dtemp, d_out, dopts, d_st, s);
  });
  CHECK_NV(failed);
  std::vector<size_t> out_len(n);
  CHECK_CUDA(cudaMemcpy(out_len.data(), d_out_len, sizeof(size_t) * n, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(sts.data(), d_st, sizeof(int) * n, cudaMemcpyDeviceToHost));
  exact &= std::all_of(sts.begin(), sts.end(), [](int v) { return v == 0; }) && out_len == in_len;
  std::vector<uint8_t> a(bytes), b(bytes);
  CHECK_CUDA(cudaMemcpy(a.data(), src, bytes, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(b.data(), out.p, bytes, cudaMemcpyDeviceToHost));
  exact &= a == b;
  NvRow row{set, name, double(bytes) / coded, bytes / (comp_ms * 1e6), bytes / (decomp_ms * 1e6), exact};
  std::printf("nvCOMP %-16s %-22s ratio %.3f  compress %8.1f GB/s  decompress %8.1f GB/s  %s\n", name.c_str(),
              set.c_str(), row.ratio, row.comp_gbs, row.decomp_gbs, exact ? "exact" : "MISMATCH");
  std::fflush(stdout);
  return row;
}

// nvCOMP's codecs on a 256 MiB bf16 input made of `pattern`.
void nvcomp_rows(const Nvcomp& nv, const std::vector<uint8_t>& pattern, const std::string& set, cudaStream_t s,
                 std::vector<NvRow>* rows) {
  const size_t bytes = size_t(256) << 20;
  Dev src(bytes);
  fill_repeated(src.p, bytes, pattern);
  AnsCompressOpts bytewise, half;
  half.data_type = 10;  // NVCOMP_TYPE_FLOAT16
  rows->push_back(run_nvcomp(nv.ans, bytewise, AnsDecompressOpts{}, set, "ANS (bytes)", src.p, bytes, s));
  rows->push_back(run_nvcomp(nv.ans, half, AnsDecompressOpts{}, set, "ANS (float16)", src.p, bytes, s));
  rows->push_back(run_nvcomp(nv.bitcomp, BitcompCompressOpts{}, BitcompDecompressOpts{}, set, "Bitcomp (ushort)", src.p,
                             bytes, s));
}

// A real tensor's bytes (a whole number of bf16 values), or empty.
std::vector<uint8_t> read_tensor(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> v((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  v.resize(v.size() & ~size_t(1));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  std::vector<std::string> files;
  const char* nvcomp_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      quick = true;
    } else if (a == "--reps" && i + 1 < argc && std::atoi(argv[i + 1]) > 0) {
      g_reps = std::atoi(argv[++i]);
    } else if (a == "--data" && i + 1 < argc) {
      files.push_back(argv[++i]);
    } else if (a == "--nvcomp" && i + 1 < argc) {
      nvcomp_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: zipccl_gpu_bench [--quick] [--reps N] [--data FILE.bf16]... [--nvcomp LIBNVCOMP]\n");
      return 2;
    }
  }
  // What the run will use is checked before the device, so that a machine without one still proves it.
  std::vector<std::pair<std::string, std::vector<uint8_t>>> real;
  for (const std::string& f : files) {
    std::vector<uint8_t> v = read_tensor(f);
    if (v.empty()) {
      std::fprintf(stderr, "zipccl_gpu_bench: %s: no bf16 data\n", f.c_str());
      return 2;
    }
    real.emplace_back(f.substr(f.find_last_of('/') + 1), std::move(v));
  }
  Nvcomp nv;
  if (nvcomp_path) {
    const std::string why = load_nvcomp(nvcomp_path, &nv);
    if (!why.empty()) {
      std::fprintf(stderr, "zipccl_gpu_bench: nvCOMP from %s: %s\n", nvcomp_path, why.c_str());
      return 2;
    }
    std::printf("nvCOMP: %s, ANS and Bitcomp entries found\n", nvcomp_path);
  }
  int dev = 0;
  cudaDeviceProp prop;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    std::printf("no CUDA device: nothing measured\n");
    return 0;
  }
  g_rotate_bytes = size_t(3) * size_t(std::max(prop.l2CacheSize, 1));
  std::printf("device: %s, %d SMs, L2 %d MiB (buffers rotate through %zu MiB), %d reps per figure\n", prop.name,
              prop.multiProcessorCount, prop.l2CacheSize >> 20, g_rotate_bytes >> 20, g_reps);
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
  // Real tensors (bf16): the message sizes of the quick set, full grid and 16 SMs.
  for (const auto& [name, pattern] : real) {
    for (size_t n : {size_t(1) << 20, size_t(256) << 20}) {
      for (int sms : {0, 16})
        rows.push_back(run(ElemType::kBf16, pattern, name, n, 1, sms, s)), all_exact &= rows.back().exact;
    }
  }
  std::vector<NvRow> nv_rows;
  if (nv.lib) {
    std::string set;
    nvcomp_rows(nv, make_data(ElemType::kBf16, size_t(256) << 20, &set), set, s, &nv_rows);
    for (const auto& [name, pattern] : real) nvcomp_rows(nv, pattern, name, s, &nv_rows);
  }
  std::printf("\n| set | message | grid | ratio | encode GB/s | decode GB/s | copy GB/s | encode of copy | decode of copy | bit-exact |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (auto& r : rows)
    std::printf("| %s | %s | %s | %.3f | %.1f | %.1f | %.1f | %.2f | %.2f | %s |\n", r.set.c_str(), r.what.c_str(),
                r.grid.c_str(), r.ratio, r.enc_gbs, r.dec_gbs, r.copy_gbs, r.enc_gbs / r.copy_gbs, r.dec_gbs / r.copy_gbs,
                r.exact ? "yes" : "NO");
  if (!nv_rows.empty()) {
    std::printf("\n| nvCOMP, 256 MiB in 64 KiB chunks | set | ratio | compress GB/s | decompress GB/s | bit-exact |\n"
                "|---|---|---|---|---|---|\n");
    for (auto& r : nv_rows)
      std::printf("| %s | %s | %.3f | %.1f | %.1f | %s |\n", r.codec.c_str(), r.set.c_str(), r.ratio, r.comp_gbs,
                  r.decomp_gbs, r.exact ? "yes" : "NO");
  }
  CHECK_CUDA(cudaStreamDestroy(s));
  // nvCOMP's own failures are reported in its table; the exit status is the codec's.
  return all_exact ? 0 : 1;
}
