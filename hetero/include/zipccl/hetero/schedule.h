// Schedule: one rank's share of a plan, as the messages it posts - the code both executors run.
//
// Transfers between the same pair of ranks that are contiguous in both the sender's and the
// receiver's buffer merge into one message. The merge looks only at that pair's transfers, in plan
// order, so the sender and the receiver, each building its own schedule, arrive at the same list
// of messages in the same order: the per-pair order in which NCCL matches sends with receives.
//
// Build a schedule once per plan (it allocates) and run it every step (running it does not).
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "zipccl/hetero/plan.h"

namespace zipccl::hetero {

struct Message {
  int peer = 0;                            // world rank
  BufferKind buffer = BufferKind::source;  // local buffer read (send) or written (always destination)
  std::int64_t offset = 0;
  std::int64_t bytes = 0;
};

struct LocalCopy {
  BufferKind from = BufferKind::source;
  std::int64_t from_offset = 0;
  std::int64_t to_offset = 0;  // into the destination buffer
  std::int64_t bytes = 0;
};

struct PhaseOps {
  std::vector<LocalCopy> copies;
  std::vector<Message> sends;
  std::vector<Message> recvs;
  bool empty() const { return copies.empty() && sends.empty() && recvs.empty(); }
};

struct RankSchedule {
  int rank = -1;
  std::int64_t source_bytes = 0;  // the plan's buffer sizes for this rank
  std::int64_t destination_bytes = 0;
  std::vector<PhaseOps> phases;  // one per plan phase (possibly empty)

  bool empty() const {
    for (const PhaseOps& p : phases) {
      if (!p.empty()) return false;
    }
    return true;
  }
};

// The schedule of one rank (any rank of the world; uninvolved ranks get empty phases).
// Throws ExecutionError for a rank outside the world.
inline RankSchedule make_schedule(const BoundaryPlan& plan, int rank);
// Every rank's schedule at once, in one pass over the plan (index = world rank).
inline std::vector<RankSchedule> make_all_schedules(const BoundaryPlan& plan);

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/schedule_impl.h"
