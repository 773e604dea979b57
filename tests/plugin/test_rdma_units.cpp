// The RDMA transport's pure decisions: NCCL_IB_HCA filtering, RoCE GID choice, port speed, the
// registration path and page-aligned range of a buffer, the queue pair settings' ranges.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "rdma/rdma_select.h"

using namespace zipccl::net;

namespace {

// A GID table entry from its IPv6 text ("::" = empty).
GidEntry gid(const char* addr, int type) {
  GidEntry e{};
  e.type = type;
  EXPECT_EQ(inet_pton(AF_INET6, addr, e.raw), 1) << addr;
  return e;
}

const char* const kV4 = "::ffff:10.0.0.1";
const char* const kLinkLocal = "fe80::1";
const char* const kGlobal6 = "2001:db8::1";
const char* const kEmpty = "::";

}  // namespace

TEST(IbHca, PrefixExcludeExactPort) {
  struct Case {
    const char* spec;
    const char* dev;
    int port;
    bool selected;
  } cases[] = {
      {"", "mlx5_0", 1, true},
      {"mlx5", "mlx5_0", 1, true},
      {"mlx5", "mlx5_12", 1, true},
      {"mlx4", "mlx5_0", 1, false},
      {"mlx4,mlx5_1", "mlx5_1", 1, true},
      {"mlx5_1", "mlx5_10", 1, true},  // a prefix, as NCCL reads it
      {"=mlx5_1", "mlx5_10", 1, false},
      {"=mlx5_1", "mlx5_1", 1, true},
      {"^mlx5_0", "mlx5_0", 1, false},
      {"^mlx5_0", "mlx5_1", 1, true},
      {"^mlx5", "mlx5_3", 1, false},
      {"^=mlx5_1", "mlx5_1", 1, false},
      {"^=mlx5_1", "mlx5_10", 1, true},
      {"mlx5_0:1", "mlx5_0", 1, true},
      {"mlx5_0:1", "mlx5_0", 2, false},
      {"mlx5_0:1,mlx5_1:2", "mlx5_1", 2, true},
      {"^mlx5_0:1", "mlx5_0", 1, false},
      {"^mlx5_0:1", "mlx5_0", 2, true},
      {",,mlx5,", "mlx5_0", 1, true},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(hca_selected(parse_hca_filter(c.spec), c.dev, c.port), c.selected)
        << "NCCL_IB_HCA='" << c.spec << "' device " << c.dev << " port " << c.port;
  }
  HcaFilter f = parse_hca_filter("^=a:2,b");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.exact);
  ASSERT_EQ(f.entries.size(), 2u);
  EXPECT_EQ(f.entries[0].name, "a");
  EXPECT_EQ(f.entries[0].port, 2);
  EXPECT_EQ(f.entries[1].port, -1);
}

TEST(RoceGid, PrefersRoceV2Ipv4ThenV6ThenV1) {
  const char* why = nullptr;
  std::vector<GidEntry> t = {gid(kLinkLocal, kGidRoceV1), gid(kLinkLocal, kGidRoceV2), gid(kV4, kGidRoceV1),
                             gid(kV4, kGidRoceV2), gid(kGlobal6, kGidRoceV2)};
  EXPECT_EQ(choose_gid(t, true, -1, &why), 3);
  t[3] = gid(kEmpty, kGidUnknown);
  EXPECT_EQ(choose_gid(t, true, -1, &why), 4);
  t[4] = gid(kEmpty, kGidUnknown);
  EXPECT_EQ(choose_gid(t, true, -1, &why), 2);
  std::vector<GidEntry> only_ll = {gid(kLinkLocal, kGidRoceV1), gid(kLinkLocal, kGidRoceV2), gid(kEmpty, 0)};
  EXPECT_EQ(choose_gid(only_ll, true, -1, &why), -1);
  EXPECT_NE(why, nullptr);
}

TEST(RoceGid, HonoursGidIndex) {
  const char* why = nullptr;
  std::vector<GidEntry> t = {gid(kLinkLocal, kGidRoceV1), gid(kLinkLocal, kGidRoceV2), gid(kV4, kGidRoceV2)};
  EXPECT_EQ(choose_gid(t, true, 1, &why), 1);  // the user's choice, even link-local
  EXPECT_EQ(choose_gid(t, true, 7, &why), -1);
  EXPECT_NE(why, nullptr);
  t.push_back(gid(kEmpty, 0));
  EXPECT_EQ(choose_gid(t, true, 3, &why), -1);
  // InfiniBand: index 0 unless configured.
  EXPECT_EQ(choose_gid(t, false, -1, &why), 0);
  EXPECT_EQ(choose_gid(t, false, 2, &why), 2);
}

TEST(IbSpeed, WidthTimesLane) {
  EXPECT_EQ(ib_speed_mbps(64, 2), 200000);   // HDR 4x
  EXPECT_EQ(ib_speed_mbps(128, 2), 400000);  // NDR 4x
  EXPECT_EQ(ib_speed_mbps(32, 2), 100000);   // EDR 4x
  EXPECT_EQ(ib_speed_mbps(32, 1), 25000);    // EDR 1x (25 GbE RoCE)
  EXPECT_EQ(ib_speed_mbps(64, 16), 100000);  // HDR 2x
  EXPECT_EQ(ib_speed_mbps(1, 8), 30000);     // SDR 12x
  EXPECT_EQ(ib_speed_mbps(0, 0), 10000);     // unknown
}

// ---- registration paths, page alignment, queue pair settings ----

