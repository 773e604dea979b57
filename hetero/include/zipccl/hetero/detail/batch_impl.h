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

inline bool combined_input(const Module& m, const BoundaryBatch& batch) {
  return m.role() == Role::llm && batch.llm_sequence.format != SequenceFormat::image_only;
}

// a / b rounded up (a >= 0, b >= 1).
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return a / b + (a % b != 0);
}

// n rounded up to a multiple of k (k >= 1); BatchError when that overflows.
inline std::int64_t round_up(std::int64_t n, std::int64_t k) {
  const std::int64_t r = n % k;
  std::int64_t out = 0;
  if (r != 0 && __builtin_add_overflow(n, k - r, &out)) {
    throw BatchError("sequence length " + std::to_string(n) + " padded to a multiple of " + std::to_string(k) +
                     " overflows 64 bits");
  }
  return r == 0 ? n : out;
}

// Positions of a sequence of n that cp rank c of cp keeps (chunks c and 2*cp-1-c of 2*cp, cut at
// floor(i*n / (2*cp))): one or two ascending ranges, possibly empty; returns how many.
inline int cp_chunks(std::int64_t n, int cp, int c, RowRange out[2]) {
  if (cp == 1) {
    out[0] = RowRange{0, n};
    return 1;
  }
  const std::int64_t k = 2 * static_cast<std::int64_t>(cp);
  auto cut = [&](std::int64_t i) { return split_point(n, i, k); };
  const std::int64_t lo = c, hi = k - 1 - c;
  out[0] = RowRange{cut(lo), cut(lo + 1)};
  if (out[0].end == cut(hi)) {
    out[0].end = cut(hi + 1);  // chunks cp-1 and cp touch: one range
    return 1;
  }
  out[1] = RowRange{cut(hi), cut(hi + 1)};
  return 2;
}

// Rows of a length-n sequence that cp rank c keeps: the sizes of its cp_chunks.
inline std::int64_t cp_local_rows(std::int64_t n, int cp, int c) {
  RowRange ch[2];
  const int k = cp_chunks(n, cp, c, ch);
  return k == 1 ? ch[0].size() : ch[0].size() + ch[1].size();
}

// The tp piece [from, to) of a local sequence of `local` rows: all of it without sequence parallelism.
inline RowRange sp_window(const Module& m, std::int64_t local, int tp_rank) {
  if (!m.sequence_parallel()) return RowRange{0, local};
  return RowRange{split_point(local, tp_rank, m.tp()), split_point(local, tp_rank + 1, m.tp())};
}

// Appends the image rows of sample s at positions [a, b) of its combined sequence; position a sits
// at buffer row `row_at_a`. Image rows are numbered through the sample's images in order.
inline void image_rows_in(const std::vector<ImageSpan>& images, int s, std::int64_t a, std::int64_t b,
                          std::int64_t row_at_a, std::int64_t row_bytes, std::vector<BufferSegment>& out) {
  std::int64_t first_row = 0;
  for (const ImageSpan& im : images) {
    if (im.offset >= b) break;
    const std::int64_t lo = std::max(a, im.offset), hi = std::min(b, im.offset + im.tokens);
    if (lo < hi) {
      out.push_back(BufferSegment{s, RowRange{first_row + lo - im.offset, first_row + hi - im.offset},
                                  (row_at_a + lo - a) * row_bytes});
    }
    first_row += im.tokens;
  }
}

