// `zipccl compress` and `zipccl decompress`: a file to a stream of frames and back, in bounded memory.
//
// A stream is frames back to back (gpu_codec/FORMAT.md section 8), each holding at most one chunk of
// input (8 MiB unless --frame-mib says otherwise), so files of any size go through three reused
// slots: one is read while the previous is coded and the one before written (frame_stream.h). The
// decoder learns each frame's length from its header, so it reads streams of any frame sizes,
// including the files of earlier versions (64 MiB frames). The command line follows zstd's: `-` is
// stdin/stdout, -o names the output, -f overwrites, -k keeps the input (the default), --rm removes it.
//
// The way through, for `compress`: main() (zipccl.cpp) -> cmd_compress below -> parse_args ->
// open_gpu (--gpu only) -> open_ends (InputFile, OutputFile: stream_io.h) -> run_stages, whose
// Pipeline (frame_stream.h) runs three stages per frame: `read` (InputFile::take maps the next
// chunk), `code` (codec::encode, gpu_codec/src/frame.cpp: header, block index, blocks) and
// `write` (OutputFile::write_all) -> finish (OutputFile::commit keeps the file; on any failure the
// OutputFile removes what it wrote). `decompress` is the same way with FrameReader as its reader.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commands.h"
#include "frame_stream.h"
#include "gpu_tool.h"
#include "isa_option.h"
#include "stream_io.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace tools {
namespace {

constexpr const char* kSuffix = ".zcc";
// What the parsing and opening steps return when the command goes on; otherwise an exit status.
constexpr int kGoOn = -1;

struct Options {
  codec::ElemType type = codec::ElemType::kAuto;
  int threads = 1;
  int block_log2 = 0;
  int frame_mib = static_cast<int>(kDefaultFrameInput >> 20);
  bool verbose = false;
  bool gpu = false;  // the CUDA codec (same frames)
  bool force = false;
  bool remove_input = false;
  codec::Isa isa = codec::Isa::kAuto;
  std::string in_path, out_path;  // '-': stdin / stdout
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

constexpr const char* kEndsUsage =
    "  -o FILE        write to FILE ('-': stdout); or give it as the second argument\n"
    "  -c, --stdout   write to stdout\n"
    "  -f, --force    overwrite an existing output file; read or write a terminal\n"
    "  -k, --keep     keep IN (the default);  --rm: remove IN after success\n";

void usage(bool compress) {
  if (compress) {
    std::printf(
        "usage: zipccl compress [-t auto|bf16|fp16|fp32] [--threads N | --gpu] [--block-log2 N]\n"
        "                       [--frame-mib N] [--isa SET] [-o OUT] [-f] [-k|--rm] [-v] IN [OUT]\n"
        "  Compresses IN into a stream of zipccl frames, in bounded memory whatever IN's size.\n"
        "  '-' is stdin/stdout; without OUT: IN%s (stdout for stdin); a terminal only with -f.\n"
        "  -t, --type     element type of IN (default auto: detected per frame)\n"
        "  --threads N    encoder threads per frame (default 1)\n"
        "  --block-log2 N log2 elements per block, 10..14 (default 14; with --gpu 13)\n"
        "  --frame-mib N  input MiB per frame, 1..4095 (default %d)\n"
        "  --gpu          encode on GPU 0 with the CUDA codec (the CPU's frames at the same block size;\n"
        "                 exit 3 without a GPU)\n"
        "%s%s"
        "  -v, --verbose  print sizes and ratio to stderr\n"
        "Exit status: 0 done, 1 failed (nothing left behind), 2 bad usage, 3 --gpu without a GPU.\n",
        kSuffix, static_cast<int>(kDefaultFrameInput >> 20), kEndsUsage, kIsaUsage);
  } else {
    std::printf(
        "usage: zipccl decompress [--threads N | --gpu] [--isa SET] [-o OUT] [-f] [-k|--rm] [-v] IN [OUT]\n"
        "  Restores a stream written by `zipccl compress` (any frame sizes; concatenated streams too).\n"
        "  '-' is stdin/stdout; without OUT: IN less its %s suffix (stdout for stdin).\n"
        "  --threads N    decoder threads per frame (default 1)\n"
        "  --gpu          decode on GPU 0 with the CUDA codec (exit 3 without a GPU)\n"
        "%s%s"
        "  -v, --verbose  print sizes and ratio to stderr\n"
        "Exit status: 0 done, 1 failed (nothing left behind), 2 bad usage, 3 --gpu without a GPU.\n",
        kSuffix, kEndsUsage, kIsaUsage);
  }
}

// Options with a value. 1: matched; 0: not this kind of option; kExitUsage: bad value.
int parse_value_option(const char* cmd, bool compress, int argc, char** argv, int* i, Options* o) {
  std::string v;
  bool bad = false;
  if (option_value(argc, argv, i, "-o", "--output", &v, &bad)) {
    if (bad || v.empty() || !o->out_path.empty()) {
      std::fprintf(stderr, "zipccl %s: -o needs one file name\n", cmd);
      return kExitUsage;
    }
    o->out_path = v;
  } else if (option_value(argc, argv, i, nullptr, "--threads", &v, &bad)) {
    if (bad || !parse_int(v, 1, 1024, &o->threads)) {
      std::fprintf(stderr, "zipccl %s: --threads needs a number from 1 to 1024\n", cmd);
      return kExitUsage;
    }
  } else if (compress && option_value(argc, argv, i, "-t", "--type", &v, &bad)) {
    if (bad || !codec::parse_elem_type(v.c_str(), &o->type)) {
      std::fprintf(stderr, "zipccl %s: -t takes auto, bf16, fp16 or fp32\n", cmd);
      return kExitUsage;
    }
  } else if (option_value(argc, argv, i, nullptr, "--isa", &v, &bad)) {
    if (bad) {
      std::fprintf(stderr, "zipccl %s: --isa needs a kernel set (auto, avx512, avx2, neon, scalar)\n", cmd);
      return kExitUsage;
    }
    if (!parse_isa_option(cmd, v, &o->isa)) return kExitUsage;
  } else if (compress && option_value(argc, argv, i, nullptr, "--block-log2", &v, &bad)) {
    if (bad || !parse_int(v, 10, 14, &o->block_log2)) {  // FORMAT.md: blocks of 2^10..2^14 elements
      std::fprintf(stderr, "zipccl %s: --block-log2 needs a number from 10 to 14\n", cmd);
      return kExitUsage;
    }
  } else if (compress && option_value(argc, argv, i, nullptr, "--frame-mib", &v, &bad)) {
    if (bad || !parse_int(v, 1, 4095, &o->frame_mib)) {  // a frame carries < 4 GiB
      std::fprintf(stderr, "zipccl %s: --frame-mib needs a number from 1 to 4095\n", cmd);
      return kExitUsage;
    }
  } else {
    return 0;
  }
  return 1;
}

// The output's name when none was given: zstd's rule, with the .zcc suffix.
bool default_output(const char* cmd, bool compress, Options* o) {
  if (o->in_path == "-") {
    o->out_path = "-";
    return true;
  }
  const size_t n = std::strlen(kSuffix);
  if (compress) {
    o->out_path = o->in_path + kSuffix;
    return true;
  }
  if (o->in_path.size() > n && o->in_path.compare(o->in_path.size() - n, n, kSuffix) == 0) {
    o->out_path = o->in_path.substr(0, o->in_path.size() - n);
    return true;
  }
  std::fprintf(stderr, "zipccl %s: %s does not end in %s: name the output (-o FILE or a second argument)\n",
               cmd, o->in_path.c_str(), kSuffix);
  return false;
}

// Checks that the options go together and fills in the output name.
int check_args(const char* cmd, bool compress, const std::vector<std::string>& pos, Options* o) {
  if (pos.empty() || pos.size() > 2 || (pos.size() == 2 && !o->out_path.empty())) {
    std::fprintf(stderr, "usage: zipccl %s [options] IN [OUT]   (see --help)\n", cmd);
    return kExitUsage;
  }
  if (o->gpu && o->threads != 1) {
    std::fprintf(stderr, "zipccl %s: --threads is for the CPU codec; it does not go with --gpu\n", cmd);
    return kExitUsage;
  }
  o->in_path = pos[0];
  if (pos.size() == 2) o->out_path = pos[1];
  if (o->out_path.empty() && !default_output(cmd, compress, o)) return kExitUsage;
  if (o->remove_input && (o->in_path == "-" || o->out_path == "-")) {
    std::fprintf(stderr, "zipccl %s: --rm needs a named input and a named output file\n", cmd);
    return kExitUsage;
  }
  return kGoOn;
}

// kGoOn when parsing succeeded, else the exit status (kExitOk after --help).
int parse_args(const char* cmd, bool compress, int argc, char** argv, Options* o) {
  std::vector<std::string> pos;
  bool only_positional = false;
  if (!isa_from_environment(cmd, &o->isa)) return kExitUsage;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (only_positional || a[0] != '-' || !std::strcmp(a, "-")) {
      pos.push_back(a);
    } else if (!std::strcmp(a, "--")) {
      only_positional = true;
    } else if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      usage(compress);
      return kExitOk;
    } else if (!std::strcmp(a, "-v") || !std::strcmp(a, "--verbose")) {
      o->verbose = true;
    } else if (!std::strcmp(a, "--gpu")) {
      o->gpu = true;
    } else if (!std::strcmp(a, "-f") || !std::strcmp(a, "--force")) {
      o->force = true;
    } else if (!std::strcmp(a, "-k") || !std::strcmp(a, "--keep")) {
      o->remove_input = false;
    } else if (!std::strcmp(a, "--rm")) {
      o->remove_input = true;
    } else if (!std::strcmp(a, "-c") || !std::strcmp(a, "--stdout")) {
      if (!o->out_path.empty() && o->out_path != "-") {
        std::fprintf(stderr, "zipccl %s: -c and -o name two outputs\n", cmd);
        return kExitUsage;
      }
      o->out_path = "-";
    } else if (int rc = parse_value_option(cmd, compress, argc, argv, &i, o); rc != 1) {
      if (rc == 0) std::fprintf(stderr, "zipccl %s: unknown option '%s' (see --help)\n", cmd, a);
      return kExitUsage;
    }
  }
  return check_args(cmd, compress, pos, o);
}

