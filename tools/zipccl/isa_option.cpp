#include "isa_option.h"

#include <cstdio>
#include <cstdlib>

namespace zipccl {
namespace tools {

const char* const kIsaUsage =
    "  --isa SET      CPU kernel set: auto (the fastest this CPU runs), avx512, avx2, neon, scalar;\n"
    "                 the frames are the same bytes whichever (exit 2 when the CPU lacks SET)\n";

namespace {

const char* display_name(codec::Isa isa) {
  switch (isa) {
    case codec::Isa::kAvx512: return "AVX-512";
    case codec::Isa::kAvx2: return "AVX2";
    case codec::Isa::kNeon: return "NEON";
    default: return codec::isa_name(isa);
  }
}

bool check_isa(const char* cmd, const char* what, const std::string& name, codec::Isa* out) {
  codec::Isa isa;
  if (!codec::parse_isa(name.c_str(), &isa)) {
    std::fprintf(stderr, "zipccl %s: %s takes auto, avx512, avx2, neon or scalar, not '%s'\n", cmd, what,
                 name.c_str());
    return false;
  }
  if (!codec::isa_supported(isa)) {
    const std::string missing = codec::isa_missing(isa);
    const std::string has = codec::isa_name(codec::effective_isa(codec::Isa::kAuto));
    if (missing == "not in this build")
      std::fprintf(stderr, "zipccl %s: %s %s: this build has no %s kernels; it has %s\n", cmd, what,
                   name.c_str(), display_name(isa), has.c_str());
    else
      std::fprintf(stderr, "zipccl %s: %s %s: this CPU has no %s (%s missing); it has %s\n", cmd, what,
                   name.c_str(), display_name(isa), missing.c_str(), has.c_str());
    return false;
  }
  *out = isa;
  return true;
}

}  // namespace

bool parse_isa_option(const char* cmd, const std::string& name, codec::Isa* out) {
  return check_isa(cmd, "--isa", name, out);
}

bool isa_from_environment(const char* cmd, codec::Isa* out) {
  const char* v = std::getenv("ZIPCCL_CODEC_ISA");
  if (v == nullptr || *v == '\0') return true;
  return check_isa(cmd, "ZIPCCL_CODEC_ISA", v, out);
}

}  // namespace tools
}  // namespace zipccl
