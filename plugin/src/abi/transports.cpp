#include "abi/transports.h"

#include "common/log.h"
#include "rdma/rdma_transport.h"
#include "socket/socket_transport.h"

namespace zipccl {
namespace net {
namespace {

constexpr TransportEntry kTransports[] = {
#ifndef ZIPCCL_NO_RDMA
    {TransportChoice::kIb, "ib", "RDMA port", rdma_transport},
#endif
    {TransportChoice::kSocket, "socket", "interface", socket_transport},
};

}  // namespace

Transport* pick_transport(TransportChoice want) {
  bool built = false;
  for (const TransportEntry& e : kTransports) {
    if (e.choice != want) continue;
    built = true;
    if (e.choice == TransportChoice::kSocket) break;
    Transport* t = e.factory();
    if (t && t->device_count() > 0) return t;
    ZIPCCL_WARN("ZIPCCL_TRANSPORT=%s but no usable %s (see the INFO lines); using the socket transport", e.name,
                e.device);
  }
  if (!built) {
    ZIPCCL_WARN("ZIPCCL_TRANSPORT=%s but this build has no such transport; using sockets", transport_name(want));
  }
  return socket_transport();
}

}  // namespace net
}  // namespace zipccl
