// Per-rank planning: one rank's share of a boundary plan, computed without planning the world.
//
// plan_forward / plan_backward (plan.h) plan every rank: O(samples * parties + transfers) for the
// whole job, tens of milliseconds at 16,384 ranks, on the training step's critical path if every rank
// does it every micro-batch. plan_rank computes only the transfers rank `rank` sends or receives,
// and they are exactly the world plan's transfers with src or dst == rank, in the world plan's
// order (so make_schedule gives the same messages as make_schedule(plan_forward(...), rank)):
//  - as a receiver, its own rows, each from the holding party; as a holder, its party's stream;
//  - the exact cut of each source party's demand stream it takes part in (sender, or receiver of
//    part of it) - the stream lists the demands of the receiving parties that need that party's
//    rows, so the work is proportional to the transfers of the parties the rank deals with, plus
//    O(samples) for the sample->replica maps (cached by RankPlanner).
// scatter_allgather adds, for the rank's own receiving party, that party's whole plan (its relay
// pieces and relays), and for each source party whose stream it takes part in, the plans of the
// receiving parties that demand from it; a relayed party's pieces level its members' loads as
// holders, so the phase-0 totals of those members' source parties are computed too (each once).
// automatic needs to know which strategy's busiest sender (over the world) sends less. It decides
// from bounds on the most rows any party keeps - exact and O(samples x cp) for image-only layouts,
// O(samples) bounds for the LLM's combined input; where the modules share ranks and those leave the
// answer open, one pass over the receiving parties counts every source party's rows as a holder
// exactly and bounds each party's busiest member from above (following relay_pieces' cuts on upper
// bounds), and only the parties whose bound reaches direct's figure are planned exactly. A
// receiving party of one rank is planned alike by both strategies, so there it is direct at once.
// RankPlanner caches the result with the plan.
//
// RankPlanner keeps the last few plans keyed by the micro-batch (token counts, assignments, LLM
// input; the forward and backward plans of a micro-batch share one key), so a training loop whose
// micro-batches repeat shapes replans nothing; on a miss it reuses
// its workspace (per-sample tables, each module's party per rank, the exact count's per-party
// totals: ~1 MB at 16,384 ranks) and its least recently used entry, so in steady state planning
// touches no fresh memory. A plain plan_rank call allocates all of it each time: keep a RankPlanner
// per boundary for the training loop.
// Thread-safety: plan_rank is a pure function; a RankPlanner is not shared between threads.
#pragma once

#include <climits>
#include <cstdint>
#include <list>
#include <memory>
#include <vector>

#include "zipccl/hetero/plan.h"
#include "zipccl/hetero/schedule.h"

namespace zipccl::hetero {

struct RankPlan {
  int rank = -1;
  int world_size = 0;
  Direction direction = Direction::forward;
  Strategy strategy = Strategy::direct;  // never automatic: the strategy chosen, as BoundaryPlan::strategy
  int encoder = 0;
  std::int64_t row_bytes = 0;
  std::int64_t source_bytes = 0;       // this rank's buffers, as BoundaryPlan::source_bytes[rank]
  std::int64_t destination_bytes = 0;
  // The world plan's phases, transfers with src or dst == rank, up to the last phase the rank takes
  // part in (at least 1 for direct, 2 for scatter_allgather): a party relaying in chains
  // (plan.h) adds phases that other parties' ranks have no part in.
  std::vector<std::vector<Transfer>> phases;

  std::size_t num_transfers() const {
    std::size_t n = 0;
    for (const auto& p : phases) n += p.size();
    return n;
  }
};

// Throws as plan_forward does (bad batch, bad encoder index, byte counts beyond 64 bits), LayoutError
// for a rank outside the world, LimitError when this rank's work
// exceeds options.max_transfers.
inline RankPlan plan_rank(const Layout& layout, int encoder, const BoundaryBatch& batch, Direction direction,
                          int rank, const PlanOptions& options = {});

// The rank's messages, as make_schedule(world plan, rank) would build them.
inline RankSchedule make_schedule(const RankPlan& plan);

namespace detail {
// A module's per-sample tables for one per-rank plan (sample -> replica, slot, samples by replica),
// kept by RankPlanner so that planning a micro-batch allocates no per-sample memory in steady state.
struct PlacementTables {
  std::vector<int> replica_of, slot, first, by_replica, next;
};
// exact_relay_sends_less's totals for one receiving party.
struct ReceivedTotals {
  // Where some member is in a source party, relay_sum_bound's total of relays: every row dealt to u
  // lacking members, times u - 1 (-1: beyond 64 bits); else the rows it keeps.
  std::int64_t rows_or_relays = 0;
  std::int64_t steps = 0;
  int fewest = INT_MAX;  // relay_sum_bound's, at most m
  bool colocated = false;
};
// Everything a per-rank plan sizes by the world rather than by the rank's own work, kept by
// RankPlanner so that a miss (a new micro-batch) reuses it: ~1 MB at 16,384 ranks.
struct RankWorkspace {
  PlacementTables source, destination;
  // Each boundary module's party per rank of its span (LazyPlacement::party_of_rank_cached): a
  // function of the layout alone, so built once per module, not per micro-batch. One slot per role,
  // so the two modules of a boundary never share one whichever way it is planned; `module` says
  // whose table a slot holds (another encoder's replaces it).
  struct PartyTable {
    const Module* module = nullptr;
    std::vector<int> party;
  } party_tables[2];
  std::vector<int>& party_table(const Module& m) {
    PartyTable& t = party_tables[m.role() == Role::llm ? 0 : 1];
    if (t.module != &m) {
      t.module = &m;
      t.party.clear();
    }
    return t.party;
  }
  std::vector<Demand> stream;  // one source party's demands, in the world planner's order
  // exact_relay_sends_less's counts: per source party (relay, direct) rows as a holder, and per
  // receiving party its totals.
  std::vector<std::pair<std::int64_t, std::int64_t>> held;
  std::vector<ReceivedTotals> received;
  std::vector<int> member_parties;
};
}  // namespace detail

class RankPlanner {
 public:
  // `layout` must outlive the planner.
  RankPlanner(const Layout& layout, int encoder, int rank, std::size_t capacity = 8, PlanOptions options = {})
      : layout_(layout), encoder_(encoder), rank_(rank), capacity_(capacity < 1 ? 1 : capacity), options_(options) {}

  // The plan for this micro-batch, from the cache when an equal batch was planned recently.
  const RankPlan& plan(const BoundaryBatch& batch, Direction direction);

  std::size_t hits() const { return hits_; }
  std::size_t misses() const { return misses_; }

 private:
  struct Entry {
    Direction direction = Direction::forward;
    std::shared_ptr<std::vector<std::int64_t>> key;  // detail::batch_key_into of the batch; the two directions share it
    RankPlan plan;
  };
  const Layout& layout_;
  int encoder_;
  int rank_;
  std::size_t capacity_;
  PlanOptions options_;
  std::list<Entry> entries_;  // most recently used first
  detail::RankWorkspace workspace_;
  std::size_t hits_ = 0, misses_ = 0;
};

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/rank_plan_impl.h"
