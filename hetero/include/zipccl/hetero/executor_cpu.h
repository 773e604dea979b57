// In-process executor: runs a plan over host buffers of every rank, with threads and memcpy.
//
// It runs the schedules (schedule.h) that the NCCL executor runs, and matches messages the way
// NCCL does: per ordered pair of ranks, in posting order, and a receive must expect exactly the
// size that was sent. Each phase runs as: every rank makes its local copies and posts its sends
// (the bytes are copied into the receiver's mailbox), then every rank takes its receives. A
// receive with nothing matching in its mailbox, a size mismatch, or a message left unreceived at
// the end of a phase is a disagreement between schedules, reported as ExecutionError.
//
// Meant for tests and for checking plans; it holds a copy of every message in flight.
#pragma once

#include <cstddef>
#include <vector>

#include "zipccl/hetero/schedule.h"

namespace zipccl::hetero {

struct HostBuffers {
  const void* source = nullptr;  // at least plan.source_bytes[rank] bytes
  void* destination = nullptr;   // at least plan.destination_bytes[rank] bytes
  std::size_t source_size = 0;
  std::size_t destination_size = 0;
};

// buffers[r] belongs to world rank r (size == plan.world_size). threads = 0: hardware concurrency.
// Throws ExecutionError for buffers smaller than the plan's sizes, or for mismatched schedules.
inline void execute_cpu(const BoundaryPlan& plan, const std::vector<HostBuffers>& buffers, int threads = 0);

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/executor_cpu_impl.h"