// Appends the image rows the rank at (cp, tp) keeps in the packed (thd) layout (kept_segments);
// returns its buffer's length in rows.
inline std::int64_t thd_segments(const Module& m, const BoundaryBatch& batch, const std::vector<int>& samples,
                                 int cp, int tp, std::vector<BufferSegment>& out) {
  const LlmSequence& q = batch.llm_sequence;
  const std::int64_t mult = sequence_pad_multiple(m, batch);
  std::int64_t local = 0;
  for (int s : samples) {
    local = checked_add(local, cp_local_rows(round_up(q.length[s], mult), m.cp(), cp), "a packed local sequence length");
  }
  const RowRange w = sp_window(m, local, tp);
  RowRange ch[2];
  std::int64_t base = 0;
  for (int s : samples) {
    if (base >= w.end) break;
    const int k = cp_chunks(round_up(q.length[s], mult), m.cp(), cp, ch);
    for (int i = 0; i < k; ++i) {
      const std::int64_t lo = std::max(w.begin, base), hi = std::min(w.end, base + ch[i].size());
      if (lo < hi) {
        image_rows_in(q.images[s], s, ch[i].begin + (lo - base), ch[i].begin + (hi - base), lo - w.begin,
                      batch.row_bytes(), out);
      }
      base += ch[i].size();
    }
  }
  return w.size();
}

// Megatron-LM's pad multiple for module m, spelled out for messages.
inline std::string default_pad_multiple_text(const Module& m) {
  const std::string cp = "2*cp = " + std::to_string(2 * static_cast<std::int64_t>(m.cp()));
  const std::string tp = "tp = " + std::to_string(m.tp()) + " with sequence parallelism";
  if (m.cp() > 1 && m.sequence_parallel()) return cp + " times " + tp;
  return m.cp() > 1 ? cp : m.sequence_parallel() ? tp : "1";
}

// A bshd padded length must be a multiple of the pad multiple in force (batch.h item 3).
inline void check_padded_length(const Module& m, const BoundaryBatch& batch) {
  const LlmSequence& q = batch.llm_sequence;
  if (q.format != SequenceFormat::bshd || q.padded_length == 0) return;
  const std::int64_t mult = sequence_pad_multiple(m, batch);
  if (q.padded_length % mult == 0) return;
  throw BatchError("bshd input: the padded length " + std::to_string(q.padded_length) +
                   " is not a multiple of the pad multiple " + std::to_string(mult) + " (" +
                   (q.pad_multiple > 0 ? std::string("given") : "module '" + m.name() + "': " + default_pad_multiple_text(m)) +
                   "): every sequence is padded to a multiple of it");
}

// The same for the padded (bshd) layout.
inline std::int64_t bshd_segments(const Module& m, const BoundaryBatch& batch, const std::vector<int>& samples,
                                  int cp, int tp, std::vector<BufferSegment>& out) {
  const LlmSequence& q = batch.llm_sequence;
  check_padded_length(m, batch);
  std::int64_t padded = q.padded_length;
  if (padded == 0) {
    std::int64_t longest = 0;
    for (int s : samples) longest = std::max(longest, q.length[s]);
    padded = round_up(longest, sequence_pad_multiple(m, batch));
  }
  RowRange ch[2];
  const int k = cp_chunks(padded, m.cp(), cp, ch);
  const RowRange w = sp_window(m, cp_local_rows(padded, m.cp(), cp), tp);
  for (std::size_t slot = 0; slot < samples.size(); ++slot) {
    const int s = samples[slot];
    std::int64_t base = 0;
    for (int i = 0; i < k; ++i) {
      const std::int64_t lo = std::max(w.begin, base), hi = std::min(w.end, base + ch[i].size());
      if (lo < hi) {
        image_rows_in(q.images[s], s, ch[i].begin + (lo - base), ch[i].begin + (hi - base),
                      static_cast<std::int64_t>(slot) * w.size() + (lo - w.begin), batch.row_bytes(), out);
      }
      base += ch[i].size();
    }
  }
  return checked_mul(static_cast<std::int64_t>(samples.size()), w.size(), "rows of a padded local batch");
}

inline std::int64_t kept_segments(const Module& m, const BoundaryBatch& batch, const std::vector<int>& samples,
                                  int cp, int tp, std::vector<BufferSegment>& out) {
  std::int64_t rows = 0;
  if (combined_input(m, batch)) {
    rows = batch.llm_sequence.format == SequenceFormat::thd ? thd_segments(m, batch, samples, cp, tp, out)
                                                            : bshd_segments(m, batch, samples, cp, tp, out);
    checked_mul(rows, batch.row_bytes(), "bytes of an LLM rank's input slice");
    return rows;
  }
  RowRange kept[2];
  for (int s : samples) {
    const int k = stored_rows(m, batch.tokens[s], cp, tp, kept);
    for (int i = 0; i < k; ++i) {
      out.push_back(BufferSegment{s, kept[i], rows * batch.row_bytes()});
      rows += kept[i].size();
    }
  }
  return rows;
}

