// The C API's error plumbing: each thread's last message, and the guard every exported function runs
// its body in, so that no exception crosses the C ABI.
#pragma once

#include <cstdio>
#include <exception>
#include <new>

#include "zipccl/codec.h"
#include "zipccl/zipccl_c.h"

namespace zipccl {
namespace capi {

// Clears the calling thread's message (every call starts so: the message is the last call's).
void clear_error();
// Sets the calling thread's message (printf-style, truncated to 1023 bytes) and returns `status`.
int fail(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
const char* last_error();

// ZIPCCL_OK for 1..1024 threads, else ZIPCCL_ERR_INVALID_ARGUMENT naming fn.
int check_threads(const char* fn, int threads);
// *out = the codec's element type of a ZIPCCL_TYPE_* value, or ZIPCCL_ERR_INVALID_ARGUMENT naming fn.
int elem_type_of(const char* fn, int t, codec::ElemType* out);

// ZIPCCL_ERR_* of a codec status.
int status_code(codec::Status s);

// Runs body() -> int status, translating any exception into ZIPCCL_ERR_INTERNAL with its message.
template <class Body>
int guarded(const char* function, Body&& body) noexcept {
  clear_error();
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(ZIPCCL_ERR_INTERNAL, "%s: out of memory", function);
  } catch (const std::exception& e) {
    return fail(ZIPCCL_ERR_INTERNAL, "%s: %s", function, e.what());
  } catch (...) {
    return fail(ZIPCCL_ERR_INTERNAL, "%s: unknown exception", function);
  }
}

}  // namespace capi
}  // namespace zipccl
