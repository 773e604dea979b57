// Per-rank planning (rank_plan.h) against the world planner: on every random layout, in both
// directions and for every strategy, each rank's plan is exactly the world plan's transfers that rank sends or receives,
// in the same order, with the same buffer sizes and the same messages.
#include "zipccl/hetero/rank_plan.h"
#include "zipccl/hetero/parse.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>

#include <gtest/gtest.h>

#include "test_util.h"

// Allocation failure on demand: while g_fail_in >= 0, the allocation that takes it below zero
// throws std::bad_alloc. Not under ASan or TSan, which bring their own allocation functions.
#ifndef ZIPCCL_SANITIZED
#define ZIPCCL_TEST_FAILING_NEW 1
static std::atomic<long> g_fail_in{-1};
void* operator new(std::size_t n) {
  if (g_fail_in.load(std::memory_order_relaxed) >= 0 && g_fail_in.fetch_sub(1) == 0) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
// Out of line, so that GCC, seeing free() on what operator new returned, does not warn at every delete.
[[gnu::noinline]] static void release(void* p) noexcept { std::free(p); }
void operator delete(void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
#endif

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
  if (mine.strategy != world.strategy) return std::string("strategy ") + strategy_name(mine.strategy);
  // rank_plan.h: the world's phases up to the last one r takes part in, at least the strategy's minimum.
  std::size_t phases = world.strategy == Strategy::direct ? 1 : 2;
  for (std::size_t p = 0; p < world.phases.size(); ++p) {
    for (const Transfer& t : world.phases[p]) {
      if (t.src == r || t.dst == r) phases = std::max(phases, p + 1);
    }
  }
  if (mine.phases.size() != phases) {
    return "rank " + std::to_string(r) + ": " + std::to_string(mine.phases.size()) + " phases, expected " +
           std::to_string(phases);
  }
  if (mine.source_bytes != world.source_bytes[r] || mine.destination_bytes != world.destination_bytes[r])
    return "buffer sizes of rank " + std::to_string(r);
  for (std::size_t p = 0; p < phases; ++p) {
    std::vector<Transfer> expected;
    for (const Transfer& t : world.phases[p]) {
      if (t.src == r || t.dst == r) expected.push_back(t);
    }
    const std::string where = "rank " + std::to_string(r) + " phase " + std::to_string(p);
    if (mine.phases[p].size() != expected.size()) {
      return where + ": " + std::to_string(mine.phases[p].size()) + " transfers, the world plan has " +
             std::to_string(expected.size());
    }
    for (std::size_t i = 0; i < expected.size(); ++i) {
      if (mine.phases[p][i] != expected[i]) return where + " transfer " + std::to_string(i);
    }
  }
  const RankSchedule a = make_schedule(world, r), b = make_schedule(mine);
  if (a.source_bytes != b.source_bytes || a.destination_bytes != b.destination_bytes) return "schedule sizes";
  const PhaseOps none;  // phases past the rank plan's last are empty for r in the world's schedule
  for (std::size_t p = 0; p < a.phases.size(); ++p) {
    const PhaseOps& x = a.phases[p];
    const PhaseOps& y = p < b.phases.size() ? b.phases[p] : none;
    if (!same_messages(x.sends, y.sends) || !same_messages(x.recvs, y.recvs) || x.copies.size() != y.copies.size()) {
      return "schedule of rank " + std::to_string(r);
    }
  }
  return "";
}

TEST(HeteroRankPlan, EveryRankMatchesTheWorldPlanner) {
  std::mt19937_64 rng(test_seed(4242));
  int compared = 0, combined = 0, relayed = 0, chose_direct = 0, chained = 0;
  for (int i = 0; i < 1500; ++i) {
    const Case c = random_case(rng, 48, true);
    const Layout layout(c.spec);
    combined += c.batch.llm_sequence.format != SequenceFormat::image_only;
    for (int e = 0; e < layout.num_encoders(); ++e) {
      for (Direction dir : {Direction::forward, Direction::backward}) {
        for (Strategy strategy : {Strategy::direct, Strategy::scatter_allgather, Strategy::automatic}) {
          const PlanOptions options{strategy};
          const BoundaryPlan world = plan_boundary(layout, e, c.batch, dir, options);
          relayed += world.strategy == Strategy::scatter_allgather && !world.phases[1].empty();
          chained += world.phases.size() > 2;
          chose_direct += strategy == Strategy::automatic && world.strategy == Strategy::direct;
          for (int r = 0; r < layout.world_size(); ++r) {
            const RankPlan mine = plan_rank(layout, e, c.batch, dir, r, options);
            ASSERT_EQ(compare(world, mine, r), "") << "case " << i << " encoder " << e << " " << direction_name(dir)
                                                   << " " << strategy_name(strategy) << ": " << c.describe();
            ++compared;
          }
        }
      }
    }
  }
  EXPECT_GT(compared, 150000);
  EXPECT_GT(combined, 500);
  EXPECT_GT(relayed, 1000);      // plans with a second phase were compared
  EXPECT_GT(chose_direct, 500);  // and automatic went both ways
  EXPECT_GT(chained, 20);        // and some parties relayed in chains
  std::printf("%d plans relay in chains\n", chained);
}

// A RankPlanner reuses its workspace on a miss (per-sample tables, each module's party per rank,
// the exact count's totals), with the two modules trading places between directions: a planner kept
// across micro-batches, asked for both directions in turn, plans exactly what a fresh one does.
TEST(HeteroRankPlan, AReusedPlannerPlansAsAFreshOne) {
  std::mt19937_64 rng(test_seed(2605));
  int compared = 0, relayed = 0;
  for (int i = 0; i < 400; ++i) {
    const Case c = random_case(rng, 48, false);
    const Layout layout(c.spec);
    BoundaryBatch other = c.batch;  // another micro-batch: the same samples in another order
    std::shuffle(other.tokens.begin(), other.tokens.end(), rng);
    for (int e = 0; e < layout.num_encoders(); ++e) {
      const PlanOptions options{Strategy::automatic};
      const BoundaryPlan worlds[4] = {plan_forward(layout, e, c.batch, options), plan_backward(layout, e, c.batch, options),
                                      plan_forward(layout, e, other, options), plan_backward(layout, e, other, options)};
      for (const BoundaryPlan& w : worlds) relayed += w.strategy == Strategy::scatter_allgather;
      for (int r = 0; r < layout.world_size(); ++r) {
        RankPlanner planner(layout, e, r, 1, options);
        for (int k = 0; k < 8; ++k) {  // each plan twice, so every call after the first is a miss on a used workspace
          const BoundaryPlan& w = worlds[k % 4];
          const RankPlan& mine = planner.plan(k % 4 < 2 ? c.batch : other, w.direction);
          ASSERT_EQ(compare(w, mine, r), "") << "case " << i << " encoder " << e << " call " << k << ": " << c.describe();
          ++compared;
        }
        EXPECT_EQ(planner.hits(), 0u);
      }
    }
  }
  EXPECT_GT(compared, 50000);
  EXPECT_GT(relayed, 100);
}

// automatic at the scale of BENCHMARKS.md section 3, and the 8-GPU hot spot grown to
// 16,384 ranks (batches where its bounds decide):
// the strategy each direction keeps, and a few ranks' plans against the world plan.
TEST(HeteroRankPlan, AutomaticAtSixteenThousandRanks) {
  struct Example {
    const char *encoder, *llm;
    int samples;
    bool thd;
    Strategy forward, backward;
    bool uneven = false;  // the hot-spot tokens, repeated
  };
  for (const Example& x : {Example{"name=vision,tp=2,ranks=0-4095", "name=llm,tp=8,pp=4,cp=2,sp,ranks=4096-16383", 12288,
                                   false, Strategy::direct, Strategy::scatter_allgather},
                           Example{"name=vision,tp=1", "name=llm,tp=8,pp=4", 16384, false, Strategy::direct, Strategy::direct},
                           Example{"name=vision,tp=2,ranks=0-4095", "name=llm,tp=8,pp=4,cp=2,sp,ranks=4096-16383", 12288,
                                   true, Strategy::direct, Strategy::scatter_allgather},
                           Example{"name=vision,tp=1", "name=llm,tp=4", 16384, false, Strategy::scatter_allgather,
                                   Strategy::direct, true}}) {
    LayoutSpec spec;
    spec.world_size = 16384;
    spec.encoders.push_back(parse_module_spec(x.encoder));
    spec.llm = parse_module_spec(x.llm);
    const Layout layout(spec);
    BoundaryBatch batch{std::vector<std::int64_t>(x.samples, x.thd ? 1728 : 576), 8192, 2};
    const std::int64_t hot[] = {576, 1024, 256, 729, 0, 576, 100, 2048};
    for (int s = 0; x.uneven && s < x.samples; ++s) batch.tokens[s] = hot[s % 8];
    if (x.thd) {
      batch.llm_sequence.format = SequenceFormat::thd;
      batch.llm_sequence.length.assign(x.samples, 4096);
      batch.llm_sequence.images.assign(x.samples, {{32, 576}, {1200, 576}, {2600, 576}});
    }
    for (Direction dir : {Direction::forward, Direction::backward}) {
      const BoundaryPlan world = plan_boundary(layout, 0, batch, dir, PlanOptions{Strategy::automatic});
      EXPECT_EQ(world.strategy, dir == Direction::forward ? x.forward : x.backward) << x.llm << " " << direction_name(dir);
      for (int r : {0, 4095, 4096, 4100, 9999, 16383}) {
        EXPECT_EQ(compare(world, plan_rank(layout, 0, batch, dir, r, PlanOptions{Strategy::automatic}), r), "")
            << x.llm << " " << direction_name(dir);
      }
    }
  }
}

// 24 ranks: a sequence-parallel LLM tp4 on 8-23, a tp1 encoder on 0-7.
LayoutSpec small_spec() {
  LayoutSpec spec;
  spec.world_size = 24;
  spec.llm = ModuleSpec{"llm", 4, 1, 1, 0, true, 8, 16};
  spec.encoders.push_back(ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 8});
  return spec;
}