// Checks the combined-sequence description against the batch (see LlmSequence).
inline void validate_sequence(const BoundaryBatch& batch) {
  const LlmSequence& q = batch.llm_sequence;
  if (q.format == SequenceFormat::image_only) return;
  const std::size_t n = batch.tokens.size();
  const std::string fmt = sequence_format_name(q.format);
  if (q.length.size() != n || q.images.size() != n) {
    throw BatchError(fmt + " input: " + std::to_string(q.length.size()) + " sequence lengths and " +
                     std::to_string(q.images.size()) + " image lists for " + std::to_string(n) + " samples");
  }
  if (q.pad_multiple < 0) throw BatchError(fmt + " input: pad multiple " + std::to_string(q.pad_multiple) + " < 0");
  if (q.padded_length < 0 || (q.padded_length > 0 && q.format != SequenceFormat::bshd)) {
    throw BatchError(fmt + " input: a padded length (" + std::to_string(q.padded_length) +
                     ") is for bshd only, and must be positive");
  }
  std::int64_t images = 0, positions = 0;
  // Messages are built only on failure: this runs for every sample and image of every micro-batch.
  auto sample = [](std::size_t s) { return "sample " + std::to_string(s); };
  for (std::size_t s = 0; s < n; ++s) {
    const std::int64_t len = q.length[s];
    if (len < 0) throw BatchError(sample(s) + " has a negative sequence length (" + std::to_string(len) + ")");
    if (q.padded_length > 0 && len > q.padded_length) {
      throw BatchError(sample(s) + ": sequence length " + std::to_string(len) + " exceeds the padded length " +
                       std::to_string(q.padded_length));
    }
    images += static_cast<std::int64_t>(q.images[s].size());
    if (images > kMaxImages) {
      throw LimitError("a batch may hold at most " + std::to_string(kMaxImages) +
                       " images (zipccl::hetero::kMaxImages)");
    }
    std::int64_t end = 0, sum = 0;
    for (std::size_t i = 0; i < q.images[s].size(); ++i) {
      const ImageSpan& im = q.images[s][i];
      auto what = [&] {
        return sample(s) + ": image " + std::to_string(i) + " (offset " + std::to_string(im.offset) + ", " +
               std::to_string(im.tokens) + " tokens)";
      };
      if (im.offset < 0 || im.tokens < 0) throw BatchError(what() + " has a negative offset or size");
      if (im.tokens == 0) {
        throw BatchError(what() + " holds no tokens: every image holds at least one (a sample without images "
                         "has an empty image list)");
      }
      if (im.offset < end) {
        throw BatchError(what() + " starts before the previous image ends (" + std::to_string(end) +
                         "): images are ascending and disjoint");
      }
      if (im.offset > len || im.tokens > len - im.offset) {
        throw BatchError(what() + " ends past the sequence length " + std::to_string(len));
      }
      end = im.offset + im.tokens;
      sum += im.tokens;
    }
    if (sum != batch.tokens[s]) {
      throw BatchError(sample(s) + ": its images hold " + std::to_string(sum) + " tokens, the batch says " +
                       std::to_string(batch.tokens[s]));
    }
    positions = checked_add(positions, len, "the combined sequence lengths");
  }
  checked_mul(positions, batch.row_bytes(), "bytes of the combined LLM input");
}

}  // namespace detail

inline std::int64_t sequence_pad_multiple(const Module& m, const BoundaryBatch& batch) {
  if (batch.llm_sequence.pad_multiple > 0) return batch.llm_sequence.pad_multiple;
  return (m.cp() > 1 ? 2 * static_cast<std::int64_t>(m.cp()) : 1) * (m.sequence_parallel() ? m.tp() : 1);
}

