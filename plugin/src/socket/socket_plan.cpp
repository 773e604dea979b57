#include "socket/socket_plan.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "common/settings.h"

namespace zipccl {
namespace net {
namespace {

std::string count_text(int v) {
  return v == kSocketAuto ? "auto" : std::to_string(v);
}

}  // namespace

std::string interface_vendor(const std::string& root, const std::string& ifname) {
  const std::string path = root + "/sys/class/net/" + ifname + "/device/vendor";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[7] = {};
  ssize_t n = read(fd, buf, 6);  // NCCL compares exactly the first 6 bytes ("0x1d0f")
  close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

StreamPlan plan_streams(int nthreads, int per_thread, const std::string& vendor) {
  StreamPlan p;
  const int asked_threads = nthreads, asked_per = per_thread;
  if (nthreads > kNcclMaxSocketThreads) {
    p.warning = "NCCL_SOCKET_NTHREADS=" + std::to_string(nthreads) + " is above NCCL's maximum; using " +
                std::to_string(kNcclMaxSocketThreads);
    nthreads = kNcclMaxSocketThreads;
  }
  std::string autos;
  if (nthreads == kSocketAuto || per_thread == kSocketAuto) {
    int auto_threads = 0, auto_per = 1;
    std::string cloud = "no known NIC vendor";
    if (vendor == "0x1d0f") {
      auto_threads = 2, auto_per = 8, cloud = "AWS";
    } else if (vendor == "0x1ae0") {
      auto_threads = 4, auto_per = 1, cloud = "GCP";
    } else if (!vendor.empty()) {
      cloud = "NIC vendor " + vendor;
    }
    if (nthreads == kSocketAuto) nthreads = auto_threads;
    if (per_thread == kSocketAuto) per_thread = auto_per;
    autos = "; auto from " + cloud;
  }
  int sockets = nthreads * per_thread;
  if (sockets > kNcclMaxSockets) {
    per_thread = kNcclMaxSockets / nthreads;
    sockets = per_thread * nthreads;
    if (!p.warning.empty()) p.warning += "; ";
    p.warning += "more than " + std::to_string(kNcclMaxSockets) +
                 " sockets asked; using NCCL_NSOCKS_PERTHREAD=" + std::to_string(per_thread) +
                 " as NCCL does";
  }
  p.nccl_sockets = sockets;
  p.source = "NCCL_SOCKET_NTHREADS=" + count_text(asked_threads) +
             " NCCL_NSOCKS_PERTHREAD=" + count_text(asked_per) + autos + ": NCCL " +
             std::to_string(nthreads) + " threads x " + std::to_string(per_thread) + " sockets";
  if (sockets == 0) {
    p.source += " (NCCL: data on its control socket; zipccl: 1 data stream)";
    p.nthreads = p.per_thread = p.streams = 1;
  } else {
    p.nthreads = nthreads;
    p.per_thread = per_thread;
    p.streams = sockets;
  }
  return p;
}

}  // namespace net
}  // namespace zipccl
