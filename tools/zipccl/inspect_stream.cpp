// `zipccl inspect` of a stream written by `zipccl compress` (FORMAT.md section 8): the frames one by
// one, read and decoded through reused buffers, so a stream of any length is listed in bounded memory.
#include <cinttypes>
#include <cstdio>
#include <string>

#include "frame_stream.h"
#include "inspect.h"
#include "stream_io.h"

namespace zipccl {
namespace tools {
namespace {

const char* kind_name(codec::FrameKind k) {
  switch (k) {
    case codec::FrameKind::kRaw:
      return "raw";
    case codec::FrameKind::kConst:
      return "const";
    case codec::FrameKind::kCoded:
      return "coded";
  }
  return "?";
}

double ratio(uint64_t raw, uint64_t packed) {
  return packed ? static_cast<double>(raw) / static_cast<double>(packed) : 1.0;
}

}  // namespace

bool is_frame_stream(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  uint8_t head[4];
  const size_t n = std::fread(head, 1, sizeof head, f);
  std::fclose(f);
  return starts_with_frame(head, n);
}

bool inspect_stream(const std::string& path, int threads, FILE* out, std::string* error) {
  InputFile in;
  if (!in.open(path, error)) {
    *error = path + ": " + *error;
    return false;
  }
  std::fprintf(out, "zipccl inspect %s: a stream of zipccl frames (each decoded to check it)\n\n", path.c_str());
  std::fprintf(out, "%7s %14s  %-5s  %-4s  %6s %12s %12s %9s\n", "frame", "offset", "kind", "type", "block",
               "bytes", "frame bytes", "ratio");
  FrameReader reader(&in);
  InputBytes frame;
  AlignedBuffer back;
  codec::DecodeOptions dopt;
  dopt.threads = threads;
  uint64_t raw = 0;
  for (;;) {
    codec::FrameInfo info{};
    if (!reader.next(&frame, &info, error)) return false;
    if (info.frame_size == 0) break;
    size_t got = 0;
    codec::Status st = codec::Status::kOk;
    if (!back.reserve(static_cast<size_t>(info.original_size)) ||
        (st = codec::decode(frame.data(), static_cast<size_t>(info.frame_size), back.data(), back.capacity(),
                            &got, dopt)) != codec::Status::kOk ||
        frame.lost()) {
      *error = "frame " + std::to_string(reader.frames() - 1) + " at byte " +
               std::to_string(reader.offset()) + ": " + (frame.lost() ? kShrank : codec::status_string(st));
      return false;
    }
    std::fprintf(out, "%7" PRIu64 " %14" PRIu64 "  %-5s  %-4s  %6u %12" PRIu64 " %12" PRIu64 " %8.3fx\n",
                 reader.frames() - 1, reader.offset(), kind_name(info.kind), codec::elem_type_name(info.type),
                 info.block_elems, info.original_size, info.frame_size, ratio(info.original_size, info.frame_size));
    raw += info.original_size;
  }
  std::fprintf(out, "\n%" PRIu64 " frame%s: %" PRIu64 " bytes (%s) in %" PRIu64 " bytes (%.3fx); every frame decodes\n",
               reader.frames(), reader.frames() == 1 ? "" : "s", raw, human_bytes(static_cast<double>(raw)).c_str(),
               reader.bytes_read(), ratio(raw, reader.bytes_read()));
  return true;
}

}  // namespace tools
}  // namespace zipccl
