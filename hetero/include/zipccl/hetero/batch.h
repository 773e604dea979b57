// Batch: the boundary tensor of one global micro-batch, and where each module keeps which part of it.
//
// The boundary tensor holds, for each sample s of the global micro-batch, tokens[s] rows (encoder
// output tokens, counts may differ per sample and may be 0) of `hidden` elements of `element_size`
// bytes. A row is the unit of placement; plans move whole rows.
//
// Where a module keeps it (the same rules for the encoder's output and the LLM's input):
//  - Samples go to the module's data-parallel replicas by the batch's assignment for that module
//    (SampleAssignment, below). By default, contiguous blocks of floor(B / dp) or ceil(B / dp)
//    samples, the first B mod dp replicas taking the larger blocks (with B divisible by dp this is
//    Megatron-LM's split); or token-balanced; or a map the caller gives. Each module splits
//    independently, so encoder dp != LLM dp gives fan-in (encoder dp > LLM dp) or fan-out (encoder
//    dp < LLM dp), and the plans work with any pair of assignments.
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
#include <string>
#include <utility>
#include <vector>

#include "zipccl/hetero/layout.h"

namespace zipccl::hetero {

// How a module's samples map onto its data-parallel replicas.
//  - contiguous: blocks by count (see above). With dynamic-resolution images one replica can get
//    2-3.5x the mean token load, and the whole step waits for it.
//  - balanced: by tokens: samples in descending token order (ties: lower index first), each onto the
//    replica with the fewest tokens so far (ties: fewer samples, then lower index) - the LPT rule,
//    max load <= mean + the largest sample and <= 4/3 of the best possible. It depends only on the
//    token counts and dp, so every rank computes the same map.
//  - given: `replica[s]` is sample s's replica (in [0, dp)); e.g. a data loader's own balancing.
// Within a replica, samples keep ascending index order in the buffers.
enum class AssignmentRule { contiguous, balanced, given };

struct SampleAssignment {
  AssignmentRule rule = AssignmentRule::contiguous;
  std::vector<int> replica;  // rule given: one entry per sample
};

inline const char* assignment_rule_name(AssignmentRule r) {
  return r == AssignmentRule::contiguous ? "contiguous" : r == AssignmentRule::balanced ? "balanced" : "given";
}

// The LLM's input as a framework lays it out (Megatron-LM, TransformerEngine). image_only: the
// boundary tensor alone, as described at the top of this file (the LLM keeps each sample's image
// rows by the same cp/sp rules as an encoder). thd / bshd: the *combined* sequence of each sample -
// text tokens with each image's tokens spliced in at an offset - and the LLM rank's destination
// buffer is its whole slice of the combined input (text and padding rows included: the embedding
// output the image rows are written into); the plan writes exactly the image rows whose positions
// the rank holds, and the backward reads exactly those rows of the input's gradient.
//  - Padding: each sequence is padded to a multiple of `pad_multiple` (0: Megatron-LM's rule,
//    2*cp when cp > 1, times tp with sequence parallelism; 1 without either).
//  - thd (packed): the samples of a replica, ascending, are concatenated; cp rank c keeps chunks c
//    and 2*cp-1-c of each padded sequence (cut at floor(i*P / (2*cp)); equal chunks once padded),
//    concatenated sample after sample (TransformerEngine's thd_get_partitioned_indices); with
//    sequence parallelism the resulting packed local sequence of L rows is cut at floor(t*L / tp)
//    and tp rank t keeps piece t (the scatter of [s, 1, h] along s: pieces may span samples).
//    Buffer: that piece's rows in order. cu_seqlens: `thd_cu_seqlens`.
//  - bshd (padded): every sample of a replica is padded to S = `padded_length` (if > 0, at least
//    every sample's length) or to that replica's longest sequence rounded up to the multiple; cp
//    rank c keeps chunks c and 2*cp-1-c of S, Sl rows per sample; with sequence parallelism tp rank
//    t keeps rows [floor(t*Sl / tp), floor((t+1)*Sl / tp)) of every sample's local sequence.
//    Buffer: [b, w, hidden] batch-major, b = the replica's samples (ascending), w = rows kept per
//    sample (a [s, b, h] tensor is its transpose).
// The encoders keep the image-only layout: tokens[s] rows per sample, the sample's images in order.
enum class SequenceFormat { image_only, thd, bshd };

inline const char* sequence_format_name(SequenceFormat f) {
  return f == SequenceFormat::image_only ? "image-only" : f == SequenceFormat::thd ? "thd" : "bshd";
}

struct ImageSpan {
  std::int64_t offset = 0;  // first position of the image in the combined sequence
  std::int64_t tokens = 0;  // its rows (consecutive positions)
};

struct LlmSequence {
  SequenceFormat format = SequenceFormat::image_only;
  std::vector<std::int64_t> length;            // per sample: combined length (text + images), unpadded
  std::vector<std::vector<ImageSpan>> images;  // per sample: ascending, disjoint, within length;
                                               // tokens add up to the sample's tokens[s]
  std::int64_t pad_multiple = 0;               // 0: Megatron-LM's (see above)
  std::int64_t padded_length = 0;              // bshd only: a fixed padded length; 0: per replica
};

// Limit on images in a batch (all samples together): planning keeps a few words per image.
inline constexpr std::int64_t kMaxImages = std::int64_t{1} << 24;

struct BoundaryBatch {
  // BoundaryBatch{tokens, hidden, element_size}, as before assignments existed (contiguous ones);
  // a constructor rather than an aggregate so that form stays free of missing-initializer warnings.
  BoundaryBatch() = default;
  BoundaryBatch(std::vector<std::int64_t> tokens_, std::int64_t hidden_, std::int64_t element_size_)
      : tokens(std::move(tokens_)), hidden(hidden_), element_size(element_size_) {}

