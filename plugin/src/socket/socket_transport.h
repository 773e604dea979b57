// The socket transport's factory (socket_transport.cpp; the table in abi/transports.cpp lists it).
#pragma once

#include "transport.h"

namespace zipccl {
namespace net {

// The socket transport (TCP, several streams per connection). Reads NCCL_SOCKET_IFNAME and
// NCCL_SOCKET_FAMILY once. Returns nullptr (with a WARN) when no usable interface exists.
Transport* socket_transport();

}  // namespace net
}  // namespace zipccl
