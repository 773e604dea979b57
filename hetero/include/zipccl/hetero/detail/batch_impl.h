// Definitions for batch.h.
#pragma once

#include <algorithm>
#include <climits>
#include <functional>
#include <queue>
#include <tuple>
#include <string>

namespace zipccl::hetero {

namespace detail {

__extension__ typedef __int128 Int128;  // GCC and Clang; __extension__ keeps -Wpedantic quiet

// floor(total * i / k) without overflow: the i-th of k near-equal cut points of [0, total).
inline std::int64_t split_point(std::int64_t total, std::int64_t i, std::int64_t k) {
  std::int64_t product = 0;
  if (!__builtin_mul_overflow(total, i, &product)) return product / k;  // 128-bit division is slow
  return static_cast<std::int64_t>(static_cast<Int128>(total) * i / k);
}

// a * b and a + b for byte and row counts; BatchError naming the operands when 64 bits overflow.
inline std::int64_t checked_mul(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    throw BatchError(std::string(what) + ": " + std::to_string(a) + " x " + std::to_string(b) +
                     " overflows 64 bits");
  }
  return r;
}
inline std::int64_t checked_add(std::int64_t a, std::int64_t b, const char* what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    throw BatchError(std::string(what) + ": " + std::to_string(a) + " + " + std::to_string(b) +
                     " overflows 64 bits");
  }
  return r;
}

}  // namespace detail

inline void validate_batch(const BoundaryBatch& batch) {
  if (batch.tokens.size() > static_cast<std::size_t>(kMaxSamples)) {
    throw LimitError("a batch may hold at most " + std::to_string(kMaxSamples) + " samples (got " +
                     std::to_string(batch.tokens.size()) + "; zipccl::hetero::kMaxSamples)");
  }
  if (batch.hidden < 1)
    throw BatchError("hidden size must be at least 1 (got " + std::to_string(batch.hidden) + ")");
  if (batch.element_size < 1) {
    throw BatchError("element size must be at least 1 byte (got " + std::to_string(batch.element_size) + ")");
  }
  std::int64_t row_bytes = 0, total = 0;
  if (__builtin_mul_overflow(batch.hidden, batch.element_size, &row_bytes)) {
    throw BatchError("hidden size * element size overflows 64 bits");
  }
  for (std::size_t s = 0; s < batch.tokens.size(); ++s) {
    std::int64_t n = batch.tokens[s], bytes = 0;
    if (n < 0) {
      throw BatchError("sample " + std::to_string(s) + " has a negative token count (" + std::to_string(n) +
                       ")");
    }
    if (__builtin_mul_overflow(n, row_bytes, &bytes) || __builtin_add_overflow(total, bytes, &total)) {
      throw BatchError("the batch's byte count (tokens * hidden * element size) overflows 64 bits");
    }
  }
}

inline void check_boundary_fits(const Module& receiver, const BoundaryBatch& batch) {
  std::int64_t total = 0;
  for (std::int64_t n : batch.tokens) total += n * batch.row_bytes();  // fits: validate_batch
  const std::int64_t copies = static_cast<std::int64_t>(receiver.tp()) * receiver.cp() + 1;
  std::int64_t r = 0;
  if (__builtin_mul_overflow(total, copies, &r)) {
    throw BatchError("the boundary traffic overflows 64 bits: the batch's " + std::to_string(total) +
                     " bytes x up to " + std::to_string(copies) + " copies (module '" + receiver.name() +
                     "' receives on tp " + std::to_string(receiver.tp()) + " x cp " +
                     std::to_string(receiver.cp()) + " ranks per sample, plus one leader hop) = more than " +
                     std::to_string(INT64_MAX) + " bytes; split the batch");
  }
}

