#include "common/log.h"

#include <atomic>

namespace zipccl {
namespace net {
namespace {
std::atomic<ncclDebugLogger_t> g_logger{nullptr};
}

void set_logger(ncclDebugLogger_t l) {
  if (l) g_logger.store(l);
}
ncclDebugLogger_t logger() {
  return g_logger.load(std::memory_order_relaxed);
}

}  // namespace net
}  // namespace zipccl