// With --gpu: opens the GPU before any output file exists. kGoOn, else the exit status.
int open_gpu(const char* cmd, const Options& o, GpuCodec* gpu) {
  if (!o.gpu) return kGoOn;
  std::string why;
  if (gpu->open(&why)) {
    if (o.verbose) std::fprintf(stderr, "zipccl %s: GPU %s\n", cmd, gpu->device().c_str());
    return kGoOn;
  }
  std::fprintf(stderr, "zipccl %s --gpu: needs a GPU: %s; nothing was written\n", cmd, why.c_str());
  return kExitNoGpu;
}

// Opens both ends; compressed data is never read from or written to a terminal unless forced.
bool open_ends(const char* cmd, bool compress, const Options& o, InputFile* in, OutputFile* out) {
  std::string why;
  if (!in->open(o.in_path, &why)) {
    std::fprintf(stderr, "zipccl %s: %s: %s\n", cmd, o.in_path.c_str(), why.c_str());
    return false;
  }
  if (in->is_stdin() && !o.force && ::isatty(STDIN_FILENO)) {
    std::fprintf(stderr, "zipccl %s: stdin is a terminal; give a file or a pipe (-f reads it anyway)\n", cmd);
    return false;
  }
  if (compress && o.out_path == "-" && !o.force && ::isatty(STDOUT_FILENO)) {
    std::fprintf(stderr,
                 "zipccl %s: refusing to write compressed data to a terminal; use -o FILE or a redirect "
                 "(-f writes it anyway)\n",
                 cmd);
    return false;
  }
  if (!out->open(o.out_path, *in, o.force, &why)) {
    std::fprintf(stderr, "zipccl %s: %s: %s\n", cmd, o.out_path.c_str(), why.c_str());
    return false;
  }
  return true;
}

