// Pipeline steps at the boundary (pipeline.h): the 1F1B order against Megatron-LM's loop on both
// sides of the boundary, combined steps against running the plans one at a time, and the order
// contract (a rank that posts the backward plan first is caught).
#include "zipccl/hetero/pipeline.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "zipccl/hetero/executor_cpu.h"

namespace {

using namespace hetero_test;

// ---- the 1F1B order ----

// The boundary calls one pipeline stage makes, written from the structure of Megatron-LM's
// forward_backward_pipelining_without_interleaving: warm-up forwards, one forward then one backward
// in steady state, cool-down backwards. `next` keeps the calls with the next stage (the encoder's
// last stage at the boundary), otherwise those with the previous stage (the LLM's first stage).
// Each kept call is one tick: {micro-batch sent/received forward, micro-batch backward}.
std::vector<std::pair<int, int>> megatron_boundary_calls(int pp, int stage, int m, bool next) {
  std::vector<std::pair<int, int>> calls;
  const int warmup = std::min(pp - stage - 1, m), remaining = m - warmup;
  int f = 0, b = 0;
  for (int i = 0; i < warmup; ++i, ++f) calls.push_back({f, -1});  // send_forward / recv_forward
  if (remaining > 0 && !next) calls.push_back({f, -1});            // recv_forward before the steady state
  for (int i = 0; i < remaining; ++i) {
    const bool last = i == remaining - 1;
    if (next) calls.push_back({f, b});  // send_forward_recv_backward: forward f out, gradient b in
    ++f;
    if (!next) calls.push_back(last ? std::pair<int, int>{-1, b} : std::pair<int, int>{f, b});
    // ^ send_backward, or send_backward_recv_forward: gradient b out, forward f in
    ++b;
  }
  for (int i = 0; i < warmup; ++i, ++b) calls.push_back({-1, b});  // recv_backward / send_backward
  return calls;
}

std::vector<std::pair<int, int>> pairs_of(const std::vector<BoundaryTick>& ticks) {
  std::vector<std::pair<int, int>> out;
  for (const BoundaryTick& t : ticks) out.push_back({t.forward, t.backward});
  return out;
}

TEST(Boundary1F1B, SeparateStagesMatchMegatronOnBothSides) {
  for (int enc_stages = 1; enc_stages <= 3; ++enc_stages) {
    for (int llm_stages = 1; llm_stages <= 6; ++llm_stages) {
      for (int m = 0; m <= 14; ++m) {
        const int pp = enc_stages + llm_stages;
        const auto ticks = boundary_1f1b(m, llm_stages);
        const auto encoder_side = megatron_boundary_calls(pp, enc_stages - 1, m, true);
        const auto llm_side = megatron_boundary_calls(pp, enc_stages, m, false);
        ASSERT_EQ(pairs_of(ticks), encoder_side)
            << "llm stages " << llm_stages << ", " << m << " micro-batches";
        ASSERT_EQ(pairs_of(ticks), llm_side) << "llm stages " << llm_stages << ", " << m << " micro-batches";
        const int k = std::min(llm_stages, m);
        ASSERT_EQ(ticks.size(), static_cast<std::size_t>(m + k));
        for (std::size_t t = 0; t < ticks.size(); ++t) {
          const BoundaryTick& tick = ticks[t];
          EXPECT_EQ(tick.stage, static_cast<int>(t) < k   ? TickStage::warmup
                                : static_cast<int>(t) < m ? TickStage::steady
                                                          : TickStage::cooldown);
          if (tick.forward >= 0 && tick.backward >= 0) {
            EXPECT_EQ(tick.forward - tick.backward, k);  // the lag of the steady state
          }
        }
      }
    }
  }
}

// Shared stages: the LLM's stage 0 runs the boundary inside its own forward and backward compute.
TEST(Boundary1F1B, SharedStageFollowsTheLlmsFirstStage) {
  for (int llm_stages = 1; llm_stages <= 6; ++llm_stages) {
    for (int m = 0; m <= 14; ++m) {
      std::vector<std::pair<int, int>> expect;
      const int warmup = std::min(llm_stages - 1, m);
      int f = 0, b = 0;
      for (; f < warmup; ++f) expect.push_back({f, -1});
      for (; f < m; ++f, ++b) {
        expect.push_back({f, -1});
        expect.push_back({-1, b});
      }
      for (; b < m; ++b) expect.push_back({-1, b});
      const auto ticks = boundary_1f1b(m, llm_stages, BoundaryStages::shared);
      ASSERT_EQ(pairs_of(ticks), expect) << "llm stages " << llm_stages << ", " << m << " micro-batches";
      for (const BoundaryTick& t : ticks) EXPECT_TRUE(t.forward < 0 || t.backward < 0);
    }
  }
}

TEST(Boundary1F1B, EveryMicroBatchOnceForwardThenBackward) {
  for (BoundaryStages stages : {BoundaryStages::separate, BoundaryStages::shared}) {
    for (int llm_stages = 1; llm_stages <= 9; ++llm_stages) {
      for (int m = 0; m <= 20; ++m) {
        std::vector<int> fwd_at(m, -1), bwd_at(m, -1);
        const auto ticks = boundary_1f1b(m, llm_stages, stages);
        for (std::size_t t = 0; t < ticks.size(); ++t) {
          ASSERT_TRUE(ticks[t].forward >= 0 || ticks[t].backward >= 0);
          if (ticks[t].forward >= 0) {
            ASSERT_EQ(fwd_at[ticks[t].forward], -1);
            fwd_at[ticks[t].forward] = static_cast<int>(t);
          }
          if (ticks[t].backward >= 0) {
            ASSERT_EQ(bwd_at[ticks[t].backward], -1);
            bwd_at[ticks[t].backward] = static_cast<int>(t);
          }
        }
        for (int i = 0; i < m; ++i) {
          ASSERT_GE(fwd_at[i], 0);
          ASSERT_GT(bwd_at[i], fwd_at[i]) << boundary_stages_name(stages);
        }
      }
    }
  }
}

TEST(Boundary1F1B, BadArguments) {
  EXPECT_THROW(boundary_1f1b(4, 0), LayoutError);
  EXPECT_THROW(boundary_1f1b(-1, 2), BatchError);
  try {
    boundary_1f1b(kMaxSamples + 1, 2);
    ADD_FAILURE();
  } catch (const LimitError& e) {
    EXPECT_NE(std::string(e.what()).find("1048577 micro-batches is above the limit of 1048576"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(boundary_1f1b(0, 3).empty());
}

LayoutSpec two_modules(int world, ModuleSpec llm, ModuleSpec enc) {
  LayoutSpec s;
  s.world_size = world;
  s.llm = std::move(llm);
  s.encoders.push_back(std::move(enc));
  return s;
}

TEST(Boundary1F1B, StagesOfALayout) {
  // Fan-in: encoder on ranks 0-3, LLM (pp 2) on 4-11.
  const Layout separate(
      two_modules(12, {"llm", 2, 1, 2, 0, false, 4, 8}, {"vision", 1, 1, 1, 0, false, 0, 4}));
  EXPECT_EQ(boundary_stages(separate, 0), BoundaryStages::separate);
  EXPECT_EQ(pairs_of(boundary_1f1b(separate, 0, 5)), pairs_of(boundary_1f1b(5, 2)));
  // Colocated, no pipeline: the encoder runs inside the LLM's only stage.
  const Layout shared(
      two_modules(8, {"llm", 4, 1, 1, 0, false, 0, -1}, {"vision", 2, 1, 1, 0, false, 0, -1}));
  EXPECT_EQ(boundary_stages(shared, 0), BoundaryStages::shared);
  EXPECT_EQ(pairs_of(boundary_1f1b(shared, 0, 3)), pairs_of(boundary_1f1b(3, 1, BoundaryStages::shared)));
  // Colocated, both pp 2 in Megatron order: encoder stage 1 = ranks 4-7, LLM stage 0 = ranks 0-3.
  const Layout staged(
      two_modules(8, {"llm", 2, 1, 2, 0, false, 0, -1}, {"vision", 1, 1, 2, 0, false, 0, -1}));
  EXPECT_EQ(boundary_stages(staged, 0), BoundaryStages::separate);
  // Colocated, LLM pp 2, encoder pp 1: the encoder's last stage is every rank, the LLM's first half.
  const Layout partial(
      two_modules(8, {"llm", 2, 1, 2, 0, false, 0, -1}, {"vision", 1, 1, 1, 0, false, 0, -1}));
  try {
    boundary_stages(partial, 0);
    ADD_FAILURE();
  } catch (const LayoutError& e) {
    EXPECT_STREQ(
        e.what(),
        "encoder 'vision': its last pipeline stage (8 ranks) and the LLM's first stage (4 ranks) share 4 "
        "ranks; a 1F1B boundary schedule needs them disjoint (separate stages) or identical (shared)");
  }
  EXPECT_THROW(boundary_stages(partial, 1), LayoutError);
}

// ---- steps on the CPU executor ----

struct PlanData {
  BoundaryPlan plan;
  std::vector<std::vector<unsigned char>> source, destination;
  std::vector<PlanBuffers> buffers() {
    std::vector<PlanBuffers> out;
    for (std::size_t r = 0; r < source.size(); ++r)
      out.push_back(
          PlanBuffers{source[r].data(), destination[r].data(), source[r].size(), destination[r].size()});
    return out;
  }
};

// Random source bytes, poisoned destinations.
PlanData make_data(BoundaryPlan plan, std::mt19937_64& rng) {
  PlanData d;
  const int world = plan.world_size;
  d.source.resize(world);
  d.destination.resize(world);
  for (int r = 0; r < world; ++r) {
    for (std::int64_t i = 0; i < plan.source_bytes[r]; ++i)
      d.source[r].push_back(static_cast<unsigned char>(rng()));
    d.destination[r].assign(plan.destination_bytes[r], 0xEE);
  }
  d.plan = std::move(plan);
  return d;
}

std::vector<StepBuffers> step_buffers(PlanData* forward, PlanData* backward, int world) {
  std::vector<StepBuffers> out(world);
  if (forward != nullptr) {
    const auto b = forward->buffers();
    for (int r = 0; r < world; ++r) out[r].forward = b[r];
  }
  if (backward != nullptr) {
    const auto b = backward->buffers();
    for (int r = 0; r < world; ++r) out[r].backward = b[r];
  }
  return out;
}

// Micro-batches of one layout: the case's batch with fresh token counts (same samples, so a given
// sample->replica map stays valid), each plan with a random strategy.
struct Iteration {
  std::vector<PlanData> forward, backward;
};

Iteration make_iteration(const Layout& layout, int encoder, const BoundaryBatch& like, int microbatches,
                         std::mt19937_64& rng) {
  Iteration it;
  for (int i = 0; i < microbatches; ++i) {
    BoundaryBatch batch = like;
    for (auto& t : batch.tokens) t = rng() % 5 == 0 ? 0 : static_cast<std::int64_t>(rng() % 30);
    auto strategy = [&] { return rng() % 2 ? Strategy::direct : Strategy::scatter_allgather; };
    it.forward.push_back(make_data(plan_forward(layout, encoder, batch, PlanOptions{strategy()}), rng));
    it.backward.push_back(make_data(plan_backward(layout, encoder, batch, PlanOptions{strategy()}), rng));
  }
  return it;
}

// Runs the ticks as combined steps, and each plan alone on a copy of its buffers; every destination
// byte must agree. Returns how many steps had a pair of ranks carrying both plans one way in one wave.
int run_and_compare(const Layout& layout, Iteration& it, const std::vector<BoundaryTick>& ticks,
                    const std::string& what) {
  const int world = layout.world_size();
  std::vector<PlanData> alone_fwd = it.forward, alone_bwd = it.backward;
  for (PlanData& d : alone_fwd) execute_cpu(d.plan, d.buffers(), 2);
  for (PlanData& d : alone_bwd) execute_cpu(d.plan, d.buffers(), 2);
  int shared_pairs = 0;
  for (const BoundaryTick& t : ticks) {
    PlanData* f = t.forward >= 0 ? &it.forward[t.forward] : nullptr;
    PlanData* b = t.backward >= 0 ? &it.backward[t.backward] : nullptr;
    execute_step_cpu(f ? &f->plan : nullptr, b ? &b->plan : nullptr, step_buffers(f, b, world), 2);
    if (f == nullptr || b == nullptr) continue;
    const auto all = make_all_step_schedules(&f->plan, &b->plan);
    bool found = false;
    for (int r = 0; r < world && !found; ++r) {
      const RankStepSchedule& s = all[r];
      for (std::size_t w = 0; w < s.waves() && !found; ++w) {
        if (w >= s.parts[0].schedule.phases.size() || w >= s.parts[1].schedule.phases.size()) continue;
        for (const Message& m0 : s.parts[0].schedule.phases[w].sends) {
          for (const Message& m1 : s.parts[1].schedule.phases[w].sends) found = found || m0.peer == m1.peer;
        }
      }
    }
    shared_pairs += found;
  }
  for (std::size_t i = 0; i < it.forward.size(); ++i) {
    EXPECT_EQ(it.forward[i].destination, alone_fwd[i].destination)
        << what << ": forward of micro-batch " << i;
    EXPECT_EQ(it.backward[i].destination, alone_bwd[i].destination)
        << what << ": backward of micro-batch " << i;
  }
  return shared_pairs;
}

TEST(HeteroPipeline, OneFOneBEqualsPlanByPlan) {
  std::mt19937_64 rng(test_seed(2022));
  int combined = 0;
  for (int i = 0; i < 150; ++i) {
    Case c = random_case(rng, 32);
    const Layout layout(c.spec);
    const int e = static_cast<int>(rng() % layout.num_encoders());
    const int m = 1 + static_cast<int>(rng() % 6);
    Iteration it = make_iteration(layout, e, c.batch, m, rng);
    const int llm_stages = 1 + static_cast<int>(rng() % 4);
    for (BoundaryStages stages : {BoundaryStages::separate, BoundaryStages::shared}) {
      Iteration copy = it;
      const auto ticks = boundary_1f1b(m, llm_stages, stages);
      for (const BoundaryTick& t : ticks) combined += t.forward >= 0 && t.backward >= 0;
      run_and_compare(layout, copy, ticks,
                      "case " + std::to_string(i) + " " + boundary_stages_name(stages) + ": " + c.describe());
      if (HasFailure()) return;
    }
  }
  EXPECT_GT(combined, 150);
}

// Colocated layouts: the encoder and the LLM share every rank, so in a combined step one pair of ranks
// can carry forward and backward messages the same way in the same wave - where the order matters.
TEST(HeteroPipeline, ColocatedLayouts) {
  std::mt19937_64 rng(test_seed(7));
  int cases = 0, shared_pairs = 0;
  while (cases < 120) {
    Case c = random_case(rng, 24);
    if (c.spec.llm.num_ranks != -1) continue;  // colocated only
    ++cases;
    const Layout layout(c.spec);
    const int m = 2 + static_cast<int>(rng() % 4);
    Iteration it = make_iteration(layout, 0, c.batch, m, rng);
    shared_pairs += run_and_compare(layout, it, boundary_1f1b(m, 1 + static_cast<int>(rng() % 3)),
                                    "case " + std::to_string(cases) + ": " + c.describe());
    if (HasFailure()) return;
  }
  EXPECT_GT(shared_pairs, 30);  // the interesting situation did occur
}

// A rank that posts the backward plan first, against peers that post the forward plan first: caught
// wherever a pair of ranks carries both plans the same way in one wave, harmless elsewhere.
TEST(HeteroPipeline, OrderContractViolationIsCaught) {
  std::mt19937_64 rng(test_seed(31));
  int caught = 0, harmless = 0;
  for (int i = 0; i < 300; ++i) {
    Case c = random_case(rng, 24);
    const Layout layout(c.spec);
    const int world = layout.world_size();
    Iteration it = make_iteration(layout, 0, c.batch, 2, rng);
    PlanData& f = it.forward[1];
    PlanData& b = it.backward[0];
    const std::vector<RankStepSchedule> good = make_all_step_schedules(&f.plan, &b.plan);
    // The rank to break: one that receives both plans from one peer in one wave, if any.
    int victim = -1;
    for (int r = 0; r < world && victim < 0; ++r) {
      const RankStepSchedule& s = good[r];
      ASSERT_EQ(s.parts.size(), 2u);
      ASSERT_EQ(s.parts[0].direction, Direction::forward);
      ASSERT_EQ(s.parts[1].direction, Direction::backward);
      for (std::size_t w = 0; w < s.waves() && victim < 0; ++w) {
        if (w >= s.parts[0].schedule.phases.size() || w >= s.parts[1].schedule.phases.size()) continue;
        for (const Message& m0 : s.parts[0].schedule.phases[w].recvs) {
          for (const Message& m1 : s.parts[1].schedule.phases[w].recvs) {
            if (m0.peer == m1.peer) victim = r;
          }
        }
      }
    }
    std::vector<RankStepSchedule> bad = good;
    const int swapped = victim >= 0 ? victim : static_cast<int>(rng() % world);
    std::swap(bad[swapped].parts[0], bad[swapped].parts[1]);
    const auto buffers = step_buffers(&f, &b, world);
    if (victim < 0) {
      // No pair carries both plans one way: the order cannot matter, and the data must still arrive.
      PlanData f2 = f, b2 = b;
      execute_step_cpu(bad, buffers, 2);
      execute_step_cpu(&f2.plan, &b2.plan, step_buffers(&f2, &b2, world), 2);
      ASSERT_EQ(f.destination, f2.destination) << c.describe();
      ASSERT_EQ(b.destination, b2.destination) << c.describe();
      ++harmless;
      continue;
    }
    try {
      execute_step_cpu(bad, buffers, 2);
      ADD_FAILURE() << "rank " << victim << " posted backward first and nothing noticed: " << c.describe();
      return;
    } catch (const ExecutionError& e) {
      EXPECT_NE(std::string(e.what()).find("different orders (pipeline.h's order contract)"),
                std::string::npos)
          << e.what();
    }
    // The same break on the sending side of that pair is caught too.
    bad = good;
    int sender = -1;
    for (int r = 0; r < world && sender < 0; ++r) {
      const RankStepSchedule& s = good[r];
      for (std::size_t w = 0;
           w < std::min(s.parts[0].schedule.phases.size(), s.parts[1].schedule.phases.size()); ++w) {
        for (const Message& m0 : s.parts[0].schedule.phases[w].sends) {
          for (const Message& m1 : s.parts[1].schedule.phases[w].sends) {
            if (m0.peer == m1.peer) sender = r;
          }
        }
      }
    }
    ASSERT_GE(sender, 0);
    std::swap(bad[sender].parts[0], bad[sender].parts[1]);
    EXPECT_THROW(execute_step_cpu(bad, buffers, 2), ExecutionError) << c.describe();
    // And the schedules as built run.
    execute_step_cpu(good, buffers, 2);
    ++caught;
  }
  EXPECT_GT(caught, 15);
  EXPECT_GT(harmless, 20);
}

TEST(HeteroPipeline, StepPartsAndWaves) {
  const Layout layout(two_modules(8, {"llm", 4, 1, 1, 0, false, 4, 4}, {"vision", 1, 1, 1, 0, false, 0, 4}));
  const BoundaryBatch batch{{5, 3, 2, 7}, 4, 2};
  const BoundaryPlan f = plan_forward(layout, 0, batch, PlanOptions{Strategy::scatter_allgather});
  const BoundaryPlan b = plan_backward(layout, 0, batch);
  ASSERT_EQ(f.phases.size(), 2u);
  ASSERT_EQ(b.phases.size(), 1u);
  for (int r = 0; r < 8; ++r) {
    const RankStepSchedule s = make_step_schedule(&f, &b, r);
    ASSERT_EQ(s.parts.size(), 2u);
    EXPECT_EQ(s.parts[0].direction, Direction::forward) << "every rank posts the forward plan first";
    EXPECT_EQ(s.parts[1].direction, Direction::backward);
    EXPECT_EQ(s.waves(), 2u);
    EXPECT_FALSE(s.empty());
    // An encoder rank sends forward and receives backward in its first wave: one grouped call.
    if (r < 4) {
      EXPECT_FALSE(s.parts[0].schedule.phases[0].sends.empty());
      EXPECT_FALSE(s.parts[1].schedule.phases[0].recvs.empty());
    }
  }
  const RankStepSchedule only_backward = make_step_schedule(nullptr, &b, 5);
  ASSERT_EQ(only_backward.parts.size(), 1u);
  EXPECT_EQ(only_backward.parts[0].direction, Direction::backward);
  EXPECT_EQ(only_backward.waves(), 1u);
  EXPECT_TRUE(make_step_schedule(nullptr, nullptr, 3).parts.empty());
  EXPECT_NO_THROW(execute_step_cpu(nullptr, nullptr, {}));
}

TEST(HeteroPipeline, RejectsPlansInTheWrongRole) {
  const Layout layout(two_modules(8, {"llm", 2, 1, 1, 0, false, 4, 4}, {"vision", 1, 1, 1, 0, false, 0, 4}));
  LayoutSpec two = two_modules(8, {"llm", 2, 1, 1, 0, false, 4, 4}, {"vision", 1, 1, 1, 0, false, 0, 2});
  two.encoders.push_back(ModuleSpec{"audio", 1, 1, 1, 0, false, 2, 2});
  const Layout layout2(two);
  const BoundaryBatch batch{{3, 3}, 4, 2};
  const BoundaryPlan f = plan_forward(layout, 0, batch), b = plan_backward(layout, 0, batch);
  try {
    make_step_schedule(&b, &f, 0);
    ADD_FAILURE();
  } catch (const ExecutionError& e) {
    EXPECT_STREQ(e.what(), "step: the plan given as the forward plan is a backward plan");
  }
  EXPECT_THROW(make_step_schedule(nullptr, &f, 0), ExecutionError);
  EXPECT_THROW(make_all_step_schedules(&b, nullptr), ExecutionError);
  const BoundaryPlan audio_b = plan_backward(layout2, 1, batch);
  try {
    make_all_step_schedules(&f, &audio_b);
    ADD_FAILURE();
  } catch (const ExecutionError& e) {
    EXPECT_STREQ(e.what(),
                 "step: the forward plan (encoder 0, world 8) and the backward plan (encoder 1, world 8) are "
                 "not the two directions of one boundary");
  }
  EXPECT_THROW(make_step_schedule(&f, &b, 8), ExecutionError);
  // Short buffers name the plan.
  std::mt19937_64 rng(1);
  PlanData fd = make_data(f, rng), bd = make_data(b, rng);
  std::vector<StepBuffers> bufs = step_buffers(&fd, &bd, 8);
  bufs[4].forward.destination_size -= 1;
  try {
    execute_step_cpu(&f, &b, bufs);
    ADD_FAILURE();
  } catch (const ExecutionError& e) {
    EXPECT_STREQ(e.what(), ("rank 4: destination buffer of " + std::to_string(f.destination_bytes[4] - 1) +
                            " bytes, the forward plan needs " + std::to_string(f.destination_bytes[4]))
                               .c_str());
  }
  EXPECT_THROW(execute_step_cpu(&f, &b, std::vector<StepBuffers>(7)), ExecutionError);
}

}  // namespace
