// The boundary planner behind plan.h.
//
// For each destination party P (ranks that must keep the same rows) and each row range it needs,
// the ranges are intersected with the source parties that hold them. A receiver inside the holding
// party copies locally; otherwise the need becomes a demand on that source party. Each source
// party's demands form one stream of rows, cut into |party| equal consecutive pieces, piece i sent
// by member i: holders of the same rows are disjoint from other holders, so this equalises what
// each sends and needs no global optimisation. The stream lists one receiver's rows together, so
// a piece touches few receivers and consecutive rows merge into few messages.
//
// scatter_allgather splits a replicated party's rows over its members first (members that already
// hold rows keep them; the rest is water-filled so members end with equal shares), plans those
// shares as above, then adds the member-to-member exchange as phase 2.
#pragma once

#include <algorithm>
#include <numeric>
#include <utility>

#include "zipccl/hetero/detail/placement.h"

namespace zipccl::hetero {
namespace detail {

struct Demand {
  int receiver;
  int sample;
  RowRange rows;
};

// Caps c_j >= 0 with sum c_j == total that minimise max(load_j + c_j).
inline std::vector<std::int64_t> water_fill(const std::vector<std::int64_t>& load, std::int64_t total) {
  const std::size_t m = load.size();
  std::vector<std::int64_t> caps(m, 0);
  if (total <= 0) return caps;
  auto fill = [&](std::int64_t level) {
    std::int64_t sum = 0;
    for (std::int64_t l : load) sum += std::max<std::int64_t>(0, level - l);
    return sum;
  };
  std::int64_t lo = *std::min_element(load.begin(), load.end()), hi = lo + total;
  while (lo < hi) {  // smallest level whose fill reaches total
    std::int64_t mid = lo + (hi - lo) / 2;
    if (fill(mid) >= total)
      hi = mid;
    else
      lo = mid + 1;
  }
  std::int64_t given = 0;
  for (std::size_t j = 0; j < m; ++j) {
    caps[j] = std::max<std::int64_t>(0, lo - 1 - load[j]);
    given += caps[j];
  }
  for (std::size_t j = 0; j < m && given < total; ++j) {
    if (load[j] + caps[j] == lo - 1) {
      ++caps[j];
      ++given;
    }
  }
  return caps;
}

inline std::int64_t max_sent(const BoundaryPlan& plan) {
  std::vector<std::int64_t> sent(plan.world_size, 0);
  std::int64_t most = 0;
  for (const auto& phase : plan.phases) {
    for (const Transfer& t : phase) {
      if (t.src != t.dst) most = std::max(most, sent[t.src] += t.bytes);
    }
  }
  return most;
}

// Counts what a plan holds as it grows, so an oversized request stops early with a message instead
// of running for minutes or exhausting memory.
class TransferBudget {
 public:
  TransferBudget(const Layout& layout, int encoder, Direction direction, std::size_t limit)
      : layout_(layout), encoder_(encoder), direction_(direction), limit_(limit) {}
  void take(std::size_t n) {
    used_ += n;
    if (used_ > limit_) {
      const Module& dst = direction_ == Direction::forward ? layout_.llm() : layout_.encoder(encoder_);
      throw LimitError(std::string("the ") + direction_name(direction_) + " plan of encoder '" +
                       layout_.encoder(encoder_).name() + "' needs more than " + std::to_string(limit_) +
                       " transfers (PlanOptions::max_transfers; zipccl plan --max-transfers); module '" +
                       dst.name() + "' receives on " + std::to_string(dst.num_ranks()) + " ranks, tp " +
                       std::to_string(dst.tp()));
    }
  }

