#include "rdma/rdma_select.h"

#include <cstdlib>
#include <cstring>

namespace zipccl {
namespace net {

HcaFilter parse_hca_filter(const std::string& spec) {
  HcaFilter f;
  size_t i = 0;
  if (i < spec.size() && spec[i] == '^') {
    f.exclude = true;
    ++i;
  }
  if (i < spec.size() && spec[i] == '=') {
    f.exact = true;
    ++i;
  }
  while (i <= spec.size()) {
    size_t end = spec.find(',', i);
    if (end == std::string::npos) end = spec.size();
    std::string item = spec.substr(i, end - i);
    if (!item.empty()) {
      HcaFilter::Entry e;
      size_t colon = item.find(':');
      e.name = item.substr(0, colon);
      if (colon != std::string::npos) {
        char* endp = nullptr;
        long p = std::strtol(item.c_str() + colon + 1, &endp, 10);
        e.port = (endp && !*endp && p > 0 && p < 256) ? static_cast<int>(p) : -1;
      }
      if (!e.name.empty()) f.entries.push_back(e);
    }
    i = end + 1;
  }
  return f;
}

bool hca_selected(const HcaFilter& f, const std::string& dev, int port) {
  if (f.entries.empty()) return true;
  bool hit = false;
  for (const HcaFilter::Entry& e : f.entries) {
    bool name_ok = f.exact ? dev == e.name : dev.compare(0, e.name.size(), e.name) == 0;
    if (name_ok && (e.port < 0 || e.port == port)) {
      hit = true;
      break;
    }
  }
  return f.exclude ? !hit : hit;
}

namespace {

bool gid_zero(const uint8_t* g) {
  for (int i = 0; i < 16; ++i) {
    if (g[i]) return false;
  }
  return true;
}

bool gid_v4_mapped(const uint8_t* g) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(g, kPrefix, 12) == 0;
}

bool gid_link_local(const uint8_t* g) {
  return g[0] == 0xfe && (g[1] & 0xc0) == 0x80;
}

}  // namespace

int choose_gid(const std::vector<GidEntry>& table, bool ethernet, int configured, const char** why) {
  *why = nullptr;
  int n = static_cast<int>(table.size());
  if (configured >= 0) {
    if (configured < n && !gid_zero(table[configured].raw)) return configured;
    *why = "NCCL_IB_GID_INDEX names an empty or missing GID table entry";
    return -1;
  }
  if (!ethernet) {
    if (n > 0 && !gid_zero(table[0].raw)) return 0;
    *why = "the port has no GID at index 0";
    return -1;
  }
  // Lower rank is better; rank 4 = unusable.
  auto rank = [](const GidEntry& e) {
    if (gid_zero(e.raw)) return 4;
    bool v4 = gid_v4_mapped(e.raw), ll = gid_link_local(e.raw);
    if (e.type == kGidRoceV2 && v4) return 0;
    if (e.type == kGidRoceV2 && !ll) return 1;
    if (e.type == kGidRoceV1 && v4) return 2;
    if (!ll) return 3;
    return 4;
  };
  int best = -1, best_rank = 4;
  for (int i = 0; i < n; ++i) {
    int r = rank(table[i]);
    if (r < best_rank) {
      best = i;
      best_rank = r;
    }
  }
  if (best < 0) *why = "no routable GID (only empty or link-local entries); set NCCL_IB_GID_INDEX";
  return best;
}

int ib_speed_mbps(uint32_t active_speed, uint32_t active_width) {
  // Per-lane data rate of each IBV_SPEED_* value: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR.
  static const struct {
    uint32_t bit;
    int mbps;
  } kLane[] = {{1, 2500},   {2, 5000},   {4, 10000},    {8, 10000},   {16, 14000},
               {32, 25000}, {64, 50000}, {128, 100000}, {256, 200000}};
  static const struct {
    uint32_t bit;
    int lanes;
  } kWidth[] = {{1, 1}, {2, 4}, {4, 8}, {8, 12}, {16, 2}};
  int lane = 10000, lanes = 1;
  for (const auto& l : kLane) {
    if (l.bit == active_speed) lane = l.mbps;
  }
  for (const auto& w : kWidth) {
    if (w.bit == active_width) lanes = w.lanes;
  }
  return lane * lanes;
}

const char* reg_path_name(RegPath p) {
  switch (p) {
    case RegPath::kHost:
      return "ibv_reg_mr (host memory)";
    case RegPath::kDmaBufFd:
      return "ibv_reg_dmabuf_mr (NCCL's dma-buf fd)";
    case RegPath::kDmaBufExport:
      return "ibv_reg_dmabuf_mr (dma-buf fd from cuMemGetHandleForAddressRange)";
    case RegPath::kPeerMem:
      return "ibv_reg_mr of the device pointer (nvidia-peermem)";
  }
  return "?";
}

int reg_paths(const MemDesc& mem, const RegCaps& caps, RegPath out[3]) {
  int n = 0;
  if (!mem.device) {
    out[n++] = RegPath::kHost;
    return n;
  }
  if (mem.dmabuf_fd >= 0) {
    if (caps.reg_dmabuf_mr) out[n++] = RegPath::kDmaBufFd;
  } else if (caps.reg_dmabuf_mr && caps.cuda_export) {
    out[n++] = RegPath::kDmaBufExport;
  }
  out[n++] = RegPath::kPeerMem;
  return n;
}

MemDesc page_align(const MemDesc& mem, size_t page) {
  MemDesc out = mem;
  if (mem.size == 0 || page == 0) return out;
  uintptr_t a = reinterpret_cast<uintptr_t>(mem.data);
  uintptr_t base = a & ~static_cast<uintptr_t>(page - 1);
  uintptr_t end = a + mem.size;
  uintptr_t end_up = (end + page - 1) & ~static_cast<uintptr_t>(page - 1);
  if (end_up < end) return out;  // wraps at the top of the address space
  uintptr_t head = a - base;
  if (mem.dmabuf_fd >= 0) {
    if (mem.dmabuf_offset < head) return out;
    out.dmabuf_offset = mem.dmabuf_offset - head;
  }
  out.data = reinterpret_cast<void*>(base);
  out.size = end_up - base;
  return out;
}

namespace {
bool in_range(const char* name, int v, int lo, int hi, const char* what, std::string* problem) {
  if (v >= lo && v <= hi) return true;
  *problem = std::string(name) + "=" + std::to_string(v) + " is out of range: " + what + " is " +
             std::to_string(lo) + ".." + std::to_string(hi);
  return false;
}
}  // namespace

bool ib_qp_settings_valid(const IbQpSettings& s, std::string* problem) {
  return in_range("NCCL_IB_TC", s.tc, 0, kIbTcMax, "the traffic class (8 bits)", problem) &&
         in_range("NCCL_IB_SL", s.sl, 0, kIbSlMax, "the service level (4 bits)", problem) &&
         in_range("NCCL_IB_TIMEOUT", s.timeout, kIbTimeoutMin, kIbTimeoutMax,
                  "the ACK timeout exponent (5 bits; 0 = infinite is refused)", problem) &&
         in_range("NCCL_IB_RETRY_CNT", s.retry_cnt, 0, kIbRetryCntMax, "the retry count (3 bits)", problem);
}

}  // namespace net
}  // namespace zipccl
