// `zipccl bench`: the codec's ratio and speed beside zstd and lz4 on the same bytes in the same run,
// with the order-0 entropy bounds of the codec's plane model (tools/zipccl/entropy.h).
//
// Every codec and baseline round trip is checked bit-exact; a mismatch fails the run (exit 1).
#if ZIPCCL_HAVE_BASELINES
#include <lz4.h>
#include <zstd.h>
#endif

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "common/units.h"
#include "datasets.h"
#include "entropy.h"
#include "gpu_tool.h"
#include "isa_option.h"
#include "tensor_file.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace tools {
namespace {

using codec::ElemType;
using Clock = std::chrono::steady_clock;

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kDefaultSize = 64 * kMiB;
constexpr size_t kQuickSize = 4 * kMiB;
// Inputs larger than this are coded as several frames (a frame carries < 4 GiB).
constexpr size_t kBenchFrame = size_t{1} << 30;
constexpr size_t kLz4Chunk = size_t{1} << 30;  // below LZ4_MAX_INPUT_SIZE

struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::vector<std::string> files;
  bool type_given = false;
  ElemType type = ElemType::kAuto;
  size_t size = kDefaultSize;
  int threads = 0;  // the "all threads" column; 0: hardware_concurrency
  int reps = 3;
  size_t bound_block = 4096;
  bool json = false;
  bool per_tensor = false;
  bool baselines = true;
  codec::Isa isa = codec::Isa::kAuto;  // --isa; --scalar: kScalar; else ZIPCCL_CODEC_ISA
  bool isa_given = false;              // by --isa or --scalar
  bool gpu = false;   // the CUDA codec instead of the CPU's
  int gpu_sms = 16;   // the bounded-grid column of --gpu
  std::vector<std::string> sets;
  int name_width = 20;  // of the table's first column, from the longest input name
};

// One buffer to measure. `type` is what the codec is told (kAuto: it detects).
struct Input {
  std::string name;
  std::string what;
  ElemType type = ElemType::kAuto;
  const uint8_t* data = nullptr;
  size_t size = 0;
};

struct Speed {
  double comp_gbps = 0;
  double decomp_gbps = 0;
};

struct CodecResult {
  size_t compressed = 0;
  size_t frames = 0;
  ElemType frame_type = ElemType::kNone;  // of the first frame
  codec::FrameKind kind = codec::FrameKind::kRaw;
  uint32_t block_elems = 0;
  Speed one, all;
};

struct BaselineResult {
  std::string name;
  size_t compressed = 0;
  Speed one;
};

struct Result {
  Input in;
  ElemType model = ElemType::kNone;  // plane model of the bound (the detected type under auto)
  EntropyBound bound;
  CodecResult codec;
  std::vector<BaselineResult> baselines;
};

double gbps(size_t bytes, double seconds) {
  return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0;
}
double ratio(size_t in, size_t out) {
  return out ? static_cast<double>(in) / static_cast<double>(out) : std::numeric_limits<double>::infinity();
}