TEST(HeteroRankPlan, PlannerCachesByMicroBatch) {
  const Layout layout(small_spec());
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
  // Entries are recycled (key storage and all): what a full cache returns is still each batch's own
  // plan, and a batch that fails leaves the cache as it was.
  EXPECT_EQ(compare(plan_backward(layout, 0, b), planner.plan(b, Direction::backward), 9), "");
  EXPECT_EQ(compare(plan_forward(layout, 0, b), planner.plan(b, Direction::forward), 9), "");
  EXPECT_EQ(planner.misses(), 6u);
  BoundaryBatch bad = a;
  bad.tokens[0] = -1;
  EXPECT_THROW(planner.plan(bad, Direction::forward), BatchError);
  EXPECT_THROW(planner.plan(bad, Direction::forward), BatchError);  // not cached: a miss again
  EXPECT_EQ(compare(plan_backward(layout, 0, b), planner.plan(b, Direction::backward), 9), "");  // a hit
  EXPECT_EQ(compare(plan_forward(layout, 0, a), planner.plan(a, Direction::forward), 9), "");
  EXPECT_EQ(planner.misses(), 9u);
  EXPECT_EQ(planner.hits(), 3u);
  EXPECT_THROW(plan_rank(layout, 0, a, Direction::forward, 24), LayoutError);
  for (Strategy st : {Strategy::scatter_allgather, Strategy::automatic}) {  // the planner keeps its strategy
    RankPlanner relaying(layout, 0, 9, 2, PlanOptions{st});
    const RankPlan& p = relaying.plan(a, Direction::forward);
    EXPECT_EQ(compare(plan_forward(layout, 0, a, PlanOptions{st}), p, 9), "");
    EXPECT_EQ(&relaying.plan(a, Direction::forward), &p);
  }
}

