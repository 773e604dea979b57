// The RDMA transport over a set of ports (rdma_fabric.h's RdmaPort): the handle, the TCP side
// channel that exchanges queue pair numbers, LID/GID and ring keys, and the non-blocking
// listen/connect/accept state machines. rdma_transport() (transport.h) builds it over the verbs ports;
// the tests build it over loopback ports.
#pragma once

#include <memory>
#include <vector>

#include "rdma/rdma_fabric.h"
#include "socket/socket_iface.h"
#include "transport.h"

namespace zipccl {
namespace net {

// Side channels listen on ifaces[0]; with no ports or no interface the transport has zero devices.
Transport* make_rdma_transport(std::vector<std::unique_ptr<RdmaPort>> ports, std::vector<SocketIface> ifaces);

}  // namespace net
}  // namespace zipccl
