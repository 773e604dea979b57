// Shared helpers for the hetero tests: random valid layouts and batches, and an independent
// row-by-row oracle of who keeps which rows (written from the rules in batch.h, not from its code).
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
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
    return s;
  }
};

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

inline Case random_case(std::mt19937_64& rng, int max_ranks = 48) {
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

// The replica of each sample, from the rules in batch.h: balanced by repeated linear scans.
inline std::vector<int> oracle_replicas(const Module& m, const BoundaryBatch& batch) {
  const SampleAssignment& a = m.role() == Role::llm ? batch.llm_assignment : batch.encoder_assignment;
  const int n = batch.num_samples(), dp = m.dp();
  std::vector<int> out(n, -1);
  if (a.rule == AssignmentRule::given) return a.replica;
  if (a.rule == AssignmentRule::contiguous) {
    for (int s = 0; s < n; ++s) out[s] = oracle_replica(n, dp, s);
    return out;
  }
  std::vector<std::int64_t> load(dp, 0);
  std::vector<int> count(dp, 0);
  for (int placed = 0; placed < n; ++placed) {
    int next = -1;  // the unplaced sample with the most tokens, lowest index on ties
    for (int s = 0; s < n; ++s) {
      if (out[s] < 0 && (next < 0 || batch.tokens[s] > batch.tokens[next])) next = s;
    }
    int best = 0;
    for (int d = 1; d < dp; ++d) {
      if (load[d] < load[best] || (load[d] == load[best] && count[d] < count[best])) best = d;
    }
    out[next] = best;
    load[best] += batch.tokens[next];
    ++count[best];
  }
  return out;
}

// keeps[rank][sample] = the rows of that sample the rank keeps at the module's boundary (sorted).
struct Oracle {
  std::vector<std::vector<std::vector<std::int64_t>>> keeps;
  std::vector<std::int64_t> buffer_rows;  // per rank

  bool has(int rank, int s, std::int64_t row) const {
    const auto& v = keeps[rank][s];
    return std::binary_search(v.begin(), v.end(), row);
  }
  // Rows before (s, row) in the rank's sample-major buffer.
  std::int64_t position(int rank, int s, std::int64_t row) const {
    std::int64_t pos = 0;
    for (int t = 0; t < s; ++t) pos += static_cast<std::int64_t>(keeps[rank][t].size());
    const auto& v = keeps[rank][s];
    return pos + (std::lower_bound(v.begin(), v.end(), row) - v.begin());
  }
};

inline Oracle make_oracle(const Layout& layout, const Module& m, const BoundaryBatch& batch) {
  Oracle o;
  const int n = batch.num_samples();
  o.keeps.assign(layout.world_size(), std::vector<std::vector<std::int64_t>>(n));
  o.buffer_rows.assign(layout.world_size(), 0);
  const std::vector<int> replica = oracle_replicas(m, batch);
  for (int s = 0; s < n; ++s) {
    const std::vector<Keeper> who = keepers(m, batch.tokens[s]);
    const int d = replica[s];
    for (int r = m.first_rank(); r < m.end_rank(); ++r) {
      const Coords c = m.coords(r);
      if (c.pp != m.boundary_stage() || c.dp != d) continue;
      for (std::int64_t row = 0; row < batch.tokens[s]; ++row) {
        if (who[row].cp == c.cp && (who[row].tp == -1 || who[row].tp == c.tp)) {
          o.keeps[r][s].push_back(row);
          ++o.buffer_rows[r];
        }
      }
    }
  }
  return o;
}

}  // namespace hetero_test
