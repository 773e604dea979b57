// Traffic: bytes each rank sends and receives for a plan, the lower bounds, and the leader+broadcast
// scheme that frameworks use today, for comparison.
//
// Counted: bytes over the network between distinct ranks. Local copies (src == dst) are reported
// separately and are not traffic.
//
// Lower bounds, for one direction of one encoder's boundary:
//  - received: the most any rank needs and does not already hold. No scheme can receive less.
//  - sent: the larger of two bounds that hold for any scheme, relays included: rows held by one
//    party of identical holders and needed by some rank outside it must leave the party at least
//    once, through its members (max over parties of ceil(those bytes / members)); and every byte
//    received is sent by some rank, so the world shares them at best (ceil(total / world size)).
//  - sent_holders_only: the party bound when each receiver takes every row from an original holder (no
//    relays), so rows are counted once per receiver. The direct strategy meets it to within a row.
//
// Leader+broadcast (the Megatron-LM MIMO bridge, modelled per sample): the sending module's leader
// for the sample (tp 0, cp 0 of the replica's boundary stage) gathers the sample if its module
// shards it (sequence parallel or cp), sends it whole to the receiving replica's leader (unless it
// is the same rank), which broadcasts it whole to the other tp*cp ranks of its stage; each keeps
// what it needs. The broadcast is counted as NCCL's ring: every member but the last sends the
// sample once, every member but the leader receives it once.
#pragma once

#include <cstdint>
#include <vector>

#include "zipccl/hetero/plan.h"

namespace zipccl::hetero {

struct RankTraffic {
  std::int64_t sent = 0;
  std::int64_t received = 0;
  std::int64_t copied = 0;  // local copies (src == dst), not traffic
  int send_peers = 0;       // distinct ranks this rank sends to
  int recv_peers = 0;       // distinct ranks this rank receives from
};

struct TrafficSummary {
  std::vector<RankTraffic> ranks;  // per world rank
  std::int64_t max_sent = 0;
  std::int64_t max_received = 0;
  std::int64_t network_bytes = 0;   // sum of sent
  std::int64_t boundary_bytes = 0;  // sent from a rank outside the receiving module to one inside it
  std::int64_t copied_bytes = 0;
};

// Per-rank bytes of a plan (all phases).
inline TrafficSummary summarize(const BoundaryPlan& plan, const Layout& layout);

struct LowerBounds {
  std::int64_t received = 0;
  std::int64_t sent = 0;
  std::int64_t sent_holders_only = 0;
};

// Throws what plan_boundary throws.
inline LowerBounds lower_bounds(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                Direction direction);

// Per-rank bytes of the leader+broadcast scheme (peer counts are not modelled and left 0).
inline TrafficSummary leader_broadcast_traffic(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                               Direction direction);

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/traffic_impl.h"