  std::vector<std::int64_t> tokens;  // rows per sample; size() is the number of samples
  std::int64_t hidden = 0;           // elements per row
  std::int64_t element_size = 0;     // bytes per element (bf16: 2)
  SampleAssignment encoder_assignment;  // samples -> replicas of the encoder being planned
  SampleAssignment llm_assignment;      // samples -> replicas of the LLM
  LlmSequence llm_sequence;             // how the LLM keeps its input (default: image rows only)

  int num_samples() const { return static_cast<int>(tokens.size()); }
  std::int64_t row_bytes() const { return hidden * element_size; }
  const SampleAssignment& assignment(const Module& m) const {
    return m.role() == Role::llm ? llm_assignment : encoder_assignment;
  }
};

// The replica of each sample among `dp` replicas under `a`. Throws BatchError for a given map whose
// size is not the number of samples or with an entry outside [0, dp); `who` names the module.
inline std::vector<int> assign_replicas(const std::vector<std::int64_t>& tokens, int dp,
                                        const SampleAssignment& a, const std::string& who = "module");
// The replica of each sample of `batch` in module m (its role picks the assignment).
inline std::vector<int> module_replicas(const Module& m, const BoundaryBatch& batch) {
  return assign_replicas(batch.tokens, m.dp(), batch.assignment(m), "module '" + m.name() + "'");
}

// Tokens per replica under an assignment; max / mean is the straggler factor of the module's step.
struct ReplicaLoad {
  std::vector<std::int64_t> tokens;  // per replica
  std::int64_t max = 0;
  double mean = 0;
  double imbalance() const { return mean > 0 ? static_cast<double>(max) / mean : 1.0; }
};
inline ReplicaLoad replica_load(const std::vector<std::int64_t>& tokens, const std::vector<int>& replicas, int dp);

// Planning keeps a few words per sample and party; this bounds that (and a mistyped sample count).
// 2^20 samples plan in seconds; global batches in training are 10^3-10^5 samples.
inline constexpr int kMaxSamples = 1 << 20;

// Throws BatchError unless tokens >= 0, hidden >= 1, element_size >= 1 and the whole tensor's byte
// count fits in 63 bits, and (thd/bshd) the images fit their sequences as LlmSequence says and the
// combined input's byte count fits too; LimitError for more than kMaxSamples samples or kMaxImages
// images.
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

// Samples held by data-parallel replica `replica` of `dp` replicas under the contiguous rule.
inline SampleRange replica_samples(int num_samples, int dp, int replica) {
  const int base = num_samples / dp, extra = num_samples % dp;
  const int begin = replica * base + (replica < extra ? replica : extra);
  return SampleRange{begin, begin + base + (replica < extra ? 1 : 0)};
}

// The replica that holds sample s under the contiguous rule.
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

// One contiguous piece of a rank's local buffer: rows of one sample at consecutive buffer rows.
struct BufferSegment {
  int sample = 0;
  RowRange rows;
  std::int64_t offset = 0;  // bytes from the start of the buffer
};

// The boundary rows `rank` keeps for module m, ascending by sample then row, and where they sit in
// its local buffer (empty when the rank is not in m's boundary stage). In the image-only layout the
// segments pack the buffer; in the LLM's thd/bshd layouts they are the image rows of a buffer that
// also holds text and padding (buffer_bytes gives its size).
inline std::vector<BufferSegment> buffer_segments(const Module& m, const BoundaryBatch& batch, int rank);
// The size of that buffer in bytes.
inline std::int64_t buffer_bytes(const Module& m, const BoundaryBatch& batch, int rank);

// The LLM's thd cumulative sequence lengths of replica `replica` (padded lengths, samples ascending,
// starting at 0), as the attention kernel takes them; `m` must be the LLM.
inline std::vector<std::int64_t> thd_cu_seqlens(const Module& m, const BoundaryBatch& batch, int replica);
// The padding multiple in force for module m (LlmSequence::pad_multiple or its default).
inline std::int64_t sequence_pad_multiple(const Module& m, const BoundaryBatch& batch);

namespace detail {
// The segments (offsets in bytes) a rank at (cp, tp) of a replica holding `samples` (ascending)
// keeps; returns the buffer's size in rows. The single rule behind buffer_segments and the planner.
inline std::int64_t kept_segments(const Module& m, const BoundaryBatch& batch, const std::vector<int>& samples,
                                  int cp, int tp, std::vector<BufferSegment>& out);
}  // namespace detail

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/batch_impl.h"
