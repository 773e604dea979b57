// How many TCP data streams a socket connection opens: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD
// with NCCL's semantics (src/transport/net_socket.cc, ncclNetSocketGetNsockNthread), so that on a
// plain-TCP cloud zipccl opens as many flows as NCCL's own socket transport would.
//
// NCCL: both default to auto (-2), resolved from the PCI vendor of the interface in
// /sys/class/net/<if>/device/vendor: 0x1d0f (AWS) 2 threads x 8 sockets, 0x1ae0 (GCP) 4 x 1, anything
// else (or no vendor file) 0 x 1. More than 16 threads are capped to 16 (WARN); more than 64 sockets
// reduce the sockets per thread to 64 / threads (WARN). A product of 0 means NCCL sends the data on
// its one control socket from the proxy thread.
//
// zipccl's mapping: threads x sockets-per-thread data streams, one helper thread per NCCL thread, each
// driving its sockets (as NCCL's helper threads do), plus the control stream. zipccl's control stream
// carries headers and payloads up to ZIPCCL_INLINE_BYTES only, so where NCCL's product is 0 zipccl
// opens one data stream with one helper thread: one bulk TCP flow, as NCCL's control socket is.
#pragma once

#include <string>

namespace zipccl {
namespace net {

constexpr int kNcclMaxSocketThreads = 16;  // NCCL's MAX_THREADS
constexpr int kNcclMaxSockets = 64;        // NCCL's MAX_SOCKETS

struct StreamPlan {
  int nthreads = 1;      // helper threads per connection
  int per_thread = 1;    // data streams each helper thread drives
  int streams = 1;       // data streams: nthreads * per_thread, at least 1
  int nccl_sockets = 0;  // what NCCL would open besides its control socket (0: data on the control socket)
  std::string source;    // where the numbers came from, for the INFO line
  std::string warning;   // a cap applied (NCCL WARNs the same), empty if none
};

// The PCI vendor ("0x1d0f") of interface `ifname` read under `root` ("" = /) as NCCL reads it (the
// first 6 bytes of sys/class/net/<ifname>/device/vendor); empty when there is none (virtual links).
std::string interface_vendor(const std::string& root, const std::string& ifname);

// The streams for requested `nthreads` / `per_thread` (kSocketAuto or a count >= 0, settings.h) on an
// interface whose vendor is `vendor` (may be empty). Pure.
StreamPlan plan_streams(int nthreads, int per_thread, const std::string& vendor);

}  // namespace net
}  // namespace zipccl
