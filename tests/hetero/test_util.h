// Shared helpers for the hetero tests: random valid layouts and batches, and an independent
// row-by-row oracle of who keeps which rows (written from the rules in batch.h, not from its code).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "zipccl/hetero/layout.h"
#include "zipccl/hetero/plan.h"

namespace hetero_test {

using namespace zipccl::hetero;

struct Case {
  LayoutSpec spec;
  BoundaryBatch batch;
  std::string describe() const {
    auto mod = [](const ModuleSpec& m) {
      return m.name + "{tp" + std::to_string(m.tp) + " cp" + std::to_string(m.cp) + " pp" +
             std::to_string(m.pp) + (m.sequence_parallel ? " sp" : "") + " ranks " +
             std::to_string(m.first_rank) + "+" + std::to_string(m.num_ranks) + " " + to_string(m.order) +
             "}";
    };
    std::string s = "world " + std::to_string(spec.world_size) + " llm " + mod(spec.llm);
    for (const auto& e : spec.encoders) s += " enc " + mod(e);
    s += " tokens [";
    for (std::size_t i = 0; i < batch.tokens.size(); ++i)
      s += (i ? "," : "") + std::to_string(batch.tokens[i]);
    s += "] hidden " + std::to_string(batch.hidden) + " elem " + std::to_string(batch.element_size);
    for (const SampleAssignment* a : {&batch.encoder_assignment, &batch.llm_assignment}) {
      s += std::string(a == &batch.llm_assignment ? " llm " : " encoder ") + assignment_rule_name(a->rule);
      for (std::size_t i = 0; i < a->replica.size(); ++i) s += (i ? "," : " ") + std::to_string(a->replica[i]);
    }
    const LlmSequence& q = batch.llm_sequence;
    if (q.format != SequenceFormat::image_only) {
      s += std::string(" llm input ") + sequence_format_name(q.format) + " pad " + std::to_string(q.pad_multiple) +
           " padded " + std::to_string(q.padded_length) + " [";
      for (std::size_t i = 0; i < q.length.size(); ++i) {
        s += (i ? "; " : "") + std::to_string(q.length[i]) + ":";
        for (const ImageSpan& im : q.images[i]) s += " " + std::to_string(im.offset) + "+" + std::to_string(im.tokens);
      }
      s += "]";
    }
    return s;
  }
};

// The random property tests draw from test_seed(their own seed). ZIPCCL_HETERO_SEED=N moves every
// one of them to other layouts for a soak run; unset (CI), each test sees the same cases every run.
// A soak can break a test's "this kind of case occurred" count by bad luck; any other failure is a bug.
inline std::uint64_t test_seed(std::uint64_t base) {
  const char* env = std::getenv("ZIPCCL_HETERO_SEED");
  if (!env || !*env) return base;
  return base ^ (std::strtoull(env, nullptr, 10) * 0x9E3779B97F4A7C15ull);
}

inline int pick(std::mt19937_64& rng, std::initializer_list<int> values) {
  std::vector<int> v(values);
  return v[std::uniform_int_distribution<std::size_t>(0, v.size() - 1)(rng)];
}

inline RankOrder random_order(std::mt19937_64& rng) {
  RankOrder o = kMegatronOrder;
  if (rng() % 3 == 0) std::shuffle(o.begin(), o.end(), rng);
  return o;
}

// A module shape with tp*cp*pp dividing `ranks` (or free when ranks == 0); returns tp*cp*pp*dp.
inline int random_module(std::mt19937_64& rng, ModuleSpec& m, int ranks, int max_ranks) {
  for (;;) {
    m.tp = pick(rng, {1, 1, 2, 2, 3, 4, 8});
    m.cp = pick(rng, {1, 1, 1, 2, 3});
    m.pp = pick(rng, {1, 1, 2, 3});
    m.sequence_parallel = m.tp > 1 && rng() % 2 == 0;
    m.order = random_order(rng);
    const int model = m.tp * m.cp * m.pp;
    if (ranks > 0) {
      if (ranks % model == 0) return ranks;
      continue;
    }
    const int dp = pick(rng, {1, 1, 2, 2, 3, 4, 5, 8});
    if (model * dp <= max_ranks) return model * dp;
  }
}

// The pad multiple in force for an LLM of this shape (batch.h item 3), from the rule.
inline std::int64_t oracle_pad_multiple(const LlmSequence& q, int tp, int cp, bool sp) {
  if (q.pad_multiple > 0) return q.pad_multiple;
  return (cp > 1 ? 2 * cp : 1) * (sp && tp > 1 ? tp : 1);
}

// A layout of an LLM and one encoder over `world` ranks.
inline Layout two_modules(int world, const ModuleSpec& llm, const ModuleSpec& encoder) {
  LayoutSpec spec;
  spec.world_size = world;
  spec.llm = llm;
  spec.encoders.push_back(encoder);
  return Layout(spec);
}

// The LLM's combined input (thd or bshd): each sample's tokens split into 0-3 images (each of at
// least one token) with text before, between and after them; sometimes a pad multiple or (bshd) a
// fixed padded length (a multiple of the pad multiple in force for `llm`).
inline void random_sequence(std::mt19937_64& rng, BoundaryBatch& batch, const ModuleSpec& llm) {
  LlmSequence& q = batch.llm_sequence;
  q.format = rng() % 2 ? SequenceFormat::thd : SequenceFormat::bshd;
  q.length.clear();
  q.images.clear();
  std::int64_t longest = 0;
  for (std::int64_t tokens : batch.tokens) {
    std::vector<ImageSpan> images;
    const int drawn = tokens == 0 ? static_cast<int>(rng() % 2) : 1 + static_cast<int>(rng() % 3);
    const int count = static_cast<int>(std::min<std::int64_t>(drawn, tokens));
    std::int64_t left = tokens, at = 0;
    for (int i = 0; i < count; ++i) {
      at += rng() % 3 == 0 ? 0 : static_cast<std::int64_t>(rng() % 5);  // text before the image
      const std::int64_t room = left - (count - 1 - i);  // the images after this one need a token each
      const std::int64_t n = i + 1 == count ? left : 1 + static_cast<std::int64_t>(rng() % room);
      images.push_back(ImageSpan{at, n});
      at += n;
      left -= n;
    }
    at += static_cast<std::int64_t>(rng() % 5);
    q.length.push_back(at);
    q.images.push_back(images);
    longest = std::max(longest, at);
  }
  q.pad_multiple = rng() % 3 == 0 ? pick(rng, {1, 3, 4, 6}) : 0;
  const std::int64_t mult = oracle_pad_multiple(q, llm.tp, llm.cp, llm.sequence_parallel);
  const std::int64_t padded = longest + static_cast<std::int64_t>(rng() % 5);
  q.padded_length = q.format == SequenceFormat::bshd && rng() % 3 == 0 ? (padded + mult - 1) / mult * mult : 0;
}

// With llm_inputs, half the cases give the LLM a combined thd/bshd input (random_sequence); without
// it the random stream and the cases are those of the image-only layouts (callers that change the
// token counts afterwards need that).
inline Case random_case(std::mt19937_64& rng, int max_ranks = 48, bool llm_inputs = false) {
  Case c;
  const int encoders = rng() % 4 == 0 ? 2 : 1;
  c.spec.llm.name = "llm";
  c.spec.encoders.resize(encoders);
  for (int e = 0; e < encoders; ++e) c.spec.encoders[e].name = "enc" + std::to_string(e);
  const int shape = static_cast<int>(rng() % 3);  // 0 colocated, 1 separate, 2 mixed
  if (shape == 0) {
    const int world = random_module(rng, c.spec.llm, 0, max_ranks);
    c.spec.world_size = world;
    for (auto& e : c.spec.encoders) random_module(rng, e, world, max_ranks);
  } else {
    // Spans: the LLM, and each encoder either alone or sharing the previous encoder's span (shape 2).
    std::vector<std::pair<ModuleSpec*, int>> spans;
    spans.push_back({&c.spec.llm, random_module(rng, c.spec.llm, 0, max_ranks)});
    for (int e = 0; e < encoders; ++e) {
      ModuleSpec& m = c.spec.encoders[e];
      if (shape == 2 && e > 0 && rng() % 2 == 0) {
        random_module(rng, m, spans.back().second, max_ranks);
        m.first_rank = -1;  // marks "same span as previous"
        continue;
      }
      spans.push_back({&m, random_module(rng, m, 0, max_ranks)});
    }
    std::shuffle(spans.begin(), spans.end(), rng);
    int next = 0;
    for (auto& [m, n] : spans) {
      m->first_rank = next;
      m->num_ranks = n;
      next += n;
    }
    c.spec.world_size = next;
    for (int e = 1; e < encoders; ++e) {
      if (c.spec.encoders[e].first_rank == -1) {
        c.spec.encoders[e].first_rank = c.spec.encoders[e - 1].first_rank;
        c.spec.encoders[e].num_ranks = c.spec.encoders[e - 1].num_ranks;
      }
    }
  }
  const int samples = pick(rng, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16});
  const int max_tokens = pick(rng, {1, 3, 8, 20, 40});
  for (int s = 0; s < samples; ++s) {
    c.batch.tokens.push_back(rng() % 7 == 0 ? 0 : static_cast<std::int64_t>(rng() % (max_tokens + 1)));
  }
  c.batch.hidden = pick(rng, {1, 2, 3});
  c.batch.element_size = pick(rng, {1, 2, 4});
  // Assignments: contiguous half the time, else balanced or a random map (valid for every encoder).
  auto dp_of = [&](const ModuleSpec& m) {
    return (m.num_ranks < 0 ? c.spec.world_size : m.num_ranks) / (m.tp * m.cp * m.pp);
  };
  int encoder_dp = INT32_MAX;
  for (const auto& e : c.spec.encoders) encoder_dp = std::min(encoder_dp, dp_of(e));
  auto random_assignment = [&](int dp) {
    SampleAssignment a;
    const int r = static_cast<int>(rng() % 4);
    a.rule = r < 2 ? AssignmentRule::contiguous : r == 2 ? AssignmentRule::balanced : AssignmentRule::given;
    if (a.rule == AssignmentRule::given) {
      for (int s = 0; s < samples; ++s) a.replica.push_back(static_cast<int>(rng() % dp));
    }
    return a;
  };
  c.batch.encoder_assignment = random_assignment(encoder_dp);
  c.batch.llm_assignment = random_assignment(dp_of(c.spec.llm));
  if (llm_inputs && rng() % 2 == 0) random_sequence(rng, c.batch, c.spec.llm);
  return c;
}