template <class F>
double timed(F&& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void check_same(const Input& in, const char* who, const uint8_t* back) {
  if (in.size == 0 || std::memcmp(in.data, back, in.size) == 0) return;
  size_t i = 0;
  while (back[i] == in.data[i]) ++i;
  throw BenchError(std::string(who) + " round trip of '" + in.name + "' differs at byte " +
                   std::to_string(i) + " of " + std::to_string(in.size));
}

// ---- the baselines: one-threaded, whole buffer, library defaults ----

class Baseline {
 public:
  virtual ~Baseline() = default;
  virtual std::string name() const = 0;
  virtual size_t bound(size_t n) const = 0;
  virtual size_t compress(const uint8_t* src, size_t n, uint8_t* dst, size_t cap) = 0;
  virtual void decompress(const uint8_t* src, size_t csize, uint8_t* dst, size_t n) = 0;
};

#if ZIPCCL_HAVE_BASELINES
class ZstdBaseline : public Baseline {
 public:
  explicit ZstdBaseline(int level) : level_(level), cctx_(ZSTD_createCCtx()), dctx_(ZSTD_createDCtx()) {}
  ZstdBaseline(const ZstdBaseline&) = delete;
  ZstdBaseline& operator=(const ZstdBaseline&) = delete;
  ~ZstdBaseline() override {
    ZSTD_freeCCtx(cctx_);
    ZSTD_freeDCtx(dctx_);
  }
  std::string name() const override { return "zstd-" + std::to_string(level_); }
  size_t bound(size_t n) const override { return ZSTD_compressBound(n); }
  size_t compress(const uint8_t* src, size_t n, uint8_t* dst, size_t cap) override {
    return zcompress(src, n, dst, cap);
  }
  void decompress(const uint8_t* src, size_t csize, uint8_t* dst, size_t n) override {
    zdecompress(src, csize, dst, n);
  }

 protected:
  size_t zcompress(const uint8_t* src, size_t n, uint8_t* dst, size_t cap) {
    size_t r = ZSTD_compressCCtx(cctx_, dst, cap, src, n, level_);
    if (ZSTD_isError(r)) throw BenchError(std::string("zstd: ") + ZSTD_getErrorName(r));
    return r;
  }
  void zdecompress(const uint8_t* src, size_t csize, uint8_t* dst, size_t n) {
    size_t r = ZSTD_decompressDCtx(dctx_, dst, n, src, csize);
    if (ZSTD_isError(r) || r != n) throw BenchError("zstd decompression failed");
  }
  int level_;
  ZSTD_CCtx* cctx_;
  ZSTD_DCtx* dctx_;
};

class Lz4Baseline : public Baseline {
 public:
  std::string name() const override { return "lz4"; }
  size_t bound(size_t n) const override {
    size_t chunks = n / kLz4Chunk + 1;
    return n + chunks * (static_cast<size_t>(LZ4_compressBound(static_cast<int>(kLz4Chunk))) - kLz4Chunk);
  }
  size_t compress(const uint8_t* src, size_t n, uint8_t* dst, size_t cap) override {
    sizes_.clear();
    size_t out = 0;
    for (size_t off = 0; off < n || off == 0; off += kLz4Chunk) {
      const int len = static_cast<int>(std::min(kLz4Chunk, n - off));
      const int r =
          LZ4_compress_default(reinterpret_cast<const char*>(src + off), reinterpret_cast<char*>(dst + out),
                               len, static_cast<int>(std::min<size_t>(cap - out, INT32_MAX)));
      if (r <= 0 && len > 0) throw BenchError("lz4 compression failed");
      sizes_.push_back(static_cast<size_t>(r));
      out += static_cast<size_t>(r);
      if (n == 0) break;
    }
    return out;
  }
  void decompress(const uint8_t* src, size_t, uint8_t* dst, size_t n) override {
    size_t in = 0, off = 0;
    for (size_t c : sizes_) {
      const int len = static_cast<int>(std::min(kLz4Chunk, n - off));
      const int r = LZ4_decompress_safe(reinterpret_cast<const char*>(src + in),
                                        reinterpret_cast<char*>(dst + off), static_cast<int>(c), len);
      if (r != len) throw BenchError("lz4 decompression failed");
      in += c;
      off += static_cast<size_t>(len);
    }
  }

 private:
  std::vector<size_t> sizes_;
};

// ZipNN-style: byte k of every element into plane k, then zstd on each plane. Split and merge are
// part of the timed work. Trailing bytes that do not fill an element go raw.
class PlanesZstdBaseline : public ZstdBaseline {
 public:
  PlanesZstdBaseline(int level, size_t elem_bytes) : ZstdBaseline(level), es_(elem_bytes) {}
  std::string name() const override { return "planes+zstd-" + std::to_string(level_); }
  size_t bound(size_t n) const override { return es_ * ZSTD_compressBound(n / es_ + 1) + es_; }
  size_t compress(const uint8_t* src, size_t n, uint8_t* dst, size_t cap) override {
    const size_t elems = n / es_, tail = n - elems * es_;
    scratch_.resize(n);
    split(src, elems, scratch_.data());
    sizes_.assign(es_, 0);
    size_t out = 0;
    for (size_t k = 0; k < es_; ++k) {
      sizes_[k] = zcompress(scratch_.data() + k * elems, elems, dst + out, cap - out);
      out += sizes_[k];
    }
    std::memcpy(dst + out, src + elems * es_, tail);
    return out + tail;
  }
  void decompress(const uint8_t* src, size_t, uint8_t* dst, size_t n) override {
    const size_t elems = n / es_, tail = n - elems * es_;
    size_t in = 0;
    for (size_t k = 0; k < es_; ++k) {
      zdecompress(src + in, sizes_[k], scratch_.data() + k * elems, elems);
      in += sizes_[k];
    }
    merge(scratch_.data(), elems, dst);
    std::memcpy(dst + elems * es_, src + in, tail);
  }

 private:
  void split(const uint8_t* src, size_t elems, uint8_t* planes) const {
    if (es_ == 2) {
      uint8_t *p0 = planes, *p1 = planes + elems;
      for (size_t i = 0; i < elems; ++i) p0[i] = src[2 * i], p1[i] = src[2 * i + 1];
    } else if (es_ == 4) {
      uint8_t *p0 = planes, *p1 = p0 + elems, *p2 = p1 + elems, *p3 = p2 + elems;
      for (size_t i = 0; i < elems; ++i) {
        p0[i] = src[4 * i], p1[i] = src[4 * i + 1], p2[i] = src[4 * i + 2], p3[i] = src[4 * i + 3];
      }
    } else {
      std::memcpy(planes, src, elems);
    }
  }
  void merge(const uint8_t* planes, size_t elems, uint8_t* dst) const {
    if (es_ == 2) {
      const uint8_t *p0 = planes, *p1 = planes + elems;
      for (size_t i = 0; i < elems; ++i) dst[2 * i] = p0[i], dst[2 * i + 1] = p1[i];
    } else if (es_ == 4) {
      const uint8_t *p0 = planes, *p1 = p0 + elems, *p2 = p1 + elems, *p3 = p2 + elems;
      for (size_t i = 0; i < elems; ++i) {
        dst[4 * i] = p0[i], dst[4 * i + 1] = p1[i], dst[4 * i + 2] = p2[i], dst[4 * i + 3] = p3[i];
      }
    } else {
      std::memcpy(dst, planes, elems);
    }
  }
  size_t es_;
  std::vector<uint8_t> scratch_;
  std::vector<size_t> sizes_;
};
#endif  // ZIPCCL_HAVE_BASELINES

// ---- the codec ----

size_t codec_bound(size_t n) {
  size_t total = 0;
  for (size_t off = 0; off < n || off == 0; off += kBenchFrame) {
    total += codec::max_encoded_size(std::min(kBenchFrame, n - off));
    if (n == 0) break;
  }
  return total;
}

size_t codec_encode(const Input& in, uint8_t* dst, size_t cap, const codec::EncodeOptions& opt,
                    std::vector<size_t>* frames) {
  frames->clear();
  size_t out = 0;
  for (size_t off = 0; off < in.size || off == 0; off += kBenchFrame) {
    const size_t len = std::min(kBenchFrame, in.size - off);
    size_t enc = 0;
    codec::Status st = codec::encode(in.data + off, len, dst + out, cap - out, &enc, opt);
    if (st != codec::Status::kOk)
      throw BenchError("codec encode of '" + in.name + "': " + codec::status_string(st));
    frames->push_back(enc);
    out += enc;
    if (in.size == 0) break;
  }
  return out;
}

void codec_decode(const Input& in, const uint8_t* src, const std::vector<size_t>& frames, uint8_t* dst,
                  const codec::DecodeOptions& opt) {
  size_t off = 0, pos = 0;
  for (size_t f : frames) {
    size_t dec = 0;
    codec::Status st = codec::decode(src + pos, f, dst + off, in.size - off, &dec, opt);
    if (st != codec::Status::kOk)
      throw BenchError("codec decode of '" + in.name + "': " + codec::status_string(st));
    off += dec;
    pos += f;
  }
  if (off != in.size) throw BenchError("codec decode of '" + in.name + "' returned the wrong size");
}

// Scratch shared by all measurements of one input.
struct Buffers {
  std::vector<uint8_t> packed, back;
  void reserve(size_t packed_bytes, size_t n) {
    if (packed.size() < packed_bytes) packed.resize(packed_bytes);
    if (back.size() < n || back.empty()) back.resize(std::max<size_t>(n, 1));  // never a null data()
  }
};

Speed measure_codec(const Input& in, const Options& o, int threads, Buffers* buf, CodecResult* r) {
  codec::EncodeOptions eo;
  eo.type = in.type;
  eo.threads = threads;
  eo.isa = o.isa;
  codec::DecodeOptions dopt;
  dopt.threads = threads;
  dopt.isa = o.isa;
  std::vector<size_t> frames;
  double enc = std::numeric_limits<double>::infinity(), dec = enc;
  size_t csize = 0;
  for (int rep = 0; rep < o.reps; ++rep) {
    enc = std::min(
        enc, timed([&] { csize = codec_encode(in, buf->packed.data(), buf->packed.size(), eo, &frames); }));
  }
  if (r->frames != 0 && csize != r->compressed) {
    throw BenchError("codec output size of '" + in.name + "' depends on the thread count");
  }
  r->compressed = csize;
  r->frames = frames.size();
  codec::FrameInfo info{};
  if (codec::read_frame_info(buf->packed.data(), frames[0], &info) == codec::Status::kOk) {
    r->frame_type = info.type;
    r->kind = info.kind;
    r->block_elems = info.block_elems;
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    std::memset(buf->back.data(), 0xA5, in.size);  // so a decoder that writes nothing cannot pass
    dec = std::min(dec, timed([&] { codec_decode(in, buf->packed.data(), frames, buf->back.data(), dopt); }));
    check_same(in, "codec", buf->back.data());
  }
  return {gbps(in.size, enc), gbps(in.size, dec)};
}

BaselineResult measure_baseline(const Input& in, const Options& o, Baseline* b, Buffers* buf) {
  buf->reserve(b->bound(in.size), in.size);
  BaselineResult r;
  r.name = b->name();
  double comp = std::numeric_limits<double>::infinity(), dec = comp;
  for (int rep = 0; rep < o.reps; ++rep) {
    comp = std::min(comp, timed([&] {
                      r.compressed = b->compress(in.data, in.size, buf->packed.data(), buf->packed.size());
                    }));
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    std::memset(buf->back.data(), 0xA5, in.size);
    dec = std::min(
        dec, timed([&] { b->decompress(buf->packed.data(), r.compressed, buf->back.data(), in.size); }));
    check_same(in, r.name.c_str(), buf->back.data());
  }
  r.one = {gbps(in.size, comp), gbps(in.size, dec)};
  return r;
}

Result run_one(const Input& in, const Options& o, int all_threads) {
  Result res;
  res.in = in;
  res.model = in.type == ElemType::kAuto ? codec::detect_elem_type(in.data, in.size) : in.type;
  res.bound = entropy_bound(in.data, in.size, res.model, o.bound_block);

  Buffers buf;
  buf.reserve(codec_bound(in.size), in.size);
  res.codec.one = measure_codec(in, o, 1, &buf, &res.codec);
  res.codec.all = all_threads > 1 ? measure_codec(in, o, all_threads, &buf, &res.codec) : res.codec.one;

#if ZIPCCL_HAVE_BASELINES
  if (o.baselines) {
    const size_t es = std::max<size_t>(1, codec::elem_size(res.model));
    std::vector<std::unique_ptr<Baseline>> bs;
    bs.emplace_back(new ZstdBaseline(1));
    bs.emplace_back(new ZstdBaseline(3));
    bs.emplace_back(new Lz4Baseline());
    bs.emplace_back(new PlanesZstdBaseline(3, es));
    for (auto& b : bs) res.baselines.push_back(measure_baseline(in, o, b.get(), &buf));
  }
#endif
  return res;
}

// ---- output ----

std::string fmt_ratio(double r) {
  char s[32];
  if (std::isinf(r)) return "inf";
  std::snprintf(s, sizeof s, r >= 100 ? "%.0fx" : "%.3fx", r);
  return s;
}

std::string fmt(const char* f, double v) {
  char s[64];
  std::snprintf(s, sizeof s, f, v);
  return s;
}

std::string type_label(const Result& r) {
  if (r.in.type == ElemType::kAuto) return std::string("auto:") + codec::elem_type_name(r.model);
  return codec::elem_type_name(r.in.type);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0 || line.rfind("Model", 0) == 0) {
      size_t c = line.find(':');
      if (c != std::string::npos) return line.substr(line.find_first_not_of(" \t", c + 1));
    }
  }
  return "unknown CPU";
}

