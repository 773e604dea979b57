// Pure decisions of the RDMA transport's device discovery, kept apart from libibverbs so they are
// unit-tested: NCCL_IB_HCA filtering, RoCE GID choice (NCCL_IB_GID_INDEX), port speed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zipccl {
namespace net {

// NCCL_IB_HCA syntax: a comma-separated list of device names, each optionally ":port". Entries are
// prefixes ("mlx5" selects mlx5_0, mlx5_1); a leading "=" makes them exact names; a leading "^"
// inverts the list (exclude those); "^=" excludes exact names. An empty list selects everything.
struct HcaFilter {
  bool exclude = false;
  bool exact = false;
  struct Entry {
    std::string name;
    int port = -1;  // -1: any port
  };
  std::vector<Entry> entries;
};
HcaFilter parse_hca_filter(const std::string& spec);
bool hca_selected(const HcaFilter& f, const std::string& dev, int port);

// One entry of a port's GID table. type: 0 unused/unknown, 1 IB or RoCE v1, 2 RoCE v2.
struct GidEntry {
  uint8_t raw[16];
  int type;
};
enum GidType { kGidUnknown = 0, kGidRoceV1 = 1, kGidRoceV2 = 2 };
// The GID index to use on a port, or -1 when none is usable (with *why). InfiniBand ports use index
// 0 unless configured. Ethernet (RoCE) ports: `configured` (NCCL_IB_GID_INDEX, -1 when unset) if it
// names a non-zero entry; otherwise the first of: RoCE v2 with an IPv4-mapped address, RoCE v2 with
// a global IPv6 address, RoCE v1 IPv4-mapped, then any non-zero non-link-local entry.
int choose_gid(const std::vector<GidEntry>& table, bool ethernet, int configured, const char** why);

// Port speed in Mbit/s from ibv_port_attr's active_speed (IBV_SPEED_* bit) and active_width
// (1 = 1x, 2 = 4x, 4 = 8x, 8 = 12x, 16 = 2x). Unknown values count as 10 Gbit/s per lane, 1 lane.
int ib_speed_mbps(uint32_t active_speed, uint32_t active_width);

}  // namespace net
}  // namespace zipccl
