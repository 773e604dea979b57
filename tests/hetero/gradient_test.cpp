// The backward plan gives the gradient of an undistributed model.
//
// Toy model, per sample s (rows are tokens):
//   encoder  X = Z W          W: [k, h], tensor parallel as a row-parallel linear (Megatron-LM):
//                             tp rank t holds Z[:, cols t] and W[rows t, :], outputs are summed over
//                             tp (all-reduce; reduce-scatter over rows with sequence parallelism)
//   boundary Y = X            the plan, forward
//   LLM      H = Y V          V: [h, f], a column-parallel linear: tp rank t holds V[:, cols t]; with
//                             sequence parallelism Y is first all-gathered over tp
//   loss     L = sum(B .* H) + sum(H .* H) / 2, so dH = B + H
// Backward as Megatron-LM runs it: tp rank t gets the partial dY_t = dH[:, cols t] V[:, cols t]^T;
// the copy-to-tp-region's backward all-reduces it (reduce-scatters it with sequence parallelism),
// so every copy is the full dY. The backward plan takes one copy per row and hands it to every
// encoder rank that produced the row; each computes dW[rows t, :] += Z[:, cols t]^T dX, summed over
// dp and cp (the usual gradient all-reduce). Reference: the same model on one process.
// Small integers in doubles keep every sum exact, so results are compared for equality.
#include <gtest/gtest.h>

#include <map>

#include "test_util.h"
#include "zipccl/hetero/executor_cpu.h"