void print_header(const Options& o, int all_threads, size_t count) {
  std::printf("zipccl bench: %zu input%s; codec kernels %s%s; best of %d; %s, %u hardware threads\n", count,
              count == 1 ? "" : "s", codec::isa_name(codec::effective_isa(o.isa)),
              o.isa == codec::Isa::kAuto ? "" : o.isa_given ? " (--isa)" : " (ZIPCCL_CODEC_ISA)", o.reps,
              cpu_model().c_str(), std::thread::hardware_concurrency());
  if (!ZIPCCL_HAVE_BASELINES && o.baselines) std::printf("(built without libzstd/liblz4: no zstd or lz4 baselines)\n");
  std::printf(
      "bounds: order-0 entropy of the codec's byte planes, whole buffer and per block of %zu elements\n\n",
      o.bound_block);
  std::printf("%-*s %-10s %8s %9s %9s %9s %6s %6s %6s %6s %6s\n", o.name_width, "", "", "", "zipccl", "bound",
              "bound", "% of", "enc", "dec", "enc", "dec");
  std::printf("%-*s %-10s %8s %9s %9s %9s %6s %6s %6s %6s %6s\n", o.name_width, "input", "type", "MiB",
              "ratio", "buffer", "block", "block", "GB/s", "GB/s", "GB/s", "GB/s");
  std::printf("%-*s %-10s %8s %9s %9s %9s %6s %6s %6s %6s %6s\n", o.name_width, "", "", "", "", "", "",
              "bound", "1 thr", "1 thr", (std::to_string(all_threads) + " thr").c_str(),
              (std::to_string(all_threads) + " thr").c_str());
}

