#include "socket/socket_iface.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cstring>

namespace zipccl {
namespace net {

socklen_t addr_len(const SocketAddr& a) {
  return a.sa.sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
}

std::string addr_to_string(const SocketAddr& a) {
  char host[INET6_ADDRSTRLEN] = "?";
  char out[INET6_ADDRSTRLEN + 16];
  if (a.sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &a.in.sin_addr, host, sizeof host);
    std::snprintf(out, sizeof out, "%s:%u", host, ntohs(a.in.sin_port));
  } else if (a.sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &a.in6.sin6_addr, host, sizeof host);
    std::snprintf(out, sizeof out, "[%s]:%u", host, ntohs(a.in6.sin6_port));
  } else {
    std::snprintf(out, sizeof out, "<family %d>", a.sa.sa_family);
  }
  return out;
}

bool iface_matches(const std::string& spec_in, const std::string& name) {
  std::string spec = spec_in;
  bool exclude = false, exact = false;
  if (!spec.empty() && spec[0] == '^') {
    exclude = true;
    spec.erase(0, 1);
  }
  if (!spec.empty() && spec[0] == '=') {
    exact = true;
    spec.erase(0, 1);
  }
  bool hit = false;
  size_t pos = 0;
  while (pos <= spec.size()) {
    size_t comma = spec.find(',', pos);
    std::string item = spec.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    size_t colon = item.find(':');
    if (colon != std::string::npos) item.resize(colon);
    if (!item.empty()) {
      if (exact ? name == item : name.compare(0, item.size(), item) == 0) hit = true;
    }
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

int parse_family(const char* s, bool* ok) {
  *ok = true;
  if (!s || !*s) return AF_UNSPEC;
  if (!std::strcmp(s, "AF_INET")) return AF_INET;
  if (!std::strcmp(s, "AF_INET6")) return AF_INET6;
  *ok = false;
  return AF_UNSPEC;
}

namespace {

// Rank of an address for one interface: lower is better; -1 unusable.
int addr_rank(const sockaddr* sa, int family) {
  if (!sa) return -1;
  if (sa->sa_family != AF_INET && sa->sa_family != AF_INET6) return -1;
  if (family != AF_UNSPEC && sa->sa_family != family) return -1;
  if (sa->sa_family == AF_INET) return 0;
  auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
  return IN6_IS_ADDR_LINKLOCAL(&in6->sin6_addr) ? 2 : 1;
}

void collect(ifaddrs* list, const std::string& spec, int family, std::vector<SocketIface>* out) {
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_name || !(a->ifa_flags & IFF_UP)) continue;
    int rank = addr_rank(a->ifa_addr, family);
    if (rank < 0 || !iface_matches(spec, a->ifa_name)) continue;
    SocketIface* existing = nullptr;
    for (SocketIface& s : *out) {
      if (s.name == a->ifa_name) existing = &s;
    }
    if (existing && addr_rank(&existing->addr.sa, family) <= rank) continue;
    SocketIface iface;
    iface.name = a->ifa_name;
    std::memset(&iface.addr, 0, sizeof iface.addr);
    std::memcpy(&iface.addr, a->ifa_addr,
                a->ifa_addr->sa_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in));
    if (existing)
      *existing = iface;
    else
      out->push_back(iface);
  }
}

}  // namespace

std::vector<SocketIface> find_interfaces(const std::string& spec, int family) {
  std::vector<SocketIface> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  if (!spec.empty()) {
    collect(list, spec, family, &out);
  } else {
    for (const char* s : {"ib", "^docker,lo", "docker", "lo"}) {
      collect(list, s, family, &out);
      if (!out.empty()) break;
    }
  }
  freeifaddrs(list);
  return out;
}

bool peer_is_local(int fd) {
  SocketAddr peer{};
  socklen_t len = sizeof peer;
  if (getpeername(fd, &peer.sa, &len) != 0) return false;
  if (peer.sa.sa_family == AF_INET6 && IN6_IS_ADDR_V4MAPPED(&peer.in6.sin6_addr)) {
    SocketAddr v4{};
    v4.in.sin_family = AF_INET;
    std::memcpy(&v4.in.sin_addr, peer.in6.sin6_addr.s6_addr + 12, 4);
    peer = v4;
  }
  if (peer.sa.sa_family == AF_INET && (ntohl(peer.in.sin_addr.s_addr) >> 24) == 127) return true;
  if (peer.sa.sa_family == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&peer.in6.sin6_addr)) return true;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool local = false;
  for (ifaddrs* a = list; a && !local; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != peer.sa.sa_family) continue;
    if (peer.sa.sa_family == AF_INET) {
      local = reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr.s_addr == peer.in.sin_addr.s_addr;
    } else if (peer.sa.sa_family == AF_INET6) {
      local = std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr, &peer.in6.sin6_addr,
                          sizeof(in6_addr)) == 0;
    }
  }
  freeifaddrs(list);
  return local;
}

}  // namespace net
}  // namespace zipccl
