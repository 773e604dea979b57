// Per-rank planning (rank_plan.h) against the world planner: on every random layout, in both
// directions, each rank's plan is exactly the world plan's transfers that rank sends or receives,
// in the same order, with the same buffer sizes and the same messages.
#include "zipccl/hetero/rank_plan.h"

#include <gtest/gtest.h>

#include "test_util.h"

namespace {

using namespace hetero_test;

bool same_messages(const std::vector<Message>& a, const std::vector<Message>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].peer != b[i].peer || a[i].buffer != b[i].buffer || a[i].offset != b[i].offset || a[i].bytes != b[i].bytes)
      return false;
  }
  return true;
}

// Empty when rank r's plan is the world plan's share of r.
std::string compare(const BoundaryPlan& world, const RankPlan& mine, int r) {
  std::vector<Transfer> expected;
  for (const Transfer& t : world.phases[0]) {
    if (t.src == r || t.dst == r) expected.push_back(t);
  }
  if (mine.phases.size() != 1) return "phases";
  if (mine.source_bytes != world.source_bytes[r] || mine.destination_bytes != world.destination_bytes[r])
    return "buffer sizes of rank " + std::to_string(r);
  if (mine.phases[0].size() != expected.size()) {
    return "rank " + std::to_string(r) + ": " + std::to_string(mine.phases[0].size()) + " transfers, the world plan has " +
           std::to_string(expected.size());
  }
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (mine.phases[0][i] != expected[i]) return "rank " + std::to_string(r) + " transfer " + std::to_string(i);
  }
  const RankSchedule a = make_schedule(world, r), b = make_schedule(mine);
  if (a.source_bytes != b.source_bytes || a.destination_bytes != b.destination_bytes) return "schedule sizes";
  for (std::size_t p = 0; p < a.phases.size(); ++p) {
    if (!same_messages(a.phases[p].sends, b.phases[p].sends) || !same_messages(a.phases[p].recvs, b.phases[p].recvs) ||
        a.phases[p].copies.size() != b.phases[p].copies.size()) {
      return "schedule of rank " + std::to_string(r);
    }
  }
  return "";
}

TEST(HeteroRankPlan, EveryRankMatchesTheWorldPlanner) {
  std::mt19937_64 rng(4242);
  int compared = 0, combined = 0;
  for (int i = 0; i < 1500; ++i) {
    const Case c = random_case(rng, 48, true);
    const Layout layout(c.spec);
    combined += c.batch.llm_sequence.format != SequenceFormat::image_only;
    for (int e = 0; e < layout.num_encoders(); ++e) {
      for (Direction dir : {Direction::forward, Direction::backward}) {
        const BoundaryPlan world = plan_boundary(layout, e, c.batch, dir);
        for (int r = 0; r < layout.world_size(); ++r) {
          const RankPlan mine = plan_rank(layout, e, c.batch, dir, r);
          ASSERT_EQ(compare(world, mine, r), "") << "case " << i << " encoder " << e << " " << direction_name(dir)
                                                 << ": " << c.describe();
          ++compared;
        }
      }
    }
  }
  EXPECT_GT(compared, 50000);
  EXPECT_GT(combined, 500);
}

TEST(HeteroRankPlan, PlannerCachesByMicroBatch) {
  LayoutSpec spec;
  spec.world_size = 24;
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, true, 8, 16};
  spec.encoders.push_back(ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 8});
  const Layout layout(spec);
  RankPlanner planner(layout, 0, 9, 2);
  BoundaryBatch a{{576, 1024, 256, 729, 576, 576, 100, 2048}, 64, 2};
  BoundaryBatch b = a;
  b.tokens[3] = 730;
  const RankPlan first = planner.plan(a, Direction::forward);
  EXPECT_EQ(compare(plan_forward(layout, 0, a), first, 9), "");
  planner.plan(a, Direction::forward);
  EXPECT_EQ(planner.hits(), 1u);
  EXPECT_EQ(compare(plan_forward(layout, 0, b), planner.plan(b, Direction::forward), 9), "");
  EXPECT_EQ(planner.misses(), 2u);
  planner.plan(a, Direction::backward);  // a third entry: evicts the least recently used (a forward)
  planner.plan(a, Direction::forward);
  EXPECT_EQ(planner.misses(), 4u);
  b.llm_assignment.rule = AssignmentRule::balanced;  // same tokens, other assignment: another plan
  EXPECT_EQ(compare(plan_forward(layout, 0, b), planner.plan(b, Direction::forward), 9), "");
  EXPECT_EQ(planner.misses(), 5u);
  EXPECT_THROW(plan_rank(layout, 0, a, Direction::forward, 24), LayoutError);
  EXPECT_THROW(plan_rank(layout, 0, a, Direction::forward, 0, PlanOptions{Strategy::scatter_allgather}), LayoutError);
}

}  // namespace