void print_row(const Options& o, const Result& r) {
  const double cr = ratio(r.in.size, r.codec.compressed);
  std::printf("%-*s %-10s %8.2f %9s %9s %9s %6s %6.2f %6.2f %6.2f %6.2f\n", o.name_width, r.in.name.c_str(),
              type_label(r).c_str(), static_cast<double>(r.in.size) / kMiB, fmt_ratio(cr).c_str(),
              fmt_ratio(r.bound.whole_ratio).c_str(), fmt_ratio(r.bound.block_ratio).c_str(),
              std::isinf(r.bound.block_ratio) ? "-" : fmt("%.1f%%", 100 * cr / r.bound.block_ratio).c_str(),
              r.codec.one.comp_gbps, r.codec.one.decomp_gbps, r.codec.all.comp_gbps, r.codec.all.decomp_gbps);
  std::fflush(stdout);
}

void print_block_note(const std::vector<Result>& rs) {
  std::vector<uint32_t> sizes;
  for (const Result& r : rs) {
    if (r.codec.kind == codec::FrameKind::kCoded &&
        std::find(sizes.begin(), sizes.end(), r.codec.block_elems) == sizes.end()) {
      sizes.push_back(r.codec.block_elems);
    }
  }
  if (sizes.empty()) return;
  std::printf("(the codec's frames used blocks of");
  for (size_t i = 0; i < sizes.size(); ++i) std::printf("%s %u", i ? "," : "", sizes[i]);
  std::printf(" elements)\n");
}

