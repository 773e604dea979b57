// Placement: the boundary tensor as one module keeps it, grouped into parties.
//
// A party is a set of ranks that keep exactly the same rows of every sample: the tp ranks of one
// (replica, cp) position without sequence parallelism, or a single rank with it. Parties of one
// module are disjoint, and for each sample the parties of the sample's replica partition its rows.
// All members of a party lay out their buffers identically, so offsets are stored once per party.
// A range is rows of one sample at consecutive buffer rows (an image-only layout has at most two per
// sample; the LLM's combined layouts one per image piece), so a transfer inside one is contiguous.
#pragma once

#include <cstdint>
#include <vector>

#include "zipccl/hetero/batch.h"
#include "zipccl/hetero/groups.h"

namespace zipccl::hetero::detail {

struct Party {
  int replica = 0;
  int cp = 0;
  int tp = -1;                             // -1: every tp rank of (replica, cp)
  RankList ranks;                          // ordered by tp coordinate
  std::vector<int> samples;                // the replica's samples, ascending
  std::vector<int> first_range;            // per sample of the replica, +1 at the end: index into ranges
  std::vector<RowRange> ranges;            // rows kept, sample-major
  std::vector<std::int64_t> range_offset;  // byte offset of each range in a member's buffer
  std::int64_t buffer_bytes = 0;
};

inline std::int64_t row_offset(const Party& p, int slot, std::int64_t row, std::int64_t row_bytes);

struct Placement {
  const Module* module = nullptr;
  std::int64_t row_bytes = 0;
  int parties_per_replica = 0;
  std::vector<Party> parties;      // index = (replica * cp + c) * (sp ? tp : 1) + (sp ? t : 0)
  std::vector<int> party_of_rank;  // per world rank; -1 outside the boundary stage
  std::vector<int> replica_of;     // per sample: the replica that holds it
  std::vector<int> slot;           // per sample: its position among its replica's samples

  int party_index(int replica, int cp, int tp) const {
    const int per_cp = module->sequence_parallel() ? module->tp() : 1;
    return (replica * module->cp() + cp) * per_cp + (module->sequence_parallel() ? tp : 0);
  }
  // The parties of the replica that holds sample s: [first, first + parties_per_replica).
  int first_party_of_sample(int s) const { return replica_of[s] * parties_per_replica; }
  // Sample s must belong to p's replica.
  const RowRange* ranges_begin(const Party& p, int s) const { return p.ranges.data() + p.first_range[slot[s]]; }
  const RowRange* ranges_end(const Party& p, int s) const {
    return p.ranges.data() + p.first_range[slot[s] + 1];
  }
  // Byte offset of row `row` of sample s in the buffer of any member of party p; the row must be kept.
  std::int64_t offset(int party, int s, std::int64_t row) const {
    return row_offset(parties[party], slot[s], row, row_bytes);
  }
};

// Byte offset of row `row` of the sample at `slot` among p's samples; -1 when p does not keep it.
inline std::int64_t row_offset(const Party& p, int slot, std::int64_t row, std::int64_t row_bytes) {
  for (int i = p.first_range[slot]; i < p.first_range[slot + 1]; ++i) {
    if (row >= p.ranges[i].begin && row < p.ranges[i].end) return p.range_offset[i] + (row - p.ranges[i].begin) * row_bytes;
  }
  return -1;
}

// Party (replica d, cp c, tp t; t ignored without sequence parallelism) of module m, whose replica
// holds `samples` (ascending); `segments` is scratch space.
inline void build_party(const Module& m, const BoundaryBatch& batch, const std::vector<int>& samples, int d, int c,
                        int t, Party& p, std::vector<BufferSegment>& segments) {
  const bool sp = m.sequence_parallel();
  const int stage = m.boundary_stage();
  p.replica = d;
  p.cp = c;
  p.tp = sp ? t : -1;
  p.samples = samples;
  if (sp) {
    p.ranks.push_back(m.rank(Coords{t, c, d, stage}));
  } else {
    for (int u = 0; u < m.tp(); ++u) p.ranks.push_back(m.rank(Coords{u, c, d, stage}));
  }
  segments.clear();
  p.buffer_bytes = kept_segments(m, batch, samples, c, sp ? t : 0, segments) * batch.row_bytes();
  p.first_range.reserve(samples.size() + 1);
  p.ranges.reserve(segments.size());
  p.range_offset.reserve(segments.size());
  std::size_t next = 0;
  for (int s : samples) {
    p.first_range.push_back(static_cast<int>(p.ranges.size()));
    for (; next < segments.size() && segments[next].sample == s; ++next) {
      p.ranges.push_back(segments[next].rows);
      p.range_offset.push_back(segments[next].offset);
    }
  }
  p.first_range.push_back(static_cast<int>(p.ranges.size()));
}

inline Placement make_placement(const Module& m, const BoundaryBatch& batch, int world_size) {
  Placement pl;
  pl.module = &m;
  pl.row_bytes = batch.row_bytes();
  const bool sp = m.sequence_parallel();
  const int per_cp = sp ? m.tp() : 1;
  pl.parties_per_replica = m.cp() * per_cp;
  pl.parties.resize(static_cast<std::size_t>(m.dp()) * pl.parties_per_replica);
  pl.party_of_rank.assign(world_size, -1);
  pl.replica_of = module_replicas(m, batch);
  pl.slot.resize(pl.replica_of.size());
  std::vector<std::vector<int>> samples_of(m.dp());
  for (int s = 0; s < batch.num_samples(); ++s) {
    pl.slot[s] = static_cast<int>(samples_of[pl.replica_of[s]].size());
    samples_of[pl.replica_of[s]].push_back(s);
  }
  std::vector<BufferSegment> segments;
  for (int d = 0; d < m.dp(); ++d) {
    for (int c = 0; c < m.cp(); ++c) {
      for (int t = 0; t < per_cp; ++t) {
        const int index = pl.party_index(d, c, t);
        build_party(m, batch, samples_of[d], d, c, t, pl.parties[index], segments);
        for (int r : pl.parties[index].ranks) pl.party_of_rank[r] = index;
      }
    }
  }
  return pl;
}

}  // namespace zipccl::hetero::detail
