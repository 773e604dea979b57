// Batch: the boundary tensor of one global micro-batch, and where each module keeps which part of it.
//
// The boundary tensor holds, for each sample s of the global micro-batch, tokens[s] rows (encoder
// output tokens, counts may differ per sample and may be 0) of `hidden` elements of `element_size`
// bytes. A row is the unit of placement; plans move whole rows.
//
// Where a module keeps it (the same rules for the encoder's output and the LLM's input):
//  - Samples are split over the module's data-parallel replicas in contiguous blocks of
//    floor(B / dp) or ceil(B / dp) samples, the first B mod dp replicas taking the larger blocks
//    (with B divisible by dp this is Megatron-LM's split). Each module splits independently, so
//    encoder dp != LLM dp gives fan-in (encoder dp > LLM dp) or fan-out (encoder dp < LLM dp).
//  - Within a replica only the boundary pipeline stage holds it (LLM: stage 0; encoder: last stage).
//  - Context parallel (cp > 1): a sample of n rows is cut into 2*cp chunks at floor(i*n / (2*cp)),
//    and cp rank c keeps chunks c and 2*cp-1-c (the load-balanced zigzag of Megatron-LM's CP).
//  - Without sequence parallelism every tp rank keeps all rows of its cp rank (replicated across TP).
//    With it, the rows a cp rank keeps, in ascending order, L of them, are cut at floor(t*L / tp) and
//    tp rank t keeps piece t (sequence-sharded across TP).
//  - A rank's local buffer is its rows packed sample-major: samples ascending, then rows ascending,
//    each row `hidden * element_size` bytes (the packed "THD" form; a [seq, batch, hidden] tensor
//    needs a transpose on the caller's side).
#pragma once

#include <cstdint>
#include <vector>

#include "zipccl/hetero/layout.h"

namespace zipccl::hetero {

struct BoundaryBatch {
  std::vector<std::int64_t> tokens;  // rows per sample; size() is the number of samples
  std::int64_t hidden = 0;           // elements per row
  std::int64_t element_size = 0;     // bytes per element (bf16: 2)

  int num_samples() const { return static_cast<int>(tokens.size()); }
  std::int64_t row_bytes() const { return hidden * element_size; }
};

// Planning keeps a few words per sample and party; this bounds that (and a mistyped sample count).
// 2^20 samples plan in seconds; global batches in training are 10^3-10^5 samples.
inline constexpr int kMaxSamples = 1 << 20;

// Throws BatchError unless tokens >= 0, hidden >= 1, element_size >= 1 and the whole tensor's byte
// count fits in 63 bits; LimitError for more than kMaxSamples samples.
inline void validate_batch(const BoundaryBatch& batch);

// Every byte count of a boundary into `receiver` (per rank, totals, the leader+broadcast model) is at
// most the batch's bytes times (receiver tp * cp + 1); throws BatchError, naming those values, when
// that product overflows 64 bits. The planner and the traffic functions call it; it assumes a
// validated batch.
inline void check_boundary_fits(const Module& receiver, const BoundaryBatch& batch);

struct SampleRange {
  int begin = 0, end = 0;  // [begin, end)
  int size() const { return end - begin; }
};

// Samples held by data-parallel replica `replica` of `dp` replicas (contiguous blocks, see above).
inline SampleRange replica_samples(int num_samples, int dp, int replica) {
  const int base = num_samples / dp, extra = num_samples % dp;
  const int begin = replica * base + (replica < extra ? replica : extra);
  return SampleRange{begin, begin + base + (replica < extra ? 1 : 0)};
}

// The replica that holds sample s.
inline int sample_replica(int num_samples, int dp, int s) {
  const int base = num_samples / dp, extra = num_samples % dp;
  const int big = extra * (base + 1);
  return s < big ? s / (base + 1) : extra + (s - big) / base;
}

struct RowRange {
  std::int64_t begin = 0, end = 0;  // [begin, end)
  std::int64_t size() const { return end - begin; }
  bool operator==(const RowRange& o) const { return begin == o.begin && end == o.end; }
};

// The rows of an n-row sample kept by the rank at (cp_rank, tp_rank) of the module's boundary stage:
// at most two ascending, disjoint, non-empty, non-adjacent ranges written to out[]; returns how many.
inline int stored_rows(const Module& m, std::int64_t n, int cp_rank, int tp_rank, RowRange out[2]);

// One contiguous piece of a rank's local buffer.
struct BufferSegment {
  int sample = 0;
  RowRange rows;
  std::int64_t offset = 0;  // bytes from the start of the buffer
};

// The local boundary buffer of `rank` for module m (empty when the rank is not in m's boundary stage).
inline std::vector<BufferSegment> buffer_segments(const Module& m, const BoundaryBatch& batch, int rank);

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/batch_impl.h"
