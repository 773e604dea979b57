// Batch: the boundary tensor of one global micro-batch, and where each module keeps which part of it.
//
// The boundary layout, exactly (docs/notes/hetero.md holds the same text; a test compares them):
// <layout>
// 1. Rows. Sample s of the global micro-batch has tokens[s] image rows (its encoder output tokens;
//    0 is allowed). A row is `hidden` elements of `element_size` bytes and the unit of placement;
//    plans move whole rows.
// 2. Replicas. Each module maps the samples onto its dp replicas by its SampleAssignment
//    (contiguous, balanced or given; see below). A replica takes its samples in ascending sample
//    order, in every rule below. Only its boundary pipeline stage holds the tensor: the LLM's stage
//    0, an encoder's last stage.
// 3. Sequences. Every rule below acts on a sequence of P positions per sample.
//    - image-only (every encoder; the LLM by default): P = tokens[s], position i is image row i,
//      no padding.
//    - thd / bshd (the LLM's combined input, LlmSequence): positions 0 .. length[s]-1 are the
//      sample's text and image tokens; image k covers positions offset .. offset+tokens-1; the image
//      rows are numbered through the images in order (image 0's rows first), which is the
//      encoder's output order; every other position is text. Padding goes at the end: positions
//      length[s] .. P-1. The pad multiple M is pad_multiple if given, else Megatron-LM's: 2*cp
//      when cp > 1 (else 1), times tp with sequence parallelism. thd: P = length[s] rounded up to a
//      multiple of M. bshd: P = S for every sample of a replica; S = padded_length if given (a
//      multiple of M, at least every length), else the replica's longest length rounded up to M.
//    - A sample without images has tokens[s] = 0 and an empty image list: all text (and padding)
//      under thd/bshd, still taking its positions; nothing at all under image-only.
// 4. Context parallelism. A sequence of P positions is cut into 2*cp chunks at floor(i*P / (2*cp)),
//    i = 0 .. 2*cp (floor cuts also when P is not a multiple of 2*cp; chunks may then differ by
//    one position, and may be empty). cp rank c keeps chunk c followed by chunk 2*cp-1-c (the
//    load-balanced zigzag of Megatron-LM and TransformerEngine): that is its local sequence of the
//    sample, in this order. With cp = 1 the local sequence is the whole sequence. thd and bshd cut
//    the same way; bshd cuts S.
// 5. Sequence parallelism. Without it every tp rank keeps its cp rank's local sequences whole
//    (replicated across tp). With it a local sequence of L positions is cut at floor(t*L / tp),
//    t = 0 .. tp, and tp rank t keeps positions floor(t*L / tp) .. floor((t+1)*L / tp) - 1 of it.
//    Which local sequence: image-only and bshd cut each sample's own (bshd: the same window for
//    every sample, all having S positions); thd cuts the replica's packed local sequence, its
//    samples' local sequences concatenated in sample order, so a piece may span samples.
// 6. Buffers. A rank's local buffer holds, one row each, the positions it keeps:
//    - image-only: sample after sample (ascending), each sample's kept positions in local-sequence
//      order (chunk c before chunk 2*cp-1-c): the packed "THD" form of the image rows alone.
//    - thd: its piece of the packed local sequence, in order: buffer row r = position r of the piece.
//    - bshd: [b, w, hidden]: buffer row j*w + r = position r of the piece of the replica's j-th
//      sample (ascending), w = the positions kept per sample.
//    A [seq, batch, hidden] tensor is the transpose (on the caller's side). Under thd/bshd the
//    buffer also holds the text and padding rows (the embedding output the image rows are written
//    into); a forward plan writes exactly its image rows, at their positions, and the backward
//    reads exactly those rows of the input's gradient.
// </layout>
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "zipccl/hetero/layout.h"

