// The transports of zipccl's own this build can run over: one {choice, name, factory} table. The
// socket transport comes last, as everyone's fallback.
#pragma once

#include "common/settings.h"
#include "transport.h"

namespace zipccl {
namespace net {

struct TransportEntry {
  TransportChoice choice;  // the ZIPCCL_TRANSPORT value that asks for it
  const char* name;        // for logs
  const char* device;      // what it needs to have devices ("RDMA port"), for the fallback's WARN
  Transport* (*factory)();  // process-wide instance, created on first call
};

// The transport the fabric decision asked for (socket or ib) when it has devices, else the socket
// transport, with a WARN. nullptr when even the socket transport has no interface (its factory
// WARNs).
Transport* pick_transport(TransportChoice want);

}  // namespace net
}  // namespace zipccl