inline std::vector<std::int64_t> thd_cu_seqlens(const Module& m, const BoundaryBatch& batch, int replica) {
  const std::vector<int> replicas = module_replicas(m, batch);
  const std::int64_t mult = sequence_pad_multiple(m, batch);
  std::vector<std::int64_t> cu{0};
  for (int s = 0; s < batch.num_samples(); ++s) {
    if (replicas[s] == replica) cu.push_back(detail::checked_add(cu.back(), detail::round_up(batch.llm_sequence.length[s], mult), "cu_seqlens"));
  }
  return cu;
}

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
  detail::validate_sequence(batch);
}

inline void validate_batch(const BoundaryBatch& batch, const Module& llm) {
  validate_batch(batch);
  detail::check_padded_length(llm, batch);
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

namespace detail {
inline void balanced_replicas(const std::vector<std::int64_t>& weight, bool padded, int dp, std::vector<int>& replica);

// assign_replicas into `replica`, reusing its storage (per-rank planning runs every micro-batch).
inline void assign_replicas_into(const std::vector<std::int64_t>& tokens, int dp, const SampleAssignment& a,
                                 const std::string& who, std::vector<int>& replica) {
  const int n = static_cast<int>(tokens.size());
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
    replica = a.replica;
    return;
  }
  replica.resize(n);  // every entry is written below
  if (a.rule == AssignmentRule::contiguous) {
    for (int d = 0, s = 0; d < dp && s < n; ++d) {  // block by block (no division per sample)
      const SampleRange block = replica_samples(n, dp, d);
      for (; s < block.end; ++s) replica[s] = d;
    }
    return;
  }
  balanced_replicas(tokens, false, dp, replica);
}

// The balanced rule (batch.h) over per-sample weights into `replica` (sized): their sums, or
// (padded) samples x the largest weight.
inline void balanced_replicas(const std::vector<std::int64_t>& weight, bool padded, int dp, std::vector<int>& replica) {
  const int n = static_cast<int>(weight.size());
  std::vector<int> order(n);
  for (int s = 0; s < n; ++s) order[s] = s;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return weight[x] > weight[y]; });
  // Min-heap of (load after taking the next sample, samples, replica), ties as documented. A sum adds
  // the same weight to every replica, so its load so far orders them. A padded replica's largest
  // weight is its first sample's (the order is descending), so one more sample costs (samples + 1) x
  // that weight; an empty replica costs the sample's own weight, no more than any other replica and
  // with fewer samples: it comes first (key 0), lowest index first. 128 bits: no key overflows.
  using Slot = std::tuple<Int128, int, int>;
  std::priority_queue<Slot, std::vector<Slot>, std::greater<Slot>> heap;
  std::vector<std::int64_t> largest(padded ? dp : 0, 0);
  for (int d = 0; d < dp; ++d) heap.emplace(0, 0, d);
  for (int s : order) {
    auto [key, count, d] = heap.top();
    heap.pop();
    replica[s] = d;
    if (!padded) {
      heap.emplace(key + weight[s], count + 1, d);
      continue;
    }
    if (count == 0) largest[d] = weight[s];
    heap.emplace(static_cast<Int128>(count + 2) * largest[d], count + 1, d);
  }
}

// module_replicas into `replica`, reusing its storage (per-rank planning runs every micro-batch).
inline void module_replicas_into(const Module& m, const BoundaryBatch& batch, std::vector<int>& replica) {
  const SampleAssignment& a = batch.assignment(m);
  if (a.rule != AssignmentRule::balanced || !combined_input(m, batch)) {
    assign_replicas_into(batch.tokens, m.dp(), a, "module '" + m.name() + "'", replica);
    return;
  }
  const SampleLoads loads = sample_loads(m, batch);
  replica.resize(loads.weight.size());
  balanced_replicas(loads.weight, loads.padded, m.dp(), replica);
}
}  // namespace detail

inline std::vector<int> module_replicas(const Module& m, const BoundaryBatch& batch) {
  std::vector<int> replica;
  detail::module_replicas_into(m, batch, replica);
  return replica;
}