// Independent oracle: for module m and an n-row sample, who[row] = {cp rank, tp rank or -1}.
struct Keeper {
  int cp;
  int tp;  // -1: every tp rank
};

inline std::vector<Keeper> keepers(const Module& m, std::int64_t n) {
  std::vector<Keeper> who(n);
  const std::int64_t k = 2 * m.cp();
  std::vector<std::int64_t> count(m.cp(), 0), seen(m.cp(), 0);
  std::vector<int> cp_of(n);
  for (std::int64_t row = 0; row < n; ++row) {
    std::int64_t chunk = 0;
    while ((chunk + 1) * n / k <= row) ++chunk;
    cp_of[row] = static_cast<int>(chunk < m.cp() ? chunk : k - 1 - chunk);
    ++count[cp_of[row]];
  }
  const bool sp = m.sequence_parallel();
  for (std::int64_t row = 0; row < n; ++row) {
    const int c = cp_of[row];
    int tp = -1;
    if (sp) {
      const std::int64_t pos = seen[c]++;
      tp = 0;
      while (tp + 1 < m.tp() && (tp + 1) * count[c] / m.tp() <= pos) ++tp;
    }
    who[row] = Keeper{c, tp};
  }
  return who;
}

inline int oracle_replica(int num_samples, int dp, int s) {
  int begin = 0;
  for (int d = 0; d < dp; ++d) {
    const int size = num_samples / dp + (d < num_samples % dp ? 1 : 0);
    if (s < begin + size) return d;
    begin += size;
  }
  return -1;
}

