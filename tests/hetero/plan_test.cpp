// Boundary plan properties over thousands of random valid layouts and batches, checked against an
// independent row-by-row oracle (test_util.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <tuple>

#include "test_util.h"
#include "zipccl/hetero/rank_plan.h"
#include "zipccl/hetero/traffic.h"

namespace {

using namespace hetero_test;

// Returns an empty string when the plan meets the contract in plan.h, else the first violation.
std::string check_plan(const Layout& layout, const BoundaryBatch& batch, const BoundaryPlan& plan) {
  const Module& src = layout.modules()[plan.source_module];
  const Module& dst = layout.modules()[plan.destination_module];
  const Oracle have = make_oracle(layout, src, batch);
  const Oracle need = make_oracle(layout, dst, batch);
  const int world = layout.world_size(), n = batch.num_samples();
  const std::int64_t rb = batch.row_bytes();
  auto where = [](const Transfer& t) {
    return " (transfer " + std::to_string(t.src) + "->" + std::to_string(t.dst) + " sample " +
           std::to_string(t.sample) + " rows " + std::to_string(t.rows.begin) + "-" +
           std::to_string(t.rows.end) + ")";
  };
  for (int r = 0; r < world; ++r) {
    if (plan.source_bytes[r] != have.buffer_rows[r] * rb) return "source_bytes of rank " + std::to_string(r);
    if (plan.destination_bytes[r] != need.buffer_rows[r] * rb)
      return "destination_bytes of rank " + std::to_string(r);
  }
  // written[rank][sample][row]: how many transfers wrote it so far.
  std::vector<std::vector<std::vector<int>>> written(world, std::vector<std::vector<int>>(n));
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < n; ++s) written[r][s].assign(batch.tokens[s], 0);
  }
  for (std::size_t phase = 0; phase < plan.phases.size(); ++phase) {
    std::vector<std::tuple<int, int, std::int64_t>> this_phase;
    for (const Transfer& t : plan.phases[phase]) {
      if (t.sample < 0 || t.sample >= n || t.rows.begin < 0 || t.rows.end > batch.tokens[t.sample] ||
          t.rows.size() <= 0) {
        return "bad rows" + where(t);
      }
      if (t.bytes != t.rows.size() * rb) return "bytes != rows * row_bytes" + where(t);
      const bool relay = t.src_buffer == BufferKind::destination;
      if (relay && phase == 0) return "phase 0 reads a destination buffer" + where(t);
      for (std::int64_t row = t.rows.begin; row < t.rows.end; ++row) {
        if (!need.has(t.dst, t.sample, row)) return "row not needed by the receiver" + where(t);
        if (relay) {
          // Held now only if written by an earlier phase.
          if (!need.has(t.src, t.sample, row) || written[t.src][t.sample][row] != 1) {
            return "relay of a row the sender does not hold yet" + where(t);
          }
        } else if (!have.has(t.src, t.sample, row)) {
          return "sender does not hold the row" + where(t);
        }
        if (t.src != t.dst && have.has(t.dst, t.sample, row))
          return "sent a row the receiver holds" + where(t);
        this_phase.emplace_back(t.dst, t.sample, row);
      }
      const Oracle& src_layout = relay ? need : have;
      if (t.src_offset != src_layout.position(t.src, t.sample, t.rows.begin) * rb)
        return "src_offset" + where(t);
      if (t.dst_offset != need.position(t.dst, t.sample, t.rows.begin) * rb) return "dst_offset" + where(t);
    }
    for (const auto& [r, s, row] : this_phase) {
      if (++written[r][s][row] > 1) {
        return "rank " + std::to_string(r) + " sample " + std::to_string(s) + " row " + std::to_string(row) +
               " written twice";
      }
    }
  }
  for (int r = 0; r < world; ++r) {
    for (int s = 0; s < n; ++s) {
      for (std::int64_t row = 0; row < batch.tokens[s]; ++row) {
        if (written[r][s][row] != (need.has(r, s, row) ? 1 : 0)) {
          return "rank " + std::to_string(r) + " sample " + std::to_string(s) + " row " +
                 std::to_string(row) + " written " + std::to_string(written[r][s][row]) + " times";
        }
      }
    }
  }
  return "";
}

// Received bytes per rank == what it needs and does not hold; direct sends within a row of the bound.
std::string check_balance(const Layout& layout, const BoundaryBatch& batch, const BoundaryPlan& plan) {
  const TrafficSummary t = summarize(plan, layout);
  const LowerBounds lb = lower_bounds(layout, plan.encoder, batch, plan.direction);
  const Oracle have = make_oracle(layout, layout.modules()[plan.source_module], batch);
  const Oracle need = make_oracle(layout, layout.modules()[plan.destination_module], batch);
  std::int64_t missing_max = 0;
  for (int r = 0; r < layout.world_size(); ++r) {
    std::int64_t missing = 0;
    for (int s = 0; s < batch.num_samples(); ++s) {
      for (std::int64_t row : need.keeps[r][s]) missing += !have.has(r, s, row);
    }
    missing *= batch.row_bytes();
    if (t.ranks[r].received != missing) return "rank " + std::to_string(r) + " receives more than it misses";
    missing_max = std::max(missing_max, missing);
  }
  if (lb.received != missing_max) return "lower bound on received is wrong";
  if (t.max_received != lb.received) return "max received above the lower bound";
  if (t.max_sent < lb.sent) return "max sent below a lower bound";
  if (plan.strategy == Strategy::scatter_allgather) {
    // Each row enters a replicated receiving party once (none if every member holds it; a holder
    // inside the party scatters to the others rather than relaying the rows to each), and members
    // that hold nothing of the source end up passing on equal shares (within a row each).
    const Module& dst = layout.modules()[plan.destination_module];
    const Module& src = layout.modules()[plan.source_module];
    std::map<std::tuple<int, int, int>, std::vector<int>> parties;  // (replica, cp, tp or -1) -> ranks
    for (int r = dst.first_rank(); r < dst.end_rank(); ++r) {
      const Coords c = dst.coords(r);
      if (c.pp == dst.boundary_stage())
        parties[{c.dp, c.cp, dst.sequence_parallel() ? c.tp : -1}].push_back(r);
    }
    std::map<int, std::tuple<int, int, int>> party_of;
    for (const auto& [key, ranks] : parties) {
      for (int r : ranks) party_of[r] = key;
    }
    std::map<std::tuple<int, int, int, int, std::int64_t>, int> entered;  // party + sample + row
    for (const Transfer& x : plan.phases[0]) {
      if (x.src == x.dst) continue;
      const auto [d, c, tp] = party_of[x.dst];
      for (auto row = x.rows.begin; row < x.rows.end; ++row) ++entered[{d, c, tp, x.sample, row}];
    }
    for (const auto& [key, ranks] : parties) {
      bool holds_any = false;
      for (int r : ranks) holds_any |= src.contains(r);
      const auto [d, c, tp] = key;
      for (int s = 0; s < batch.num_samples(); ++s) {
        for (std::int64_t row : need.keeps[ranks[0]][s]) {
          bool held_by_all = true;
          for (int r : ranks) held_by_all &= have.has(r, s, row);
          if (entered[{d, c, tp, s, row}] != (held_by_all ? 0 : 1)) {
            return "a row entered a party " + std::to_string(entered[{d, c, tp, s, row}]) + " times";
          }
        }
      }
      if (holds_any || ranks.size() < 2) continue;
      std::int64_t lo = INT64_MAX, hi = 0;
      for (int r : ranks) {
        std::int64_t relayed = 0;
        for (const Transfer& x : plan.phases[1]) relayed += x.src == r ? x.bytes : 0;
        lo = std::min(lo, relayed);
        hi = std::max(hi, relayed);
      }
      if (hi - lo > static_cast<std::int64_t>(ranks.size() - 1) * batch.row_bytes())
        return "unequal relay shares";
    }
  }
  if (plan.strategy == Strategy::direct) {
    if (t.max_sent < lb.sent_holders_only) return "direct max sent below the holders-only bound";
    if (t.max_sent >= lb.sent_holders_only + batch.row_bytes() && t.max_sent > 0) {
      return "direct max sent " + std::to_string(t.max_sent) + " more than a row above the bound " +
             std::to_string(lb.sent_holders_only);
    }
  }
  return "";
}

