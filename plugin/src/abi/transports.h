// The transports this build can run over: one {choice, name, factory} table, in the order
// ZIPCCL_TRANSPORT=auto tries them. The socket transport comes last, as everyone's fallback.
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

// ZIPCCL_TRANSPORT's transport: the one asked for when it has devices (auto: the first that has),
// else the socket transport, with a WARN when one was asked for by name. nullptr when even the
// socket transport has no interface (its factory WARNs).
Transport* pick_transport(TransportChoice want);

}  // namespace net
}  // namespace zipccl
