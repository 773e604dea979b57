// NCCL layer: the layout's communicators, split from a parent, and a plan run on the caller's stream.
//
// Needs <nccl.h> (2.18 or later, for ncclCommSplit) and the CUDA runtime; link NCCL and cudart
// (CMake: zipccl::hetero_nccl). The rest of zipccl::hetero does not need either.
//
// NcclGroups - every group of groups.h as a communicator, made with ncclCommSplit from a parent
// communicator whose rank i is world rank i of the layout. Constructing it is collective over the
// parent: every rank must construct it, with the same layout, at the same point in its sequence of
// NCCL calls on the parent. Families are split in the order of all_group_families(); families whose
// groups all have one rank are skipped (their comm() is nullptr: a one-rank group has nothing to
// communicate). The destructor destroys the communicators it created (ncclCommDestroy).
//
// NcclBoundaryExecutor - runs this rank's part of a plan. For each phase: local copies with
// cudaMemcpyAsync (device to device), then one ncclGroupStart / ncclSend... / ncclRecv... /
// ncclGroupEnd, every message straight between the two ranks concerned (no leader, no broadcast),
// all enqueued on the caller's stream. run() does not wait: NCCL's own group call is the only host
// synchronisation, and the data is ready when the stream reaches that point. Phases are ordered by
// the stream, so the second phase of scatter_allgather reads what the first wrote. Every rank named
// in the plan must call run() for the same plan, in the same order relative to its other NCCL
// operations on the communicator (ranks the plan does not involve need not call it).
// With a non-blocking communicator, ncclInProgress from the group call is not an error; poll
// ncclCommGetAsyncError as NCCL documents.
//
// Errors: ExecutionError with the failing call, file:line and NCCL's or CUDA's message.
// Thread-safety: an executor is immutable after construction; run() may be called from any thread
// that may use the communicator (NCCL's rules for a communicator apply).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "zipccl/hetero/groups.h"
#include "zipccl/hetero/schedule.h"

namespace zipccl::hetero {

class NcclGroups {
 public:
  // Collective over `parent` (see above). `config` is passed to ncclCommSplit (nullptr: inherit the
  // parent's). Throws ExecutionError if the parent's size is not the layout's world size, or if
  // NCCL fails (communicators made so far are destroyed).
  NcclGroups(ncclComm_t parent, const Layout& layout, ncclConfig_t* config = nullptr);
  ~NcclGroups();
  NcclGroups(const NcclGroups&) = delete;
  NcclGroups& operator=(const NcclGroups&) = delete;
  NcclGroups(NcclGroups&& other) noexcept : rank_(other.rank_), entries_(std::move(other.entries_)) {
    other.entries_.clear();
  }

  int world_rank() const { return rank_; }
  // This rank's communicator in family (kind, module); nullptr when the rank is not in the module
  // (or, for boundary, not at the boundary) or the family was skipped. module: index into
  // Layout::modules(); for GroupKind::boundary, 1 + encoder index.
  ncclComm_t comm(GroupKind kind, int module) const;
  // World ranks of that communicator in its rank order (empty when comm() is nullptr).
  const RankList& members(GroupKind kind, int module) const;
  ncclComm_t boundary(int encoder) const { return comm(GroupKind::boundary, 1 + encoder); }
  const RankList& boundary_members(int encoder) const { return members(GroupKind::boundary, 1 + encoder); }

 private:
  struct Entry {
    GroupKind kind;
    int module;
    ncclComm_t comm;
    RankList members;
  };
  void destroy() noexcept;
  int rank_ = -1;
  std::vector<Entry> entries_;
};

class NcclBoundaryExecutor {
 public:
  // comm must contain every rank this rank exchanges with under the plan: the boundary communicator
  // of NcclGroups, or the parent (world) communicator. members[i] is the world rank of comm rank i.
  // Builds this rank's schedule (allocates; build once, run every step).
  // Throws ExecutionError if comm's size differs from members.size(), or a peer is not a member.
  NcclBoundaryExecutor(const BoundaryPlan& plan, ncclComm_t comm, RankList members);

  // Enqueues this rank's transfers on `stream` and returns. source / destination: device buffers of
  // at least source_bytes() / destination_bytes() bytes (either may be null when its size is 0).
  // Throws ExecutionError for short buffers or a failing NCCL or CUDA call.
  void run(const void* source, std::size_t source_size, void* destination, std::size_t destination_size,
           cudaStream_t stream) const;

  int world_rank() const { return schedule_.rank; }
  std::int64_t source_bytes() const { return schedule_.source_bytes; }
  std::int64_t destination_bytes() const { return schedule_.destination_bytes; }
  // Peers in the returned schedule are communicator ranks, not world ranks.
  const RankSchedule& schedule() const { return schedule_; }

 private:
  ncclComm_t comm_;
  RankSchedule schedule_;
};

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/executor_nccl_impl.h"