TEST(HeteroPlan, RandomLayoutsMeetTheContract) {
  std::mt19937_64 rng(test_seed(20240601));
  int cases = 0, relayed = 0, colocated = 0;
  std::map<std::tuple<int, bool, bool>, int> inputs;  // (format, LLM sp, LLM cp > 1) -> cases
  for (int i = 0; i < 2500; ++i) {
    Case c = random_case(rng, 48, true);
    Layout layout(c.spec);
    ++inputs[{static_cast<int>(c.batch.llm_sequence.format), layout.llm().sequence_parallel(), layout.llm().cp() > 1}];
    for (int e = 0; e < layout.num_encoders(); ++e) {
      colocated += layout.colocated(e);
      for (Strategy st : {Strategy::direct, Strategy::scatter_allgather}) {
        for (Direction dir : {Direction::forward, Direction::backward}) {
          const BoundaryPlan plan = plan_boundary(layout, e, c.batch, dir, PlanOptions{st});
          if (st == Strategy::scatter_allgather && !plan.phases[1].empty()) ++relayed;
          std::string err = check_plan(layout, c.batch, plan);
          if (err.empty()) err = check_balance(layout, c.batch, plan);
          ASSERT_EQ(err, "") << "case " << i << " encoder " << e << " " << direction_name(dir) << " "
                             << strategy_name(st) << ": " << c.describe();
          ++cases;
        }
      }
    }
  }
  // Every LLM input format meets every combination of sequence parallelism and context parallelism.
  for (int f : {0, 1, 2}) {
    for (bool sp : {false, true}) {
      for (bool cp : {false, true}) EXPECT_GT((inputs[{f, sp, cp}]), 40) << f << sp << cp;
    }
  }
  EXPECT_GT(relayed, 500);  // the generator reaches both strategies' interesting paths
  EXPECT_GT(colocated, 300);
  EXPECT_GT(cases, 10000);
}

// The backward delivers to exactly the copies the forward read from (every encoder rank that kept
// the activation), and the forward writes exactly where the backward reads: the two plans are each
// other's reverse on the layout, with their own choice of which copy to read.
TEST(HeteroPlan, AutomaticKeepsTheLighterPlan) {
  std::mt19937_64 rng(test_seed(31));
  int relay_chosen = 0, direct_chosen = 0;
  for (int i = 0; i < 400; ++i) {
    Case c = random_case(rng, 48, true);
    Layout layout(c.spec);
    for (Direction dir : {Direction::forward, Direction::backward}) {
      const BoundaryPlan a = plan_boundary(layout, 0, c.batch, dir, PlanOptions{Strategy::automatic});
      const std::int64_t direct =
          summarize(plan_boundary(layout, 0, c.batch, dir, PlanOptions{Strategy::direct}), layout).max_sent;
      const std::int64_t relay =
          summarize(plan_boundary(layout, 0, c.batch, dir, PlanOptions{Strategy::scatter_allgather}), layout)
              .max_sent;
      ASSERT_EQ(summarize(a, layout).max_sent, std::min(direct, relay)) << c.describe();
      ASSERT_EQ(a.strategy, relay < direct ? Strategy::scatter_allgather : Strategy::direct);
      ASSERT_EQ(check_plan(layout, c.batch, a), "") << c.describe();
      relay_chosen += a.strategy == Strategy::scatter_allgather;
      direct_chosen += a.strategy == Strategy::direct;
    }
  }
  EXPECT_GT(relay_chosen, 20);
  EXPECT_GT(direct_chosen, 20);
}

TEST(HeteroPlan, BackwardReturnsToEveryProducer) {
  std::mt19937_64 rng(test_seed(7));
  for (int i = 0; i < 300; ++i) {
    Case c = random_case(rng, 48, true);
    Layout layout(c.spec);
    const BoundaryPlan fwd = plan_forward(layout, 0, c.batch);
    const BoundaryPlan bwd = plan_backward(layout, 0, c.batch);
    ASSERT_EQ(fwd.source_bytes, bwd.destination_bytes) << c.describe();
    ASSERT_EQ(fwd.destination_bytes, bwd.source_bytes) << c.describe();
    std::map<std::tuple<int, int, std::int64_t>, int> fwd_read, bwd_written;
    for (const Transfer& t : fwd.phases[0]) {
      for (auto row = t.rows.begin; row < t.rows.end; ++row) fwd_read[{t.src, t.sample, row}] = 1;
    }
    for (const Transfer& t : bwd.phases[0]) {
      for (auto row = t.rows.begin; row < t.rows.end; ++row) ++bwd_written[{t.dst, t.sample, row}];
    }
    for (const auto& [key, count] : fwd_read) ASSERT_EQ(bwd_written[key], 1) << c.describe();
  }
}

TEST(HeteroPlan, ExamplesFromTheIssue) {
  // 40 GPUs: encoder TP2 DP4 on 0-7, LLM TP4 PP2 DP4 on 8-39; 8 samples of 576 tokens, hidden 4096, bf16.
  LayoutSpec spec;
  spec.world_size = 40;
  spec.llm = ModuleSpec{"llm", 4, 1, 2, 4, false, 8, 32};
  spec.encoders.push_back(ModuleSpec{"vision", 2, 1, 1, 4, false, 0, 8});
  Layout layout(spec);
  BoundaryBatch batch{std::vector<std::int64_t>(8, 576), 4096, 2};
  const std::int64_t sample = 576 * 4096 * 2;
  BoundaryPlan p = plan_forward(layout, 0, batch);
  TrafficSummary t = summarize(p, layout);
  // Each LLM stage-0 rank needs its replica's 2 samples; stage-1 ranks receive nothing.
  for (int r = 8; r < 24; ++r) EXPECT_EQ(t.ranks[r].received, 2 * sample) << r;
  for (int r = 24; r < 40; ++r) EXPECT_EQ(t.ranks[r].received, 0) << r;
  // Two encoder tp ranks share four copies of two samples: 4 samples each.
  for (int r = 0; r < 8; ++r) EXPECT_EQ(t.ranks[r].sent, 4 * sample) << r;
  EXPECT_EQ(t.boundary_bytes, 16 * 2 * sample);
  // scatter_allgather: 2 samples cross per replica, then the 4 LLM ranks exchange quarters.
  p = plan_forward(layout, 0, batch, PlanOptions{Strategy::scatter_allgather});
  t = summarize(p, layout);
  for (int r = 0; r < 8; ++r) EXPECT_EQ(t.ranks[r].sent, sample) << r;
  for (int r = 8; r < 24; ++r) EXPECT_EQ(t.ranks[r].received, 2 * sample) << r;
  for (int r = 8; r < 24; ++r) EXPECT_EQ(t.ranks[r].sent, 3 * sample / 2) << r;
  EXPECT_EQ(t.boundary_bytes, 4 * 2 * sample);

  // 8 GPUs: encoder TP1 (DP8) colocated with LLM TP4 (DP2); each rank encodes one sample.
  LayoutSpec co;
  co.world_size = 8;
  co.llm.tp = 4;
  co.encoders.push_back(ModuleSpec{});
  Layout colocated(co);
  ASSERT_TRUE(colocated.colocated(0));
  p = plan_forward(colocated, 0, batch);
  t = summarize(p, colocated);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(t.ranks[r].received, 3 * sample) << r;
    EXPECT_EQ(t.ranks[r].sent, 3 * sample) << r;
    EXPECT_EQ(t.ranks[r].copied, sample) << r;
  }
  const TrafficSummary leader = leader_broadcast_traffic(colocated, 0, batch, Direction::forward);
  EXPECT_EQ(leader.max_received, 4 * sample);  // the broadcast resends what a member holds
}