void print_baselines(const Options& o, const std::vector<Result>& rs) {
  if (rs.empty() || rs[0].baselines.empty()) return;
  std::printf("\nthe same bytes, one thread: ratio  compress/decompress GB/s\n");
  std::printf("%-*s %-20s", o.name_width, "input", "zipccl");
  for (const BaselineResult& b : rs[0].baselines) std::printf(" %-20s", b.name.c_str());
  std::printf("\n");
  for (const Result& r : rs) {
    auto cell = [&](size_t csize, const Speed& s) {
      return fmt_ratio(ratio(r.in.size, csize)) + " " + fmt("%.2f", s.comp_gbps) + "/" +
             fmt("%.2f", s.decomp_gbps);
    };
    std::printf("%-*s %-20s", o.name_width, r.in.name.c_str(), cell(r.codec.compressed, r.codec.one).c_str());
    for (const BaselineResult& b : r.baselines) std::printf(" %-20s", cell(b.compressed, b.one).c_str());
    std::printf("\n");
  }
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\')
      out += '\\', out += static_cast<char>(c);
    else if (c < 0x20)
      out += fmt("\\u%04x", c);
    else
      out += static_cast<char>(c);
  }
  return out + "\"";
}

std::string json_num(double v) {
  return std::isfinite(v) ? fmt("%.6g", v) : "null";
}

void print_json(const Options& o, int all_threads, const std::vector<Result>& rs) {
  std::printf("{\n  \"tool\": \"zipccl bench\",\n  \"cpu\": %s,\n  \"hardware_threads\": %u,\n",
              json_string(cpu_model()).c_str(), std::thread::hardware_concurrency());
  std::printf(
      "  \"simd\": %s,\n  \"force_scalar\": %s,\n  \"reps\": %d,\n  \"threads\": %d,\n  "
      "\"bound_block_elems\": %zu,\n",
      json_string(codec::isa_name(codec::effective_isa(o.isa))).c_str(),
      o.isa == codec::Isa::kScalar ? "true" : "false", o.reps, all_threads,
      o.bound_block);
  std::printf("  \"inputs\": [");
  for (size_t i = 0; i < rs.size(); ++i) {
    const Result& r = rs[i];
    const double cr = ratio(r.in.size, r.codec.compressed);
    std::printf("%s\n    {\"name\": %s, \"what\": %s, \"type\": %s, \"model\": %s, \"bytes\": %zu,\n",
                i ? "," : "", json_string(r.in.name).c_str(), json_string(r.in.what).c_str(),
                json_string(codec::elem_type_name(r.in.type)).c_str(),
                json_string(codec::elem_type_name(r.model)).c_str(), r.in.size);
    std::printf("     \"bound\": {\"whole_ratio\": %s, \"block_ratio\": %s, \"planes\": [",
                json_num(r.bound.whole_ratio).c_str(), json_num(r.bound.block_ratio).c_str());
    for (size_t k = 0; k < r.bound.planes.size(); ++k) {
      std::printf("%s{\"whole_bits\": %s, \"block_bits\": %s}", k ? ", " : "",
                  json_num(r.bound.planes[k].whole_bits).c_str(),
                  json_num(r.bound.planes[k].block_bits).c_str());
    }
    std::printf("]},\n");
    const char* kinds[] = {"raw", "const", "coded"};
    std::printf(
        "     \"zipccl\": {\"compressed\": %zu, \"ratio\": %s, \"pct_of_block_bound\": %s, \"frames\": %zu, "
        "\"frame_kind\": %s, \"frame_type\": %s, \"block_elems\": %u,\n",
        r.codec.compressed, json_num(cr).c_str(),
        json_num(std::isinf(r.bound.block_ratio) ? NAN : 100 * cr / r.bound.block_ratio).c_str(),
        r.codec.frames, json_string(kinds[static_cast<int>(r.codec.kind) % 3]).c_str(),
        json_string(codec::elem_type_name(r.codec.frame_type)).c_str(), r.codec.block_elems);
    std::printf(
        "       \"encode_gbps_1t\": %s, \"decode_gbps_1t\": %s, \"encode_gbps_nt\": %s, \"decode_gbps_nt\": "
        "%s}",
        json_num(r.codec.one.comp_gbps).c_str(), json_num(r.codec.one.decomp_gbps).c_str(),
        json_num(r.codec.all.comp_gbps).c_str(), json_num(r.codec.all.decomp_gbps).c_str());
    std::printf(",\n     \"baselines\": [");
    for (size_t k = 0; k < r.baselines.size(); ++k) {
      const BaselineResult& b = r.baselines[k];
      std::printf(
          "%s\n       {\"name\": %s, \"compressed\": %zu, \"ratio\": %s, \"compress_gbps_1t\": %s, "
          "\"decompress_gbps_1t\": %s}",
          k ? "," : "", json_string(b.name).c_str(), b.compressed,
          json_num(ratio(r.in.size, b.compressed)).c_str(), json_num(b.one.comp_gbps).c_str(),
          json_num(b.one.decomp_gbps).c_str());
    }
    std::printf("]}");
  }
  std::printf("\n  ]\n}\n");
}

