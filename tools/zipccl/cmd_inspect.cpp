// `zipccl inspect FILE [-t TYPE] [--svg OUT]`: per tensor of a checkpoint or tensor dump, the element
// type, exponent histogram, entropy, predicted and actual compressed size; then what zipccl would save
// on the wire. See tools/zipccl/inspect.h (the measurements) and tools/zipccl/svg.h (the picture).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "commands.h"
#include "inspect.h"
#include "svg.h"

namespace zipccl {
namespace tools {
namespace {

void usage(FILE* f) {
  std::fprintf(
      f,
      "usage: zipccl inspect FILE [-t bf16|fp16|fp32] [--svg OUT] [--threads N]\n\n"
      "FILE is a stream written by `zipccl compress` (its frames are listed and checked), or\n"
      "a .safetensors or .npy file, or raw little-endian elements (give their type with -t;\n"
      "without it the type is detected from the bytes and marked '?'). For every tensor: element\n"
      "type, exponent histogram, order-0 entropy of the codec's byte planes, the size that entropy\n"
      "predicts, the size of zipccl's frames (each decoded again and compared), and the ratios;\n"
      "then what zipccl would save on the wire.\n\n"
      "  -t TYPE       element type of raw files and of tensors whose dtype is not a float type\n"
      "  --svg OUT     also draw the exponent histograms and ratios as an SVG picture\n"
      "  --threads N   codec threads (default: all cores)\n");
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  std::string file, svg_out;
  codec::ElemType type = codec::ElemType::kAuto;
  unsigned hw = std::thread::hardware_concurrency();
  int threads = hw ? static_cast<int>(hw) : 1;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const bool has_value = i + 1 < argc;
    if (!std::strcmp(a, "-h") || !std::strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!std::strcmp(a, "-t") && has_value) {
      if (!codec::parse_elem_type(argv[++i], &type)) {
        std::fprintf(stderr, "zipccl inspect: -t takes bf16, fp16, fp32 or auto, not '%s'\n", argv[i]);
        return 2;
      }
    } else if (!std::strcmp(a, "--svg") && has_value) {
      svg_out = argv[++i];
    } else if (!std::strcmp(a, "--threads") && has_value) {
      threads = std::atoi(argv[++i]);
      if (threads < 1 || threads > 1024) {
        std::fprintf(stderr, "zipccl inspect: --threads takes 1..1024\n");
        return 2;
      }
    } else if (a[0] == '-' && a[1] != 0) {
      std::fprintf(stderr, "zipccl inspect: unknown option or missing value: '%s'\n\n", a);
      usage(stderr);
      return 2;
    } else if (file.empty()) {
      file = a;
    } else {
      std::fprintf(stderr, "zipccl inspect: one FILE only ('%s' and '%s')\n", file.c_str(), a);
      return 2;
    }
  }
  if (file.empty()) {
    usage(stderr);
    return 2;
  }

  std::string error;
  if (is_frame_stream(file)) {
    if (!svg_out.empty()) {
      std::fprintf(stderr, "zipccl inspect: %s is a stream of zipccl frames; --svg draws tensors\n", file.c_str());
      return 2;
    }
    if (inspect_stream(file, threads, stdout, &error)) return 0;
    std::fprintf(stderr, "zipccl inspect: %s\n", error.c_str());
    return 1;
  }
  InspectReport report;
  if (!inspect_file(file, type, threads, &report, &error)) {
    std::fprintf(stderr, "zipccl inspect: %s\n", error.c_str());
    return 1;
  }
  std::fputs(report_table(report).c_str(), stdout);
  if (!svg_out.empty()) {
    std::ofstream out(svg_out, std::ios::binary | std::ios::trunc);
    out << inspect_svg(report);
    out.close();
    if (!out.good()) {
      std::fprintf(stderr, "zipccl inspect: cannot write %s\n", svg_out.c_str());
      return 1;
    }
    std::printf("picture: %s\n", svg_out.c_str());
  }
  return 0;
}

}  // namespace tools
}  // namespace zipccl