// The two directions of a micro-batch share one key; recycling an entry whose key another entry
// still uses must leave that entry's key alone.
TEST(HeteroRankPlan, DirectionsShareAKeyThatRecyclingLeavesAlone) {
  const Layout layout(small_spec());
  BoundaryBatch a{{576, 1024, 256, 729, 576, 576, 100, 2048}, 64, 2};
  BoundaryBatch b = a;
  std::swap(b.tokens[0], b.tokens[7]);
  for (int r : {0, 9}) {
    RankPlanner planner(layout, 0, r, 2);
    planner.plan(a, Direction::forward);
    planner.plan(a, Direction::backward);  // shares a's key
    EXPECT_EQ(compare(plan_forward(layout, 0, b), planner.plan(b, Direction::forward), r), "");  // recycles a forward
    EXPECT_EQ(planner.misses(), 3u);
    EXPECT_EQ(compare(plan_backward(layout, 0, a), planner.plan(a, Direction::backward), r), "");  // still a's
    EXPECT_EQ(planner.hits(), 1u);
    EXPECT_EQ(compare(plan_backward(layout, 0, b), planner.plan(b, Direction::backward), r), "");  // not a's plan
    EXPECT_EQ(planner.misses(), 4u);  // recycled b forward
    EXPECT_EQ(compare(plan_forward(layout, 0, b), planner.plan(b, Direction::forward), r), "");  // shares b's key
    EXPECT_EQ(compare(plan_backward(layout, 0, b), planner.plan(b, Direction::backward), r), "");
    EXPECT_EQ(planner.misses(), 5u);
    EXPECT_EQ(planner.hits(), 2u);
    EXPECT_EQ(compare(plan_forward(layout, 0, a), planner.plan(a, Direction::forward), r), "");  // recycles b forward
    EXPECT_EQ(compare(plan_backward(layout, 0, b), planner.plan(b, Direction::backward), r), "");  // still b's
    EXPECT_EQ(compare(plan_backward(layout, 0, a), planner.plan(a, Direction::backward), r), "");  // not b's plan
    EXPECT_EQ(planner.misses(), 7u);
    EXPECT_EQ(planner.hits(), 3u);
  }
}