TEST(HeteroPlan, SequenceParallelReceivesAShard) {
  LayoutSpec spec;
  spec.world_size = 24;
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, true, 8, 16};
  spec.encoders.push_back(ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 8});
  Layout layout(spec);
  BoundaryBatch batch{{576, 575, 1, 0, 100, 7, 576, 33}, 16, 2};
  const BoundaryPlan p = plan_forward(layout, 0, batch);
  const TrafficSummary t = summarize(p, layout);
  const TrafficSummary leader = leader_broadcast_traffic(layout, 0, batch, Direction::forward);
  const LowerBounds lb = lower_bounds(layout, 0, batch, Direction::forward);
  EXPECT_EQ(t.max_received, lb.received);
  EXPECT_LT(t.max_received * 3, leader.max_received);  // a quarter of the samples, not all of them
  // Fan-in: LLM replica 0 (ranks 8-11) takes samples 0-1 from encoder ranks 0 and 1.
  std::int64_t got = 0;
  for (const Transfer& x : p.phases[0]) got += x.dst >= 8 && x.dst < 12 ? x.rows.size() : 0;
  EXPECT_EQ(got, 576 + 575);
}

TEST(HeteroPlan, EmptyAndDegenerateBatches) {
  LayoutSpec spec;
  spec.world_size = 6;
  spec.llm = ModuleSpec{"llm", 2, 1, 1, 0, true, 2, 4};
  spec.encoders.push_back(ModuleSpec{"vision", 2, 1, 1, 0, false, 0, 2});
  Layout layout(spec);
  for (const auto& tokens : std::vector<std::vector<std::int64_t>>{{}, {0}, {0, 0, 0}, {1}, {1, 0, 1}}) {
    BoundaryBatch batch{tokens, 3, 2};
    for (Direction dir : {Direction::forward, Direction::backward}) {
      for (Strategy st : {Strategy::direct, Strategy::scatter_allgather}) {
        const BoundaryPlan p = plan_boundary(layout, 0, batch, dir, PlanOptions{st});
        EXPECT_EQ(check_plan(layout, batch, p), "");
        EXPECT_EQ(check_balance(layout, batch, p), "");
      }
    }
  }
}

TEST(HeteroPlan, BadBatchesAreRejected) {
  LayoutSpec spec;
  spec.world_size = 2;
  spec.encoders.push_back(ModuleSpec{});
  Layout layout(spec);
  auto message = [&](BoundaryBatch b) {
    try {
      plan_forward(layout, 0, b);
    } catch (const BatchError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({{1, -2}, 4, 2}), "sample 1 has a negative token count (-2)");
  EXPECT_EQ(message({{1}, 0, 2}), "hidden size must be at least 1 (got 0)");
  EXPECT_EQ(message({{1}, 4, 0}), "element size must be at least 1 byte (got 0)");
  EXPECT_EQ(message({{INT64_MAX / 4, INT64_MAX / 4}, 2, 2}),
            "the batch's byte count (tokens * hidden * element size) overflows 64 bits");
  EXPECT_THROW(plan_forward(layout, 1, BoundaryBatch{{1}, 1, 1}), LayoutError);
  EXPECT_THROW(plan_forward(layout, 0, BoundaryBatch{std::vector<std::int64_t>(kMaxSamples + 1, 1), 1, 1}),
               LimitError);
}

// The issue's reproducer: the batch fits in 64 bits but 4 receivers' copies of it do not. Every
// function that sums bytes must refuse it rather than wrap around.
TEST(HeteroPlan, TrafficThatOverflowsIsAnError) {
  LayoutSpec spec;
  spec.world_size = 5;
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, false, 1, 4};
  spec.encoders.push_back(ModuleSpec{"v", 1, 1, 1, 0, false, 0, 1});
  const Layout layout(spec);
  const BoundaryBatch batch{{INT64_MAX}, 1, 1};
  const std::string expected =
      "the boundary traffic overflows 64 bits: the batch's 9223372036854775807 bytes x up to 5 copies "
      "(module 'llm' receives on tp 4 x cp 1 ranks per sample, plus one leader hop) = more than "
      "9223372036854775807 bytes; split the batch";
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const BatchError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  for (Strategy st : {Strategy::direct, Strategy::scatter_allgather, Strategy::automatic}) {
    EXPECT_EQ(message([&] { plan_forward(layout, 0, batch, PlanOptions{st}); }), expected);
  }
  EXPECT_EQ(message([&] { lower_bounds(layout, 0, batch, Direction::forward); }), expected);
  EXPECT_EQ(message([&] { leader_broadcast_traffic(layout, 0, batch, Direction::forward); }), expected);
  // The largest batch that fits: 5 copies of it still fit, and the figures are exact.
  const BoundaryBatch fits{{INT64_MAX / 5}, 1, 1};
  const BoundaryPlan p = plan_forward(layout, 0, fits, PlanOptions{Strategy::scatter_allgather});
  EXPECT_EQ(summarize(p, layout).max_received, INT64_MAX / 5);
  EXPECT_EQ(lower_bounds(layout, 0, fits, Direction::forward).received, INT64_MAX / 5);
  EXPECT_EQ(detail::checked_mul(3, 4, "x"), 12);
  EXPECT_EQ(message([] { detail::checked_add(INT64_MAX, 1, "bytes sent by one rank"); }),
            "bytes sent by one rank: 9223372036854775807 + 1 overflows 64 bits");
}

// Issue 22 item 3: a holder inside the receiving party scatters its rows (each enters the party
// once) instead of relaying them to every member. The two hot spots of the issue, bf16, hidden 4096.
TEST(HeteroPlan, HoldersInsideThePartyScatter) {
  const std::int64_t row = 4096 * 2;
  LayoutSpec a;  // 8 GPUs: encoder tp1 colocated with LLM tp4
  a.world_size = 8;
  a.llm.tp = 4;
  a.encoders.push_back(ModuleSpec{"vision"});
  const Layout la(a);
  const BoundaryBatch ba{{576, 1024, 256, 729, 0, 576, 100, 2048}, 4096, 2};
  LayoutSpec b;  // 64 GPUs: LLM tp8; encoder tp1 pp2 with pp fastest, so its holders sit in one LLM party
  b.world_size = 64;
  b.llm.tp = 8;
  b.encoders.push_back(ModuleSpec{"enc0", 1, 1, 2, 0, false, 0, -1, parse_rank_order("pp-dp-tp-cp")});
  const Layout lb_layout(b);
  const BoundaryBatch bb{{576, 576, 576, 576}, 4096, 2};
  struct Example {
    const Layout& layout;
    const BoundaryBatch& batch;
    std::int64_t before;  // what the relay sent before: the holder passed its rows to every member
    double most;          // max sent / lower bound, at most
  };
  for (const Example& x : {Example{la, ba, 3 * 2048 * row, 1.01}, Example{lb_layout, bb, 7 * 576 * row, 1.25}}) {
    const BoundaryPlan p = plan_forward(x.layout, 0, x.batch, PlanOptions{Strategy::scatter_allgather});
    ASSERT_EQ(check_plan(x.layout, x.batch, p), "");
    ASSERT_EQ(check_balance(x.layout, x.batch, p), "");
    const TrafficSummary t = summarize(p, x.layout);
    const LowerBounds lb = lower_bounds(x.layout, 0, x.batch, Direction::forward);
    const TrafficSummary leader = leader_broadcast_traffic(x.layout, 0, x.batch, Direction::forward);
    EXPECT_EQ(t.max_received, lb.received);
    EXPECT_LE(t.max_sent, x.most * lb.sent);
    EXPECT_LT(t.max_sent, leader.max_sent);
    EXPECT_LT(t.max_sent * 2, x.before);
    // automatic now keeps the relay: direct sends the holders-only bound, 3x-8x more.
    EXPECT_EQ(plan_forward(x.layout, 0, x.batch, PlanOptions{Strategy::automatic}).strategy,
              Strategy::scatter_allgather);
  }
  // Example 1 exactly: rank 7 lets sample 7 out once (16 MiB) and relays nothing more than a row's
  // rounding; before, it sent it to each of 3 members (48 MiB).
  const TrafficSummary t = summarize(plan_forward(la, 0, ba, PlanOptions{Strategy::scatter_allgather}), la);
  EXPECT_LE(t.ranks[7].sent, 2048 * row + 16 * row);
}