inline std::vector<int> assign_replicas(const std::vector<std::int64_t>& tokens, int dp,
                                        const SampleAssignment& a, const std::string& who) {
  const int n = static_cast<int>(tokens.size());
  std::vector<int> replica(n);
  if (a.rule == AssignmentRule::given) {
    if (a.replica.size() != tokens.size()) {
      throw BatchError(who + ": the sample->replica map has " + std::to_string(a.replica.size()) +
                       " entries for " + std::to_string(n) + " samples");
    }
    for (int s = 0; s < n; ++s) {
      if (a.replica[s] < 0 || a.replica[s] >= dp) {
        throw BatchError(who + ": sample " + std::to_string(s) + " is mapped to replica " +
                         std::to_string(a.replica[s]) + ", outside 0.." + std::to_string(dp - 1) + " (dp " +
                         std::to_string(dp) + ")");
      }
    }
    return a.replica;
  }
  if (a.rule == AssignmentRule::contiguous) {
    for (int s = 0; s < n; ++s) replica[s] = sample_replica(n, dp, s);
    return replica;
  }
  std::vector<int> order(n);
  for (int s = 0; s < n; ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return tokens[x] > tokens[y]; });
  // Min-heap of (tokens, samples, replica): the least loaded replica on top, ties as documented.
  using Slot = std::tuple<std::int64_t, int, int>;
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
  for (int d = 0; d < dp; ++d) heap.emplace(0, 0, d);
  for (int s : order) {
    auto [load, count, d] = heap.top();
    heap.pop();
    replica[s] = d;
    heap.emplace(load + tokens[s], count + 1, d);
  }
  return replica;
}

inline ReplicaLoad replica_load(const std::vector<std::int64_t>& tokens, const std::vector<int>& replicas,
                                int dp) {
  ReplicaLoad load;
  load.tokens.assign(dp, 0);
  std::int64_t total = 0;
  for (std::size_t s = 0; s < tokens.size(); ++s) {
    load.tokens[replicas[s]] += tokens[s];
    total += tokens[s];
  }
  for (std::int64_t t : load.tokens) load.max = std::max(load.max, t);
  load.mean = static_cast<double>(total) / dp;
  return load;
}

inline int stored_rows(const Module& m, std::int64_t n, int cp_rank, int tp_rank, RowRange out[2]) {
  RowRange chunks[2];
  int count = 0;
  if (m.cp() == 1) {
    chunks[count++] = RowRange{0, n};
  } else {
    const std::int64_t k = 2 * static_cast<std::int64_t>(m.cp());
    auto cut = [&](std::int64_t i) { return detail::split_point(n, i, k); };
    const std::int64_t lo = cp_rank, hi = k - 1 - cp_rank;
    chunks[count++] = RowRange{cut(lo), cut(lo + 1)};
    if (chunks[0].end == cut(hi)) {
      chunks[0].end = cut(hi + 1);  // chunks cp-1 and cp touch: one range
    } else {
      chunks[count++] = RowRange{cut(hi), cut(hi + 1)};
    }
  }
  if (m.sequence_parallel()) {
    std::int64_t local = 0;
    for (int i = 0; i < count; ++i) local += chunks[i].size();
    auto cut = [&](std::int64_t t) { return detail::split_point(local, t, m.tp()); };
    const std::int64_t from = cut(tp_rank), to = cut(tp_rank + 1);
    // Map the local piece [from, to) back through the chunks.
    int outs = 0;
    std::int64_t base = 0;
    for (int i = 0; i < count; ++i) {
      const std::int64_t a = std::max(from, base), b = std::min(to, base + chunks[i].size());
      if (a < b) out[outs++] = RowRange{chunks[i].begin + (a - base), chunks[i].begin + (b - base)};
      base += chunks[i].size();
    }
    return outs;
  }
  int outs = 0;
  for (int i = 0; i < count; ++i) {
    if (chunks[i].size() > 0) out[outs++] = chunks[i];
  }
  return outs;
}

inline std::vector<BufferSegment> buffer_segments(const Module& m, const BoundaryBatch& batch, int rank) {
  std::vector<BufferSegment> segments;
  if (!m.contains(rank)) return segments;
  const Coords c = m.coords(rank);
  if (c.pp != m.boundary_stage()) return segments;
  const std::vector<int> replica = module_replicas(m, batch);
  std::int64_t offset = 0;
  for (int s = 0; s < batch.num_samples(); ++s) {
    if (replica[s] != c.dp) continue;
    RowRange rows[2];
    const int k = stored_rows(m, batch.tokens[s], c.cp, c.tp, rows);
    for (int i = 0; i < k; ++i) {
      segments.push_back(BufferSegment{s, rows[i], offset});
      offset += rows[i].size() * batch.row_bytes();
    }
  }
  return segments;
}

}  // namespace zipccl::hetero