// A miss that runs out of memory throws and leaves the cache answering right: each allocation of
// the miss (planning, the entry, its key) is failed in turn, after which every batch and direction
// still gets its own plan. The case that matters: a recycled entry whose key another entry shares.
TEST(HeteroRankPlan, OutOfMemoryLeavesNoWrongEntry) {
#ifndef ZIPCCL_TEST_FAILING_NEW
  GTEST_SKIP() << "the sanitizer's allocation functions are not replaced";
#else
  const Layout layout(small_spec());
  BoundaryBatch a{{576, 1024, 256, 729, 576, 576, 100, 2048}, 64, 2};
  BoundaryBatch b = a;
  std::swap(b.tokens[0], b.tokens[7]);
  const BoundaryPlan worlds[4] = {plan_forward(layout, 0, a), plan_backward(layout, 0, a), plan_forward(layout, 0, b),
                                  plan_backward(layout, 0, b)};
  int failed = 0;
  for (long n = 0;; ++n) {
    RankPlanner planner(layout, 0, 9, 2);
    planner.plan(a, Direction::forward);
    planner.plan(a, Direction::backward);  // a's two entries share a key; a forward is the oldest
    bool threw = false;
    g_fail_in = n;
    try {
      planner.plan(b, Direction::forward);  // recycles a forward's entry
    } catch (const std::bad_alloc&) {
      threw = true;
    }
    g_fail_in = -1;
    for (int k = 0; k < 4; ++k) {
      ASSERT_EQ(compare(worlds[k], planner.plan(k < 2 ? a : b, worlds[k].direction), 9), "")
          << "allocation " << n << " failed, then plan " << k;
    }
    if (!threw) break;
    ++failed;
  }
  EXPECT_GT(failed, 10);  // the miss allocates: each of those allocations was failed once
#endif
}