// ---- arguments ----

void usage(FILE* f) {
  std::fprintf(
      f,
      "usage: zipccl bench [FILE...] [-t auto|bf16|fp16|fp32] [--size BYTES | --quick] [--threads N]\n"
      "                    [--reps N] [--sets A,B,..] [--per-tensor] [--no-baselines] [--isa SET] [--json]\n"
      "  With no FILE: the built-in synthetic sets (--list names them), 64 MiB each (--quick: 4 MiB).\n"
      "  FILE: raw bytes (needs -t), .npy (<f2, <f4, bfloat16 as '<V2') or .safetensors (BF16/F16/F32;\n"
      "        tensors of one dtype concatenated in file order, like a gradient bucket; --per-tensor:\n"
      "        one row per tensor). -t overrides the dtype a file declares.\n"
      "  --size BYTES    size of each built-in set (suffixes K, M, G: KiB, MiB, GiB)\n"
      "  --threads N     thread count of the multi-threaded columns (default: hardware threads)\n"
      "  --reps N        repetitions; the best time counts (default 3)\n"
      "  --bound-block N elements per block of the per-block entropy bound (default 4096)\n"
      "  --no-baselines  skip zstd / lz4;  --json: JSON on stdout\n"
      "  --isa SET       the codec's CPU kernel set: auto, avx512, avx2, neon, scalar (--scalar: scalar;\n"
      "                  exit 2 when the CPU lacks SET)\n"
      "  --gpu [--gpu-sms N]  the CUDA codec on GPU 0, data resident on the device, CUDA events, launch\n"
      "                  included; whole GPU and a grid bounded to N SMs (default 16); frames checked\n"
      "                  against the CPU codec's (exit 3 without a GPU)\n");
}

// Sizes follow the settings' grammar (common/units.h: 64K, 64KiB, 1.5M, 2G); the bench caps them at
// 1 TiB.
bool parse_size(const std::string& s, size_t* out, std::string* why = nullptr) {
  uint64_t v = 0;
  if (!units::parse_size(s.c_str(), &v, why)) return false;
  if (v > (1ull << 40)) {
    if (why) *why = "more than 1TiB";
    return false;
  }
  *out = static_cast<size_t>(v);
  return true;
}

bool parse_count(const std::string& s, int lo, int hi, int* out) {
  size_t v = 0;
  if (!parse_size(s, &v) || v < static_cast<size_t>(lo) || v > static_cast<size_t>(hi)) return false;
  *out = static_cast<int>(v);
  return true;
}

// Returns -1 to go on, else an exit status.
int parse_args(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string key = a, val;
    const bool has_eq = a.rfind("--", 0) == 0 && a.find('=') != std::string::npos;
    if (has_eq) key = a.substr(0, a.find('=')), val = a.substr(a.find('=') + 1);
    auto value = [&](std::string* v) {
      if (has_eq) return *v = val, true;
      if (i + 1 >= argc) return false;
      *v = argv[++i];
      return true;
    };
    auto bad = [&](const char* what) {
      std::fprintf(stderr, "zipccl bench: %s %s\n", key.c_str(), what);
      return 2;
    };
    std::string v;
    if (a == "-h" || a == "--help") {
      usage(stdout);
      return 0;
    } else if (a == "--list") {
      for (const DatasetInfo& d : builtin_datasets())
        std::printf("%-22s %-5s %s\n", d.name, codec::elem_type_name(d.type), d.what);
      return 0;
    } else if (key == "-t" || key == "--type") {
      if (!value(&v) || !codec::parse_elem_type(v.c_str(), &o->type))
        return bad("takes auto, bf16, fp16 or fp32");
      o->type_given = true;
    } else if (key == "--size") {
      std::string why = "zero";
      if (!value(&v) || !parse_size(v, &o->size, &why) || o->size == 0)
        return bad(("needs a size in bytes (64K, 1.5M, 2G): " + why).c_str());
    } else if (a == "--quick") {
      o->size = kQuickSize;
    } else if (key == "--threads") {
      if (!value(&v) || !parse_count(v, 1, 1024, &o->threads)) return bad("needs a number from 1 to 1024");
    } else if (key == "--reps") {
      if (!value(&v) || !parse_count(v, 1, 1000, &o->reps)) return bad("needs a number from 1 to 1000");
    } else if (key == "--bound-block") {
      int b = 0;
      if (!value(&v) || !parse_count(v, 1, 1 << 24, &b)) return bad("needs a number of elements");
      o->bound_block = static_cast<size_t>(b);
    } else if (key == "--sets") {
      if (!value(&v)) return bad("needs a comma-separated list (see --list)");
      for (size_t s = 0; s <= v.size();) {
        size_t e = v.find(',', s);
        if (e == std::string::npos) e = v.size();
        if (e > s) o->sets.push_back(v.substr(s, e - s));
        s = e + 1;
      }
    } else if (a == "--json") {
      o->json = true;
    } else if (a == "--per-tensor") {
      o->per_tensor = true;
    } else if (a == "--no-baselines") {
      o->baselines = false;
    } else if (a == "--scalar") {
      o->isa = codec::Isa::kScalar;
      o->isa_given = true;
    } else if (key == "--isa") {
      if (!value(&v)) return bad("needs a kernel set (auto, avx512, avx2, neon, scalar)");
      if (!parse_isa_option("bench", v, &o->isa)) return 2;
      o->isa_given = true;
    } else if (a == "--gpu") {
      o->gpu = true;
    } else if (key == "--gpu-sms") {
      if (!value(&v) || !parse_count(v, 1, 4096, &o->gpu_sms)) return bad("needs a number of SMs");
    } else if (a.size() > 1 && a[0] == '-') {
      std::fprintf(stderr, "zipccl bench: unknown option '%s' (see --help)\n", a.c_str());
      return 2;
    } else {
      o->files.push_back(a);
    }
  }
  if (o->gpu && (o->json || o->isa_given || o->per_tensor)) {
    std::fprintf(stderr, "zipccl bench: --gpu does not go with --json, --isa, --scalar or --per-tensor\n");
    return 2;
  }
  if (!o->isa_given && !o->gpu && !isa_from_environment("bench", &o->isa)) return 2;
  if (!o->files.empty() && !o->sets.empty()) {
    std::fprintf(stderr, "zipccl bench: --sets selects built-in sets; it does not go with files\n");
    return 2;
  }
  for (const std::string& s : o->sets) {
    bool known = false;
    for (const DatasetInfo& d : builtin_datasets()) known = known || s == d.name;
    if (!known) {
      std::fprintf(stderr, "zipccl bench: no built-in set '%s' (see --list)\n", s.c_str());
      return 2;
    }
  }
  return -1;
}