// Commits the output and, with --rm, removes the input. The exit status.
int finish(const char* cmd, const Options& o, OutputFile* out) {
  std::string why;
  if (!out->commit(&why)) {
    std::fprintf(stderr, "zipccl %s: %s: %s\n", cmd, out->display_name().c_str(), why.c_str());
    return kExitFailure;
  }
  if (o.remove_input && ::unlink(o.in_path.c_str()) != 0) {
    std::fprintf(stderr, "zipccl %s: %s was written, but %s could not be removed: %s\n", cmd,
                 o.out_path.c_str(), o.in_path.c_str(), std::strerror(errno));
    return kExitFailure;
  }
  return kExitOk;
}

void report(const Options& o, uint64_t in_bytes, uint64_t out_bytes, uint64_t frames, bool compress) {
  if (!o.verbose) return;
  const uint64_t raw = compress ? in_bytes : out_bytes;
  const uint64_t packed = compress ? out_bytes : in_bytes;
  std::fprintf(stderr, "%s: %llu bytes -> %llu bytes, %llu frame%s, ratio %.4fx, %s kernels\n",
               o.in_path.c_str(), static_cast<unsigned long long>(in_bytes),
               static_cast<unsigned long long>(out_bytes), static_cast<unsigned long long>(frames),
               frames == 1 ? "" : "s", packed ? static_cast<double>(raw) / static_cast<double>(packed) : 1.0,
               o.gpu ? "CUDA" : codec::isa_name(codec::effective_isa(o.isa)));
}

