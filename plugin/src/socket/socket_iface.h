// Interface and address selection for the socket transport, with NCCL's NCCL_SOCKET_IFNAME syntax:
// a comma-separated list of prefixes ("eth,ib"); "^" excludes ("^docker,lo"); "=" makes the list
// exact ("=eth0", "^=eth0"). NCCL_SOCKET_FAMILY=AF_INET|AF_INET6 restricts the address family.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <string>
#include <vector>

namespace zipccl {
namespace net {

union SocketAddr {
  sockaddr sa;
  sockaddr_in in;
  sockaddr_in6 in6;
};

socklen_t addr_len(const SocketAddr& a);
std::string addr_to_string(const SocketAddr& a);  // "127.0.0.1:1234", "[::1]:1234"

struct SocketIface {
  std::string name;
  SocketAddr addr;  // port 0
};

// True when interface `name` is selected by `spec` (NCCL_SOCKET_IFNAME syntax; a ":port" suffix on an
// entry is ignored).
bool iface_matches(const std::string& spec, const std::string& name);
// Parses NCCL_SOCKET_FAMILY; returns AF_UNSPEC for empty/unknown (with *ok false for unknown).
int parse_family(const char* s, bool* ok);
// The usable interfaces in the order NCCL would pick them. With an empty spec: "ib" interfaces, then
// any but docker/lo, then docker, then lo. One address per interface (IPv4 first unless the family
// says otherwise; global IPv6 before link-local).
std::vector<SocketIface> find_interfaces(const std::string& spec, int family);
// True when the peer of connected socket `fd` is this host (in this network namespace): a loopback
// address or one assigned to a local interface. Such a connection has no network link; its bytes
// are memory copies on this host's CPUs.
bool peer_is_local(int fd);

}  // namespace net
}  // namespace zipccl