TEST(HeteroRankPlan, CacheKeySeesTheCombinedInput) {
  const Layout layout(small_spec());
  BoundaryBatch a{{8, 16}, 64, 2};
  a.llm_sequence.format = SequenceFormat::thd;
  a.llm_sequence.length = {32, 40};
  a.llm_sequence.images = {{{0, 8}}, {{4, 8}, {20, 8}}};
  for (Strategy st : {Strategy::direct, Strategy::automatic}) {
    RankPlanner planner(layout, 0, 10, 4, PlanOptions{st});
    planner.plan(a, Direction::forward);
    BoundaryBatch b = a;
    planner.plan(b, Direction::forward);
    EXPECT_EQ(planner.hits(), 1u);
    b.llm_sequence.images[1][1].offset = 24;  // same tokens, the second image moved: another plan
    EXPECT_EQ(compare(plan_forward(layout, 0, b, PlanOptions{st}), planner.plan(b, Direction::forward), 10), "");
    b.llm_sequence.images[1] = {{4, 16}};  // one image instead of two
    EXPECT_EQ(compare(plan_forward(layout, 0, b, PlanOptions{st}), planner.plan(b, Direction::forward), 10), "");
    EXPECT_EQ(planner.misses(), 3u);
    planner.plan(a, Direction::forward);
    EXPECT_EQ(planner.hits(), 2u);
  }
}

// The upper bounds per-rank automatic settles most relayed parties with (rank_plan_impl.h:
// relay_sum_bound, RelayBound) against what relay_pieces really gives, star or chain, on random
// parties: members with and without a source party, holder loads given exactly or as upper bounds,
// overlaps lacked by one, some or all members, rows from 1 (chains) to thousands.
TEST(HeteroRankPlan, RelayBoundsCoverRelayPieces) {
  using namespace zipccl::hetero::detail;
  std::mt19937_64 rng(test_seed(2212));
  int chained = 0, exact_hits = 0, sum_looser = 0;
  std::int64_t worst_slack = 0;
  const int cases = 40000;
  for (int i = 0; i < cases; ++i) {
    const int m = pick(rng, {2, 3, 4, 4, 4, 8}), sources = 1 + static_cast<int>(rng() % 5);
    std::vector<int> member_party(m);
    std::vector<std::int64_t> load(m, 0);
    const std::int64_t scale = pick(rng, {2, 40, 3000});
    for (int j = 0; j < m; ++j) {
      member_party[j] = static_cast<int>(rng() % (sources + 1)) - 1;
      if (member_party[j] >= 0) load[j] = static_cast<std::int64_t>(rng() % (2 * scale));
    }
    Party P;  // one sample per overlap, each a single range: the holders callback hands out the overlap
    std::vector<std::pair<int, std::int64_t>> overlaps(1 + rng() % 8);
    for (std::size_t s = 0; s < overlaps.size(); ++s) {
      overlaps[s] = {static_cast<int>(rng() % sources), 1 + static_cast<std::int64_t>(rng() % scale)};
      P.samples.push_back(static_cast<int>(s));
      P.first_range.push_back(static_cast<int>(s));
      P.ranges.push_back(RowRange{0, overlaps[s].second});
    }
    P.first_range.push_back(static_cast<int>(overlaps.size()));
    for (int j = 0; j < m; ++j) P.ranks.push_back(j);
    std::vector<int> slots(P.samples);
    std::vector<std::vector<Share>> shares;
    std::vector<std::int64_t> sends;
    chained += relay_pieces(
        P, slots, member_party, load,
        [&](int s, RowRange, auto&& f) { f(overlaps[s].first, RowRange{0, overlaps[s].second}); },
        [](int, int, int, RowRange) {}, [](int, int, int, RowRange) {}, shares, sends);
    std::int64_t exact = 0;
    for (int j = 0; j < m; ++j) exact = std::max(exact, load[j] + sends[j]);

    const bool loose_loads = rng() % 4 == 0;  // callers may pass upper bounds on the loads
    RelayBound bound;
    bound.start();
    std::int64_t highest = 0, steps = 0, fewest = INT64_MAX, pooled = 0;
    Int128 total = 0;
    for (int j = 0; j < m; ++j) {
      const std::int64_t hi = load[j] + (loose_loads ? static_cast<std::int64_t>(rng() % 5) : 0);
      bound.add_member(member_party[j], hi);
      highest = std::max(highest, hi);
      total += hi;
    }
    for (const auto& [q, rows] : overlaps) {
      bound.overlap(q, rows);
      const std::int64_t lacking = m - std::count(member_party.begin(), member_party.end(), q);
      if (lacking == m) {
        pooled += rows;
      } else if (lacking > 1) {
        total += Int128{rows} * (lacking - 1);
        fewest = std::min(fewest, lacking);
        ++steps;
      }
    }
    if (pooled > 0) {
      total += Int128{pooled} * (m - 1);
      fewest = std::min<std::int64_t>(fewest, m);
      ++steps;
    }
    const std::int64_t fill_bound = bound.finish(), sum_bound = relay_sum_bound(highest, total, fewest, steps, m);
    ASSERT_GE(fill_bound, exact) << "case " << i << ", " << m << " members";
    ASSERT_GE(sum_bound, exact) << "case " << i << ", " << m << " members";
    exact_hits += fill_bound == exact;
    sum_looser += sum_bound > fill_bound;
    worst_slack = std::max(worst_slack, fill_bound - exact);
  }
  // Both bounds hold in every case; the fill bound is often exact and mostly the tighter one (what
  // lets per-rank automatic plan few parties exactly where the strategies come close).
  EXPECT_GT(chained, cases / 50);
  EXPECT_GT(exact_hits, cases / 5);
  EXPECT_GT(sum_looser, cases / 2);
  std::printf("%d of %d parties chained; fill bound exact in %d, below the sum bound in %d, at most %lld rows above\n",
              chained, cases, exact_hits, sum_looser, static_cast<long long>(worst_slack));
}

