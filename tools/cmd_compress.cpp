// `zipccl compress` and `zipccl decompress`: a file to a stream of frames and back.
//
// A stream is frames back to back, each holding at most 64 MiB of input, so files of any size go
// through in bounded memory; the decoder learns each frame's length from its header
// (read_frame_info). An empty file becomes one frame holding nothing, so every stream has a frame.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "commands.h"
#include "gpu_tool.h"
#include "isa_option.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace tools {
namespace {

constexpr size_t kFrameInput = size_t{64} << 20;
constexpr size_t kProbeBytes = size_t{64} << 10;  // first read of a frame: enough for any header
constexpr int kExitOk = 0;
constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;

struct Options {
  codec::ElemType type = codec::ElemType::kAuto;
  int threads = 1;
  int block_log2 = 0;
  bool verbose = false;
  bool gpu = false;  // the CUDA codec (same frames)
  codec::Isa isa = codec::Isa::kAuto;
  std::string in, out;
};

// Matches `--name VALUE`, `--name=VALUE` and, with a short form, `-x VALUE`. *bad on a missing value.
bool option_value(int argc, char** argv, int* i, const char* short_name, const char* long_name,
                  std::string* value, bool* bad) {
  const char* a = argv[*i];
  const size_t n = std::strlen(long_name);
  if (!std::strncmp(a, long_name, n) && a[n] == '=') {
    *value = a + n + 1;
    return true;
  }
  if (std::strcmp(a, long_name) != 0 && (!short_name || std::strcmp(a, short_name) != 0)) return false;
  if (*i + 1 >= argc) {
    *bad = true;
    return true;
  }
  *value = argv[++*i];
  return true;
}

bool parse_int(const std::string& s, int lo, int hi, int* out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end || errno || v < lo || v > hi) return false;
  *out = static_cast<int>(v);
  return true;
}

// Returns -1 when parsing succeeded, else the exit status (0 after --help).
int parse_args(const char* cmd, bool compress, int argc, char** argv, Options* o) {
  std::vector<std::string> pos;
  bool only_positional = false;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    std::string v;
    bool bad = false;
    if (only_positional || a[0] != '-' || !std::strcmp(a, "-")) {
      pos.push_back(a);
    } else if (!std::strcmp(a, "--")) {
      only_positional = true;
    } else if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      if (compress) {
        std::printf(
            "usage: zipccl compress [-t auto|bf16|fp16|fp32] [--threads N | --gpu] [--block-log2 N]\n"
            "                       [--isa SET] [-v] IN OUT\n"
            "  Compresses IN into a stream of zipccl frames (64 MiB of input each). '-' is stdin/stdout.\n"
            "  -t, --type     element type of IN (default auto: detected per frame)\n"
            "  --threads N    encoder threads per frame (default 1)\n"
            "  --block-log2 N log2 elements per block, 10..14 (default 14; with --gpu 13)\n"
            "  --gpu          encode on GPU 0 with the CUDA codec (the CPU's frames at the same block size;\n"
            "                 exit 3 without a GPU)\n"
            "%s"
            "  -v, --verbose  print sizes and ratio to stderr\n",
            kIsaUsage);
      } else {
        std::printf(
            "usage: zipccl decompress [--threads N | --gpu] [--isa SET] [-v] IN OUT\n"
            "  Restores a file written by `zipccl compress`. '-' is stdin/stdout.\n"
            "  --gpu          decode on GPU 0 with the CUDA codec (exit 3 without a GPU)\n"
            "%s",
            kIsaUsage);
      }
      return kExitOk;
    } else if (!std::strcmp(a, "-v") || !std::strcmp(a, "--verbose")) {
      o->verbose = true;
    } else if (!std::strcmp(a, "--gpu")) {
      o->gpu = true;
    } else if (option_value(argc, argv, &i, nullptr, "--threads", &v, &bad)) {
      if (bad || !parse_int(v, 1, 1024, &o->threads)) {
        std::fprintf(stderr, "zipccl %s: --threads needs a number from 1 to 1024\n", cmd);
        return kExitUsage;
      }
    } else if (compress && option_value(argc, argv, &i, "-t", "--type", &v, &bad)) {
      if (bad || !codec::parse_elem_type(v.c_str(), &o->type)) {
        std::fprintf(stderr, "zipccl %s: -t takes auto, bf16, fp16 or fp32\n", cmd);
        return kExitUsage;
      }
    } else if (option_value(argc, argv, &i, nullptr, "--isa", &v, &bad)) {
      if (bad) {
        std::fprintf(stderr, "zipccl %s: --isa needs a kernel set (auto, avx512, avx2, neon, scalar)\n", cmd);
        return kExitUsage;
      }
      if (!parse_isa_option(cmd, v, &o->isa)) return kExitUsage;
    } else if (compress && option_value(argc, argv, &i, nullptr, "--block-log2", &v, &bad)) {
      if (bad || !parse_int(v, 10, 14, &o->block_log2)) {  // FORMAT.md: blocks of 2^10..2^14 elements
        std::fprintf(stderr, "zipccl %s: --block-log2 needs a number from 10 to 14\n", cmd);
        return kExitUsage;
      }
    } else {
      std::fprintf(stderr, "zipccl %s: unknown option '%s' (see --help)\n", cmd, a);
      return kExitUsage;
    }
  }
  if (pos.size() != 2) {
    std::fprintf(stderr, "usage: zipccl %s [options] IN OUT   (see --help)\n", cmd);
    return kExitUsage;
  }
  if (o->gpu && o->threads != 1) {
    std::fprintf(stderr, "zipccl %s: --threads is for the CPU codec; it does not go with --gpu\n", cmd);
    return kExitUsage;
  }
  o->in = pos[0];
  o->out = pos[1];
  return -1;
}