// The writer stage of both commands; counts what it wrote.
Pipeline::Stage write_stage(OutputFile* out, uint64_t* in_bytes, uint64_t* out_bytes, uint64_t* frames) {
  return [=](Slot& s, std::string* why) {
    if (s.empty) return true;
    if (!out->write_all(s.result, s.result_len, why)) {
      *why = out->display_name() + ": " + *why;
      return false;
    }
    *in_bytes += s.in_len;
    *out_bytes += s.result_len;
    ++*frames;
    return true;
  };
}

// Runs the read/code/write pipeline of either command to its end: the exit status, the output
// finished (or removed on failure) and, with -v, the report.
int run_stages(const char* cmd, bool compress, const Options& o, InputFile* in, OutputFile* out,
               const Pipeline::Stage& read, const Pipeline::Stage& code) {
  uint64_t total_in = 0, total_out = 0, frames = 0;
  Pipeline pipeline;
  in->stop_when_readable(pipeline.failure_fd());
  std::string why;
  if (!pipeline.run(read, code, write_stage(out, &total_in, &total_out, &frames), &why)) {
    std::fprintf(stderr, "zipccl %s: %s\n", cmd, why.c_str());
    return kExitFailure;
  }
  if (int rc = finish(cmd, o, out); rc != kExitOk) return rc;
  report(o, total_in, total_out, frames, compress);
  return kExitOk;
}

}  // namespace

