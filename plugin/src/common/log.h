// Logging through the logger NCCL hands to init(), and the error-propagation macro.
#pragma once

#include <atomic>

#include "nccl/net_common.h"

namespace zipccl {
namespace net {

// Installs NCCL's logger (nullptr: logging is dropped). Thread-safe.
void set_logger(ncclDebugLogger_t logger);
ncclDebugLogger_t logger();

}  // namespace net
}  // namespace zipccl

#define ZIPCCL_LOG(level, flags, fmt, ...)                                                  \
  do {                                                                                      \
    ncclDebugLogger_t zipccl_log_fn_ = ::zipccl::net::logger();                             \
    if (zipccl_log_fn_)                                                                     \
      zipccl_log_fn_(level, flags, __FILE__, __LINE__, "NET/zipccl : " fmt, ##__VA_ARGS__); \
  } while (0)

#define ZIPCCL_WARN(fmt, ...) ZIPCCL_LOG(NCCL_LOG_WARN, NCCL_NET, fmt, ##__VA_ARGS__)
#define ZIPCCL_INFO(flags, fmt, ...) ZIPCCL_LOG(NCCL_LOG_INFO, flags, fmt, ##__VA_ARGS__)
#define ZIPCCL_TRACE(fmt, ...) ZIPCCL_LOG(NCCL_LOG_TRACE, NCCL_NET, fmt, ##__VA_ARGS__)
// A WARN the first time this line logs in the process, INFO after: for conditions handled without
// failing that may repeat per connection or per message.
#define ZIPCCL_WARN_FIRST(flags, fmt, ...)                                                              \
  do {                                                                                                  \
    static std::atomic<bool> zipccl_said_{false};                                                       \
    ZIPCCL_LOG(zipccl_said_.exchange(true) ? NCCL_LOG_INFO : NCCL_LOG_WARN, flags, fmt, ##__VA_ARGS__); \
  } while (0)

// Propagates a failing ncclResult_t, logging file:line on the way out so failures read like a backtrace.
#define ZIPCCL_CHECK(call)                                                        \
  do {                                                                            \
    ncclResult_t zipccl_res_ = (call);                                            \
    if (zipccl_res_ != ncclSuccess) {                                             \
      ZIPCCL_INFO(NCCL_NET, "%s:%d -> %d", __FILE__, __LINE__, (int)zipccl_res_); \
      return zipccl_res_;                                                         \
    }                                                                             \
  } while (0)