// The two ends of a command: stdin/stdout for "-", files otherwise. A failed run removes the
// partial output file so that no half-written file is mistaken for a result.
class Files {
 public:
  explicit Files(const char* cmd) : cmd_(cmd) {}
  ~Files() {
    if (in_ && in_ != stdin) std::fclose(in_);
    if (out_ && out_ != stdout) {
      std::fclose(out_);
      if (!committed_) std::remove(out_name_.c_str());
    }
  }

  bool open(const std::string& in, const std::string& out) {
    in_name_ = in == "-" ? "<stdin>" : in;
    out_name_ = out;
    in_ = in == "-" ? stdin : std::fopen(in.c_str(), "rb");
    if (!in_) return error(in, std::strerror(errno));
    if (out != "-") {
      struct stat si, so;
      if (::fstat(fileno(in_), &si) == 0 && ::stat(out.c_str(), &so) == 0 && si.st_dev == so.st_dev &&
          si.st_ino == so.st_ino) {
        return error(out, "is the input file; refusing to overwrite it");
      }
    }
    out_ = out == "-" ? stdout : std::fopen(out.c_str(), "wb");
    if (!out_) return error(out, std::strerror(errno));
    return true;
  }

  // Reads up to n bytes; fewer only at end of input. False on a read error.
  bool read(void* p, size_t n, size_t* got) {
    *got = std::fread(p, 1, n, in_);
    if (std::ferror(in_)) return error(in_name_, "read error");
    return true;
  }
  bool write(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, out_) != n)
      return error(out_name_ == "-" ? "<stdout>" : out_name_, std::strerror(errno));
    return true;
  }
  bool finish() {
    if (std::fflush(out_) != 0) return error(out_name_, std::strerror(errno));
    if (out_ != stdout) {
      FILE* f = out_;
      out_ = nullptr;
      if (std::fclose(f) != 0) {
        std::remove(out_name_.c_str());
        return error(out_name_, std::strerror(errno));
      }
    }
    committed_ = true;
    return true;
  }
  bool input_is_regular() const {
    struct stat st;
    return ::fstat(fileno(in_), &st) == 0 && S_ISREG(st.st_mode);
  }
  size_t input_size() const {
    struct stat st;
    return ::fstat(fileno(in_), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
  }
  const std::string& in_name() const { return in_name_; }

  bool error(const std::string& what, const std::string& why) {
    std::fprintf(stderr, "zipccl %s: %s: %s\n", cmd_, what.c_str(), why.c_str());
    return false;
  }

 private:
  const char* cmd_;
  std::string in_name_, out_name_;
  FILE* in_ = nullptr;
  FILE* out_ = nullptr;
  bool committed_ = false;
};

