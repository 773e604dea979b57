// Definitions for traffic.h.
#pragma once

#include <algorithm>
#include <unordered_set>

#include "zipccl/hetero/detail/placement.h"

namespace zipccl::hetero {
namespace detail {

inline void finish_summary(TrafficSummary& t) {
  for (const RankTraffic& r : t.ranks) {
    t.max_sent = std::max(t.max_sent, r.sent);
    t.max_received = std::max(t.max_received, r.received);
    t.network_bytes = checked_add(t.network_bytes, r.sent, "bytes sent by all ranks");
    t.copied_bytes = checked_add(t.copied_bytes, r.copied, "bytes copied by all ranks");
  }
}

}  // namespace detail

inline TrafficSummary summarize(const BoundaryPlan& plan, const Layout& layout) {
  TrafficSummary t;
  t.ranks.resize(plan.world_size);
  const Module& receiver = layout.modules()[plan.destination_module];
  std::unordered_set<std::int64_t> pairs;
  for (const auto& phase : plan.phases) {
    for (const Transfer& x : phase) {
      if (x.src == x.dst) {
        t.ranks[x.src].copied += x.bytes;
        continue;
      }
      t.ranks[x.src].sent = detail::checked_add(t.ranks[x.src].sent, x.bytes, "bytes sent by one rank");
      t.ranks[x.dst].received =
          detail::checked_add(t.ranks[x.dst].received, x.bytes, "bytes received by one rank");
      if (!receiver.contains(x.src) && receiver.contains(x.dst)) t.boundary_bytes += x.bytes;
      if (pairs.insert(static_cast<std::int64_t>(x.src) * plan.world_size + x.dst).second) {
        ++t.ranks[x.src].send_peers;
        ++t.ranks[x.dst].recv_peers;
      }
    }
  }
  detail::finish_summary(t);
  return t;
}

inline LowerBounds lower_bounds(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                Direction direction) {
  validate_batch(batch, layout.llm());
  layout.encoder(encoder);
  const int world = layout.world_size();
  const int src_index = direction == Direction::forward ? 1 + encoder : 0;
  const int dst_index = direction == Direction::forward ? 0 : 1 + encoder;
  check_boundary_fits(layout.modules()[dst_index], batch);  // the sums below fit after this
  const detail::Placement ps = detail::make_placement(layout.modules()[src_index], batch, world);
  const detail::Placement pd = detail::make_placement(layout.modules()[dst_index], batch, world);
  std::vector<std::int64_t> leave(ps.parties.size(), 0), per_receiver(ps.parties.size(), 0);
  LowerBounds lb;
  std::int64_t total_missing = 0;  // rows received by all ranks together
  for (const detail::Party& P : pd.parties) {
    std::vector<std::int64_t> missing(P.ranks.size(), 0);
    for (int s : P.samples) {
      const int first = ps.first_party_of_sample(s);
      for (const RowRange* I = pd.ranges_begin(P, s); I != pd.ranges_end(P, s); ++I) {
        for (int q = first; q < first + ps.parties_per_replica; ++q) {
          for (const RowRange* r = ps.ranges_begin(ps.parties[q], s); r != ps.ranges_end(ps.parties[q], s);
               ++r) {
            const std::int64_t rows = std::min(I->end, r->end) - std::max(I->begin, r->begin);
            if (rows <= 0) continue;
            int outside = 0;
            for (std::size_t j = 0; j < P.ranks.size(); ++j) {
              if (ps.party_of_rank[P.ranks[j]] != q) {
                ++outside;
                missing[j] += rows;
              }
            }
            if (outside > 0) leave[q] += rows;
            per_receiver[q] += rows * outside;
          }
        }
      }
    }
    for (std::int64_t rows : missing) {
      lb.received = std::max(lb.received, rows * batch.row_bytes());
      total_missing += rows;
    }
  }
  // Every byte received is sent by some rank: the world shares that load at best.
  lb.sent = detail::ceil_div(total_missing * batch.row_bytes(), world);
  for (std::size_t q = 0; q < ps.parties.size(); ++q) {
    const std::int64_t k = static_cast<std::int64_t>(ps.parties[q].ranks.size());
    lb.sent = std::max(lb.sent, detail::ceil_div(leave[q] * batch.row_bytes(), k));
    lb.sent_holders_only =
        std::max(lb.sent_holders_only, detail::ceil_div(per_receiver[q] * batch.row_bytes(), k));
  }
  return lb;
}

inline TrafficSummary leader_broadcast_traffic(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                               Direction direction) {
  validate_batch(batch, layout.llm());
  layout.encoder(encoder);
  const int world = layout.world_size();
  const Module& src = layout.modules()[direction == Direction::forward ? 1 + encoder : 0];
  const Module& dst = layout.modules()[direction == Direction::forward ? 0 : 1 + encoder];
  check_boundary_fits(dst, batch);  // the sums below fit after this
  const detail::Placement ps = detail::make_placement(src, batch, world);
  const int n = batch.num_samples();
  TrafficSummary t;
  t.ranks.resize(world);
  std::vector<RankList> dst_stage(dst.dp());
  for (int d = 0; d < dst.dp(); ++d) dst_stage[d] = boundary_stage_ranks(dst, d);
  std::vector<std::int64_t> ring_bytes(dst.dp(), 0);
  const std::vector<int> dst_replica = module_replicas(dst, batch);
  for (int s = 0; s < n; ++s) {
    const std::int64_t bytes = batch.tokens[s] * batch.row_bytes();
    if (bytes == 0) continue;
    const int sd = ps.replica_of[s];
    const int src_leader = src.rank(Coords{0, 0, sd, src.boundary_stage()});
    // Gather at the source leader what it does not hold.
    const int first = sd * ps.parties_per_replica;
    for (int q = first; q < first + ps.parties_per_replica; ++q) {
      if (ps.party_of_rank[src_leader] == q) continue;
      std::int64_t rows = 0;
      for (const RowRange* r = ps.ranges_begin(ps.parties[q], s); r != ps.ranges_end(ps.parties[q], s); ++r) {
        rows += r->size();
      }
      t.ranks[ps.parties[q].ranks[0]].sent += rows * batch.row_bytes();
      t.ranks[src_leader].received += rows * batch.row_bytes();
    }
    const RankList& members = dst_stage[dst_replica[s]];
    const int dst_leader = members[0];
    if (dst_leader != src_leader) {
      t.ranks[src_leader].sent += bytes;
      t.ranks[dst_leader].received += bytes;
      if (!dst.contains(src_leader)) t.boundary_bytes += bytes;
    }
    ring_bytes[dst_replica[s]] += bytes;
  }
  // The ring costs each member the same per sample, so it is added per replica: O(samples + ranks).
  for (int d = 0; d < dst.dp(); ++d) {
    const RankList& members = dst_stage[d];
    for (std::size_t i = 0; i + 1 < members.size(); ++i) {
      t.ranks[members[i]].sent += ring_bytes[d];
      t.ranks[members[i + 1]].received += ring_bytes[d];
    }
  }
  detail::finish_summary(t);
  return t;
}

}  // namespace zipccl::hetero
