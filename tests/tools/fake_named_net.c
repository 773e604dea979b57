/* A net plugin that is only a name: NCCL (and zipccl's fabric discovery) can find and name it, but its
 * init fails. Built as GPUDirectTCPX for the TCPX-class plugin of the fabric tests
 * (FAKE_NET_NAME). */
#include "nccl/net_v8.h"

#ifndef FAKE_NET_NAME
#error "FAKE_NET_NAME must name the plugin"
#endif

static ncclResult_t fake_init(ncclDebugLogger_t log) {
  (void)log;
  return ncclSystemError;
}

__attribute__((visibility("default"))) const ncclNet_v8_t ncclNetPlugin_v8 = {
    .name = FAKE_NET_NAME,
    .init = fake_init,
};