// On random layouts with realistic sample sizes: the relay and automatic never send more than
// leader+broadcast, and automatic stays within a row of the holders-only bound (direct's
// guarantee). A party relaying few rows is where passing whole rows on to all other members at once
// would exceed the ring (TwoPhasesOfWholeRowsVersusTheRing); it relays in chains there.
// ZIPCCL_HETERO_SEEDS=N runs N seeds (BENCHMARKS.md quotes 8).
TEST(HeteroPlan, RelayNeverAboveLeaderBroadcast) {
  const char* env = std::getenv("ZIPCCL_HETERO_SEEDS");
  const int seeds = env ? std::max(1, std::atoi(env)) : 1;
  int cases = 0, relay_kept = 0, small = 0, chained = 0;
  for (int i = 0; i < 1500 * seeds; ++i) {
    static std::mt19937_64 rng;
    if (i % 1500 == 0) rng.seed(test_seed(20260 + i / 1500));
    Case c = random_case(rng, 48, true);
    for (auto& t : c.batch.tokens) t = t * 97 + static_cast<std::int64_t>(rng() % 97);
    if (c.batch.llm_sequence.format != SequenceFormat::image_only) random_sequence(rng, c.batch, c.spec.llm);
    const Layout layout(c.spec);
    for (int e = 0; e < layout.num_encoders(); ++e) {
      for (Direction dir : {Direction::forward, Direction::backward}) {
        const Module& dst = layout.modules()[dir == Direction::forward ? 0 : 1 + e];
        const LowerBounds lb = lower_bounds(layout, e, c.batch, dir);
        const std::int64_t leader = leader_broadcast_traffic(layout, e, c.batch, dir).max_sent;
        const BoundaryPlan relay = plan_boundary(layout, e, c.batch, dir, PlanOptions{Strategy::scatter_allgather});
        const BoundaryPlan chosen = plan_boundary(layout, e, c.batch, dir, PlanOptions{Strategy::automatic});
        const std::int64_t relay_sent = summarize(relay, layout).max_sent;
        const std::int64_t chosen_sent = summarize(chosen, layout).max_sent;
        ASSERT_LE(relay_sent, leader) << c.describe() << " " << direction_name(dir);
        ASSERT_LE(chosen_sent, leader) << c.describe() << " " << direction_name(dir);
        ASSERT_LE(chosen_sent, lb.sent_holders_only + c.batch.row_bytes()) << c.describe();
        const std::int64_t m = dst.sequence_parallel() ? 1 : dst.tp();
        small += std::accumulate(c.batch.tokens.begin(), c.batch.tokens.end(), std::int64_t{0}) < m * (m - 1);
        chained += relay.phases.size() > 2;
        relay_kept += chosen.strategy == Strategy::scatter_allgather;
        ++cases;
      }
    }
  }
  std::printf("%d boundaries (%d seeds): none above leader+broadcast; %d relay plans with chains, %d small batches\n",
              cases, seeds, chained, small);
  EXPECT_GT(cases, 3000);
  // Coverage, with room for other seeds (ZIPCCL_HETERO_SEED; over 40 of them: 74-134 small, 3-16 chained).
  EXPECT_GT(small, 50);  // batches where two phases of whole rows could exceed the ring
  EXPECT_GT(chained, 1);
  EXPECT_GT(relay_kept, 500);
}

// The small batches above, by hand: one 1-row sample from a tp-1 encoder to an LLM party of 4. The
// ring sends 1 row per rank; direct 4 from the holder; a relay passing the row on whole 3 from the
// member it reaches - no two-phase plan of whole rows does better - so the party chains: each member
// sends it at most once, in 3 relay phases. From m (m - 1) = 12 rows the star costs no more than
// the ring (9 rows per member against 12, 2 phases); in between (5 rows: star 2 x 3 = 6 per member,
// ring 5) the chain sends 5 - 1 = 4 (each member passes on all but its successor's piece).
TEST(HeteroPlan, TwoPhasesOfWholeRowsVersusTheRing) {
  LayoutSpec spec;
  spec.world_size = 5;
  spec.encoders.push_back(ModuleSpec{"v", 1, 1, 1, 0, false, 0, 1});
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, false, 1, 4};
  const Layout layout(spec);
  struct Expect {
    std::int64_t tokens, direct, relay, ring;
    std::size_t phases;
  };
  for (const Expect& x : {Expect{1, 4, 1, 1, 4}, Expect{5, 20, 4, 5, 4}, Expect{12, 48, 9, 12, 2}}) {
    const BoundaryBatch batch{{x.tokens}, 1, 1};
    EXPECT_EQ(leader_broadcast_traffic(layout, 0, batch, Direction::forward).max_sent, x.ring);
    EXPECT_EQ(summarize(plan_forward(layout, 0, batch), layout).max_sent, x.direct);
    const BoundaryPlan chosen = plan_forward(layout, 0, batch, PlanOptions{Strategy::automatic});
    ASSERT_EQ(check_plan(layout, batch, chosen), "");
    EXPECT_EQ(chosen.strategy, Strategy::scatter_allgather);
    const TrafficSummary t = summarize(chosen, layout);
    EXPECT_EQ(t.ranks[0].sent, x.tokens);  // the holder lets each row out once
    std::int64_t members = 0;
    for (int r = 1; r <= 4; ++r) members = std::max(members, t.ranks[r].sent);
    EXPECT_EQ(members, x.relay) << x.tokens << " rows";
    EXPECT_EQ(chosen.phases.size(), x.phases) << x.tokens << " rows";
  }
  // The closed form the per-rank planner decides by, against the plans, 0-40 rows.
  for (std::int64_t tokens = 0; tokens <= 40; ++tokens) {
    const BoundaryBatch batch{{tokens}, 1, 1};
    const TrafficSummary t = summarize(plan_forward(layout, 0, batch, PlanOptions{Strategy::scatter_allgather}), layout);
    std::int64_t members = 0;
    for (int r = 1; r <= 4; ++r) members = std::max(members, t.ranks[r].sent);
    EXPECT_EQ(members, detail::pooled_relay_rows(tokens, 4)) << tokens << " rows";
  }
}

