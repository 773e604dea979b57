// Layout validation and rank coordinates.
#include <gtest/gtest.h>

#include <set>

#include "test_util.h"

namespace {

using namespace zipccl::hetero;

std::string error_of(const LayoutSpec& spec) {
  try {
    Layout layout(spec);
  } catch (const LayoutError& e) {
    return e.what();
  }
  return "no error";
}

LayoutSpec separate(ModuleSpec llm, ModuleSpec enc, int world) {
  LayoutSpec s;
  s.world_size = world;
  s.llm = llm;
  s.encoders.push_back(enc);
  return s;
}

ModuleSpec mod(const char* name, int tp, int cp, int pp, int first, int count) {
  ModuleSpec m;
  m.name = name;
  m.tp = tp;
  m.cp = cp;
  m.pp = pp;
  m.first_rank = first;
  m.num_ranks = count;
  return m;
}

TEST(HeteroLayout, DerivesDpAndKeepsTpFastest) {
  Layout layout(separate(mod("llm", 4, 1, 2, 8, 32), mod("vision", 2, 1, 1, 0, 8), 40));
  const Module& llm = layout.llm();
  EXPECT_EQ(llm.dp(), 4);
  EXPECT_EQ(layout.encoder(0).dp(), 4);
  EXPECT_FALSE(layout.colocated(0));
  // tp-cp-dp-pp: rank = first + tp + 4 * (dp + 4 * pp).
  EXPECT_EQ(llm.coords(8), (Coords{0, 0, 0, 0}));
  EXPECT_EQ(llm.coords(11), (Coords{3, 0, 0, 0}));
  EXPECT_EQ(llm.coords(12), (Coords{0, 0, 1, 0}));
  EXPECT_EQ(llm.coords(24), (Coords{0, 0, 0, 1}));
  EXPECT_EQ(llm.coords(39), (Coords{3, 0, 3, 1}));
  EXPECT_EQ(llm.boundary_stage(), 0);
  EXPECT_EQ(layout.encoder(0).boundary_stage(), 0);
  EXPECT_THROW(llm.coords(7), LayoutError);
  EXPECT_EQ(layout.find_encoder("vision"), 0);
  EXPECT_EQ(layout.find_encoder("audio"), -1);
}

TEST(HeteroLayout, CustomOrderIsABijection) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 300; ++i) {
    hetero_test::Case c = hetero_test::random_case(rng);
    Layout layout(c.spec);
    for (const Module& m : layout.modules()) {
      std::set<std::tuple<int, int, int, int>> seen;
      for (int r = m.first_rank(); r < m.end_rank(); ++r) {
        const Coords co = m.coords(r);
        EXPECT_EQ(m.rank(co), r);
        EXPECT_TRUE(seen.insert({co.tp, co.cp, co.dp, co.pp}).second);
        // The fastest dimension of the order steps by one rank.
        Coords next = co;
        const Dim fast = m.order()[0];
        if (co[fast] + 1 < m.size(fast)) {
          next[fast] += 1;
          EXPECT_EQ(m.rank(next), r + 1);
        }
      }
    }
  }
}

TEST(HeteroLayout, ParsesRankOrders) {
  EXPECT_EQ(to_string(parse_rank_order("pp-dp-cp-tp")), "pp-dp-cp-tp");
  for (const char* bad : {"tp-cp-dp", "tp-cp-dp-pp-ep", "tp-tp-dp-pp", "tp,cp,dp,pp", "", "tp-cp-dp-"}) {
    try {
      parse_rank_order(bad);
      ADD_FAILURE() << bad;
    } catch (const LayoutError& e) {
      EXPECT_NE(std::string(e.what()).find("must name each of tp, cp, dp, pp exactly once"),
                std::string::npos);
    }
  }
}