namespace {
MemDesc mem(uintptr_t addr, size_t size, bool device, int fd = -1, uint64_t offset = 0) {
  MemDesc d;
  d.data = reinterpret_cast<void*>(addr);
  d.size = size;
  d.device = device;
  d.dmabuf_fd = fd;
  d.dmabuf_offset = offset;
  return d;
}
std::vector<RegPath> paths(const MemDesc& d, bool dmabuf_mr, bool cuda_export) {
  RegCaps caps;
  caps.reg_dmabuf_mr = dmabuf_mr;
  caps.cuda_export = cuda_export;
  RegPath out[3];
  int n = reg_paths(d, caps, out);
  return std::vector<RegPath>(out, out + n);
}
}  // namespace

TEST(RdmaRegPath, WhichPathInWhichOrder) {
  using V = std::vector<RegPath>;
  const MemDesc host = mem(0x10000, 4096, false), cuda = mem(0x10000, 4096, true),
                cuda_fd = mem(0x10000, 4096, true, 9, 0);
  for (bool a : {false, true}) {
    for (bool b : {false, true}) EXPECT_EQ(paths(host, a, b), V{RegPath::kHost});
  }
  EXPECT_EQ(paths(cuda_fd, true, false), (V{RegPath::kDmaBufFd, RegPath::kPeerMem}));
  EXPECT_EQ(paths(cuda_fd, true, true), (V{RegPath::kDmaBufFd, RegPath::kPeerMem}));  // NCCL's fd first
  EXPECT_EQ(paths(cuda_fd, false, true), V{RegPath::kPeerMem});  // old rdma-core: no dma-buf MRs
  EXPECT_EQ(paths(cuda, true, true), (V{RegPath::kDmaBufExport, RegPath::kPeerMem}));
  EXPECT_EQ(paths(cuda, true, false), V{RegPath::kPeerMem});  // no CUDA export (driver < 11.7)
  EXPECT_EQ(paths(cuda, false, true), V{RegPath::kPeerMem});
  EXPECT_EQ(paths(cuda, false, false), V{RegPath::kPeerMem});
  EXPECT_NE(std::string(reg_path_name(RegPath::kPeerMem)).find("nvidia-peermem"), std::string::npos);
}

TEST(RdmaRegPath, PageAlign) {
  MemDesc a = page_align(mem(0x10064, 5000, false), 4096);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data), 0x10000u);
  EXPECT_EQ(a.size, 0x2000u);
  MemDesc b = page_align(mem(0x10000, 4096, false), 4096);  // already whole pages
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data), 0x10000u);
  EXPECT_EQ(b.size, 4096u);
  MemDesc c = page_align(mem(0x10fff, 2, true), 4096);  // straddles a page boundary
  EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data), 0x10000u);
  EXPECT_EQ(c.size, 0x2000u);
  EXPECT_TRUE(c.device);
  MemDesc d = page_align(mem(0x10064, 100, true, 5, 0x1064), 4096);  // the offset moves with the start
  EXPECT_EQ(reinterpret_cast<uintptr_t>(d.data), 0x10000u);
  EXPECT_EQ(d.dmabuf_offset, 0x1000u);
  EXPECT_EQ(d.dmabuf_fd, 5);
  MemDesc e = page_align(mem(0x10064, 100, true, 5, 0x10), 4096);  // cannot start before the dma-buf
  EXPECT_EQ(reinterpret_cast<uintptr_t>(e.data), 0x10064u);
  EXPECT_EQ(e.size, 100u);
  EXPECT_EQ(e.dmabuf_offset, 0x10u);
  MemDesc f = page_align(mem(0x12345, 0, false), 4096);
  EXPECT_EQ(f.size, 0u);
  MemDesc g = page_align(mem(0x210000 + 7, 10, false), 65536);  // 64 KiB pages (AArch64 kernels)
  EXPECT_EQ(reinterpret_cast<uintptr_t>(g.data), 0x210000u);
  EXPECT_EQ(g.size, 65536u);
}

// NCCL's meanings: TC 8 bits, SL 4 bits, TIMEOUT 1..31 (0 = infinite is refused: a lost peer would
// never time out), RETRY_CNT 3 bits; defaults 0, 0, 20, 7 (NCCL >= 2.23).
TEST(RdmaQpSettings, RangesAndDefaults) {
  IbQpSettings d;
  EXPECT_EQ(d.tc, 0);
  EXPECT_EQ(d.sl, 0);
  EXPECT_EQ(d.timeout, 20);
  EXPECT_EQ(d.retry_cnt, 7);
  std::string why;
  EXPECT_TRUE(ib_qp_settings_valid(d, &why));
  struct Case {
    IbQpSettings s;
    const char* bad;  // nullptr: valid
  } cases[] = {
      {{255, 15, 31, 7}, nullptr},
      {{0, 0, 1, 0}, nullptr},
      {{256, 0, 20, 7}, "NCCL_IB_TC=256"},
      {{-1, 0, 20, 7}, "NCCL_IB_TC=-1"},
      {{0, 16, 20, 7}, "NCCL_IB_SL=16"},
      {{0, 0, 0, 7}, "NCCL_IB_TIMEOUT=0"},
      {{0, 0, 32, 7}, "NCCL_IB_TIMEOUT=32"},
      {{0, 0, 20, 8}, "NCCL_IB_RETRY_CNT=8"},
  };
  for (const Case& c : cases) {
    why.clear();
    EXPECT_EQ(ib_qp_settings_valid(c.s, &why), c.bad == nullptr) << why;
    if (c.bad) {
      EXPECT_NE(why.find(c.bad), std::string::npos) << why;
      EXPECT_NE(why.find(".."), std::string::npos) << "names the range: " << why;
    }
  }
}
