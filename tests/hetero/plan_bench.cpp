// Planning time at 16,384 ranks: the world planner (every rank's transfers) against one rank
// planning only its own (rank_plan.h), cold and from RankPlanner's cache, for each strategy. A benchmark, not a test:
// its figures go into BENCHMARKS.md section 3.
//   hetero_plan_bench [ranks to sample, default 256] [per-rank]
// "per-rank" skips the world planner: its large frees raise glibc's trim threshold, so without it the
// per-rank figures are those of a process whose allocator returns memory after each plan.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "zipccl/hetero/parse.h"
#include "zipccl/hetero/rank_plan.h"

using namespace zipccl::hetero;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Minor page faults so far: a plan that touches fresh memory (glibc hands out new pages whenever its
// trim and mmap thresholds return freed ones to the kernel) pays ~2 us a page on this machine.
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

bool g_world_planner = true;

void run_strategy(const Layout& layout, const BoundaryBatch& batch, int sampled, Strategy strategy) {
  const PlanOptions options{strategy};
  const int world = layout.world_size();
  double world_seconds = 1e9;
  std::size_t transfers = 0;
  for (int rep = 0; rep < (g_world_planner ? 3 : 0); ++rep) {  // best of three: the machine is shared
    const auto t0 = Clock::now();
    const BoundaryPlan f = plan_forward(layout, 0, batch, options), b = plan_backward(layout, 0, batch, options);
    world_seconds = std::min(world_seconds, since(t0));
    transfers = f.num_transfers() + b.num_transfers();
  }
  double cold_max = 0, cold_sum = 0, warm_max = 0, warm_sum = 0, miss_max = 0, miss_sum = 0;
  std::size_t most = 0;
  int worst = -1;
  long cold_faults = 0, miss_faults = 0;
  for (int i = 0; i < sampled; ++i) {
    const int r = static_cast<int>(static_cast<std::int64_t>(i) * world / sampled);
    // Best of five fresh planners per rank (other processes share the cores; a preempted run is
    // not the planner's time), then the same planner again: a cache hit. "Miss": a planner that
    // keeps one plan, asked for the two directions in turn - every call a miss that reuses the
    // tables and cache entry of the one before, as in training with a new micro-batch each step.
    double cold = 1e9, warm = 1e9, miss = 1e9;
    RankPlanner reused(layout, 0, r, 1, options);
    reused.plan(batch, Direction::forward);
    std::size_t n = 0;
    for (int rep = 0; rep < 5; ++rep) {
      long f0 = minor_faults();
      auto t0 = Clock::now();
      {
        RankPlanner planner(layout, 0, r, 8, options);
        n = planner.plan(batch, Direction::forward).num_transfers() +
            planner.plan(batch, Direction::backward).num_transfers();
        cold = std::min(cold, since(t0));
        t0 = Clock::now();
        planner.plan(batch, Direction::forward);
        planner.plan(batch, Direction::backward);
        warm = std::min(warm, since(t0));
      }
      cold_faults += minor_faults() - f0;
      f0 = minor_faults();
      t0 = Clock::now();
      reused.plan(batch, Direction::backward);
      reused.plan(batch, Direction::forward);
      miss = std::min(miss, since(t0));
      miss_faults += minor_faults() - f0;
    }
    miss_max = std::max(miss_max, miss);
    miss_sum += miss;
    if (cold > cold_max) worst = r;
    cold_max = std::max(cold_max, cold);
    warm_max = std::max(warm_max, warm);
    cold_sum += cold;
    warm_sum += warm;
    most = std::max(most, n);
  }
  if (g_world_planner) {
    std::printf("  %s: world planner, forward + backward: %.1f ms (%zu transfers; best of 3)\n", strategy_name(strategy),
                world_seconds * 1e3, transfers);
  } else {
    std::printf("  %s:\n", strategy_name(strategy));
  }
  std::printf("    per rank, forward + backward, %d ranks sampled (best of 5 each): cold mean %.3f ms, max %.3f ms (rank %d); "
              "miss on a reused planner mean %.3f ms, max %.3f ms; cached mean %.4f ms, max %.4f ms; at most %zu "
              "transfers for one rank; minor page faults per plan pair: cold %.1f, miss %.1f\n",
              sampled, cold_sum / sampled * 1e3, cold_max * 1e3, worst, miss_sum / sampled * 1e3, miss_max * 1e3,
              warm_sum / sampled * 1e3, warm_max * 1e3, most, static_cast<double>(cold_faults) / (5.0 * sampled),
              static_cast<double>(miss_faults) / (5.0 * sampled));
}

void run(const char* name, const LayoutSpec& spec, const BoundaryBatch& batch, int sampled) {
  const Layout layout(spec);
  std::printf("%s\n", name);
  for (Strategy st : {Strategy::direct, Strategy::scatter_allgather, Strategy::automatic}) {
    run_strategy(layout, batch, sampled, st);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int sampled = argc > 1 ? std::atoi(argv[1]) : 256;
  g_world_planner = !(argc > 2 && std::string(argv[2]) == "per-rank");
  {
    LayoutSpec spec;
    spec.world_size = 16384;
    spec.encoders.push_back(parse_module_spec("name=vision,tp=2,ranks=0-4095"));
    spec.llm = parse_module_spec("name=llm,tp=8,pp=4,cp=2,sp,ranks=4096-16383");
    run("16,384 ranks: encoder tp2 on 0-4095, LLM tp8 pp4 cp2 sp on 4096-16383, 12,288 x 576 tokens",
        spec, BoundaryBatch{std::vector<std::int64_t>(12288, 576), 8192, 2}, sampled);
  }
  {
    LayoutSpec spec;
    spec.world_size = 16384;
    spec.llm = parse_module_spec("name=llm,tp=8,pp=4");
    spec.encoders.push_back(parse_module_spec("name=vision,tp=1"));
    run("16,384 ranks: LLM tp8 pp4, encoder tp1 colocated, 16,384 x 576 tokens", spec,
        BoundaryBatch{std::vector<std::int64_t>(16384, 576), 8192, 2}, sampled);
  }
  {
    // The combined input: each sample 4,096 positions, three images of 576 tokens spliced in.
    LayoutSpec spec;
    spec.world_size = 16384;
    spec.encoders.push_back(parse_module_spec("name=vision,tp=2,ranks=0-4095"));
    spec.llm = parse_module_spec("name=llm,tp=8,pp=4,cp=2,sp,ranks=4096-16383");
    BoundaryBatch batch{std::vector<std::int64_t>(12288, 1728), 8192, 2};
    batch.llm_sequence.format = SequenceFormat::thd;
    batch.llm_sequence.length.assign(12288, 4096);
    batch.llm_sequence.images.assign(12288, {{32, 576}, {1200, 576}, {2600, 576}});
    run("same, LLM input thd: 12,288 sequences of 4,096 with 3 x 576 image tokens each", spec, batch, sampled);
  }
  {
    // Issue 22's 8-GPU hot spot grown: its tokens repeated, then 64-2,500 tokens drawn per sample
    // (the relay wins by less there: 7,234 rows against 7,500, so automatic counts every party).
    LayoutSpec spec;
    spec.world_size = 16384;
    spec.llm = parse_module_spec("name=llm,tp=4");
    spec.encoders.push_back(parse_module_spec("name=vision,tp=1"));
    BoundaryBatch batch{std::vector<std::int64_t>(16384), 8192, 2};
    const std::int64_t hot[] = {576, 1024, 256, 729, 0, 576, 100, 2048};
    for (int s = 0; s < 16384; ++s) batch.tokens[s] = hot[s % 8];
    run("16,384 ranks: LLM tp4, encoder tp1 colocated, 16,384 samples of 576,1024,256,729,0,576,100,2048 repeated", spec,
        batch, sampled);
    std::mt19937_64 rng(22);
    for (auto& t : batch.tokens) t = 64 + static_cast<std::int64_t>(rng() % 2437);
    run("same, 64-2,500 tokens per sample (uniform, seed 22)", spec, batch, sampled);
    // The near tie: one LLM party's four samples near the largest, so its relay sends 7,501 rows
    // against direct's 7,500 (automatic counts every party, then plans that one exactly).
    batch.tokens[4000] = batch.tokens[4001] = batch.tokens[4002] = 2500;
    batch.tokens[4003] = 2499;
    run("same, samples 4000-4003 of 2,500, 2,500, 2,500, 2,499 tokens (direct wins by one row)", spec, batch, sampled);
  }
  return 0;
}