TEST(HeteroLayout, RejectsInvalidLayoutsNamingTheConstraint) {
  LayoutSpec s = separate(mod("llm", 4, 1, 2, 8, 32), mod("vision", 2, 1, 1, 0, 8), 40);
  s.world_size = 0;
  EXPECT_EQ(error_of(s), "world size must be at least 1 (got 0)");
  s.world_size = kMaxWorldSize + 1;
  try {
    Layout layout(s);
    ADD_FAILURE() << "no LimitError";
  } catch (const LimitError& e) {
    EXPECT_EQ(std::string(e.what()), "world size 1048577 is above the limit of 1048576 ranks "
                                     "(zipccl::hetero::kMaxWorldSize; plans keep tables per world rank)");
  }

  s = separate(mod("llm", 4, 1, 2, 8, 32), mod("vision", 2, 1, 1, 0, 8), 40);
  s.encoders.clear();
  EXPECT_EQ(error_of(s), "a layout needs at least one encoder (got none)");

  EXPECT_EQ(error_of(separate(mod("llm", 0, 1, 1, 8, 32), mod("vision", 2, 1, 1, 0, 8), 40)),
            "module 'llm': tp must be at least 1 (got 0)");
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, -1, 8, 32), mod("vision", 2, 1, 1, 0, 8), 40)),
            "module 'llm': pp must be at least 1 (got -1)");
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 32), mod("vision", 3, 1, 1, 0, 8), 40)),
            "module 'vision': 8 ranks (0-7) are not divisible by tp*cp*pp = 3 (tp 3, cp 1, pp 1)");
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 33), mod("vision", 2, 1, 1, 0, 8), 40)),
            "module 'llm': ranks 8-40 must lie inside the world of 40 ranks (0-39)");
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 32), mod("vision", 2, 1, 1, 0, 0), 40)),
            "module 'vision': needs at least 1 rank (got 0)");
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 32), mod("vision", 2, 1, 1, 4, 8), 40)),
            "modules 'llm' (ranks 8-39) and 'vision' (ranks 4-11) partially overlap: spans must be identical "
            "(colocated) or disjoint (separate)");
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 32), mod("vision", 2, 1, 1, 0, 4), 40)),
            "ranks 4-7 belong to no module: module spans must cover the world (0-39)");
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 24), mod("vision", 2, 1, 1, 0, 8), 40)),
            "ranks 32-39 belong to no module: module spans must cover the world (0-39)");
  EXPECT_EQ(error_of(separate(mod("x", 4, 1, 2, 8, 32), mod("x", 2, 1, 1, 0, 8), 40)),
            "module names must be unique: 'x' appears twice");

  ModuleSpec wrong_dp = mod("vision", 2, 1, 1, 0, 8);
  wrong_dp.dp = 2;
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 32), wrong_dp, 40)),
            "module 'vision': dp 2 was given, but 8 ranks / (tp*cp*pp = 2) give dp 4");
  ModuleSpec bad_order = mod("vision", 2, 1, 1, 0, 8);
  bad_order.order = {Dim::tp, Dim::tp, Dim::dp, Dim::pp};
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 32), bad_order, 40)),
            "module 'vision': rank order must name each of tp, cp, dp, pp exactly once");
  ModuleSpec first_only;
  first_only.first_rank = 3;
  EXPECT_EQ(error_of(separate(mod("llm", 4, 1, 2, 8, 32), first_only, 40)),
            "module 'encoder0': first rank 3 given without a number of ranks");
}

TEST(HeteroLayout, ColocatedAndMixedSpans) {
  LayoutSpec s;
  s.world_size = 8;
  s.llm.tp = 4;
  s.encoders.resize(2);
  s.encoders[0].name = "vision";
  s.encoders[1] = mod("audio", 2, 1, 1, 0, 8);
  Layout layout(s);
  EXPECT_EQ(layout.llm().dp(), 2);
  EXPECT_EQ(layout.encoder(0).dp(), 8);
  EXPECT_TRUE(layout.colocated(0));
  EXPECT_TRUE(layout.colocated(1));
  EXPECT_EQ(layout.encoder(0).name(), "vision");
  EXPECT_THROW(layout.encoder(2), LayoutError);
  // Sequence parallelism with tp 1 shards nothing.
  s.llm.tp = 1;
  s.llm.sequence_parallel = true;
  EXPECT_FALSE(Layout(s).llm().sequence_parallel());
}

}  // namespace
