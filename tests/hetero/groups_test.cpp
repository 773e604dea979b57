// Rank groups: partitions, ordering contract, Megatron-LM's groups for the default order.
#include "zipccl/hetero/groups.h"

#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace {

using namespace zipccl::hetero;

TEST(HeteroGroups, MatchMegatronForTheFortyRankExample) {
  LayoutSpec s;
  s.world_size = 40;
  s.llm = ModuleSpec{"llm", 4, 1, 2, 0, false, 8, 32};
  s.encoders.push_back(ModuleSpec{"vision", 2, 1, 1, 0, false, 0, 8});
  Layout layout(s);
  const Module& llm = layout.llm();
  const auto tp = dimension_groups(llm, Dim::tp);
  ASSERT_EQ(tp.size(), 8u);
  EXPECT_EQ(tp[0], (RankList{8, 9, 10, 11}));
  EXPECT_EQ(tp[7], (RankList{36, 37, 38, 39}));
  const auto dp = dimension_groups(llm, Dim::dp);
  ASSERT_EQ(dp.size(), 8u);
  EXPECT_EQ(dp[0], (RankList{8, 12, 16, 20}));
  const auto pp = dimension_groups(llm, Dim::pp);
  ASSERT_EQ(pp.size(), 16u);
  EXPECT_EQ(pp[0], (RankList{8, 24}));
  const auto mp = model_parallel_groups(llm);
  ASSERT_EQ(mp.size(), 4u);
  EXPECT_EQ(mp[1], (RankList{12, 13, 14, 15, 28, 29, 30, 31}));
  EXPECT_EQ(dimension_groups(layout.encoder(0), Dim::tp)[3], (RankList{6, 7}));
  // Boundary: all 8 encoder ranks and the LLM's first stage (8-23), not its second.
  RankList expect;
  for (int r = 0; r < 24; ++r) expect.push_back(r);
  EXPECT_EQ(boundary_ranks(layout, 0), expect);
}

TEST(HeteroGroups, FamiliesPartitionEveryModule) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 300; ++i) {
    hetero_test::Case c = hetero_test::random_case(rng);
    Layout layout(c.spec);
    const auto families = all_group_families(layout);
    ASSERT_EQ(families.size(), 5 * layout.modules().size() + layout.num_encoders());
    for (const GroupFamily& f : families) {
      if (f.kind == GroupKind::boundary) {
        ASSERT_EQ(f.groups.size(), 1u);
        for (int r : f.groups[0]) {
          bool at_boundary = false;
          for (const Module* m : {&layout.llm(), &layout.modules()[f.module]}) {
            at_boundary |= m->contains(r) && m->coords(r).pp == m->boundary_stage();
          }
          EXPECT_TRUE(at_boundary) << r;
        }
        EXPECT_TRUE(std::is_sorted(f.groups[0].begin(), f.groups[0].end()));
        continue;
      }
      const Module& m = layout.modules()[f.module];
      std::set<int> seen;
      for (std::size_t g = 0; g < f.groups.size(); ++g) {
        const RankList& group = f.groups[g];
        if (g > 0) {
          EXPECT_LT(f.groups[g - 1][0], group[0]);
        }
        for (std::size_t i = 0; i < group.size(); ++i) {
          EXPECT_TRUE(m.contains(group[i]));
          EXPECT_TRUE(seen.insert(group[i]).second);
          const Coords c0 = m.coords(group[0]), ci = m.coords(group[i]);
          if (f.kind == GroupKind::model_parallel) {
            EXPECT_EQ(ci.dp, c0.dp);
            if (i > 0) {
              EXPECT_LT(group[i - 1], group[i]);
            }
          } else {
            const Dim d = static_cast<Dim>(static_cast<int>(f.kind));
            EXPECT_EQ(ci[d], static_cast<int>(i));  // member i has coordinate i
            Coords a = ci, b = c0;
            a[d] = b[d] = 0;
            EXPECT_EQ(a, b);
          }
        }
      }
      EXPECT_EQ(static_cast<int>(seen.size()), m.num_ranks());
    }
  }
}

}  // namespace