// Sample s's weight for module m's balanced rule, from batch.h: image tokens, or the LLM's padded
// length under thd/bshd (S for every sample when a bshd padded length is given).
inline std::int64_t oracle_weight(const Module& m, const BoundaryBatch& batch, int s) {
  const LlmSequence& q = batch.llm_sequence;
  if (m.role() != Role::llm || q.format == SequenceFormat::image_only) return batch.tokens[s];
  if (q.format == SequenceFormat::bshd && q.padded_length > 0) return q.padded_length;
  const std::int64_t mult = oracle_pad_multiple(q, m.tp(), m.cp(), m.sequence_parallel());
  return (q.length[s] + mult - 1) / mult * mult;
}

// The replica of each sample, from the rules in batch.h: balanced by repeated linear scans over
// every replica's load after taking the sample (the sum of its weights, or under bshd its samples x
// the largest weight: the padded length all of them take).
inline std::vector<int> oracle_replicas(const Module& m, const BoundaryBatch& batch) {
  const SampleAssignment& a = m.role() == Role::llm ? batch.llm_assignment : batch.encoder_assignment;
  const int n = batch.num_samples(), dp = m.dp();
  std::vector<int> out(n, -1);
  if (a.rule == AssignmentRule::given) return a.replica;
  if (a.rule == AssignmentRule::contiguous) {
    for (int s = 0; s < n; ++s) out[s] = oracle_replica(n, dp, s);
    return out;
  }
  const bool padded = m.role() == Role::llm && batch.llm_sequence.format == SequenceFormat::bshd;
  std::vector<std::int64_t> weight(n), sum(dp, 0), largest(dp, 0), count(dp, 0);
  for (int s = 0; s < n; ++s) weight[s] = oracle_weight(m, batch, s);
  for (int placed = 0; placed < n; ++placed) {
    int next = -1;  // the unplaced sample of the largest weight, lowest index on ties
    for (int s = 0; s < n; ++s) {
      if (out[s] < 0 && (next < 0 || weight[s] > weight[next])) next = s;
    }
    auto after = [&](int d) {
      return padded ? (count[d] + 1) * std::max(largest[d], weight[next]) : sum[d] + weight[next];
    };
    int best = 0;
    for (int d = 1; d < dp; ++d) {
      if (after(d) < after(best) || (after(d) == after(best) && count[d] < count[best])) best = d;
    }
    out[next] = best;
    sum[best] += weight[next];
    largest[best] = std::max(largest[best], weight[next]);
    ++count[best];
  }
  return out;
}

