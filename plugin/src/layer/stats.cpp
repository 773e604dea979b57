#include "layer/stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "common/log.h"
#include "common/settings.h"
#include "layer/live_stats.h"

namespace zipccl {
namespace net {

std::shared_ptr<ConnStats> open_conn_stats(const char* direction, const std::string& peer) {
  auto s = std::make_shared<ConnStats>(direction, peer);
  live_stats_add(s);
  return s;
}

std::string stats_json(const ConnStats& s) {
  double ratio = s.bytes_wire.get() ? static_cast<double>(s.bytes_in.get()) / static_cast<double>(s.bytes_wire.get()) : 1.0;
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "{\"pid\":%d,\"dir\":\"%s\",\"peer\":\"%s\",\"messages\":%llu,\"bytes_in\":%llu,"
      "\"bytes_wire\":%llu,\"ratio\":%.4f,\"compressed\":%llu,\"raw_small\":%llu,\"raw_policy\":%llu,"
      "\"raw_incompressible\":%llu,\"codec_s\":%.6f,\"errors\":%llu,\"link_gbps\":%.3f,\"seconds\":%.3f,"
      "\"segmented\":%llu,\"segments\":%llu,\"device_messages\":%llu,\"device_codec\":%llu}",
      static_cast<int>(getpid()), s.direction, s.peer.c_str(), (unsigned long long)s.messages.get(),
      (unsigned long long)s.bytes_in.get(), (unsigned long long)s.bytes_wire.get(), ratio,
      (unsigned long long)s.compressed.get(), (unsigned long long)s.raw_small.get(), (unsigned long long)s.raw_policy.get(),
      (unsigned long long)s.raw_incompressible.get(), s.codec_ns.get() * 1e-9, (unsigned long long)s.errors.get(), s.link_gbps.load(std::memory_order_relaxed),
      s.seconds, (unsigned long long)s.segmented.get(), (unsigned long long)s.segments.get(),
      (unsigned long long)s.device_messages.get(), (unsigned long long)s.device_codec.get());
  return buf;
}

void report_stats(ConnStats& s) {
  double ratio = s.bytes_wire.get() ? static_cast<double>(s.bytes_in.get()) / static_cast<double>(s.bytes_wire.get()) : 1.0;
  ZIPCCL_INFO(NCCL_NET,
              "%s comm closed: %llu msgs, %llu B in, %llu B on wire (ratio %.3f), compressed %llu, raw "
              "small/policy/incompressible %llu/%llu/%llu, codec %.3f s, link est %.2f Gbit/s, segmented "
              "%llu (%llu segments), device %llu (codec %llu)",
              s.direction, (unsigned long long)s.messages.get(), (unsigned long long)s.bytes_in.get(),
              (unsigned long long)s.bytes_wire.get(), ratio, (unsigned long long)s.compressed.get(),
              (unsigned long long)s.raw_small.get(), (unsigned long long)s.raw_policy.get(),
              (unsigned long long)s.raw_incompressible.get(), s.codec_ns.get() * 1e-9, s.link_gbps.load(std::memory_order_relaxed),
              (unsigned long long)s.segmented.get(), (unsigned long long)s.segments.get(),
              (unsigned long long)s.device_messages.get(), (unsigned long long)s.device_codec.get());
  s.closed.store(true, std::memory_order_release);
  const std::string& path = settings().stats_file;
  if (path.empty()) return;
  std::string line = stats_json(s) + "\n";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    ZIPCCL_WARN("cannot open ZIPCCL_STATS_FILE='%s': %s", path.c_str(), std::strerror(errno));
    return;
  }
  // One write() with O_APPEND keeps lines from several processes whole.
  if (write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    ZIPCCL_WARN("short write to ZIPCCL_STATS_FILE='%s'", path.c_str());
  }
  close(fd);
}

}  // namespace net
}  // namespace zipccl