inline SampleLoads sample_loads(const Module& m, const BoundaryBatch& batch) {
  SampleLoads out;
  if (!detail::combined_input(m, batch)) {
    out.weight = batch.tokens;
    return out;
  }
  const LlmSequence& q = batch.llm_sequence;
  if (q.length.size() != batch.tokens.size()) {
    throw BatchError(std::string(sequence_format_name(q.format)) + " input: " + std::to_string(q.length.size()) +
                     " sequence lengths for " + std::to_string(batch.tokens.size()) + " samples");
  }
  const std::int64_t mult = sequence_pad_multiple(m, batch);
  out.weight.resize(q.length.size());
  for (std::size_t s = 0; s < q.length.size(); ++s) {
    const bool fixed = q.format == SequenceFormat::bshd && q.padded_length > 0;
    out.weight[s] = fixed ? q.padded_length : detail::round_up(q.length[s], mult);
  }
  out.padded = q.format == SequenceFormat::bshd;
  out.measure = "positions";
  return out;
}

inline ReplicaLoad module_load(const Module& m, const BoundaryBatch& batch) {
  const SampleLoads loads = sample_loads(m, batch);
  std::vector<int> replicas;
  detail::module_replicas_into(m, batch, replicas);
  const int dp = m.dp();
  ReplicaLoad load;
  load.measure = loads.measure;
  load.tokens.assign(dp, 0);
  std::vector<std::int64_t> count(dp, 0), largest(dp, 0);
  for (std::size_t s = 0; s < replicas.size(); ++s) {
    const int d = replicas[s];
    ++count[d];
    largest[d] = std::max(largest[d], loads.weight[s]);
    if (!loads.padded) load.tokens[d] = detail::checked_add(load.tokens[d], loads.weight[s], "the load of a replica");
  }
  std::int64_t total = 0;
  for (int d = 0; d < dp; ++d) {
    if (loads.padded) load.tokens[d] = detail::checked_mul(count[d], largest[d], "the positions of a padded replica");
    total = detail::checked_add(total, load.tokens[d], "the load of all replicas");
    load.max = std::max(load.max, load.tokens[d]);
  }
  load.mean = static_cast<double>(total) / dp;
  return load;
}

inline std::vector<int> assign_replicas(const std::vector<std::int64_t>& tokens, int dp,
                                        const SampleAssignment& a, const std::string& who) {
  std::vector<int> replica;
  detail::assign_replicas_into(tokens, dp, a, who, replica);
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
  const int count = detail::cp_chunks(n, m.cp(), cp_rank, chunks);
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

namespace detail {
// The samples of the rank's replica and its (cp, tp), or false when it is outside m's boundary stage.
inline bool boundary_position(const Module& m, const BoundaryBatch& batch, int rank, std::vector<int>& samples,
                              Coords& c) {
  if (!m.contains(rank)) return false;
  c = m.coords(rank);
  if (c.pp != m.boundary_stage()) return false;
  const std::vector<int> replica = module_replicas(m, batch);
  for (int s = 0; s < batch.num_samples(); ++s) {
    if (replica[s] == c.dp) samples.push_back(s);
  }
  return true;
}
}  // namespace detail

inline std::vector<BufferSegment> buffer_segments(const Module& m, const BoundaryBatch& batch, int rank) {
  std::vector<BufferSegment> segments;
  std::vector<int> samples;
  Coords c;
  if (detail::boundary_position(m, batch, rank, samples, c)) detail::kept_segments(m, batch, samples, c.cp, c.tp, segments);
  return segments;
}

inline std::int64_t buffer_bytes(const Module& m, const BoundaryBatch& batch, int rank) {
  std::vector<BufferSegment> segments;
  std::vector<int> samples;
  Coords c;
  if (!detail::boundary_position(m, batch, rank, samples, c)) return 0;
  return detail::kept_segments(m, batch, samples, c.cp, c.tp, segments) * batch.row_bytes();
}

}  // namespace zipccl::hetero