// keeps[rank][sample] = the rows of that sample the rank keeps at the module's boundary (sorted),
// index[rank][sample] = the buffer row of each.
struct Oracle {
  std::vector<std::vector<std::vector<std::int64_t>>> keeps, index;
  std::vector<std::int64_t> buffer_rows;  // per rank: the whole buffer (text and padding included)

  bool has(int rank, int s, std::int64_t row) const {
    const auto& v = keeps[rank][s];
    return std::binary_search(v.begin(), v.end(), row);
  }
  // The buffer row of (s, row), which the rank keeps.
  std::int64_t position(int rank, int s, std::int64_t row) const {
    const auto& v = keeps[rank][s];
    return index[rank][s][std::lower_bound(v.begin(), v.end(), row) - v.begin()];
  }
};

// For the LLM's combined input: at[position] = the image row there, -1 for text and padding.
inline std::vector<std::int64_t> image_row_at(const LlmSequence& q, int s, std::int64_t padded) {
  std::vector<std::int64_t> at(padded, -1);
  std::int64_t row = 0;
  for (const ImageSpan& im : q.images[s]) {
    for (std::int64_t k = 0; k < im.tokens; ++k) at[im.offset + k] = row++;
  }
  return at;
}

// Whether cp rank c keeps position p of a sequence of P positions cut into 2*cp chunks (zigzag).
inline bool cp_keeps(std::int64_t P, int cp, int c, std::int64_t p) {
  const std::int64_t k = 2 * cp;
  std::int64_t chunk = 0;
  while ((chunk + 1) * P / k <= p) ++chunk;
  return chunk == c || chunk == k - 1 - c;
}

