#include <cstring>

#include "kernels.h"
#include "zipccl/codec.h"

namespace zipccl {
namespace codec {

size_t elem_size(ElemType t) {
  switch (t) {
    case ElemType::kNone: return 1;
    case ElemType::kBf16:
    case ElemType::kFp16: return 2;
    case ElemType::kFp32: return 4;
    default: return 0;
  }
}

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::kNone: return "none";
    case ElemType::kBf16: return "bf16";
    case ElemType::kFp16: return "fp16";
    case ElemType::kFp32: return "fp32";
    case ElemType::kAuto: return "auto";
  }
  return "invalid";
}

bool parse_elem_type(const char* s, ElemType* out) {
  if (!s || !out) return false;
  const ElemType all[] = {ElemType::kBf16, ElemType::kFp16, ElemType::kFp32, ElemType::kAuto};
  for (ElemType t : all) {
    if (!std::strcmp(s, elem_type_name(t))) {
      *out = t;
      return true;
    }
  }
  return false;
}

const char* status_string(Status s) {
  switch (s) {
    case Status::kOk: return "ok";
    case Status::kInvalidArgument: return "invalid argument";
    case Status::kDstTooSmall: return "destination buffer too small";
    case Status::kTooLarge: return "input larger than one frame carries (4 GiB - 1)";
    case Status::kTruncated: return "frame truncated";
    case Status::kBadMagic: return "not a zipccl frame (bad magic)";
    case Status::kBadVersion: return "unsupported zipccl frame version";
    case Status::kCorrupt: return "corrupt frame";
  }
  return "unknown status";
}

const char* simd_path() { return isa_name(effective_isa(Isa::kAuto)); }

}  // namespace codec
}  // namespace zipccl
