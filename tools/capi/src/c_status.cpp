#include "c_status.h"

#include <cstdarg>

namespace zipccl {
namespace capi {
namespace {

// A fixed array: no allocation, no thread-exit destructor, nothing to fail while reporting a failure.
thread_local char t_message[1024];

}  // namespace

void clear_error() {
  t_message[0] = '\0';
}

int fail(int status, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(t_message, sizeof t_message, fmt, args);
  va_end(args);
  return status;
}

const char* last_error() {
  return t_message;
}

int check_threads(const char* fn, int threads) {
  if (threads < 1 || threads > 1024)
    return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "%s: threads must be 1..1024, not %d", fn, threads);
  return ZIPCCL_OK;
}

int elem_type_of(const char* fn, int t, codec::ElemType* out) {
  switch (t) {
    case ZIPCCL_TYPE_NONE:
      *out = codec::ElemType::kNone;
      return ZIPCCL_OK;
    case ZIPCCL_TYPE_BF16:
      *out = codec::ElemType::kBf16;
      return ZIPCCL_OK;
    case ZIPCCL_TYPE_FP16:
      *out = codec::ElemType::kFp16;
      return ZIPCCL_OK;
    case ZIPCCL_TYPE_FP32:
      *out = codec::ElemType::kFp32;
      return ZIPCCL_OK;
    case ZIPCCL_TYPE_AUTO:
      *out = codec::ElemType::kAuto;
      return ZIPCCL_OK;
  }
  return fail(
      ZIPCCL_ERR_INVALID_ARGUMENT,
      "%s: elem_type must be ZIPCCL_TYPE_NONE (0), BF16 (1), FP16 (2), FP32 (3) or AUTO (255), not %d", fn,
      t);
}

int status_code(codec::Status s) {
  switch (s) {
    case codec::Status::kOk:
      return ZIPCCL_OK;
    case codec::Status::kInvalidArgument:
      return ZIPCCL_ERR_INVALID_ARGUMENT;
    case codec::Status::kDstTooSmall:
      return ZIPCCL_ERR_BUFFER_TOO_SMALL;
    case codec::Status::kTooLarge:
      return ZIPCCL_ERR_TOO_LARGE;
    case codec::Status::kTruncated:
      return ZIPCCL_ERR_TRUNCATED;
    case codec::Status::kBadMagic:
      return ZIPCCL_ERR_BAD_MAGIC;
    case codec::Status::kBadVersion:
      return ZIPCCL_ERR_BAD_VERSION;
    case codec::Status::kCorrupt:
      return ZIPCCL_ERR_CORRUPT;
  }
  return ZIPCCL_ERR_INTERNAL;
}

}  // namespace capi
}  // namespace zipccl