// ---- --gpu: the CUDA codec ----

void print_gpu_header(const Options& o, const GpuCodec& gpu, size_t count) {
  std::printf("zipccl bench --gpu: %zu input%s; %s; best of %d; GB/s of uncompressed bytes, launch included\n",
              count, count == 1 ? "" : "s", gpu.device().c_str(), o.reps);
  const std::string sms = std::to_string(o.gpu_sms) + " SMs";
  std::printf("%-*s %-5s %8s %9s %9s %9s %9s %9s\n", o.name_width, "input", "type", "MiB", "ratio", "enc GB/s",
              "dec GB/s", ("enc " + sms).c_str(), ("dec " + sms).c_str());
}

// One row: the whole GPU, then the bounded grid. Throws BenchError on a mismatch.
void gpu_row(const Input& in, const Options& o, GpuCodec* gpu) {
  GpuCodec::Timing full, bounded;
  std::string err;
  if (!gpu->time(in.data, in.size, in.type, 0, o.reps, &full, &err) ||
      !gpu->time(in.data, in.size, in.type, o.gpu_sms, o.reps, &bounded, &err))
    throw BenchError(in.name + ": " + err);
  std::printf("%-*s %-5s %8.2f %9s %9.1f %9.1f %9.1f %9.1f\n", o.name_width, in.name.c_str(),
              codec::elem_type_name(in.type), static_cast<double>(in.size) / kMiB,
              fmt_ratio(ratio(in.size, full.frame_bytes)).c_str(), gbps(in.size, full.encode_s),
              gbps(in.size, full.decode_s), gbps(in.size, bounded.encode_s), gbps(in.size, bounded.decode_s));
  std::fflush(stdout);
}

// Owned bytes of an input when they are not a view of a file (generated sets, concatenations).
struct Owned {
  std::vector<uint8_t> bytes;
};