namespace zipccl::hetero {

// How a module's samples map onto its data-parallel replicas.
//  - contiguous: blocks of floor(B / dp) or ceil(B / dp) samples in sample order, the first B mod dp
//    replicas taking the larger blocks (with B divisible by dp, Megatron-LM's split). With
//    dynamic-resolution images one replica can get 2-3.5x the mean load, and the whole step waits.
//  - balanced: by load (sample_loads): samples in descending weight (ties: lower index first), each
//    onto the replica whose load would be least after taking it (ties: fewer samples so far, then
//    lower index). A sample's weight and a replica's load follow what the replica computes:
//      encoders and the image-only LLM: weight = tokens[s]; load = the sum (image tokens);
//      the LLM with thd input: weight = the sample's padded length P; load = the sum (positions:
//        text, images and padding);
//      the LLM with bshd input: weight = P (S when padded_length is given); load = samples x the
//        largest weight (the replica's [b, S] positions).
//    For the sums this is the LPT rule: max load <= mean + the largest weight and <= 4/3 of the
//    best possible. For bshd it is the same greedy (no such bound). It depends only on the weights
//    and dp, so every rank computes the same map.
//  - given: `replica[s]` is sample s's replica (in [0, dp)); e.g. a data loader's own balancing.
// Each module splits independently: encoder dp != LLM dp gives fan-in (encoder dp > LLM dp) or
// fan-out, and the plans work with any pair of assignments.
enum class AssignmentRule { contiguous, balanced, given };

struct SampleAssignment {
  AssignmentRule rule = AssignmentRule::contiguous;
  std::vector<int> replica;  // rule given: one entry per sample
};

inline const char* assignment_rule_name(AssignmentRule r) {
  return r == AssignmentRule::contiguous ? "contiguous" : r == AssignmentRule::balanced ? "balanced" : "given";
}

// The LLM's input as a framework lays it out (Megatron-LM, TransformerEngine); the layout is items
// 3-6 at the top of this file. image_only: the boundary tensor alone, kept by the same rules as an
// encoder's output. thd (packed: a replica's samples concatenated, cu_seqlens from
// `thd_cu_seqlens`; TransformerEngine's thd_get_partitioned_indices, and Megatron's scatter of
// [s, 1, h] along s under sequence parallelism) and bshd (padded: [b, s, h]) are the *combined*
// sequence of each sample, text tokens with each image's tokens spliced in at an offset; the LLM
// rank's destination buffer is its whole slice of that input. The encoders always keep the
// image-only layout.
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
  std::vector<std::vector<ImageSpan>> images;  // per sample: ascending and disjoint, each of at least
                                               // one token, within length; tokens add up to the
                                               // sample's tokens[s]; empty: a sample without images
  std::int64_t pad_multiple = 0;               // M; 0: Megatron-LM's (see above)
  std::int64_t padded_length = 0;              // bshd only: S for every sample, a multiple of M;
                                               // 0: per replica
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

// The replica of each sample among `dp` replicas under `a`, balanced by `tokens` as additive
// weights (an encoder's rule). Throws BatchError for a given map whose size is not the number of
// samples or with an entry outside [0, dp); `who` names the module.
inline std::vector<int> assign_replicas(const std::vector<std::int64_t>& tokens, int dp,
                                        const SampleAssignment& a, const std::string& who = "module");
// The replica of each sample of `batch` in module m (its role picks the assignment; balanced weighs
// the samples by sample_loads(m, batch)).
inline std::vector<int> module_replicas(const Module& m, const BoundaryBatch& batch);

// A module's load per replica (see AssignmentRule::balanced); max / mean is the straggler factor of
// its step. `tokens` are image tokens for an encoder and the image-only LLM, positions (text, image
// and padding tokens) for the LLM's thd/bshd input.
struct ReplicaLoad {
  std::vector<std::int64_t> tokens;  // per replica
  std::int64_t max = 0;
  double mean = 0;
  const char* measure = "image tokens";  // or "positions" (SampleLoads::measure)
  double imbalance() const { return mean > 0 ? static_cast<double>(max) / mean : 1.0; }
};
// The load of additive weights (image tokens, thd positions) under a map.
inline ReplicaLoad replica_load(const std::vector<std::int64_t>& tokens, const std::vector<int>& replicas, int dp);

// What module m's balanced rule and load count, per sample (see AssignmentRule::balanced).
struct SampleLoads {
  std::vector<std::int64_t> weight;  // per sample: image tokens, or the LLM's padded length (thd/bshd)
  bool padded = false;               // bshd: a replica's load is its samples x its largest weight;
                                     // otherwise the sum of its weights
  const char* measure = "image tokens";  // or "positions"
};
// Throws BatchError when a padded length overflows 64 bits; assumes a validated batch.
inline SampleLoads sample_loads(const Module& m, const BoundaryBatch& batch);
// Module m's load per replica under its assignment (the figure its balanced rule evens out).
inline ReplicaLoad module_load(const Module& m, const BoundaryBatch& batch);

// Planning keeps a few words per sample and party; this bounds that (and a mistyped sample count).
// 2^20 samples plan in seconds; global batches in training are 10^3-10^5 samples.
inline constexpr int kMaxSamples = 1 << 20;

// Throws BatchError unless tokens >= 0, hidden >= 1, element_size >= 1 and the whole tensor's byte
// count fits in 63 bits, and (thd/bshd) the images fit their sequences as LlmSequence says (each
// within its sequence, ascending and disjoint, at least one token each, their tokens adding up to
// the sample's) and the combined input's byte count fits too; LimitError for more than kMaxSamples
// samples or kMaxImages images. Each message names the value and the rule it breaks.
inline void validate_batch(const BoundaryBatch& batch);
// The same, and what depends on the LLM module `llm` (the layout's): a bshd padded_length must be a
// multiple of the pad multiple in force (sequence_pad_multiple). Planning and the traffic functions
// call this one.
inline void validate_batch(const BoundaryBatch& batch, const Module& llm);

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
// The padding multiple M in force for module m (LlmSequence::pad_multiple or its default).
inline std::int64_t sequence_pad_multiple(const Module& m, const BoundaryBatch& batch);

namespace detail {
// The segments (offsets in bytes) a rank at (cp, tp) of a replica holding `samples` (ascending)
// keeps; returns the buffer's size in rows. The single rule behind buffer_segments and the planner.
inline std::int64_t kept_segments(const Module& m, const BoundaryBatch& batch, const std::vector<int>& samples,
                                  int cp, int tp, std::vector<BufferSegment>& out);
}  // namespace detail

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/batch_impl.h"
