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
// NcclBoundaryStep - runs this rank's part of a pipeline step (pipeline.h): the forward plan of one
// micro-batch and/or the backward plan of another, wave by wave, one ncclGroupStart/ncclGroupEnd per
// wave (one for two direct plans, two when either is scatter_allgather), posting in pipeline.h's
// order (forward plan first) on every rank. On the encoder's last stage it is Megatron's
// send_forward_recv_backward, on the LLM's first stage send_backward_recv_forward: the same object
// and the same call on both sides. The same rules as NcclBoundaryExecutor apply otherwise.
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
#include "zipccl/hetero/pipeline.h"
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

class NcclBoundaryStep {
 public:
  // forward / backward: the step's plans (either may be nullptr), as boundary_1f1b's tick names
  // them; comm and members as for NcclBoundaryExecutor. Builds this rank's step schedule.
  // Throws what make_step_schedule throws, and what NcclBoundaryExecutor's constructor throws.
  NcclBoundaryStep(const BoundaryPlan* forward, const BoundaryPlan* backward, ncclComm_t comm,
                   RankList members);

  // Enqueues this rank's part of the step on `stream` and returns (no allocation, no host wait
  // beyond NCCL's group calls). buffers: device memory, each at least the sizes of this rank's
  // part of that plan (schedule().parts); the four buffers must not overlap.
  // Throws ExecutionError for short buffers or a failing NCCL or CUDA call.
  void run(const StepBuffers& buffers, cudaStream_t stream) const;

  int world_rank() const { return schedule_.rank; }
  // Nothing to send, receive or copy: this rank may skip the step.
  bool empty() const { return schedule_.empty(); }
  // Peers in the returned schedule are communicator ranks, not world ranks.
  const RankStepSchedule& schedule() const { return schedule_; }

 private:
  ncclComm_t comm_;
  RankStepSchedule schedule_;
};

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/executor_nccl_impl.h"