// The colocated example of BENCHMARKS.md section 3 (LLM tp4, encoder tp1 on all 16,384 ranks,
// 64-2,500 tokens per sample, seed 22): direct's busiest rank sends 7,500 rows, scatter_allgather's
// 7,234; one LLM party given samples of 2,500, 2,500, 2,500 and 2,499 tokens makes it 7,501 (direct
// wins by a row), or with 2,490 for the last 7,494 (the relay wins by 6). A few ranks' plans, the
// members of that party among them, against the world plan.
TEST(HeteroRankPlan, AutomaticNearTieAtSixteenThousandRanks) {
  LayoutSpec spec;
  spec.world_size = 16384;
  spec.llm = parse_module_spec("name=llm,tp=4");
  spec.encoders.push_back(parse_module_spec("name=vision,tp=1"));
  const Layout layout(spec);
  for (const auto& [last, forward] : {std::pair{-1, Strategy::scatter_allgather}, std::pair{2499, Strategy::direct},
                                      std::pair{2490, Strategy::scatter_allgather}}) {
    BoundaryBatch batch{std::vector<std::int64_t>(16384), 8192, 2};
    std::mt19937_64 rng(22);
    for (auto& t : batch.tokens) t = 64 + static_cast<std::int64_t>(rng() % 2437);
    if (last >= 0) batch.tokens[4000] = batch.tokens[4001] = batch.tokens[4002] = 2500, batch.tokens[4003] = last;
    for (Direction dir : {Direction::forward, Direction::backward}) {
      const BoundaryPlan world = plan_boundary(layout, 0, batch, dir, PlanOptions{Strategy::automatic});
      EXPECT_EQ(world.strategy, dir == Direction::forward ? forward : Strategy::direct) << "last sample " << last;
      for (int r : {0, 1, 4000, 4003, 9998, 16383}) {
        EXPECT_EQ(compare(world, plan_rank(layout, 0, batch, dir, r, PlanOptions{Strategy::automatic}), r), "")
            << "last sample " << last << " " << direction_name(dir);
      }
    }
  }
}

}  // namespace