namespace {

using namespace hetero_test;
using Matrix = std::vector<double>;  // row-major

enum class Gradients { all_reduced, partial };

struct Outcome {
  bool dx_equal = true;  // every encoder rank received the reference dX rows
  bool dw_equal = true;  // assembled dW equals the reference
};

Outcome run_model(const Layout& layout, const std::vector<std::int64_t>& tokens, std::mt19937_64& rng,
                  Gradients mode, Strategy strategy) {
  const Module& enc = layout.encoder(0);
  const Module& llm = layout.llm();
  const int n = static_cast<int>(tokens.size());
  const int h = 3, k = 2 * enc.tp(), f = 2 * llm.tp();
  const BoundaryBatch batch{tokens, h, 8};
  auto rnd = [&] { return static_cast<double>(static_cast<int>(rng() % 7) - 3); };
  Matrix W(k * h), V(h * f);
  for (double& x : W) x = rnd();
  for (double& x : V) x = rnd();
  std::vector<Matrix> Z(n), B(n), dX(n);
  for (int s = 0; s < n; ++s) {
    Z[s].resize(tokens[s] * k);
    B[s].resize(tokens[s] * f);
    for (double& x : Z[s]) x = rnd();
    for (double& x : B[s]) x = rnd();
  }
  // Encoder output row, summed over tp partials (what the all-reduce / reduce-scatter produces).
  auto x_row = [&](int s, std::int64_t row, std::vector<double>& out) {
    out.assign(h, 0.0);
    for (int t = 0; t < enc.tp(); ++t) {
      for (int i = 2 * t; i < 2 * t + 2; ++i) {
        for (int j = 0; j < h; ++j) out[j] += Z[s][row * k + i] * W[i * h + j];
      }
    }
  };
  // LLM tp rank t's partial input gradient for one row, from that row's input y.
  auto partial_dy = [&](int s, std::int64_t row, int t, const double* y, std::vector<double>& out) {
    out.assign(h, 0.0);
    for (int c = 2 * t; c < 2 * t + 2; ++c) {
      double hv = 0;
      for (int j = 0; j < h; ++j) hv += y[j] * V[j * f + c];
      const double dh = B[s][row * f + c] + hv;
      for (int j = 0; j < h; ++j) out[j] += dh * V[j * f + c];
    }
  };
  // Reference dX and dW.
  Matrix dW_ref(k * h, 0.0);
  std::vector<double> xr, part;
  for (int s = 0; s < n; ++s) {
    dX[s].assign(tokens[s] * h, 0.0);
    for (std::int64_t row = 0; row < tokens[s]; ++row) {
      x_row(s, row, xr);
      for (int t = 0; t < llm.tp(); ++t) {
        partial_dy(s, row, t, xr.data(), part);
        for (int j = 0; j < h; ++j) dX[s][row * h + j] += part[j];
      }
      for (int i = 0; i < k; ++i) {
        for (int j = 0; j < h; ++j) dW_ref[i * h + j] += Z[s][row * k + i] * dX[s][row * h + j];
      }
    }
  }

  const int world = layout.world_size();
  // Forward.
  const BoundaryPlan fwd = plan_forward(layout, 0, batch, PlanOptions{strategy});
  std::vector<Matrix> enc_out(world), llm_in(world);
  std::vector<HostBuffers> bufs(world);
  for (int r = 0; r < world; ++r) {
    enc_out[r].assign(fwd.source_bytes[r] / 8, 0.0);
    llm_in[r].assign(fwd.destination_bytes[r] / 8, std::nan(""));
    for (const BufferSegment& seg : buffer_segments(enc, batch, r)) {
      for (std::int64_t row = seg.rows.begin; row < seg.rows.end; ++row) {
        x_row(seg.sample, row, xr);
        std::copy(xr.begin(), xr.end(), enc_out[r].begin() + seg.offset / 8 + (row - seg.rows.begin) * h);
      }
    }
    bufs[r] = HostBuffers{enc_out[r].data(), llm_in[r].data(), enc_out[r].size() * 8, llm_in[r].size() * 8};
  }
  execute_cpu(fwd, bufs, 2);

  // Rows a module's boundary rank sees after its tp all-gather (sequence parallel) or on its own:
  // (rank, sample, row) -> the row, read from the buffers of the rank's tp group.
  auto gathered = [&](const Module& m, const std::vector<Matrix>& buffers) {
    std::map<std::tuple<int, int, std::int64_t>, const double*> rows;
    for (int r = 0; r < world; ++r) {
      for (const BufferSegment& seg : buffer_segments(m, batch, r)) {
        for (std::int64_t row = seg.rows.begin; row < seg.rows.end; ++row) {
          const double* p = buffers[r].data() + seg.offset / 8 + (row - seg.rows.begin) * h;
          Coords c = m.coords(r);
          for (int t = 0; t < m.tp(); ++t) {
            if (!m.sequence_parallel() && t != c.tp) continue;
            Coords peer = c;
            peer.tp = t;
            rows[{m.rank(peer), seg.sample, row}] = p;
          }
        }
      }
    }
    return rows;
  };

  // LLM backward: partial gradients, then the tp all-reduce / reduce-scatter (or none, for the control).
  const auto llm_rows = gathered(llm, llm_in);
  std::map<std::tuple<int, int, int, std::int64_t>, std::vector<double>> partials;  // (replica, cp, s, row)
  std::map<std::tuple<int, int, std::int64_t>, std::vector<double>> own;            // (rank, s, row)
  for (const auto& [key, y] : llm_rows) {
    const auto [r, s, row] = key;
    const Coords c = llm.coords(r);
    partial_dy(s, row, c.tp, y, part);
    own[key] = part;
    auto& sum = partials[{c.dp, c.cp, s, row}];
    sum.resize(h, 0.0);
    for (int j = 0; j < h; ++j) sum[j] += part[j];
  }
  const BoundaryPlan bwd = plan_backward(layout, 0, batch, PlanOptions{strategy});
  std::vector<Matrix> llm_grad(world), enc_grad(world);
  for (int r = 0; r < world; ++r) {
    llm_grad[r].assign(bwd.source_bytes[r] / 8, 0.0);
    enc_grad[r].assign(bwd.destination_bytes[r] / 8, std::nan(""));
    for (const BufferSegment& seg : buffer_segments(llm, batch, r)) {
      const Coords c = llm.coords(r);
      for (std::int64_t row = seg.rows.begin; row < seg.rows.end; ++row) {
        const std::vector<double>& g = mode == Gradients::all_reduced
                                           ? partials[{c.dp, c.cp, seg.sample, row}]
                                           : own[{r, seg.sample, row}];
        std::copy(g.begin(), g.end(), llm_grad[r].begin() + seg.offset / 8 + (row - seg.rows.begin) * h);
      }
    }
    bufs[r] =
        HostBuffers{llm_grad[r].data(), enc_grad[r].data(), llm_grad[r].size() * 8, enc_grad[r].size() * 8};
  }
  execute_cpu(bwd, bufs, 2);

  // Encoder backward: dW[rows t, :] += Z[:, cols t]^T dX over the rows each rank processes.
  Outcome out;
  for (int r = 0; r < world; ++r) {
    for (const BufferSegment& seg : buffer_segments(enc, batch, r)) {
      for (std::int64_t row = seg.rows.begin; row < seg.rows.end; ++row) {
        for (int j = 0; j < h; ++j) {
          if (enc_grad[r][seg.offset / 8 + (row - seg.rows.begin) * h + j] != dX[seg.sample][row * h + j]) {
            out.dx_equal = false;
          }
        }
      }
    }
  }
  Matrix dW(k * h, 0.0);
  for (const auto& [key, dx] : gathered(enc, enc_grad)) {
    const auto [r, s, row] = key;
    const int t = enc.coords(r).tp;
    for (int i = 2 * t; i < 2 * t + 2; ++i) {
      for (int j = 0; j < h; ++j) dW[i * h + j] += Z[s][row * k + i] * dx[j];
    }
  }
  out.dw_equal = dW == dW_ref;
  return out;
}

LayoutSpec spec(int world, ModuleSpec llm, ModuleSpec enc) {
  LayoutSpec s;
  s.world_size = world;
  s.llm = llm;
  s.encoders.push_back(enc);
  return s;
}

TEST(HeteroGradient, TakeOneCopyEqualsTheUndistributedGradient) {
  std::mt19937_64 rng(1234);
  const std::vector<std::int64_t> tokens{9, 4, 0, 13, 7, 5, 11, 2};
  const std::vector<LayoutSpec> layouts = {
      // The 40-GPU example (fan-out over LLM tp), with and without sequence parallelism.
      spec(40, ModuleSpec{"llm", 4, 1, 2, 0, false, 8, 32}, ModuleSpec{"vision", 2, 1, 1, 0, false, 0, 8}),
      spec(40, ModuleSpec{"llm", 4, 1, 2, 0, true, 8, 32}, ModuleSpec{"vision", 2, 1, 1, 0, false, 0, 8}),
      // The 8-GPU example: encoder tp1 colocated with LLM tp4 (fan-in 4:1).
      spec(8, ModuleSpec{"llm", 4, 1, 1, 0, false, 0, -1}, ModuleSpec{"vision", 1, 1, 1, 0, false, 0, -1}),
      // Context parallel LLM, sequence-parallel encoder with two stages.
      spec(20, ModuleSpec{"llm", 2, 2, 1, 0, true, 8, 12}, ModuleSpec{"vision", 2, 1, 2, 0, true, 0, 8}),
  };
  for (const LayoutSpec& s : layouts) {
    Layout layout(s);
    for (Strategy st : {Strategy::direct, Strategy::scatter_allgather}) {
      const Outcome o = run_model(layout, tokens, rng, Gradients::all_reduced, st);
      EXPECT_TRUE(o.dx_equal) << layout.llm().tp() << " " << strategy_name(st);
      EXPECT_TRUE(o.dw_equal) << layout.llm().tp() << " " << strategy_name(st);
    }
  }
}

TEST(HeteroGradient, RandomLayouts) {
  std::mt19937_64 rng(77);
  for (int i = 0; i < 200; ++i) {
    Case c = random_case(rng, 24, true);
    Layout layout(c.spec);
    const Outcome o = run_model(layout, c.batch.tokens, rng, Gradients::all_reduced,
                                i % 2 ? Strategy::direct : Strategy::scatter_allgather);
    ASSERT_TRUE(o.dx_equal && o.dw_equal) << c.describe();
  }
}

// Control: without the LLM's tp all-reduce, copies hold partial sums and taking one is wrong - the
// test above would notice a backward that relied on it.
TEST(HeteroGradient, PartialCopiesWouldBeWrong) {
  std::mt19937_64 rng(4321);
  Layout layout(
      spec(40, ModuleSpec{"llm", 4, 1, 2, 0, false, 8, 32}, ModuleSpec{"vision", 2, 1, 1, 0, false, 0, 8}));
  const Outcome o = run_model(layout, {9, 4, 3, 13, 7, 5, 11, 2}, rng, Gradients::partial, Strategy::direct);
  EXPECT_FALSE(o.dx_equal);
  EXPECT_FALSE(o.dw_equal);
}

}  // namespace
