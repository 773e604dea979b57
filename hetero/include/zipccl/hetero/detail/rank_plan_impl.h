// Definitions for rank_plan.h.
#pragma once

#include <algorithm>
#include <string>
#include <unordered_map>

#include "zipccl/hetero/detail/placement.h"

namespace zipccl::hetero {
namespace detail {

// A module's placement with parties built on first use: per-rank planning touches few of them.
class LazyPlacement {
 public:
  LazyPlacement(const Module& m, const BoundaryBatch& batch)
      : m_(m), batch_(batch), replica_of_(module_replicas(m, batch)), slot_(replica_of_.size()) {
    per_cp_ = m.sequence_parallel() ? m.tp() : 1;
    // Samples grouped by replica, ascending within each (a stable counting sort).
    first_.assign(static_cast<std::size_t>(m.dp()) + 1, 0);
    for (int d : replica_of_) ++first_[d + 1];
    for (int d = 0; d < m.dp(); ++d) first_[d + 1] += first_[d];
    by_replica_.resize(replica_of_.size());
    std::vector<int> next(first_.begin(), first_.end() - 1);
    for (int s = 0; s < static_cast<int>(replica_of_.size()); ++s) {
      const int d = replica_of_[s];
      slot_[s] = next[d] - first_[d];
      by_replica_[next[d]++] = s;
    }
  }

  int replica_of(int s) const { return replica_of_[s]; }
  int slot(int s) const { return slot_[s]; }
  int parties_per_replica() const { return m_.cp() * per_cp_; }
  int party_index(int replica, int cp, int tp) const { return (replica * m_.cp() + cp) * per_cp_ + tp; }
  int party_of_rank(int rank) const {
    if (!m_.contains(rank)) return -1;
    const Coords c = m_.coords(rank);
    if (c.pp != m_.boundary_stage()) return -1;
    return party_index(c.dp, c.cp, m_.sequence_parallel() ? c.tp : 0);
  }
  const Party& party(int index) {
    auto it = parties_.find(index);
    if (it != parties_.end()) return it->second;
    const int t = index % per_cp_, c = index / per_cp_ % m_.cp(), d = index / per_cp_ / m_.cp();
    const std::vector<int> samples(by_replica_.begin() + first_[d], by_replica_.begin() + first_[d + 1]);
    Party& p = parties_[index];
    build_party(m_, batch_, samples, d, c, t, p, scratch_);
    return p;
  }

 private:
  const Module& m_;
  const BoundaryBatch& batch_;
  std::vector<int> replica_of_, slot_, first_, by_replica_;
  int per_cp_ = 1;
  std::unordered_map<int, Party> parties_;
  std::vector<BufferSegment> scratch_;
};

class RankPlanBuilder {
 public:
  RankPlanBuilder(const Layout& layout, int encoder, const BoundaryBatch& batch, Direction direction, int rank,
                  std::size_t limit)
      : ps_(layout.modules()[direction == Direction::forward ? 1 + encoder : 0], batch),
        pd_(layout.modules()[direction == Direction::forward ? 0 : 1 + encoder], batch),
        budget_(layout, encoder, direction, limit),
        rank_(rank),
        row_bytes_(batch.row_bytes()) {
    out_.rank = rank;
    out_.world_size = layout.world_size();
    out_.direction = direction;
    out_.encoder = encoder;
    out_.row_bytes = row_bytes_;
    out_.phases.resize(1);
  }

  RankPlan run() {
    const int my_src = ps_.party_of_rank(rank_), my_dst = pd_.party_of_rank(rank_);
    std::vector<int> holders;  // source parties whose demand streams this rank takes part in
    if (my_src >= 0) {
      out_.source_bytes = ps_.party(my_src).buffer_bytes;
      holders.push_back(my_src);
    }
    if (my_dst >= 0) receive(my_src, my_dst, holders);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    for (int q : holders) cut(q);
    return std::move(out_);
  }

 private:
  // The rows this rank keeps: local copies (in the world planner's order) and the holders to ask.
  void receive(int my_src, int my_dst, std::vector<int>& holders) {
    const Party& P = pd_.party(my_dst);
    out_.destination_bytes = P.buffer_bytes;
    for (int s : P.samples) {
      const int first = ps_.replica_of(s) * ps_.parties_per_replica();
      for (int i = P.first_range[pd_.slot(s)]; i < P.first_range[pd_.slot(s) + 1]; ++i) {
        const RowRange want = P.ranges[i];
        for (int q = first; q < first + ps_.parties_per_replica(); ++q) {
          const Party& Q = ps_.party(q);
          const int slot = ps_.slot(s);
          for (int j = Q.first_range[slot]; j < Q.first_range[slot + 1]; ++j) {
            const RowRange o{std::max(want.begin, Q.ranges[j].begin), std::min(want.end, Q.ranges[j].end)};
            if (o.begin >= o.end) continue;
            if (q != my_src) {
              holders.push_back(q);
              continue;
            }
            budget_.take(1);
            out_.phases[0].push_back(transfer(rank_, rank_, s, o, Q, P));
          }
        }
      }
    }
  }

  Transfer transfer(int src, int dst, int s, RowRange rows, const Party& Q, const Party& P) const {
    Transfer t;
    t.src = src;
    t.dst = dst;
    t.sample = s;
    t.rows = rows;
    t.src_buffer = BufferKind::source;
    t.src_offset = row_offset(Q, ps_.slot(s), rows.begin, row_bytes_);
    t.dst_offset = row_offset(P, pd_.slot(s), rows.begin, row_bytes_);
    t.bytes = rows.size() * row_bytes_;
    return t;
  }

