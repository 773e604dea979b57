// The RDMA transport's pure decisions: NCCL_IB_HCA filtering, RoCE GID choice, port speed.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <cstring>

#include "src/rdma_select.h"

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