// The combined input (thd/bshd) rank r keeps, position by position, from the rules in batch.h.
inline void combined_oracle(const Module& m, const BoundaryBatch& batch, const std::vector<int>& samples,
                            const Coords& c, Oracle& o, int r) {
  const LlmSequence& q = batch.llm_sequence;
  const std::int64_t mult = oracle_pad_multiple(q, m.tp(), m.cp(), m.sequence_parallel());
  auto pad = [&](std::int64_t n) { return (n + mult - 1) / mult * mult; };
  struct Slot {
    int sample;
    std::int64_t position;
  };
  auto window = [&](std::int64_t local, std::int64_t& from, std::int64_t& to) {
    from = m.sequence_parallel() ? c.tp * local / m.tp() : 0;
    to = m.sequence_parallel() ? (c.tp + 1) * local / m.tp() : local;
  };
  auto keep = [&](int s, std::int64_t row, std::int64_t at) {
    if (row < 0) return;
    o.keeps[r][s].push_back(row);
    o.index[r][s].push_back(at);
  };
  std::int64_t from = 0, to = 0;
  if (q.format == SequenceFormat::thd) {
    std::vector<Slot> local;  // the packed local sequence of this cp rank
    for (int s : samples) {
      const std::int64_t P = pad(q.length[s]);
      for (std::int64_t p = 0; p < P; ++p) {
        if (cp_keeps(P, m.cp(), c.cp, p)) local.push_back(Slot{s, p});
      }
    }
    window(static_cast<std::int64_t>(local.size()), from, to);
    for (std::int64_t i = from; i < to; ++i) {
      const Slot& x = local[i];
      keep(x.sample, image_row_at(q, x.sample, pad(q.length[x.sample]))[x.position], i - from);
    }
    o.buffer_rows[r] = to - from;
    return;
  }
  std::int64_t S = q.padded_length;
  if (S == 0) {
    for (int s : samples) S = std::max(S, pad(q.length[s]));
  }
  std::vector<std::int64_t> positions;
  for (std::int64_t p = 0; p < S; ++p) {
    if (cp_keeps(S, m.cp(), c.cp, p)) positions.push_back(p);
  }
  window(static_cast<std::int64_t>(positions.size()), from, to);
  for (std::size_t b = 0; b < samples.size(); ++b) {
    const std::vector<std::int64_t> at = image_row_at(q, samples[b], S);
    for (std::int64_t i = from; i < to; ++i) keep(samples[b], at[positions[i]], b * (to - from) + i - from);
  }
  o.buffer_rows[r] = static_cast<std::int64_t>(samples.size()) * (to - from);
}

inline Oracle make_oracle(const Layout& layout, const Module& m, const BoundaryBatch& batch) {
  Oracle o;
  const int n = batch.num_samples();
  o.keeps.assign(layout.world_size(), std::vector<std::vector<std::int64_t>>(n));
  o.index = o.keeps;
  o.buffer_rows.assign(layout.world_size(), 0);
  const std::vector<int> replica = oracle_replicas(m, batch);
  if (m.role() == Role::llm && batch.llm_sequence.format != SequenceFormat::image_only) {
    for (int r = m.first_rank(); r < m.end_rank(); ++r) {
      const Coords c = m.coords(r);
      if (c.pp != m.boundary_stage()) continue;
      std::vector<int> samples;
      for (int s = 0; s < n; ++s) {
        if (replica[s] == c.dp) samples.push_back(s);
      }
      combined_oracle(m, batch, samples, c, o, r);
    }
    return o;
  }
  for (int s = 0; s < n; ++s) {
    const std::vector<Keeper> who = keepers(m, batch.tokens[s]);
    const int d = replica[s];
    for (int r = m.first_rank(); r < m.end_rank(); ++r) {
      const Coords c = m.coords(r);
      if (c.pp != m.boundary_stage() || c.dp != d) continue;
      for (std::int64_t row = 0; row < batch.tokens[s]; ++row) {
        if (who[row].cp == c.cp && (who[row].tp == -1 || who[row].tp == c.tp)) {
          o.keeps[r][s].push_back(row);
          o.index[r][s].push_back(o.buffer_rows[r]++);  // samples ascending: packed sample-major
        }
      }
    }
  }
  return o;
}

}  // namespace hetero_test
