// Pure decisions of the RDMA transport's device discovery, kept apart from libibverbs so they are
// unit-tested: NCCL_IB_HCA filtering, RoCE GID choice (NCCL_IB_GID_INDEX), port speed, the
// registration path of a buffer and its page-aligned range, the queue pair settings' ranges.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/settings.h"
#include "transport.h"

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

// ---- memory registration (NCCL's regMr / regMrDmaBuf) ----

// The ways a buffer can be registered with the NIC.
enum class RegPath {
  kHost,          // ibv_reg_mr of host memory
  kDmaBufFd,      // ibv_reg_dmabuf_mr with the dma-buf fd NCCL passed (regMrDmaBuf)
  kDmaBufExport,  // ibv_reg_dmabuf_mr with an fd from cuMemGetHandleForAddressRange (CUDA driver)
  kPeerMem,       // ibv_reg_mr of the device pointer (needs the nvidia-peermem kernel module)
};
const char* reg_path_name(RegPath p);
// What this process can do: libibverbs exports ibv_reg_dmabuf_mr (rdma-core >= 34); the CUDA
// driver exports cuMemGetHandleForAddressRange (CUDA >= 11.7).
struct RegCaps {
  bool reg_dmabuf_mr = false;
  bool cuda_export = false;
};
// The registration attempts for one buffer, in order (the next is tried when one fails); returns
// how many were written to out[0..2]. Host memory: kHost. Device memory with an fd: kDmaBufFd then
// kPeerMem; without one: kDmaBufExport (when both capabilities exist) then kPeerMem.
int reg_paths(const MemDesc& mem, const RegCaps& caps, RegPath out[3]);

// The range the registration cache registers for `mem`: [data, data+size) widened to whole pages of
// `page` bytes (a power of two), with the dma-buf offset moved by as much as the start moved. When
// the dma-buf offset is smaller than that move, the range is kept as it is (it cannot start before
// the dma-buf). size 0 stays 0.
MemDesc page_align(const MemDesc& mem, size_t page);

// ---- queue pair settings (NCCL's meanings and defaults) ----

// Ranges: kIbTcMax .. kIbRetryCntMax (common/settings.h, whose registry reads the variables).
struct IbQpSettings {
  int tc = 0;
  int sl = 0;
  int timeout = 20;  // NCCL's default since 2.23 (~4.3 s per try)
  int retry_cnt = 7;
};
// True when every value is in range; else false with *problem naming the setting, its value and its
// range.
bool ib_qp_settings_valid(const IbQpSettings& s, std::string* problem);

}  // namespace net
}  // namespace zipccl
