// In-process executor: runs a plan over host buffers of every rank, with threads and memcpy.
//
// It runs the schedules (schedule.h) that the NCCL executor runs, and matches messages the way
// NCCL does: per ordered pair of ranks, in posting order, and a receive must expect exactly the
// size that was sent. Each phase runs as: every rank makes its local copies and posts its sends
// (the bytes are copied into the receiver's mailbox), then every rank takes its receives. A
// receive with nothing matching in its mailbox, a size mismatch, or a message left unreceived at
// the end of a phase is a disagreement between schedules, reported as ExecutionError. Pipeline
// steps run the same way, one wave (phase w of each plan) at a time.
//
// Meant for tests and for checking plans; it holds a copy of every message in flight.
#pragma once

#include <cstddef>
#include <vector>

#include "zipccl/hetero/pipeline.h"
#include "zipccl/hetero/schedule.h"

namespace zipccl::hetero {

// One rank's host buffers for a plan: source at least plan.source_bytes[rank] bytes, destination at
// least plan.destination_bytes[rank].
using HostBuffers = PlanBuffers;

// buffers[r] belongs to world rank r (size == plan.world_size). threads = 0: hardware concurrency.
// Throws ExecutionError for buffers smaller than the plan's sizes, or for mismatched schedules.
inline void execute_cpu(const BoundaryPlan& plan, const std::vector<HostBuffers>& buffers, int threads = 0);

// One pipeline step (pipeline.h) over every rank: the forward plan and/or the backward plan (either
// may be nullptr), wave by wave, buffers[r] (host memory) for world rank r. Each message carries the
// direction of its plan; a receive that meets a message of the other plan breaks pipeline.h's order
// contract and is an ExecutionError, like the size and count mismatches execute_cpu reports.
// Throws what make_all_step_schedules throws, and ExecutionError for short buffers.
inline void execute_step_cpu(const BoundaryPlan* forward, const BoundaryPlan* backward,
                             const std::vector<StepBuffers>& buffers, int threads = 0);
// The same from schedules already built (schedules[r] for world rank r, as make_all_step_schedules
// gives them). It posts in whatever order the schedules say, so a test can hand it a rank that
// breaks the contract and watch it be caught.
inline void execute_step_cpu(const std::vector<RankStepSchedule>& schedules,
                             const std::vector<StepBuffers>& buffers, int threads = 0);

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/executor_cpu_impl.h"