int cmd_compress(int argc, char** argv) {
  Options o;
  if (int rc = parse_args("compress", true, argc, argv, &o); rc != kGoOn) return rc;
  GpuCodec gpu;
  if (int rc = open_gpu("compress", o, &gpu); rc != kGoOn) return rc;
  InputFile in;
  OutputFile out;
  if (!open_ends("compress", true, o, &in, &out)) return kExitFailure;

  const size_t chunk = size_t(o.frame_mib) << 20;
  codec::EncodeOptions opt;
  opt.type = o.type;
  opt.threads = o.threads;
  opt.isa = o.isa;
  opt.block_log2 = o.block_log2;
  auto read = [&](Slot& s, std::string* why) {
    if (!in.take(chunk, &s.in, why) || s.in.lost()) {
      *why = in.display_name() + ": " +
             (s.in.lost() ? "input bytes from " + std::to_string(s.index * chunk) + " on: " + kShrank : *why);
      return false;
    }
    s.in_len = s.in.size();
    s.last = s.in_len < chunk;               // take comes back short only at the end
    s.empty = s.in_len == 0 && s.index > 0;  // an empty input still gets its one (empty) frame
    return true;
  };
  auto code = [&](Slot& s, std::string* why) {
    if (s.empty) return true;
    std::string err = "out of memory";
    codec::Status st = codec::Status::kOk;
    bool ok;
    if (o.gpu) {
      ok = gpu.encode(s.in.data(), s.in_len, o.type, o.block_log2, &s.gpu_frame, &err);
      s.result = s.gpu_frame.data();
      s.result_len = s.gpu_frame.size();
    } else {
      ok = s.buffer->reserve(codec::max_encoded_size(chunk)) &&
           (st = codec::encode(s.in.data(), s.in_len, s.buffer->data(), s.buffer->capacity(), &s.result_len,
                               opt)) == codec::Status::kOk;
      if (st != codec::Status::kOk) err = codec::status_string(st);
      s.result = s.buffer->data();
    }
    if (ok && s.in.lost()) {
      ok = false;
      err = kShrank;
    }
    if (!ok)
      *why = in.display_name() + ": encoding frame " + std::to_string(s.index) +
             (o.gpu ? " on the GPU" : "") + " failed: " + err;
    return ok;
  };
  return run_stages("compress", true, o, &in, &out, read, code);
}

int cmd_decompress(int argc, char** argv) {
  Options o;
  if (int rc = parse_args("decompress", false, argc, argv, &o); rc != kGoOn) return rc;
  GpuCodec gpu;
  if (int rc = open_gpu("decompress", o, &gpu); rc != kGoOn) return rc;
  InputFile in;
  OutputFile out;
  if (!open_ends("decompress", false, o, &in, &out)) return kExitFailure;

  FrameReader reader(&in);
  codec::DecodeOptions dopt;
  dopt.threads = o.threads;
  dopt.isa = o.isa;
  // The two output buffers take turns with the input's pages in the caches, so the decoder's stores
  // would mostly fetch lines only to evict them: streaming stores decoded 8 MiB frames 15% faster
  // into /dev/null and no slower into a file, whose write() then copies from memory.
  dopt.stream_out = true;
  auto read = [&](Slot& s, std::string* why) {
    codec::FrameInfo info{};
    if (!reader.next(&s.in, &info, why)) {
      *why = in.display_name() + ": " + *why;
      return false;
    }
    s.offset = reader.offset();
    s.in_len = static_cast<size_t>(info.frame_size);
    s.expected = static_cast<size_t>(info.original_size);
    s.last = s.empty = info.frame_size == 0;
    return true;
  };
  auto code = [&](Slot& s, std::string* why) {
    if (s.empty) return true;
    std::string err = "cannot allocate " + std::to_string(s.expected) + " bytes for its output";
    bool ok = s.buffer->reserve(s.expected);
    if (ok && o.gpu) {
      ok = gpu.decode(s.in.data(), s.in_len, s.buffer->data(), s.buffer->capacity(), &s.result_len, &err);
      if (!ok) err = "GPU decode: " + err;
    } else if (ok) {
      const codec::Status st =
          codec::decode(s.in.data(), s.in_len, s.buffer->data(), s.buffer->capacity(), &s.result_len, dopt);
      ok = st == codec::Status::kOk;
      err = codec::status_string(st);
    }
    if (s.in.lost()) {  // first: what the decoder made of the zeros is beside the point
      ok = false;
      err = kShrank;
    } else if (ok && s.result_len != s.expected) {
      ok = false;
      err = "decoded size disagrees with the header";
    }
    s.result = s.buffer->data();
    if (!ok)
      *why = in.display_name() + ": frame " + std::to_string(s.index) + " at byte " +
             std::to_string(s.offset) + ": " + err;
    return ok;
  };
  return run_stages("decompress", false, o, &in, &out, read, code);
}

}  // namespace tools
}  // namespace zipccl
