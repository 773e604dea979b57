// Memory registration and flush entry points of the plugin (net.cpp), kept out of net.h while the GPU
// path changes that file: regMrDmaBuf with its dma-buf fd, and the request object iflush returns.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nccl/net_common.h"
#include "transport.h"

namespace zipccl {
namespace net {

// regMrDmaBuf: like net_reg_mr, with the dma-buf fd NCCL exported for device memory (-1: none) and
// the offset of `data` within it. net_reg_mr(comm, data, size, type, mh) is this with fd -1.
ncclResult_t net_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                               void** mhandle);

// What net_iflush hands NCCL for a flush in flight; completed (and freed) by test_flush_request().
constexpr uint32_t kFlushRequestMagic = 0x46435a5au;
struct FlushRequest {
  uint32_t magic = kFlushRequestMagic;
  DeviceFlusher* flusher = nullptr;
  int op = -1;
};
inline bool is_flush_request(const void* request) {
  return request && static_cast<const FlushRequest*>(request)->magic == kFlushRequestMagic;
}
// NCCL's test() of a flush request: *done once the flush read completed; the request is freed then
// (and on an error). *size is 0.
inline ncclResult_t test_flush_request(void* request, int* done, size_t* size) {
  *done = 0;
  if (size) *size = 0;
  auto* r = static_cast<FlushRequest*>(request);
  bool finished = false;
  ncclResult_t res = r->flusher->test_flush(r->op, &finished);
  if (res != ncclSuccess || finished) {
    r->magic = 0;
    delete r;
  }
  if (res == ncclSuccess && finished) *done = 1;
  return res;
}

}  // namespace net
}  // namespace zipccl
