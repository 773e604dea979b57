// Definitions for pipeline.h.
#pragma once

#include <algorithm>
#include <string>
#include <utility>

namespace zipccl::hetero {

inline std::vector<BoundaryTick> boundary_1f1b(int microbatches, int llm_stages, BoundaryStages stages) {
  if (llm_stages < 1) {
    throw LayoutError("boundary_1f1b: the LLM has " + std::to_string(llm_stages) +
                      " pipeline stages, at least 1 is needed");
  }
  if (microbatches < 0) {
    throw BatchError("boundary_1f1b: " + std::to_string(microbatches) + " micro-batches");
  }
  if (microbatches > kMaxSamples) {
    throw LimitError("boundary_1f1b: " + std::to_string(microbatches) +
                     " micro-batches is above the limit of " + std::to_string(kMaxSamples) +
                     " (zipccl::hetero::kMaxSamples)");
  }
  const int m = microbatches;
  std::vector<BoundaryTick> ticks;
  ticks.reserve(2 * static_cast<std::size_t>(m));
  if (stages == BoundaryStages::separate) {
    // The encoder's last stage has llm_stages stages after it: that many warm-up forwards, then
    // each forward pairs with the backward of the micro-batch that entered k steps earlier.
    const int k = std::min(llm_stages, m);
    for (int i = 0; i < m; ++i) {
      ticks.push_back(i < k ? BoundaryTick{i, -1, TickStage::warmup}
                            : BoundaryTick{i, i - k, TickStage::steady});
    }
    for (int i = m - k; i < m; ++i) ticks.push_back(BoundaryTick{-1, i, TickStage::cooldown});
  } else {
    // The LLM's stage 0 itself: llm_stages - 1 warm-up forwards, then one forward, one backward.
    const int k = std::min(llm_stages - 1, m);
    for (int i = 0; i < k; ++i) ticks.push_back(BoundaryTick{i, -1, TickStage::warmup});
    for (int i = 0; i + k < m; ++i) {
      ticks.push_back(BoundaryTick{i + k, -1, TickStage::steady});
      ticks.push_back(BoundaryTick{-1, i, TickStage::steady});
    }
    for (int i = m - k; i < m; ++i) ticks.push_back(BoundaryTick{-1, i, TickStage::cooldown});
  }
  return ticks;
}

inline BoundaryStages boundary_stages(const Layout& layout, int encoder) {
  const Module& enc = layout.encoder(encoder);
  const Module& llm = layout.llm();
  std::vector<char> in_llm(layout.world_size(), 0);
  int llm_count = 0, enc_count = 0, both = 0;
  for (int r = llm.first_rank(); r < llm.end_rank(); ++r) {
    if (llm.coords(r).pp == llm.boundary_stage()) {
      in_llm[r] = 1;
      ++llm_count;
    }
  }
  for (int r = enc.first_rank(); r < enc.end_rank(); ++r) {
    if (enc.coords(r).pp == enc.boundary_stage()) {
      ++enc_count;
      both += in_llm[r];
    }
  }
  if (both == 0) return BoundaryStages::separate;
  if (both == enc_count && both == llm_count) return BoundaryStages::shared;
  throw LayoutError("encoder '" + enc.name() + "': its last pipeline stage (" + std::to_string(enc_count) +
                    " ranks) and the LLM's first stage (" + std::to_string(llm_count) + " ranks) share " +
                    std::to_string(both) +
                    " ranks; a 1F1B boundary schedule needs them disjoint (separate stages) or identical "
                    "(shared)");
}

namespace detail {

inline void check_step_plans(const BoundaryPlan* forward, const BoundaryPlan* backward) {
  if (forward != nullptr && forward->direction != Direction::forward) {
    throw ExecutionError("step: the plan given as the forward plan is a backward plan");
  }
  if (backward != nullptr && backward->direction != Direction::backward) {
    throw ExecutionError("step: the plan given as the backward plan is a forward plan");
  }
  if (forward == nullptr || backward == nullptr) return;
  if (forward->world_size != backward->world_size || forward->encoder != backward->encoder ||
      forward->source_module != backward->destination_module ||
      forward->destination_module != backward->source_module) {
    throw ExecutionError("step: the forward plan (encoder " + std::to_string(forward->encoder) + ", world " +
                         std::to_string(forward->world_size) + ") and the backward plan (encoder " +
                         std::to_string(backward->encoder) + ", world " +
                         std::to_string(backward->world_size) +
                         ") are not the two directions of one boundary");
  }
}

// The plans of a step in posting order: this is where the order contract is decided.
inline std::vector<const BoundaryPlan*> step_plans(const BoundaryPlan* forward,
                                                   const BoundaryPlan* backward) {
  check_step_plans(forward, backward);
  std::vector<const BoundaryPlan*> plans;
  for (const BoundaryPlan* p : {forward, backward}) {
    if (p != nullptr) plans.push_back(p);
  }
  return plans;
}

// Throws ExecutionError naming `plan_name` when a buffer is shorter than the schedule needs
// (allocates only to throw: executors check on every run).
inline void check_plan_buffers(const RankSchedule& schedule, const PlanBuffers& b, const char* plan_name) {
  auto check = [&](const char* what, const void* p, std::size_t size, std::int64_t need) {
    if (static_cast<std::int64_t>(size) < need || (need > 0 && p == nullptr)) {
      throw ExecutionError("rank " + std::to_string(schedule.rank) + ": " + what + " buffer of " +
                           std::to_string(size) + " bytes, " + std::string(plan_name) + " needs " +
                           std::to_string(need));
    }
  };
  check("source", b.source, b.source_size, schedule.source_bytes);
  check("destination", b.destination, b.destination_size, schedule.destination_bytes);
}

inline const char* step_part_name(Direction d) {
  return d == Direction::forward ? "the forward plan" : "the backward plan";
}

}  // namespace detail

inline RankStepSchedule make_step_schedule(const BoundaryPlan* forward, const BoundaryPlan* backward,
                                           int rank) {
  RankStepSchedule out;
  out.rank = rank;
  for (const BoundaryPlan* p : detail::step_plans(forward, backward)) {
    out.parts.push_back(StepPart{p->direction, make_schedule(*p, rank)});
  }
  return out;
}

inline std::vector<RankStepSchedule> make_all_step_schedules(const BoundaryPlan* forward,
                                                             const BoundaryPlan* backward) {
  const std::vector<const BoundaryPlan*> plans = detail::step_plans(forward, backward);
  std::vector<RankStepSchedule> all(plans.empty() ? 0 : plans[0]->world_size);
  for (std::size_t r = 0; r < all.size(); ++r) all[r].rank = static_cast<int>(r);
  for (const BoundaryPlan* p : plans) {
    std::vector<RankSchedule> each = make_all_schedules(*p);
    for (std::size_t r = 0; r < all.size(); ++r)
      all[r].parts.push_back(StepPart{p->direction, std::move(each[r])});
  }
  return all;
}

}  // namespace zipccl::hetero
