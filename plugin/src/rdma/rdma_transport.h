// The RDMA transport over a set of ports (rdma_fabric.h's RdmaPort): the handle, the TCP side
// channel that exchanges queue pair numbers, LID/GID and ring keys, and the non-blocking
// listen/connect/accept state machines. rdma_transport() builds it over the verbs ports (rdma_verbs.cpp);
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

// The RDMA transport (libibverbs, loaded at run time; RC queue pairs) over this host's verbs ports,
// where the build has the verbs layer (else ZIPCCL_NO_RDMA). Reads NCCL_IB_HCA, NCCL_IB_GID_INDEX,
// NCCL_IB_TC/SL/TIMEOUT/RETRY_CNT (through the settings registry) and, for its connection side channel,
// NCCL_SOCKET_IFNAME once. Has zero devices (INFO says why) when libibverbs, an active port or a
// side-channel interface is missing.
Transport* rdma_transport();

}  // namespace net
}  // namespace zipccl