// Turns the tensors of a file into inputs; returns false (message printed) on a file we cannot take.
bool file_inputs(const std::string& path, const TensorFile& tf, const Options& o, std::vector<Input>* inputs,
                 std::vector<std::unique_ptr<Owned>>* owned) {
  if (tf.format == TensorFormat::kRaw) {
    if (!o.type_given) {
      std::fprintf(stderr, "zipccl bench: %s: a raw file needs -t bf16|fp16|fp32|auto\n", path.c_str());
      return false;
    }
    const TensorView& t = tf.tensors[0];
    inputs->push_back({t.name, "raw file", o.type, t.data, t.size});
    return true;
  }
  // The type each tensor is benchmarked as: -t wins, then the file's dtype.
  auto type_of = [&](const TensorView& t, ElemType* out) {
    if (o.type_given) {
      if (t.type != ElemType::kNone && t.type != o.type && o.type != ElemType::kAuto) {
        std::fprintf(stderr, "zipccl bench: %s: '%s' is %s in the file; measuring it as %s (-t)\n",
                     path.c_str(), t.name.c_str(), t.dtype.c_str(), codec::elem_type_name(o.type));
      }
      *out = o.type;
      return true;
    }
    *out = t.type;
    return t.type != ElemType::kNone;
  };
  if (tf.format == TensorFormat::kNpy) {
    const TensorView& t = tf.tensors[0];
    ElemType type;
    if (!type_of(t, &type)) {
      std::fprintf(stderr, "zipccl bench: %s: dtype '%s' is not bf16, fp16 or fp32; say which with -t\n",
                   path.c_str(), t.dtype.c_str());
      return false;
    }
    inputs->push_back({t.name, "npy " + t.dtype, type, t.data, t.size});
    return true;
  }
  // .safetensors: per tensor, or each element type's tensors concatenated in data order.
  const std::string base =
      path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  size_t skipped = 0;
  std::vector<std::pair<ElemType, std::vector<const TensorView*>>> groups;
  for (const TensorView& t : tf.tensors) {
    ElemType type;
    if (!type_of(t, &type)) {
      ++skipped;
      continue;
    }
    if (o.per_tensor) {
      if (t.size) inputs->push_back({base + ":" + t.name, "safetensors " + t.dtype, type, t.data, t.size});
      continue;
    }
    auto g = std::find_if(groups.begin(), groups.end(), [&](const auto& x) { return x.first == type; });
    if (g == groups.end()) groups.emplace_back(type, std::vector<const TensorView*>{}), g = groups.end() - 1;
    g->second.push_back(&t);
  }
  if (skipped)
    std::fprintf(stderr, "zipccl bench: %s: skipped %zu tensors that are not bf16/fp16/fp32\n", path.c_str(),
                 skipped);
  for (const auto& g : groups) {
    owned->emplace_back(new Owned);
    std::vector<uint8_t>& bytes = owned->back()->bytes;
    for (const TensorView* t : g.second) bytes.insert(bytes.end(), t->data, t->data + t->size);
    inputs->push_back({base + ":" + codec::elem_type_name(g.first),
                       std::to_string(g.second.size()) + " tensors concatenated", g.first, bytes.data(),
                       bytes.size()});
  }
  if (inputs->empty()) std::fprintf(stderr, "zipccl bench: %s: no tensors to measure\n", path.c_str());
  return true;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  Options o;
  if (int rc = parse_args(argc, argv, &o); rc >= 0) return rc;
  const int all_threads =
      o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  GpuCodec gpu;
  if (o.gpu) {
    std::string why;
    if (!gpu.open(&why)) {
      std::fprintf(stderr, "zipccl bench --gpu: needs a GPU: %s; nothing was measured\n", why.c_str());
      return kExitNoGpu;
    }
  }
  try {
    std::vector<Result> results;
    if (o.files.empty()) {
      std::vector<DatasetInfo> sets;
      for (const DatasetInfo& d : builtin_datasets()) {
        if (o.sets.empty() || std::find(o.sets.begin(), o.sets.end(), d.name) != o.sets.end())
          sets.push_back(d);
      }
      for (const DatasetInfo& d : sets)
        o.name_width = std::max(o.name_width, static_cast<int>(std::strlen(d.name)));
      if (o.gpu)
        print_gpu_header(o, gpu, sets.size());
      else if (!o.json)
        print_header(o, all_threads, sets.size());
      for (const DatasetInfo& d : sets) {
        std::vector<uint8_t> bytes;  // generated one at a time: 12 sets of 64 MiB need not sit in memory
        make_dataset(d.name, o.size, &bytes);
        Input in{d.name, d.what, o.type_given ? o.type : d.type, bytes.data(), bytes.size()};
        if (o.gpu) {
          gpu_row(in, o, &gpu);
          continue;
        }
        results.push_back(run_one(in, o, all_threads));
        results.back().in.data = nullptr;
        if (!o.json) print_row(o, results.back());
      }
    } else {
      std::vector<TensorFile> files;
      std::vector<Input> inputs;
      std::vector<std::unique_ptr<Owned>> owned;
      for (const std::string& path : o.files) {
        TensorFile tf;
        std::string err;
        if (!load_tensor_file(path, &tf, &err)) {
          std::fprintf(stderr, "zipccl bench: %s\n", err.c_str());
          return 1;
        }
        if (!file_inputs(path, tf, o, &inputs, &owned)) return tf.format == TensorFormat::kRaw ? 2 : 1;
        files.push_back(std::move(tf));
      }
      for (const Input& in : inputs) o.name_width = std::max(o.name_width, static_cast<int>(in.name.size()));
      if (o.gpu)
        print_gpu_header(o, gpu, inputs.size());
      else if (!o.json)
        print_header(o, all_threads, inputs.size());
      for (const Input& in : inputs) {
        if (o.gpu) {
          gpu_row(in, o, &gpu);
          continue;
        }
        results.push_back(run_one(in, o, all_threads));
        if (!o.json) print_row(o, results.back());
      }
    }
    if (o.gpu) {
      // rows printed as measured
    } else if (o.json) {
      print_json(o, all_threads, results);
    } else {
      print_block_note(results);
      print_baselines(o, results);
    }
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "zipccl bench: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace tools
}  // namespace zipccl