 private:
  const Layout& layout_;
  int encoder_;
  Direction direction_;
  std::size_t limit_;
  std::size_t used_ = 0;
};

inline BoundaryPlan make_plan(const Layout& layout, int encoder, const BoundaryBatch& batch,
                              const PlanOptions& options, Direction direction) {
  const Strategy strategy = options.strategy;
  if (strategy == Strategy::automatic) {
    PlanOptions one = options;
    one.strategy = Strategy::direct;
    BoundaryPlan direct = make_plan(layout, encoder, batch, one, direction);
    one.strategy = Strategy::scatter_allgather;
    BoundaryPlan relay = make_plan(layout, encoder, batch, one, direction);
    return max_sent(relay) < max_sent(direct) ? relay : direct;
  }
  validate_batch(batch);
  layout.encoder(encoder);  // throws for a bad index
  const int world = layout.world_size();
  const int src_index = direction == Direction::forward ? 1 + encoder : 0;
  const int dst_index = direction == Direction::forward ? 0 : 1 + encoder;
  check_boundary_fits(layout.modules()[dst_index], batch);
  TransferBudget budget(layout, encoder, direction, options.max_transfers);
  const Placement ps = make_placement(layout.modules()[src_index], batch, world);
  const Placement pd = make_placement(layout.modules()[dst_index], batch, world);
  const std::int64_t row_bytes = batch.row_bytes();

  BoundaryPlan plan;
  plan.direction = direction;
  plan.strategy = strategy;
  plan.encoder = encoder;
  plan.world_size = world;
  plan.source_module = src_index;
  plan.destination_module = dst_index;
  plan.row_bytes = row_bytes;
  plan.source_bytes.assign(world, 0);
  plan.destination_bytes.assign(world, 0);
  for (const Party& p : ps.parties) {
    for (int r : p.ranks) plan.source_bytes[r] = p.buffer_bytes;
  }
  for (const Party& p : pd.parties) {
    for (int r : p.ranks) plan.destination_bytes[r] = p.buffer_bytes;
  }

  std::vector<std::vector<Demand>> demands(ps.parties.size());
  std::vector<Transfer> phase0, phase1;

  auto make_transfer = [&](int src, int dst, int s, RowRange rows, BufferKind from, std::int64_t src_offset) {
    Transfer t;
    t.src = src;
    t.dst = dst;
    t.sample = s;
    t.rows = rows;
    t.src_buffer = from;
    t.src_offset = src_offset;
    t.dst_offset = pd.offset(pd.party_of_rank[dst], s, rows.begin);
    t.bytes = rows.size() * row_bytes;
    return t;
  };
  // Calls f(source party, overlap) for each piece of `want` (rows of sample s) and the party holding it.
  auto for_each_holder = [&](int s, RowRange want, auto&& f) {
    const int first = ps.first_party_of_sample(s);
    for (int q = first; q < first + ps.parties_per_replica; ++q) {
      for (const RowRange* r = ps.ranges_begin(ps.parties[q], s); r != ps.ranges_end(ps.parties[q], s); ++r) {
        const RowRange o{std::max(want.begin, r->begin), std::min(want.end, r->end)};
        if (o.begin < o.end) f(q, o);
      }
    }
  };
  auto local_copy = [&](int rank, int q, int s, RowRange o) {
    budget.take(1);
    phase0.push_back(make_transfer(rank, rank, s, o, BufferKind::source, ps.offset(q, s, o.begin)));
  };

  struct Share {  // rows a member of a replicated party passes on in phase 2
    int holder_party;
    int sample;
    RowRange rows;
  };
  struct Pooled {
    int party;
    int sample;
    RowRange rows;
  };

  for (int pi = 0; pi < static_cast<int>(pd.parties.size()); ++pi) {
    const Party& P = pd.parties[pi];
    const int m = static_cast<int>(P.ranks.size());
    if (strategy == Strategy::direct || m == 1) {
      for (int r : P.ranks) {
        for (int s : P.samples) {
          for (const RowRange* I = pd.ranges_begin(P, s); I != pd.ranges_end(P, s); ++I) {
            for_each_holder(s, *I, [&](int q, RowRange o) {
              if (ps.party_of_rank[r] == q) {
                local_copy(r, q, s, o);
              } else {
                budget.take(1);
                demands[q].push_back(Demand{r, s, o});
              }
            });
          }
        }
      }
      continue;
    }

    std::vector<std::vector<Share>> shares(m);
    std::vector<std::int64_t> load(m, 0);
    std::vector<Pooled> pool;
    std::int64_t pooled_rows = 0;
    for (int s : P.samples) {
      for (const RowRange* I = pd.ranges_begin(P, s); I != pd.ranges_end(P, s); ++I) {
        for_each_holder(s, *I, [&](int q, RowRange o) {
          int holders = 0;
          for (int j = 0; j < m; ++j) holders += ps.party_of_rank[P.ranks[j]] == q;
          if (holders == 0) {
            pool.push_back(Pooled{q, s, o});
            pooled_rows += o.size();
            return;
          }
          // Members holding the rows copy them; they split passing them on to the others.
          int k = 0;
          for (int j = 0; j < m; ++j) {
            if (ps.party_of_rank[P.ranks[j]] != q) continue;
            local_copy(P.ranks[j], q, s, o);
            const RowRange piece{o.begin + split_point(o.size(), k, holders),
                                 o.begin + split_point(o.size(), k + 1, holders)};
            ++k;
            if (piece.size() > 0 && holders < m) {
              shares[j].push_back(Share{q, s, piece});
              load[j] += piece.size();
            }
          }
        });
      }
    }
    const std::vector<std::int64_t> caps = water_fill(load, pooled_rows);
    int j = 0;
    std::int64_t room = caps.empty() ? 0 : caps[0];
    for (const Pooled& item : pool) {
      RowRange rest = item.rows;
      while (rest.size() > 0) {
        while (room == 0) room = caps[++j];
        const RowRange piece{rest.begin, rest.begin + std::min(room, rest.size())};
        budget.take(1);
        demands[item.party].push_back(Demand{P.ranks[j], item.sample, piece});
        shares[j].push_back(Share{item.party, item.sample, piece});
        room -= piece.size();
        rest.begin = piece.end;
      }
    }
    for (int a = 0; a < m; ++a) {
      if (shares[a].empty()) continue;  // keeps this loop O(transfers), not O(m^2)
      std::sort(shares[a].begin(), shares[a].end(), [](const Share& x, const Share& y) {
        return x.sample != y.sample ? x.sample < y.sample : x.rows.begin < y.rows.begin;
      });
      for (int b = 0; b < m; ++b) {
        if (b == a) continue;
        for (const Share& sh : shares[a]) {
          if (ps.party_of_rank[P.ranks[b]] == sh.holder_party) continue;  // b copied these itself
          budget.take(1);
          phase1.push_back(make_transfer(P.ranks[a], P.ranks[b], sh.sample, sh.rows, BufferKind::destination,
                                         pd.offset(pi, sh.sample, sh.rows.begin)));
        }
      }
    }
  }

  // Cut each source party's demand stream into equal consecutive pieces, one per member.
  std::size_t cut_transfers = 0, cut_extra = 0;  // a cut adds at most members - 1 to a stream
  for (std::size_t q = 0; q < demands.size(); ++q) {
    if (demands[q].empty()) continue;
    cut_transfers += demands[q].size() + ps.parties[q].ranks.size() - 1;
    cut_extra += ps.parties[q].ranks.size() - 1;
  }
  budget.take(cut_extra);  // the demands themselves were counted as they were made
  phase0.reserve(phase0.size() + cut_transfers);
  for (int q = 0; q < static_cast<int>(ps.parties.size()); ++q) {
    const std::vector<Demand>& stream = demands[q];
    if (stream.empty()) continue;
    const Party& Q = ps.parties[q];
    const std::int64_t k = static_cast<std::int64_t>(Q.ranks.size());
    std::int64_t total = 0;
    for (const Demand& d : stream) total += d.rows.size();
    std::size_t item = 0;
    std::int64_t used = 0;  // rows of stream[item] already sent
    for (std::int64_t h = 0; h < k; ++h) {
      std::int64_t quota = split_point(total, h + 1, k) - split_point(total, h, k);
      while (quota > 0) {
        const Demand& d = stream[item];
        const std::int64_t take = std::min(quota, d.rows.size() - used);
        const RowRange rows{d.rows.begin + used, d.rows.begin + used + take};
        phase0.push_back(make_transfer(Q.ranks[h], d.receiver, d.sample, rows, BufferKind::source,
                                       ps.offset(q, d.sample, rows.begin)));
        quota -= take;
        used += take;
        if (used == d.rows.size()) {
          ++item;
          used = 0;
        }
      }
    }
  }

  plan.phases.push_back(std::move(phase0));
  if (strategy == Strategy::scatter_allgather) plan.phases.push_back(std::move(phase1));
  return plan;
}

}  // namespace detail

inline BoundaryPlan plan_forward(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                 const PlanOptions& options) {
  return detail::make_plan(layout, encoder, batch, options, Direction::forward);
}

inline BoundaryPlan plan_backward(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                  const PlanOptions& options) {
  return detail::make_plan(layout, encoder, batch, options, Direction::backward);
}

}  // namespace zipccl::hetero