// With --gpu: opens the GPU before any output file exists. Returns -1 to go on, else the exit status.
int open_gpu(const char* cmd, const Options& o, GpuCodec* gpu) {
  if (!o.gpu) return -1;
  std::string why;
  if (gpu->open(&why)) {
    if (o.verbose) std::fprintf(stderr, "zipccl %s: GPU %s\n", cmd, gpu->device().c_str());
    return -1;
  }
  std::fprintf(stderr, "zipccl %s --gpu: needs a GPU: %s; nothing was written\n", cmd, why.c_str());
  return kExitNoGpu;
}

void report(const Options& o, uint64_t in_bytes, uint64_t out_bytes, uint64_t frames, bool compress) {
  if (!o.verbose) return;
  const uint64_t raw = compress ? in_bytes : out_bytes;
  const uint64_t packed = compress ? out_bytes : in_bytes;
  std::fprintf(stderr, "%s: %llu bytes -> %llu bytes, %llu frame%s, ratio %.4fx, %s kernels\n", o.in.c_str(),
               static_cast<unsigned long long>(in_bytes), static_cast<unsigned long long>(out_bytes),
               static_cast<unsigned long long>(frames), frames == 1 ? "" : "s",
               packed ? static_cast<double>(raw) / static_cast<double>(packed) : 1.0,
               o.gpu ? "CUDA" : codec::isa_name(codec::effective_isa(o.isa)));
}

}  // namespace

int cmd_compress(int argc, char** argv) {
  Options o;
  if (int rc = parse_args("compress", true, argc, argv, &o); rc >= 0) return rc;
  GpuCodec gpu;
  if (int rc = open_gpu("compress", o, &gpu); rc >= 0) return rc;
  Files files("compress");
  if (!files.open(o.in, o.out)) return kExitFailure;

  // Size the buffers for a small regular file; a pipe (or a file that grows) gets full frames.
  const bool regular = files.input_is_regular();
  const size_t hint = files.input_size();
  size_t in_cap = regular && hint < kFrameInput ? hint + 1 : kFrameInput;
  std::unique_ptr<uint8_t[]> in(new uint8_t[in_cap]);
  // The CPU codec's output buffer; with --gpu the frame comes back in gpu_frame instead.
  size_t out_cap = o.gpu ? 0 : codec::max_encoded_size(in_cap);
  std::unique_ptr<uint8_t[]> out(o.gpu ? nullptr : new uint8_t[out_cap]);

  codec::EncodeOptions opt;
  opt.type = o.type;
  opt.threads = o.threads;
  opt.isa = o.isa;
  opt.block_log2 = o.block_log2;
  uint64_t total_in = 0, total_out = 0, frames = 0;
  std::vector<uint8_t> gpu_frame;
  for (;;) {
    size_t n = 0;
    if (!files.read(in.get(), in_cap, &n)) return kExitFailure;
    if (n == in_cap && in_cap < kFrameInput) {  // the file grew past its size hint
      std::unique_ptr<uint8_t[]> bigger(new uint8_t[kFrameInput]);
      std::memcpy(bigger.get(), in.get(), n);
      size_t more = 0;
      if (!files.read(bigger.get() + n, kFrameInput - n, &more)) return kExitFailure;
      n += more;
      in = std::move(bigger);
      in_cap = kFrameInput;
      if (!o.gpu) {
        out_cap = codec::max_encoded_size(in_cap);
        out.reset(new uint8_t[out_cap]);
      }
    }
    if (n == 0 && frames > 0) break;
    size_t encoded = 0;
    const uint8_t* frame = nullptr;
    if (o.gpu) {
      std::string err;
      if (!gpu.encode(in.get(), n, o.type, o.block_log2, &gpu_frame, &err)) {
        files.error(files.in_name(), "encoding frame " + std::to_string(frames) + " on the GPU failed: " + err);
        return kExitFailure;
      }
      frame = gpu_frame.data();
      encoded = gpu_frame.size();
    } else {
      frame = out.get();
      codec::Status st = codec::encode(in.get(), n, out.get(), out_cap, &encoded, opt);
      if (st != codec::Status::kOk) {
        files.error(files.in_name(),
                    "encoding frame " + std::to_string(frames) + " failed: " + codec::status_string(st));
        return kExitFailure;
      }
    }
    if (!files.write(frame, encoded)) return kExitFailure;
    total_in += n;
    total_out += encoded;
    ++frames;
    if (n < in_cap) break;  // fread comes back short only at the end of the input
  }
  if (!files.finish()) return kExitFailure;
  report(o, total_in, total_out, frames, true);
  return kExitOk;
}

