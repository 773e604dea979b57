// Pipeline schedules at the boundary: the steps a 1F1B pipeline takes across an encoder/LLM
// boundary, each the forward plan of one micro-batch and/or the backward plan of another, run as
// grouped calls, and the 1F1B order of those steps.
//
// In Megatron-LM's 1F1B steady state the encoder's last stage calls send_forward_recv_backward
// (activations of micro-batch i out, gradient of micro-batch i-k in) while the LLM's first stage
// calls send_backward_recv_forward (gradient of i-k out, activations of i in). Here both are the
// same step, built from the same two plans: a rank sends and receives whatever its part of each
// plan says, so an encoder rank, an LLM rank and a rank of both (colocated layouts) call the same
// thing. boundary_1f1b() gives, for a pipeline depth and micro-batch count, which micro-batch's
// forward and backward plan each step holds; every rank derives the same list from the same numbers.
//
// ORDER CONTRACT. NCCL matches point-to-point calls per ordered pair of ranks, in posting order,
// with no tags: the k-th send from X to Y meets the k-th receive at Y from X, whatever the sizes. A
// step is correct only if every rank that takes part posts in this order:
//  1. Steps run in the order of the list (boundary_1f1b's ticks), on every rank named in either
//     plan of the step. A rank with nothing in a step (RankStepSchedule::empty()) may skip it.
//  2. A step runs in waves, wave w holding phase w of each plan (plans with fewer phases have
//     nothing in the later waves): one wave for two direct plans, two when either plan is
//     scatter_allgather. Each wave is one ncclGroupStart/ncclGroupEnd; waves follow each other on
//     the stream. Why not one group for everything: phase 2 of scatter_allgather relays rows that
//     phase 1 delivers, and inside one group NCCL gives no order, so a relay could send bytes
//     before they arrive. Phases of different plans share nothing (separate buffers), so phase w
//     of the forward plan and phase w of the backward plan go into the same group.
//  3. Inside a wave: the local copies of both plans (before the group), then in the group the
//     forward plan's sends and receives, then the backward plan's sends and receives, each list in
//     its schedule's order (schedule.h: per pair, plan order).
// make_step_schedule() fixes this order in data - RankStepSchedule::parts is {forward, backward}
// whichever side builds it - and both executors post parts in that order, so a caller cannot get
// it wrong: it passes the forward plan and the backward plan by role, and a plan in the wrong role
// is an error. What remains to the caller: every rank builds the step from the same two plans
// (same micro-batches, same batches, same strategies) and runs the steps in the same order.
// Breaking rule 3 matters only where one pair of ranks carries both plans in the same direction
// in one wave (overlapping encoder and LLM ranks, e.g. colocated layouts); elsewhere forward and
// backward messages travel in opposite directions. There NCCL cannot see the mistake: messages of
// equal size are swapped silently, others corrupt data or hang. The CPU executor tags each message
// with its plan and reports any disagreement as ExecutionError.
//
// Data readiness is the caller's: when a step is enqueued, both sources (the forward micro-batch's
// encoder output, the backward one's LLM input gradient) must be complete on the stream, which the
// 1F1B order below guarantees for separate stages.
//
// Buffers: each plan has its own source and destination buffer per rank (StepBuffers); the four
// must not overlap, since one wave reads and writes all of them at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "zipccl/hetero/layout.h"
#include "zipccl/hetero/plan.h"
#include "zipccl/hetero/schedule.h"