// chain_wins' per-member figures (what the per-rank planner counts for automatic) against the hops
// for_each_hop really makes (what both planners emit), on random parties where some members hold
// some shares: each member sends a share on unless it holds it or ends its chain.
TEST(HeteroPlan, ChainCostsMatchTheirHops) {
  std::mt19937_64 rng(test_seed(77));
  int checked = 0;
  for (int i = 0; i < 2000; ++i) {
    const int m = 2 + static_cast<int>(rng() % 9);
    std::vector<int> member_party(m);
    for (int& q : member_party) q = static_cast<int>(rng() % 4) - 1;  // -1: holds nothing
    std::vector<std::vector<detail::Share>> shares(m);
    for (int n = static_cast<int>(rng() % 12); n > 0; --n) {
      const int a = static_cast<int>(rng() % m), q = static_cast<int>(rng() % 5);
      if (member_party[a] == q) continue;  // a member never enters rows it holds
      const std::int64_t begin = static_cast<std::int64_t>(rng() % 100);
      shares[a].push_back(detail::Share{q, 0, RowRange{begin, begin + 1 + static_cast<std::int64_t>(rng() % 7)}});
    }
    std::vector<std::int64_t> hops(m, 0);
    for (int a = 0; a < m; ++a) {
      for (const detail::Share& sh : shares[a]) {
        detail::for_each_hop(member_party, a, sh, [&](int from, int, std::size_t) { hops[from] += sh.rows.size(); });
      }
    }
    std::vector<std::int64_t> sends(m, std::int64_t{1} << 40);  // a star so costly that chains always win
    if (!detail::chain_wins(member_party, std::vector<std::int64_t>(m, 0), shares, sends)) {
      EXPECT_TRUE(std::all_of(shares.begin(), shares.end(), [](const auto& x) { return x.empty(); }));
      continue;
    }
    ASSERT_EQ(sends, hops) << "party of " << m;
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

// relay_pieces' per-member relay rows - what the per-rank planner counts for automatic - against the
// phase-1+ sends both planners emit from its shares (for_each_relay: the star with its helpers, or
// chains), on every relayed party of random layouts with random holder loads; helpers, chains
// and plain stars are asserted to occur, and a helper only ever sends rows its own party holds.
TEST(HeteroPlan, RelayRowsMatchTheRelaysEmitted) {
  std::mt19937_64 rng(test_seed(515));
  int parties = 0, helped = 0, chained = 0;
  for (int i = 0; i < 2500; ++i) {
    Case c = random_case(rng, 40, false);
    if (rng() % 2 == 0) {
      for (auto& t : c.batch.tokens) t = static_cast<std::int64_t>(rng() % 12);  // small: chains
    }
    const Layout layout(c.spec);
    const std::int64_t loads = rng() % 2 == 0 ? 1 : 50;
    for (int e = 0; e < 2 * layout.num_encoders(); ++e) {  // forward, then backward
      const Module& src = e % 2 == 0 ? layout.modules()[1 + e / 2] : layout.llm();
      const Module& dst = e % 2 == 0 ? layout.llm() : layout.modules()[1 + e / 2];
      const detail::Placement ps = detail::make_placement(src, c.batch, layout.world_size());
      const detail::Placement pd = detail::make_placement(dst, c.batch, layout.world_size());
      for (const detail::Party& P : pd.parties) {
        const int m = static_cast<int>(P.ranks.size());
        if (m < 2) continue;
        std::vector<int> slots, member_party(m);
        std::vector<std::int64_t> load(m);
        for (int s : P.samples) slots.push_back(pd.slot[s]);
        for (int j = 0; j < m; ++j) {
          member_party[j] = ps.party_of_rank[P.ranks[j]];
          load[j] = static_cast<std::int64_t>(rng() % loads);
        }
        std::vector<std::vector<detail::Share>> shares;
        std::vector<std::int64_t> sends;
        const bool chain = detail::relay_pieces(
            P, slots, member_party, load,
            [&](int s, RowRange want, auto&& f) {
              const int first = ps.first_party_of_sample(s);
              for (int q = first; q < first + ps.parties_per_replica; ++q) {
                for (const RowRange* r = ps.ranges_begin(ps.parties[q], s); r != ps.ranges_end(ps.parties[q], s); ++r) {
                  const RowRange o{std::max(want.begin, r->begin), std::min(want.end, r->end)};
                  if (o.begin < o.end) f(q, o);
                }
              }
            },
            [](int, int, int, RowRange) {}, [](int, int, int, RowRange) {}, shares, sends);
        std::vector<std::int64_t> emitted(m, 0);
        bool any_helper = false;
        detail::for_each_relay(chain, member_party, shares, [&](int from, int to, const detail::Share& sh, std::size_t) {
          ASSERT_NE(member_party[to], sh.holder_party);
          if (sh.helper == from) {
            ASSERT_EQ(member_party[from], sh.holder_party);  // it copied these rows in phase 0
            any_helper = true;
          }
          emitted[from] += sh.rows.size();
        });
        ASSERT_EQ(emitted, sends) << c.describe();
        ++parties;
        helped += any_helper;
        chained += chain;
      }
    }
  }
  std::printf("%d relayed parties: %d with helpers, %d in chains\n", parties, helped, chained);
  EXPECT_GT(helped, 40);
  EXPECT_GT(chained, 100);
  EXPECT_GT(parties - helped - chained, 100);
}

// The balanced rule: the oracle's linear-scan LPT, its guarantee, and a given map's validation.
TEST(HeteroAssignment, BalancedIsLptAndWithinTheLargestSample) {
  std::mt19937_64 rng(22);
  for (int i = 0; i < 3000; ++i) {
    const int dp = pick(rng, {1, 2, 3, 4, 7, 8, 16});
    const int n = static_cast<int>(rng() % 70);
    std::vector<std::int64_t> tokens(n);
    for (auto& t : tokens) t = rng() % 5 == 0 ? 0 : static_cast<std::int64_t>(rng() % (rng() % 2 ? 8 : 3000));
    LayoutSpec spec;
    spec.world_size = dp;
    spec.encoders.push_back(ModuleSpec{"v"});
    const Layout layout(spec);
    BoundaryBatch batch{tokens, 1, 1};
    batch.encoder_assignment.rule = AssignmentRule::balanced;
    const std::vector<int> got = module_replicas(layout.encoder(0), batch);
    ASSERT_EQ(got, oracle_replicas(layout.encoder(0), batch));
    const ReplicaLoad load = replica_load(tokens, got, dp);
    std::int64_t total = 0, largest = 0;
    for (std::int64_t t : tokens) total += t, largest = std::max(largest, t);
    ASSERT_LE(static_cast<double>(load.max), static_cast<double>(total) / dp + largest);
    ASSERT_DOUBLE_EQ(load.mean, static_cast<double>(total) / dp);
    // With no tokens at all, samples still spread evenly (ties go to the replica with fewer).
    std::vector<int> count(dp, 0);
    for (int d : got) ++count[d];
    if (std::count(tokens.begin(), tokens.end(), 0) == n) {
      ASSERT_LE(*std::max_element(count.begin(), count.end()) - *std::min_element(count.begin(), count.end()), 1);
    }
  }
  auto message = [](const SampleAssignment& a) {
    try {
      assign_replicas({5, 6, 7}, 2, a, "module 'v'");
    } catch (const BatchError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({AssignmentRule::given, {0, 1}}), "module 'v': the sample->replica map has 2 entries for 3 samples");
  EXPECT_EQ(message({AssignmentRule::given, {0, 2, 1}}),
            "module 'v': sample 1 is mapped to replica 2, outside 0..1 (dp 2)");
  EXPECT_EQ(message({AssignmentRule::given, {1, 1, 0}}), "no error");
  EXPECT_EQ(assign_replicas({5, 6, 7}, 2, {AssignmentRule::balanced, {}}), (std::vector<int>{1, 1, 0}));
  EXPECT_EQ(assign_replicas({5, 6, 7}, 2, {}), (std::vector<int>{0, 0, 1}));
}

// Issue 22 item 2: dynamic-resolution images (1-16 per sample, 64-2,500 tokens each), 64 samples on
// 8 encoder replicas. Contiguous blocks by count leave a straggler; the balanced rule does not.
TEST(HeteroAssignment, DynamicResolutionBatchIsBalanced) {
  std::mt19937_64 rng(2026);
  double worst_contiguous = 0, worst_balanced = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<std::int64_t> tokens(64, 0);
    for (auto& t : tokens) {
      const int images = 1 + static_cast<int>(rng() % 16);
      for (int k = 0; k < images; ++k) t += 64 + static_cast<std::int64_t>(rng() % (2500 - 64 + 1));
    }
    const double contiguous =
        replica_load(tokens, assign_replicas(tokens, 8, {}), 8).imbalance();
    const double balanced =
        replica_load(tokens, assign_replicas(tokens, 8, {AssignmentRule::balanced, {}}), 8).imbalance();
    worst_contiguous = std::max(worst_contiguous, contiguous);
    worst_balanced = std::max(worst_balanced, balanced);
  }
  EXPECT_GT(worst_contiguous, 1.5);
  EXPECT_LT(worst_balanced, 1.05);
}

// Issue 38: the LLM computes over its positions (text, images, padding), not its image tokens; its
// balanced rule and its load count those under thd/bshd. The issue's example: one long sequence
// with one image token and three short ones with five each, on 2 LLM replicas.
TEST(HeteroAssignment, LlmIsBalancedByItsPositions) {
  const Layout layout =
      two_modules(6, ModuleSpec{"llm", 1, 1, 1, 0, false, 4, 2}, ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 4});
  const Module& llm = layout.llm();
  BoundaryBatch batch{{1, 5, 5, 5}, 1, 1};
  batch.llm_assignment.rule = AssignmentRule::balanced;
  batch.encoder_assignment.rule = AssignmentRule::balanced;
  batch.llm_sequence.length = {100, 10, 10, 10};
  batch.llm_sequence.images = {{{0, 1}}, {{0, 5}}, {{0, 5}}, {{0, 5}}};
  auto loads = [](const ReplicaLoad& l) { return l.tokens; };
  // Image-only: image tokens are what the LLM computes over.
  EXPECT_EQ(module_replicas(llm, batch), (std::vector<int>{1, 0, 1, 0}));
  EXPECT_EQ(loads(module_load(llm, batch)), (std::vector<std::int64_t>{10, 6}));
  EXPECT_STREQ(sample_loads(llm, batch).measure, "image tokens");
  // thd: by tokens the long sequence would share a replica (110 positions against 20); by positions
  // it is alone (100 against 30, the best split).
  batch.llm_sequence.format = SequenceFormat::thd;
  EXPECT_EQ(module_replicas(llm, batch), (std::vector<int>{0, 1, 1, 1}));
  const ReplicaLoad thd = module_load(llm, batch);
  EXPECT_EQ(loads(thd), (std::vector<std::int64_t>{100, 30}));
  EXPECT_EQ(thd.max, 100);
  EXPECT_DOUBLE_EQ(thd.mean, 65);
  EXPECT_STREQ(sample_loads(llm, batch).measure, "positions");
  EXPECT_EQ(thd_cu_seqlens(llm, batch, 1), (std::vector<std::int64_t>{0, 10, 20, 30}));
  // Padded lengths count: with a pad multiple of 64 the weights are 128, 64, 64, 64; the last sample
  // ties at 192 either way and goes to the replica with fewer samples.
  batch.llm_sequence.pad_multiple = 64;
  EXPECT_EQ(module_replicas(llm, batch), (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(loads(module_load(llm, batch)), (std::vector<std::int64_t>{192, 128}));
  batch.llm_sequence.pad_multiple = 0;
  // bshd: a replica computes samples x its padded length.
  batch.llm_sequence.format = SequenceFormat::bshd;
  EXPECT_EQ(module_replicas(llm, batch), (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(loads(module_load(llm, batch)), (std::vector<std::int64_t>{100, 30}));
  // A fixed padded length makes every sample cost S: the rule evens the sample counts.
  batch.llm_sequence.padded_length = 100;
  EXPECT_EQ(module_replicas(llm, batch), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(loads(module_load(llm, batch)), (std::vector<std::int64_t>{200, 200}));
  // The encoders still count image tokens (one sample per replica here).
  EXPECT_EQ(module_replicas(layout.encoder(0), batch), (std::vector<int>{3, 0, 1, 2}));
  EXPECT_EQ(loads(module_load(layout.encoder(0), batch)), (std::vector<std::int64_t>{5, 5, 5, 1}));
  // bshd without a fixed length: longest first, then each where (samples + 1) x its length is least.
  batch.llm_sequence.padded_length = 0;
  batch.tokens = {1, 1, 1, 1};
  batch.llm_sequence.length = {90, 100, 10, 10};
  batch.llm_sequence.images = {{{0, 1}}, {{0, 1}}, {{0, 1}}, {{0, 1}}};
  EXPECT_EQ(module_replicas(llm, batch), (std::vector<int>{1, 0, 1, 0}));  // 200 / 180, the best
  EXPECT_EQ(loads(module_load(llm, batch)), (std::vector<std::int64_t>{200, 180}));
}

// On random combined inputs: the balanced map equals the oracle's (linear scans over each replica's
// load after taking the sample), and the load is exactly the positions the replica's ranks hold:
// summed over its cp ranks, and with sequence parallelism over its tp ranks, of buffer_bytes.
TEST(HeteroAssignment, LlmLoadIsThePositionsItsRanksHold) {
  std::mt19937_64 rng(test_seed(38));
  int thd = 0, bshd = 0, lpt_cases = 0;
  for (int i = 0; i < 3000; ++i) {
    Case c = random_case(rng, 48, true);
    if (c.batch.llm_sequence.format == SequenceFormat::image_only) continue;
    c.batch.llm_assignment.rule = rng() % 4 == 0 ? AssignmentRule::contiguous : AssignmentRule::balanced;
    c.batch.llm_assignment.replica.clear();
    const Layout layout(c.spec);
    const Module& llm = layout.llm();
    validate_batch(c.batch, llm);
    const std::vector<int> got = module_replicas(llm, c.batch);
    ASSERT_EQ(got, oracle_replicas(llm, c.batch)) << c.describe();
    const ReplicaLoad load = module_load(llm, c.batch);
    const int per_cp = llm.sequence_parallel() ? llm.tp() : 1;
    std::int64_t total = 0;
    for (int d = 0; d < llm.dp(); ++d) {
      std::int64_t held = 0;
      for (int cp = 0; cp < llm.cp(); ++cp) {
        for (int t = 0; t < per_cp; ++t) {
          held += buffer_bytes(llm, c.batch, llm.rank(Coords{t, cp, d, llm.boundary_stage()})) / c.batch.row_bytes();
        }
      }
      ASSERT_EQ(load.tokens[d], held) << "replica " << d << " " << c.describe();
      total += held;
    }
    ASSERT_DOUBLE_EQ(load.mean, static_cast<double>(total) / llm.dp());
    const bool padded = c.batch.llm_sequence.format == SequenceFormat::bshd;
    (padded ? bshd : thd) += 1;
    if (!padded && c.batch.llm_assignment.rule == AssignmentRule::balanced) {
      const SampleLoads w = sample_loads(llm, c.batch);
      const std::int64_t largest = w.weight.empty() ? 0 : *std::max_element(w.weight.begin(), w.weight.end());
      ASSERT_LE(static_cast<double>(load.max), load.mean + static_cast<double>(largest)) << c.describe();
      ++lpt_cases;
    }
  }
  EXPECT_GT(thd, 300);
  EXPECT_GT(bshd, 300);
  EXPECT_GT(lpt_cases, 200);
}

// A balanced encoder feeding a contiguous LLM: samples arrive from scattered replicas, and the
// contract holds (the random tests cover every pair of rules; this is the readable case).
TEST(HeteroAssignment, PlansWorkWithAnyAssignment) {
  LayoutSpec spec;
  spec.world_size = 24;
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, false, 8, 16};
  spec.encoders.push_back(ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 8});
  const Layout layout(spec);
  BoundaryBatch batch{{5000, 10, 10, 10, 10, 10, 10, 10, 4000, 3000}, 2, 2};
  batch.encoder_assignment.rule = AssignmentRule::balanced;
  const std::vector<int> enc = module_replicas(layout.encoder(0), batch);
  EXPECT_EQ(enc[0], 0);
  EXPECT_EQ(enc[8], 1);
  EXPECT_EQ(enc[9], 2);
  for (Strategy st : {Strategy::direct, Strategy::scatter_allgather}) {
    for (Direction dir : {Direction::forward, Direction::backward}) {
      const BoundaryPlan p = plan_boundary(layout, 0, batch, dir, PlanOptions{st});
      EXPECT_EQ(check_plan(layout, batch, p), "");
      EXPECT_EQ(check_balance(layout, batch, p), "");
    }
  }
  // Encoder rank r holds the samples the rule gave replica r, ascending.
  for (const BufferSegment& seg : buffer_segments(layout.encoder(0), batch, 1)) EXPECT_EQ(enc[seg.sample], 1);
  batch.llm_assignment = {AssignmentRule::given, {3, 3, 3, 3, 3, 3, 3, 3, 3, 0}};
  EXPECT_EQ(check_plan(layout, batch, plan_forward(layout, 0, batch)), "");
  EXPECT_EQ(summarize(plan_forward(layout, 0, batch), layout).ranks[8].received, 3000 * 4);
}

// A receiving tp of 2^20 would need 2^40 relay transfers; the plan stops at the limit instead.
TEST(HeteroPlan, TransferLimitStopsEarly) {
  LayoutSpec spec;
  spec.world_size = 4096;
  spec.llm.tp = 4096;
  spec.encoders.push_back(ModuleSpec{"v"});
  const Layout layout(spec);
  const BoundaryBatch batch{std::vector<std::int64_t>(64, 8), 1, 1};
  PlanOptions options{Strategy::scatter_allgather, 100000};
  try {
    plan_forward(layout, 0, batch, options);
    FAIL() << "no LimitError";
  } catch (const LimitError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the forward plan of encoder 'v' needs more than 100000 transfers (PlanOptions::max_transfers; "
              "zipccl plan --max-transfers); module 'llm' receives on 4096 ranks, tp 4096");
  }
  // Exactly at the limit is fine (with one-member holders the running count is exact).
  options.strategy = Strategy::direct;
  options.max_transfers = plan_forward(layout, 0, batch).num_transfers();
  EXPECT_NO_THROW(plan_forward(layout, 0, batch, options));
  options.max_transfers -= 1;
  EXPECT_THROW(plan_forward(layout, 0, batch, options), LimitError);
}

}  // namespace

namespace {

// Issue 22 item 1, by hand: the LLM (tp2 sp, cp2, ranks 4-7) takes the combined sequence. Sample 0:
// 10 positions, an image of 4 tokens at position 3; sample 1: 5 positions, 2 tokens at 1. Default
// padding: 2*cp*tp = 8, so 16 and 8 positions, chunks of 4 and 2.
struct Seg {
  int sample;
  std::int64_t begin, end, buffer_row;
  bool operator==(const Seg& o) const {
    return sample == o.sample && begin == o.begin && end == o.end && buffer_row == o.buffer_row;
  }
};
std::vector<Seg> segs(const Module& m, const BoundaryBatch& b, int rank) {
  std::vector<Seg> out;
  for (const BufferSegment& s : buffer_segments(m, b, rank))
    out.push_back(Seg{s.sample, s.rows.begin, s.rows.end, s.offset / b.row_bytes()});
  return out;
}

// The layout and batch of the examples by hand (above).
Layout hand_layout() {
  return two_modules(8, ModuleSpec{"llm", 2, 2, 1, 0, true, 4, 4}, ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 4});
}
BoundaryBatch hand_batch(SequenceFormat format) {
  BoundaryBatch batch{{4, 2}, 1, 1};
  batch.llm_sequence.format = format;
  batch.llm_sequence.length = {10, 5};
  batch.llm_sequence.images = {{{3, 4}}, {{1, 2}}};
  return batch;
}

TEST(HeteroSequence, CombinedLayoutsByHand) {
  const Layout layout = hand_layout();
  BoundaryBatch batch = hand_batch(SequenceFormat::thd);
  const Module& llm = layout.llm();
  EXPECT_EQ(sequence_pad_multiple(llm, batch), 8);
  EXPECT_EQ(thd_cu_seqlens(llm, batch, 0), (std::vector<std::int64_t>{0, 16, 24}));
  // Packed, cp rank 0 keeps positions 0-3, 12-15 of sample 0 and 0-1, 6-7 of sample 1 (12 rows),
  // cp rank 1 keeps 4-11 and 2-5; tp cuts each packed local sequence in halves of 6.
  EXPECT_EQ(segs(llm, batch, 4), (std::vector<Seg>{{0, 0, 1, 3}}));  // position 3
  EXPECT_EQ(segs(llm, batch, 5), (std::vector<Seg>{{1, 0, 1, 3}}));  // [s0 14,15, s1 0,1,6,7]: s1 pos 1
  EXPECT_EQ(segs(llm, batch, 6), (std::vector<Seg>{{0, 1, 4, 0}}));  // positions 4-6
  EXPECT_EQ(segs(llm, batch, 7), (std::vector<Seg>{{1, 1, 2, 2}}));  // [s0 10,11, s1 2-5]: s1 pos 2
  for (int r = 4; r < 8; ++r) EXPECT_EQ(buffer_bytes(llm, batch, r), 6);
  // Padded [b=2, s=16]: cp 0 keeps 0-3, 12-15 of each sample, tp 0 the first 4 of those.
  batch.llm_sequence.format = SequenceFormat::bshd;
  EXPECT_EQ(segs(llm, batch, 4), (std::vector<Seg>{{0, 0, 1, 3}, {1, 0, 2, 5}}));
  EXPECT_EQ(segs(llm, batch, 5), (std::vector<Seg>{}));
  EXPECT_EQ(segs(llm, batch, 6), (std::vector<Seg>{{0, 1, 4, 0}}));
  EXPECT_EQ(segs(llm, batch, 7), (std::vector<Seg>{}));
  for (int r = 4; r < 8; ++r) EXPECT_EQ(buffer_bytes(llm, batch, r), 8);
  batch.llm_sequence.padded_length = 24;  // chunks of 6: cp 0 keeps 0-5 and 18-23
  EXPECT_EQ(segs(llm, batch, 4), (std::vector<Seg>{{0, 0, 3, 3}, {1, 0, 2, 7}}));
  EXPECT_EQ(segs(llm, batch, 6), (std::vector<Seg>{{0, 3, 4, 0}}));  // position 6 of 6-17
  // Each image row goes to exactly the ranks holding its position; the backward returns just those.
  for (SequenceFormat f : {SequenceFormat::thd, SequenceFormat::bshd}) {
    batch.llm_sequence.format = f;
    batch.llm_sequence.padded_length = 0;
    for (Direction dir : {Direction::forward, Direction::backward}) {
      for (Strategy st : {Strategy::direct, Strategy::scatter_allgather}) {
        const BoundaryPlan p = plan_boundary(layout, 0, batch, dir, PlanOptions{st});
        EXPECT_EQ(check_plan(layout, batch, p), "");
        EXPECT_EQ(check_balance(layout, batch, p), "");
        std::int64_t moved = 0;
        for (const Transfer& t : p.phases[0]) moved += t.bytes;
        EXPECT_EQ(moved, 6);  // every image row once: no tp replication with sp
      }
    }
  }
}

// Without sequence parallelism every tp rank holds its cp rank's whole packed slice (text included).
TEST(HeteroSequence, ReplicatedTpTakesTheWholeSlice) {
  LayoutSpec spec;
  spec.world_size = 6;
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, false, 2, 4};
  spec.encoders.push_back(ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 2});
  const Layout layout(spec);
  BoundaryBatch batch{{3, 5}, 2, 2};
  batch.llm_sequence.format = SequenceFormat::thd;
  batch.llm_sequence.length = {7, 9};
  batch.llm_sequence.images = {{{0, 1}, {4, 2}}, {{2, 5}}};
  for (int r = 2; r < 6; ++r) {
    EXPECT_EQ(segs(layout.llm(), batch, r), (std::vector<Seg>{{0, 0, 1, 0}, {0, 1, 3, 4}, {1, 0, 5, 9}}));
    EXPECT_EQ(buffer_bytes(layout.llm(), batch, r), 16 * 4);
  }
  const BoundaryPlan p = plan_forward(layout, 0, batch, PlanOptions{Strategy::scatter_allgather});
  EXPECT_EQ(check_plan(layout, batch, p), "");
  EXPECT_EQ(summarize(p, layout).max_received, 8 * 4);
}

TEST(HeteroSequence, BadSequencesAreRejected) {
  auto message = [](const LlmSequence& q, std::vector<std::int64_t> tokens = {4, 2}) {
    BoundaryBatch b{std::move(tokens), 1, 1};
    b.llm_sequence = q;
    try {
      validate_batch(b);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  LlmSequence q;
  q.format = SequenceFormat::thd;
  q.length = {10, 5};
  q.images = {{{3, 4}}, {{1, 2}}};
  EXPECT_EQ(message(q), "no error");
  LlmSequence bad = q;
  bad.length = {10};
  EXPECT_EQ(message(bad), "thd input: 1 sequence lengths and 2 image lists for 2 samples");
  bad = q;
  bad.images[1] = {{4, 2}};
  EXPECT_EQ(message(bad), "sample 1: image 0 (offset 4, 2 tokens) ends past the sequence length 5");
  bad = q;
  bad.images[0] = {{3, 2}, {4, 2}};
  EXPECT_EQ(message(bad), "sample 0: image 1 (offset 4, 2 tokens) starts before the previous image ends (5): "
                         "images are ascending and disjoint");
  // Issue 38: images hold at least one token, so equal offsets are refused too.
  bad = q;
  bad.images[0] = {{3, 0}, {3, 4}};
  EXPECT_EQ(message(bad), "sample 0: image 0 (offset 3, 0 tokens) holds no tokens: every image holds at least one "
                          "(a sample without images has an empty image list)");
  bad.images[0] = {{3, 1}, {3, 3}};
  EXPECT_EQ(message(bad), "sample 0: image 1 (offset 3, 3 tokens) starts before the previous image ends (4): "
                          "images are ascending and disjoint");
  bad = q;
  bad.images[1] = {};  // a sample without images holds no tokens
  EXPECT_EQ(message(bad), "sample 1: its images hold 0 tokens, the batch says 2");
  EXPECT_EQ(message(bad, {4, 0}), "no error");
  bad = q;
  bad.images[0] = {{3, 3}};
  EXPECT_EQ(message(bad), "sample 0: its images hold 3 tokens, the batch says 4");
  bad = q;
  bad.format = SequenceFormat::bshd;
  bad.padded_length = 8;
  EXPECT_EQ(message(bad), "sample 0: sequence length 10 exceeds the padded length 8");
  bad.format = SequenceFormat::thd;
  EXPECT_EQ(message(bad), "thd input: a padded length (8) is for bshd only, and must be positive");
  bad = q;
  bad.length = {INT64_MAX, 5};
  bad.images[0] = {{INT64_MAX - 4, 4}};
  EXPECT_EQ(message(bad), "the combined sequence lengths: 9223372036854775807 + 5 overflows 64 bits");
  // Padding that overflows is reported when the LLM's slice is computed.
  LayoutSpec spec;
  spec.world_size = 2;
  spec.llm.cp = 2;
  spec.encoders.push_back(ModuleSpec{"v"});
  const Layout layout(spec);
  BoundaryBatch b{{4}, 1, 1};
  b.llm_sequence.format = SequenceFormat::thd;
  b.llm_sequence.length = {INT64_MAX - 1};
  b.llm_sequence.images = {{{0, 4}}};
  try {
    plan_forward(layout, 0, b);
    ADD_FAILURE();
  } catch (const BatchError& e) {
    EXPECT_EQ(std::string(e.what()), "sequence length 9223372036854775806 padded to a multiple of 4 overflows 64 bits");
  }
}

// Issue 38: a bshd padded length is a multiple of the pad multiple in force (the default depends on
// the LLM, so the check is validate_batch(batch, llm)'s, and every planner and buffer_segments make it).
TEST(HeteroSequence, PaddedLengthIsAMultipleOfThePadMultiple) {
  const Layout layout = hand_layout();
  BoundaryBatch batch = hand_batch(SequenceFormat::bshd);
  batch.llm_sequence.padded_length = 12;
  auto message = [&](auto&& call) {
    try {
      call();
    } catch (const BatchError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string want =
      "bshd input: the padded length 12 is not a multiple of the pad multiple 8 (module 'llm': 2*cp = 4 times "
      "tp = 2 with sequence parallelism): every sequence is padded to a multiple of it";
  EXPECT_EQ(message([&] { validate_batch(batch); }), "no error");  // the multiple needs the LLM
  EXPECT_EQ(message([&] { validate_batch(batch, layout.llm()); }), want);
  EXPECT_EQ(message([&] { plan_forward(layout, 0, batch); }), want);
  EXPECT_EQ(message([&] { plan_backward(layout, 0, batch); }), want);
  EXPECT_EQ(message([&] { plan_rank(layout, 0, batch, Direction::forward, 5); }), want);
  EXPECT_EQ(message([&] { lower_bounds(layout, 0, batch, Direction::forward); }), want);
  EXPECT_EQ(message([&] { buffer_segments(layout.llm(), batch, 4); }), want);
  batch.llm_sequence.pad_multiple = 3;
  EXPECT_EQ(message([&] { validate_batch(batch, layout.llm()); }), "no error");
  batch.llm_sequence.pad_multiple = 5;
  EXPECT_EQ(message([&] { validate_batch(batch, layout.llm()); }),
            "bshd input: the padded length 12 is not a multiple of the pad multiple 5 (given): every sequence is "
            "padded to a multiple of it");
  batch.llm_sequence.pad_multiple = 0;
  batch.llm_sequence.padded_length = 16;
  EXPECT_EQ(message([&] { validate_batch(batch, layout.llm()); }), "no error");
  EXPECT_EQ(check_plan(layout, batch, plan_forward(layout, 0, batch)), "");
}

}  // namespace
