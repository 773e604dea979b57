// The in-process executor moves real bytes; what arrives is checked against an undistributed
// reference, forward and backward, over random layouts and batches.
#include "zipccl/hetero/executor_cpu.h"

#include <cstdio>

#include <gtest/gtest.h>

#include "test_util.h"

namespace {

using namespace hetero_test;

// Byte k of row `row` of sample s of the reference tensor; `salt` tells tensors apart.
unsigned char reference_byte(int s, std::int64_t row, std::int64_t k, std::uint64_t salt) {
  std::uint64_t x = salt ^ (static_cast<std::uint64_t>(s) << 40) ^ (static_cast<std::uint64_t>(row) << 16) ^
                    static_cast<std::uint64_t>(k);
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<unsigned char>(x >> 56);
}

struct World {
  std::vector<std::vector<unsigned char>> source, destination;
  std::vector<HostBuffers> buffers;
};

// Source buffers hold the reference as module `src` keeps it; destinations are poisoned.
World make_world(const Layout& layout, const BoundaryPlan& plan, const BoundaryBatch& batch,
                 std::uint64_t salt) {
  World w;
  const int n = layout.world_size();
  w.source.resize(n);
  w.destination.resize(n);
  const Module& src = layout.modules()[plan.source_module];
  for (int r = 0; r < n; ++r) {
    // Rows outside the segments (the text and padding of the LLM's combined input) hold other data.
    w.source[r].assign(plan.source_bytes[r], 0x5A);
    w.destination[r].assign(plan.destination_bytes[r], 0xEE);
    for (const BufferSegment& seg : buffer_segments(src, batch, r)) {
      for (std::int64_t row = seg.rows.begin; row < seg.rows.end; ++row) {
        for (std::int64_t k = 0; k < batch.row_bytes(); ++k) {
          w.source[r][seg.offset + (row - seg.rows.begin) * batch.row_bytes() + k] =
              reference_byte(seg.sample, row, k, salt);
        }
      }
    }
  }
  for (int r = 0; r < n; ++r) {
    w.buffers.push_back(HostBuffers{w.source[r].data(), w.destination[r].data(), w.source[r].size(),
                                    w.destination[r].size()});
  }
  return w;
}

// Empty when every destination buffer is its rank's slice of the undistributed reference: at each
// buffer row the oracle (test_util.h, position by position from the layout rules) maps to an image
// row, that row's bytes; every other byte (text and padding of the LLM's combined input) untouched.
std::string check_arrived(const Layout& layout, const BoundaryPlan& plan, const BoundaryBatch& batch,
                          const World& w, std::uint64_t salt) {
  const Module& dst = layout.modules()[plan.destination_module];
  const Oracle need = make_oracle(layout, dst, batch);
  const std::int64_t rb = batch.row_bytes();
  for (int r = 0; r < layout.world_size(); ++r) {
    if (static_cast<std::int64_t>(w.destination[r].size()) != need.buffer_rows[r] * rb)
      return "destination buffer size of rank " + std::to_string(r);
    std::vector<char> image_row(need.buffer_rows[r], 0);
    for (int s = 0; s < batch.num_samples(); ++s) {
      for (std::size_t i = 0; i < need.keeps[r][s].size(); ++i) {
        const std::int64_t row = need.keeps[r][s][i], at = need.index[r][s][i];
        image_row[at] = 1;
        for (std::int64_t k = 0; k < rb; ++k) {
          if (w.destination[r][at * rb + k] != reference_byte(s, row, k, salt)) {
            return "rank " + std::to_string(r) + " sample " + std::to_string(s) + " row " + std::to_string(row) +
                   " (buffer row " + std::to_string(at) + ") byte " + std::to_string(k) + " is wrong";
          }
        }
      }
    }
    for (std::int64_t at = 0; at < need.buffer_rows[r]; ++at) {
      for (std::int64_t k = 0; k < rb && !image_row[at]; ++k) {
        if (w.destination[r][at * rb + k] != 0xEE)
          return "rank " + std::to_string(r) + " buffer row " + std::to_string(at) + " (text or padding) was written";
      }
    }
    // buffer_segments (what callers use) says the same as the oracle.
    std::int64_t covered = 0;
    for (const BufferSegment& seg : buffer_segments(dst, batch, r)) {
      for (std::int64_t row = seg.rows.begin; row < seg.rows.end; ++row, ++covered) {
        if (!need.has(r, seg.sample, row) ||
            need.position(r, seg.sample, row) * rb != seg.offset + (row - seg.rows.begin) * rb) {
          return "buffer_segments of rank " + std::to_string(r) + " disagree with the oracle";
        }
      }
    }
    std::int64_t kept = 0;
    for (const auto& rows : need.keeps[r]) kept += static_cast<std::int64_t>(rows.size());
    if (covered != kept) return "buffer_segments of rank " + std::to_string(r) + " miss rows";
    if (buffer_bytes(dst, batch, r) != need.buffer_rows[r] * rb) return "buffer_bytes of rank " + std::to_string(r);
  }
  return "";
}

TEST(HeteroExecutorCpu, ForwardAndBackwardDeliverTheReference) {
  std::mt19937_64 rng(test_seed(99));
  int combined[3] = {0, 0, 0};  // image-only, thd, bshd cases
  int chained = 0;              // plans with parties relaying in chains (more than 2 phases)
  for (int i = 0; i < 600; ++i) {
    Case c = random_case(rng, 40, true);
    Layout layout(c.spec);
    const int e = static_cast<int>(rng() % layout.num_encoders());
    for (Strategy st : {Strategy::direct, Strategy::scatter_allgather}) {
      for (Direction dir : {Direction::forward, Direction::backward}) {
        const BoundaryPlan plan = plan_boundary(layout, e, c.batch, dir, PlanOptions{st});
        const std::uint64_t salt = rng();
        World w = make_world(layout, plan, c.batch, salt);
        execute_cpu(plan, w.buffers, 2);
        ASSERT_EQ(check_arrived(layout, plan, c.batch, w, salt), "")
            << "case " << i << " " << direction_name(dir) << " " << strategy_name(st) << ": " << c.describe();
        chained += plan.phases.size() > 2;
      }
    }
    ++combined[static_cast<int>(c.batch.llm_sequence.format)];
  }
  std::printf("%d plans relay in chains\n", chained);
  EXPECT_GT(chained, 20);
  EXPECT_GT(combined[1], 100);
  EXPECT_GT(combined[2], 100);
}

// Adjointness on the logical tensor: F moves X (encoder layout) to the LLM layout, G moves Y back.
// Reading one copy of each row (R) on both sides, <R F X, Y> == <X, R G Y> for every X and Y, i.e.
// G is F's adjoint for the inner product that counts each logical element once. Values are small
// integers, so the sums are exact.
TEST(HeteroExecutorCpu, BackwardIsTheAdjointOfForward) {
  std::mt19937_64 rng(test_seed(5));
  for (int i = 0; i < 150; ++i) {
    Case c = random_case(rng, 32, true);
    c.batch.element_size = 8;  // one double per element
    Layout layout(c.spec);
    const BoundaryPlan fwd = plan_forward(layout, 0, c.batch), bwd = plan_backward(layout, 0, c.batch);
    const Module& enc = layout.encoder(0);
    const Module& llm = layout.llm();
    const int n = c.batch.num_samples();
    const std::int64_t h = c.batch.hidden;
    std::vector<std::vector<double>> X(n), Y(n);
    for (int s = 0; s < n; ++s) {
      for (std::int64_t k = 0; k < c.batch.tokens[s] * h; ++k) {
        X[s].push_back(static_cast<double>(static_cast<int>(rng() % 19) - 9));
        Y[s].push_back(static_cast<double>(static_cast<int>(rng() % 19) - 9));
      }
    }
    auto run = [&](const BoundaryPlan& plan, const Module& from, const Module& to,
                   const std::vector<std::vector<double>>& value) {
      const int world = layout.world_size();
      std::vector<std::vector<double>> src(world), dst(world);
      std::vector<HostBuffers> bufs(world);
      for (int r = 0; r < world; ++r) {
        src[r].assign(plan.source_bytes[r] / 8, 0.0);
        dst[r].assign(plan.destination_bytes[r] / 8, std::nan(""));
        for (const BufferSegment& seg : buffer_segments(from, c.batch, r)) {
          std::copy(value[seg.sample].begin() + seg.rows.begin * h,
                    value[seg.sample].begin() + seg.rows.end * h, src[r].begin() + seg.offset / 8);
        }
        bufs[r] = HostBuffers{src[r].data(), dst[r].data(), src[r].size() * 8, dst[r].size() * 8};
      }
      execute_cpu(plan, bufs, 2);
      // R: the copy held by the lowest rank that keeps each row.
      std::vector<std::vector<double>> logical(n);
      for (int s = 0; s < n; ++s) logical[s].assign(c.batch.tokens[s] * h, std::nan(""));
      for (int r = world - 1; r >= 0; --r) {
        for (const BufferSegment& seg : buffer_segments(to, c.batch, r)) {
          std::copy(dst[r].begin() + seg.offset / 8, dst[r].begin() + seg.offset / 8 + seg.rows.size() * h,
                    logical[seg.sample].begin() + seg.rows.begin * h);
        }
      }
      return logical;
    };
    const auto FX = run(fwd, enc, llm, X);
    const auto GY = run(bwd, llm, enc, Y);
    double lhs = 0, rhs = 0;
    for (int s = 0; s < n; ++s) {
      for (std::size_t k = 0; k < X[s].size(); ++k) {
        lhs += FX[s][k] * Y[s][k];
        rhs += X[s][k] * GY[s][k];
      }
    }
    ASSERT_EQ(lhs, rhs) << c.describe();
    ASSERT_FALSE(std::isnan(lhs)) << c.describe();
  }
}

TEST(HeteroExecutorCpu, SchedulesAgreeRankByRank) {
  std::mt19937_64 rng(test_seed(17));
  for (int i = 0; i < 100; ++i) {
    Case c = random_case(rng, 40, true);
    Layout layout(c.spec);
    const BoundaryPlan plan = plan_forward(layout, 0, c.batch, PlanOptions{Strategy::scatter_allgather});
    const std::vector<RankSchedule> all = make_all_schedules(plan);
    for (int r = 0; r < layout.world_size(); ++r) {
      const RankSchedule one = make_schedule(plan, r);
      ASSERT_EQ(one.phases.size(), all[r].phases.size());
      for (std::size_t p = 0; p < one.phases.size(); ++p) {
        ASSERT_EQ(one.phases[p].sends.size(), all[r].phases[p].sends.size());
        ASSERT_EQ(one.phases[p].recvs.size(), all[r].phases[p].recvs.size());
        for (std::size_t k = 0; k < one.phases[p].recvs.size(); ++k) {
          EXPECT_EQ(one.phases[p].recvs[k].bytes, all[r].phases[p].recvs[k].bytes);
          EXPECT_EQ(one.phases[p].recvs[k].offset, all[r].phases[p].recvs[k].offset);
        }
      }
    }
  }
}

// Issue 22's 64-GPU example, where the holder inside the receiving party also relays in phase 1
// (a helper, from the rows it copied in phase 0): the bytes that arrive are the reference, and the
// holder does send in phase 1.
TEST(HeteroExecutorCpu, HelpersDeliverTheReference) {
  LayoutSpec spec;
  spec.world_size = 64;
  spec.llm.tp = 8;
  spec.encoders.push_back(ModuleSpec{"enc0", 1, 1, 2, 0, false, 0, -1, parse_rank_order("pp-dp-tp-cp")});
  const Layout layout(spec);
  const BoundaryBatch batch{{576, 576, 576, 576}, 16, 2};
  const BoundaryPlan plan = plan_forward(layout, 0, batch, PlanOptions{Strategy::scatter_allgather});
  std::int64_t helper_sent = 0;  // rank 1 holds sample 0 and is a member of the party receiving it
  for (const Transfer& t : plan.phases[1]) helper_sent += t.src == 1 ? t.rows.size() : 0;
  EXPECT_EQ(helper_sent, 144);  // 720 - 576: docs/benchmarks-journal.md section 3
  World w = make_world(layout, plan, batch, 7);
  execute_cpu(plan, w.buffers, 2);
  EXPECT_EQ(check_arrived(layout, plan, batch, w, 7), "");
}

TEST(HeteroExecutorCpu, MessagesMergeAcrossSamples) {
  // 1:1 replicas, encoder tp1 -> llm tp1: each receiver gets its replica's 4 samples in one message.
  LayoutSpec s;
  s.world_size = 4;
  s.llm = ModuleSpec{"llm", 1, 1, 1, 0, false, 2, 2};
  s.encoders.push_back(ModuleSpec{"vision", 1, 1, 1, 0, false, 0, 2});
  Layout layout(s);
  const BoundaryPlan plan = plan_forward(layout, 0, BoundaryBatch{{5, 0, 7, 1, 2, 3, 4, 5}, 8, 2});
  EXPECT_EQ(plan.phases[0].size(), 7u);  // one transfer per non-empty sample
  const RankSchedule r2 = make_schedule(plan, 2);
  ASSERT_EQ(r2.phases[0].recvs.size(), 1u);
  EXPECT_EQ(r2.phases[0].recvs[0].bytes, (5 + 7 + 1) * 16);
  EXPECT_THROW(make_schedule(plan, 4), ExecutionError);
}

TEST(HeteroExecutorCpu, RejectsSmallBuffers) {
  LayoutSpec s;
  s.world_size = 2;
  s.encoders.push_back(ModuleSpec{});
  s.llm.tp = 2;
  Layout layout(s);
  const BoundaryPlan plan = plan_forward(layout, 0, BoundaryBatch{{3, 3}, 4, 2});
  std::vector<unsigned char> a(24), b(47);
  std::vector<HostBuffers> bufs(2, HostBuffers{a.data(), b.data(), a.size(), b.size()});
  try {
    execute_cpu(plan, bufs);
    ADD_FAILURE();
  } catch (const ExecutionError& e) {
    EXPECT_STREQ(e.what(), "rank 0: destination buffer of 47 bytes, the plan needs 48");
  }
  EXPECT_THROW(execute_cpu(plan, std::vector<HostBuffers>(1)), ExecutionError);
}

}  // namespace