int cmd_decompress(int argc, char** argv) {
  Options o;
  if (int rc = parse_args("decompress", false, argc, argv, &o); rc >= 0) return rc;
  GpuCodec gpu;
  if (int rc = open_gpu("decompress", o, &gpu); rc >= 0) return rc;
  Files files("decompress");
  if (!files.open(o.in, o.out)) return kExitFailure;

  std::vector<uint8_t> buf;  // the current frame (and possibly the start of the next)
  size_t have = 0;
  bool eof = false;
  // Reads until `have` reaches target or the input ends, growing buf at most 64 MiB at a time so a
  // corrupt length field cannot make us allocate what the input does not hold.
  auto fill_to = [&](size_t target) {
    while (have < target && !eof) {
      const size_t step = std::min(target - have, kFrameInput);
      if (buf.size() < have + step) buf.resize(have + step);
      size_t got = 0;
      if (!files.read(buf.data() + have, step, &got)) return false;
      have += got;
      if (got < step) eof = true;
    }
    return true;
  };

  std::unique_ptr<uint8_t[]> out;
  size_t out_cap = 0;
  codec::DecodeOptions dopt;
  dopt.threads = o.threads;
  dopt.isa = o.isa;
  uint64_t offset = 0, total_out = 0, frames = 0;
  auto frame_error = [&](const std::string& why) {
    files.error(files.in_name(),
                "frame " + std::to_string(frames) + " at byte " + std::to_string(offset) + ": " + why);
    return kExitFailure;
  };

  for (;;) {
    if (!fill_to(kProbeBytes)) return kExitFailure;
    if (have == 0) {
      if (frames == 0) {
        files.error(files.in_name(), "empty input is not a zipccl stream");
        return kExitFailure;
      }
      break;
    }
    codec::FrameInfo info{};
    codec::Status st;
    for (;;) {
      st = codec::read_frame_info(buf.data(), have, &info);
      if (st != codec::Status::kTruncated || eof) break;
      if (!fill_to(have * 2)) return kExitFailure;
    }
    if (st == codec::Status::kTruncated) return frame_error("the input ends inside the frame (truncated)");
    if (st != codec::Status::kOk) return frame_error(codec::status_string(st));
    if (info.frame_size == 0) return frame_error("frame header gives a zero length");
    if (!fill_to(info.frame_size)) return kExitFailure;
    if (have < info.frame_size) return frame_error("the input ends inside the frame (truncated)");

    if (info.original_size > out_cap || !out) {
      out_cap = static_cast<size_t>(std::max<uint64_t>(info.original_size, 1));
      out.reset(new (std::nothrow) uint8_t[out_cap]);
      if (!out) return frame_error("cannot allocate " + std::to_string(info.original_size) + " bytes");
    }
    size_t decoded = 0;
    if (o.gpu) {
      std::string err;
      if (!gpu.decode(buf.data(), static_cast<size_t>(info.frame_size), out.get(), out_cap, &decoded, &err))
        return frame_error("GPU decode: " + err);
    } else {
      st = codec::decode(buf.data(), info.frame_size, out.get(), out_cap, &decoded, dopt);
      if (st != codec::Status::kOk) return frame_error(codec::status_string(st));
    }
    if (decoded != info.original_size) return frame_error("decoded size disagrees with the header");
    if (!files.write(out.get(), decoded)) return kExitFailure;

    const size_t frame_size = static_cast<size_t>(info.frame_size);
    std::memmove(buf.data(), buf.data() + frame_size, have - frame_size);
    have -= frame_size;
    offset += frame_size;
    total_out += decoded;
    ++frames;
  }
  if (!files.finish()) return kExitFailure;
  report(o, offset, total_out, frames, false);
  return kExitOk;
}

}  // namespace tools
}  // namespace zipccl