  // Party q's demand stream, exactly as the world planner lists it (receiving parties ascending,
  // then their ranks, samples, kept ranges and q's ranges), cut among q's members; keeps this
  // rank's part.
  void cut(int q) {
    const Party& Q = ps_.party(q);  // unordered_map: references survive later insertions
    std::vector<int> replicas;      // receiving replicas holding q's samples, ascending
    for (int s : Q.samples) replicas.push_back(pd_.replica_of(s));
    std::sort(replicas.begin(), replicas.end());
    replicas.erase(std::unique(replicas.begin(), replicas.end()), replicas.end());
    stream_.clear();
    for (int d : replicas) {
      for (int pi = pd_.party_index(d, 0, 0); pi < pd_.party_index(d + 1, 0, 0); ++pi) {
        const Party& P = pd_.party(pi);
        for (int r : P.ranks) {
          if (ps_.party_of_rank(r) == q) continue;  // holds these rows itself
          for (int s : Q.samples) {
            if (pd_.replica_of(s) != d) continue;
            demands(Q, P, r, s);
          }
        }
      }
    }
    budget_.take(stream_.size());
    cut_stream(stream_, static_cast<std::int64_t>(Q.ranks.size()), [&](std::int64_t h, const Demand& d, RowRange rows) {
      const int src = Q.ranks[h];
      if (src != rank_ && d.receiver != rank_) return;
      out_.phases[0].push_back(transfer(src, d.receiver, d.sample, rows, Q, pd_.party(pd_.party_of_rank(d.receiver))));
    });
  }

  void demands(const Party& Q, const Party& P, int r, int s) {
    const int ps = ps_.slot(s), pd = pd_.slot(s);
    for (int i = P.first_range[pd]; i < P.first_range[pd + 1]; ++i) {
      for (int j = Q.first_range[ps]; j < Q.first_range[ps + 1]; ++j) {
        const RowRange o{std::max(P.ranges[i].begin, Q.ranges[j].begin), std::min(P.ranges[i].end, Q.ranges[j].end)};
        if (o.begin < o.end) stream_.push_back(Demand{r, s, o});
      }
    }
  }

  LazyPlacement ps_, pd_;
  TransferBudget budget_;
  int rank_;
  std::int64_t row_bytes_;
  RankPlan out_;
  std::vector<Demand> stream_;
};

inline bool same_assignment(const SampleAssignment& a, const SampleAssignment& b) {
  return a.rule == b.rule && a.replica == b.replica;
}

inline bool same_batch(const BoundaryBatch& a, const BoundaryBatch& b) {
  const LlmSequence &x = a.llm_sequence, &y = b.llm_sequence;
  if (a.tokens != b.tokens || a.hidden != b.hidden || a.element_size != b.element_size ||
      !same_assignment(a.encoder_assignment, b.encoder_assignment) ||
      !same_assignment(a.llm_assignment, b.llm_assignment) || x.format != y.format || x.length != y.length ||
      x.pad_multiple != y.pad_multiple || x.padded_length != y.padded_length || x.images.size() != y.images.size()) {
    return false;
  }
  for (std::size_t s = 0; s < x.images.size(); ++s) {
    if (x.images[s].size() != y.images[s].size()) return false;
    for (std::size_t i = 0; i < x.images[s].size(); ++i) {
      if (x.images[s][i].offset != y.images[s][i].offset || x.images[s][i].tokens != y.images[s][i].tokens) return false;
    }
  }
  return true;
}

}  // namespace detail

inline RankPlan plan_rank(const Layout& layout, int encoder, const BoundaryBatch& batch, Direction direction,
                          int rank, const PlanOptions& options) {
  if (options.strategy != Strategy::direct) {
    throw LayoutError(std::string("per-rank planning plans the direct strategy only (asked for ") +
                      strategy_name(options.strategy) + ")");
  }
  if (rank < 0 || rank >= layout.world_size()) {
    throw LayoutError("rank " + std::to_string(rank) + " is outside the world of " +
                      std::to_string(layout.world_size()) + " ranks");
  }
  validate_batch(batch);
  layout.encoder(encoder);  // throws for a bad index
  check_boundary_fits(direction == Direction::forward ? layout.llm() : layout.encoder(encoder), batch);
  return detail::RankPlanBuilder(layout, encoder, batch, direction, rank, options.max_transfers).run();
}

inline RankSchedule make_schedule(const RankPlan& plan) {
  std::vector<RankSchedule> one(1);
  detail::build_schedules(plan.phases, plan.world_size, plan.rank, [&](RankSchedule& rs) {
    rs.source_bytes = plan.source_bytes;
    rs.destination_bytes = plan.destination_bytes;
  }, one);
  return std::move(one[0]);
}

inline const RankPlan& RankPlanner::plan(const BoundaryBatch& batch, Direction direction) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->direction == direction && detail::same_batch(it->batch, batch)) {
      ++hits_;
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().plan;
    }
  }
  ++misses_;
  PlanOptions options = options_;
  options.strategy = Strategy::direct;
  RankPlan plan = plan_rank(layout_, encoder_, batch, direction, rank_, options);
  entries_.push_front(Entry{batch, direction, std::move(plan)});
  if (entries_.size() > capacity_) entries_.pop_back();
  return entries_.front().plan;
}

}  // namespace zipccl::hetero