namespace zipccl::hetero {

// ---- 1F1B at the boundary ----

enum class TickStage : std::uint8_t { warmup, steady, cooldown };

inline const char* tick_stage_name(TickStage s) {
  return s == TickStage::warmup ? "warmup" : s == TickStage::steady ? "steady" : "cooldown";
}

// One step of the boundary: forward plan of micro-batch `forward`, backward plan of micro-batch
// `backward` (-1: none), run together (one grouped call per wave).
struct BoundaryTick {
  int forward = -1;
  int backward = -1;
  TickStage stage = TickStage::warmup;
};

// Where the encoder's last pipeline stage sits relative to the LLM's first one.
//  - separate: different ranks, consecutive stages of one pipeline (encoder stages, then the LLM's).
//    Megatron's 1F1B pairs the boundary's sends: after warm-up, every step carries the forward of
//    micro-batch i and the backward of micro-batch i - k, k = min(llm_stages, micro-batches).
//  - shared: the same ranks run the encoder's last stage and the LLM's first (the encoder inside
//    the LLM's first stage). The forward of a micro-batch runs between the two modules' forward
//    compute and its backward after the LLM's backward, so the two never share a step: steps are
//    forward-only or backward-only, in the order the LLM's stage 0 runs its micro-batches.
enum class BoundaryStages : std::uint8_t { separate, shared };

inline const char* boundary_stages_name(BoundaryStages s) {
  return s == BoundaryStages::separate ? "separate" : "shared";
}

// The steps of one training iteration at the boundary, in order (non-interleaved 1F1B, as
// Megatron-LM's forward_backward_pipelining_without_interleaving runs it). llm_stages: the LLM's
// pipeline depth (the stages after the boundary). Every micro-batch's forward plan appears once,
// before its backward plan. Forward: microbatches + k steps for separate stages, 2 * microbatches
// for shared ones.
// Throws LayoutError for llm_stages < 1, BatchError for microbatches < 0, LimitError above
// kMaxSamples micro-batches.
inline std::vector<BoundaryTick> boundary_1f1b(int microbatches, int llm_stages,
                                               BoundaryStages stages = BoundaryStages::separate);

// Which BoundaryStages encoder e's boundary is: separate when the encoder's last stage and the
// LLM's first stage have no rank in common, shared when they are the same ranks. Throws
// LayoutError when they partly overlap (no 1F1B order exists for that: some ranks would have to
// run both sides of one step), or for a bad encoder index.
inline BoundaryStages boundary_stages(const Layout& layout, int encoder);

// boundary_1f1b for encoder e of a layout: the LLM's pp, boundary_stages(layout, e).
inline std::vector<BoundaryTick> boundary_1f1b(const Layout& layout, int encoder, int microbatches) {
  return boundary_1f1b(microbatches, layout.llm().pp(), boundary_stages(layout, encoder));
}

// ---- one step, one rank ----

// A rank's buffers for one plan: what it reads from (plan source) and what it must end up with.
// Host memory for the CPU executor, device memory for the NCCL one.
struct PlanBuffers {
  const void* source = nullptr;  // at least source_bytes of this rank's schedule
  void* destination = nullptr;   // at least destination_bytes
  std::size_t source_size = 0;
  std::size_t destination_size = 0;
};

struct StepBuffers {
  PlanBuffers forward;   // encoder output -> LLM input, of the step's forward micro-batch
  PlanBuffers backward;  // LLM input gradient -> encoder output gradient, of its backward one
  const PlanBuffers& of(Direction d) const { return d == Direction::forward ? forward : backward; }
};

struct StepPart {
  Direction direction = Direction::forward;
  RankSchedule schedule;  // this rank's share of that plan
};

struct RankStepSchedule {
  int rank = -1;
  std::vector<StepPart> parts;  // posting order: the forward plan's part first (the order contract)

  std::size_t waves() const {
    std::size_t n = 0;
    for (const StepPart& p : parts) n = p.schedule.phases.size() > n ? p.schedule.phases.size() : n;
    return n;
  }
  bool empty() const {
    for (const StepPart& p : parts) {
      if (!p.schedule.empty()) return false;
    }
    return true;
  }
};

// This rank's part of the step {forward, backward}; either plan may be nullptr (warm-up and
// cool-down steps carry one). Throws ExecutionError when `forward` is not a forward plan or
// `backward` not a backward plan, when the two plans are not the two directions of one boundary
// (same encoder and world), or for a rank outside the world.
inline RankStepSchedule make_step_schedule(const BoundaryPlan* forward, const BoundaryPlan* backward,
                                           int rank);
// Every rank's (index = world rank), one pass over each plan.
inline std::vector<RankStepSchedule> make_all_step_schedules(const BoundaryPlan* forward,
                                                             const BoundaryPlan* backward);

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/pipeline_impl.h"
