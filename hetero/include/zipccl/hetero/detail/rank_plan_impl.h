// Definitions for rank_plan.h.
#pragma once

#include <algorithm>
#include <climits>
#include <cstring>
#include <iterator>
#include <string>
#include <unordered_map>
#include <utility>

#include "zipccl/hetero/detail/placement.h"

namespace zipccl::hetero {
namespace detail {

// A module's placement with parties built on first use: per-rank planning touches few of them. Its
// per-sample tables live in `tables`, which a RankPlanner keeps from one micro-batch to the next.
class LazyPlacement {
 public:
  LazyPlacement(const Module& m, const BoundaryBatch& batch, PlacementTables& tables, std::vector<int>& party_by_rank)
      : m_(m),
        batch_(batch),
        replica_of_(tables.replica_of),
        slot_(tables.slot),
        first_(tables.first),
        by_replica_(tables.by_replica),
        party_by_rank_(party_by_rank) {
    module_replicas_into(m, batch, replica_of_);
    slot_.resize(replica_of_.size());
    per_cp_ = m.sequence_parallel() ? m.tp() : 1;
    combined_ = combined_input(m, batch);
    // Samples grouped by replica, ascending within each (a stable counting sort).
    first_.assign(static_cast<std::size_t>(m.dp()) + 1, 0);
    for (int d : replica_of_) ++first_[d + 1];
    for (int d = 0; d < m.dp(); ++d) first_[d + 1] += first_[d];
    by_replica_.resize(replica_of_.size());
    std::vector<int>& next = tables.next;
    next.assign(first_.begin(), first_.end() - 1);
    for (int s = 0; s < static_cast<int>(replica_of_.size()); ++s) {
      const int d = replica_of_[s];
      slot_[s] = next[d] - first_[d];
      by_replica_[next[d]++] = s;
    }
  }

  const Module& module() const { return m_; }
  bool combined() const { return combined_; }
  int max_replica_samples() const {
    int most = 0;
    for (int d = 0; d < m_.dp(); ++d) most = std::max(most, first_[d + 1] - first_[d]);
    return most;
  }
  int replica_of(int s) const { return replica_of_[s]; }
  int slot(int s) const { return slot_[s]; }
  int parties_per_replica() const { return m_.cp() * per_cp_; }
  int party_index(int replica, int cp, int tp) const { return (replica * m_.cp() + cp) * per_cp_ + tp; }
  int num_parties() const { return m_.dp() * parties_per_replica(); }
  int party_of_rank(int rank) const {
    if (!m_.contains(rank)) return -1;
    const Coords c = m_.coords(rank);
    if (c.pp != m_.boundary_stage()) return -1;
    return party_index(c.dp, c.cp, m_.sequence_parallel() ? c.tp : 0);
  }
  // Calls f(rank) for each member of party `index`, in the party's order, without building it.
  // Without sequence parallelism the members are tp ranks 0, 1, ... of one (replica, cp): one
  // stride(tp) apart.
  template <class F>
  void for_each_member(int index, F&& f) const {
    const int t = index % per_cp_, c = index / per_cp_ % m_.cp(), d = index / per_cp_ / m_.cp();
    if (m_.sequence_parallel()) {
      f(m_.rank(Coords{t, c, d, m_.boundary_stage()}));
    } else {
      const int first = m_.rank(Coords{0, c, d, m_.boundary_stage()}), stride = m_.stride(Dim::tp);
      for (int u = 0; u < m_.tp(); ++u) f(first + u * stride);
    }
  }
  // party_of_rank from a table over the module's span, built on first use by walking the boundary
  // stage's coordinates (no division per rank): the exact count looks up every member of every party.
  int party_of_rank_cached(int rank) {
    if (!m_.contains(rank)) return -1;
    if (party_by_rank_.empty()) {
      party_by_rank_.assign(static_cast<std::size_t>(m_.num_ranks()), -1);
      const int stage = m_.boundary_stage() * m_.stride(Dim::pp), tp = m_.tp(), tp_stride = m_.stride(Dim::tp);
      const int sp = m_.sequence_parallel();
      int index = 0;  // party_index(d, c, 0)
      for (int d = 0; d < m_.dp(); ++d) {
        for (int c = 0; c < m_.cp(); ++c, index += per_cp_) {
          int* base = party_by_rank_.data() + stage + d * m_.stride(Dim::dp) + c * m_.stride(Dim::cp);
          for (int t = 0; t < tp; ++t) base[t * tp_stride] = index + sp * t;
        }
      }
    }
    return party_by_rank_[rank - m_.first_rank()];
  }
  int party_size() const { return m_.sequence_parallel() ? 1 : m_.tp(); }
  // Parties per (replica, cp): tp with sequence parallelism, else 1.
  int per_cp() const { return per_cp_; }
  // Calls f(index, d, c, t, first) for every party in index order: its replica, cp and tp coordinates
  // (tp 0 without sequence parallelism) and its first member's rank, the others following
  // member_stride() apart - without the divisions that decoding each index costs.
  template <class F>
  void for_each_party(F&& f) const {
    const int sp = m_.sequence_parallel(), stage = m_.first_rank() + m_.boundary_stage() * m_.stride(Dim::pp);
    int index = 0;
    for (int d = 0; d < m_.dp(); ++d) {
      for (int c = 0; c < m_.cp(); ++c) {
        const int base = stage + d * m_.stride(Dim::dp) + c * m_.stride(Dim::cp);
        for (int t = 0; t < per_cp_; ++t) f(index++, d, c, t, base + sp * t * m_.stride(Dim::tp));
      }
    }
  }
  int member_stride() const { return m_.stride(Dim::tp); }
  // The ranges party (c, t) of sample s's replica keeps of it in an image-only layout (not combined()),
  // as for_each_range gives them: with cp 1 and no sequence parallelism, the whole sample.
  int stored_ranges(int s, int c, int t, RowRange out[2]) const {
    const std::int64_t n = batch_.tokens[s];
    if (m_.cp() == 1 && !m_.sequence_parallel()) {
      out[0] = RowRange{0, n};
      return n > 0;
    }
    return stored_rows(m_, n, c, t, out);
  }
  int replica_of_party(int index) const { return index / per_cp_ / m_.cp(); }
  // The samples of party `index` (its replica's), ascending.
  const int* samples_begin(int index) const { return by_replica_.data() + first_[replica_of_party(index)]; }
  const int* samples_end(int index) const { return by_replica_.data() + first_[replica_of_party(index) + 1]; }
  // The samples of replica d, ascending.
  const int* replica_begin(int d) const { return by_replica_.data() + first_[d]; }
  const int* replica_end(int d) const { return by_replica_.data() + first_[d + 1]; }
  // Calls f(range) for each range of sample s (of its replica) that party `index` keeps, as
  // party(index) lists them. An image-only layout has them in closed form (stored_rows), so the
  // party is not built; the LLM's combined input depends on the whole replica's packing.
  template <class F>
  void for_each_range(int index, int s, F&& f) {
    if (!combined_) {
      RowRange kept[2];
      const int k = stored_rows(m_, batch_.tokens[s], index / per_cp_ % m_.cp(), index % per_cp_, kept);
      for (int i = 0; i < k; ++i) f(kept[i]);
      return;
    }
    const Party& p = party(index);
    for (int j = p.first_range[slot_[s]]; j < p.first_range[slot_[s] + 1]; ++j) f(p.ranges[j]);
  }
  // Boundary rows party `index` keeps (the sum of its ranges), without building it.
  std::int64_t kept_rows(int index) {
    const int t = index % per_cp_, c = index / per_cp_ % m_.cp(), d = index / per_cp_ / m_.cp();
    if (!combined_) {  // stored_rows' sizes: cp rank c's two zigzag chunks, then (sp) tp rank t's piece
      if (local_of_ != std::make_pair(d, c)) {  // the tp parties of one (d, c) come in a row
        local_of_ = {d, c};
        locals_.clear();
        for (int i = first_[d]; i < first_[d + 1]; ++i) {
          locals_.push_back(cp_local_rows(batch_.tokens[by_replica_[i]], m_.cp(), c));
        }
      }
      std::int64_t rows = 0;
      for (std::int64_t local : locals_) {
        rows += m_.sequence_parallel() ? split_point(local, t + 1, m_.tp()) - split_point(local, t, m_.tp()) : local;
      }
      return rows;
    }
    if (batch_.llm_sequence.format == SequenceFormat::thd) return thd_kept_rows(d, c, t);
    samples_.assign(by_replica_.begin() + first_[d], by_replica_.begin() + first_[d + 1]);
    scratch_.clear();
    kept_segments(m_, batch_, samples_, c, t, scratch_);
    std::int64_t rows = 0;
    for (const BufferSegment& g : scratch_) rows += g.rows.size();
    return rows;
  }
  // Bounds on the most boundary rows any one party keeps, over all parties of the module: O(samples
  // x cp) for an image-only layout, where they are exact; O(samples) for the LLM's combined input,
  // whose exact figure needs each replica's packing (then lo is the replica's share per party,
  // hi the replica's whole load).
  //  - A party (d, c, t) keeps, of each sample, cp rank c's zigzag chunks (local_c rows), then with
  //    sequence parallelism tp rank t's piece split_point(local_c, t + 1, tp) - split_point(local_c,
  //    t, tp). That piece is at most ceil(local_c / tp) for every t, and exactly that for t = tp - 1
  //    (local_c - floor(local_c (tp - 1) / tp)), for all samples at once, so the replica's largest
  //    party over t is the sum of ceil(local_c / tp): only the cp ranks need a pass.
  //  - Consecutive samples of equal length repeat the previous sample's figures.
  struct KeptRows {
    std::int64_t lo = 0, hi = 0;
  };
  KeptRows max_kept_rows() {
    KeptRows out;
    const int cp = m_.cp();
    const std::int64_t tp = per_cp_;
    if (combined_) {
      const std::int64_t parties = parties_per_replica();
      for (int d = 0; d < m_.dp(); ++d) {
        std::int64_t load = 0;
        for (int i = first_[d]; i < first_[d + 1]; ++i) load += batch_.tokens[by_replica_[i]];
        out.lo = std::max(out.lo, ceil_div(load, parties));
        out.hi = std::max(out.hi, load);
      }
      return out;
    }
    if (cp == 1) {  // one party per tp piece of a replica: a sum per replica, no per-cp tables
      std::int64_t last = -1, rows = 0;
      for (int d = 0; d < m_.dp(); ++d) {
        std::int64_t sum = 0;
        for (int i = first_[d]; i < first_[d + 1]; ++i) {
          const std::int64_t n = batch_.tokens[by_replica_[i]];
          if (tp == 1) {
            rows = n;
          } else if (n != last) {
            last = n;
            rows = ceil_div(n, tp);
          }
          sum += rows;
        }
        out.hi = std::max(out.hi, sum);
      }
      out.lo = out.hi;
      return out;
    }
    sums_.assign(cp, 0);
    rows_of_n_.assign(cp, 0);
    std::int64_t last = -1;
    for (int d = 0; d < m_.dp(); ++d) {
      std::fill(sums_.begin(), sums_.end(), 0);
      for (int i = first_[d]; i < first_[d + 1]; ++i) {
        const std::int64_t n = batch_.tokens[by_replica_[i]];
        if (n != last) {
          last = n;
          for (int c = 0; c < cp; ++c) {
            const std::int64_t local = cp_local_rows(n, cp, c);
            rows_of_n_[c] = ceil_div(local, tp);
          }
        }
        for (int c = 0; c < cp; ++c) sums_[c] += rows_of_n_[c];
      }
      for (int c = 0; c < cp; ++c) out.hi = std::max(out.hi, sums_[c]);
    }
    out.lo = out.hi;
    return out;
  }

  // thd_segments' row count for (replica d, cp c, tp t): the image positions of the packed local
  // sequence, as intervals shared by the tp parties of one (d, c), counted inside t's sp window.
  std::int64_t thd_kept_rows(int d, int c, int t) {
    if (thd_of_ != std::make_pair(d, c)) {
      thd_of_ = {d, c};
      const LlmSequence& q = batch_.llm_sequence;
      const std::int64_t mult = sequence_pad_multiple(m_, batch_);
      image_at_.clear();
      covered_.assign(1, 0);
      thd_local_ = 0;
      RowRange ch[2];
      for (int i = first_[d]; i < first_[d + 1]; ++i) {
        const int s = by_replica_[i];
        const int k = cp_chunks(round_up(q.length[s], mult), m_.cp(), c, ch);
        for (int j = 0; j < k; ++j) {
          for (const ImageSpan& im : q.images[s]) {
            const std::int64_t lo = std::max(ch[j].begin, im.offset), hi = std::min(ch[j].end, im.offset + im.tokens);
            if (lo >= hi) continue;
            image_at_.push_back(RowRange{thd_local_ + lo - ch[j].begin, thd_local_ + hi - ch[j].begin});
            covered_.push_back(covered_.back() + hi - lo);
          }
          thd_local_ = checked_add(thd_local_, ch[j].size(), "a packed local sequence length");
        }
      }
    }
    auto below = [&](std::int64_t x) {  // image rows at packed positions < x
      const auto it = std::partition_point(image_at_.begin(), image_at_.end(), [&](const RowRange& r) { return r.end <= x; });
      const std::size_t i = static_cast<std::size_t>(it - image_at_.begin());
      return covered_[i] + (i < image_at_.size() ? std::max<std::int64_t>(0, x - image_at_[i].begin) : 0);
    };
    const RowRange w = sp_window(m_, thd_local_, t);
    return below(w.end) - below(w.begin);
  }

  const Party& party(int index) {
    auto it = parties_.find(index);
    if (it != parties_.end()) return it->second;
    const int t = index % per_cp_, c = index / per_cp_ % m_.cp(), d = index / per_cp_ / m_.cp();
    const std::vector<int> samples(by_replica_.begin() + first_[d], by_replica_.begin() + first_[d + 1]);
    Party& p = parties_[index];
    build_party(m_, batch_, samples, d, c, t, p, scratch_);
    return p;
  }

 private:
  const Module& m_;
  const BoundaryBatch& batch_;
  std::vector<int>&replica_of_, &slot_, &first_, &by_replica_;

  int per_cp_ = 1;
  bool combined_ = false;
  std::unordered_map<int, Party> parties_;
  std::vector<BufferSegment> scratch_;
  std::vector<int> samples_;
  std::pair<int, int> local_of_{-1, -1};  // (replica, cp) whose per-sample local lengths locals_ holds
  std::vector<std::int64_t> locals_;
  std::pair<int, int> thd_of_{-1, -1};  // (replica, cp) whose packed image positions image_at_ holds
  std::vector<RowRange> image_at_;      // ascending, disjoint
  std::vector<std::int64_t> covered_;   // image rows before each interval of image_at_, then the total
  std::int64_t thd_local_ = 0;
  std::vector<std::int64_t> sums_, rows_of_n_;  // max_kept_rows' scratch, per cp rank
  std::vector<int>& party_by_rank_;  // party_of_rank_cached's table, from first_rank (the workspace's)
};

// water_fill's level (planner.h) for `levels` (sorted here) and total > 0: the smallest v with
// sum over x of max(0, v - levels[x]) >= total. With the i lowest levels a_1..a_i under v (a_i < v <=
// a_(i+1)) that sum is i v - (a_1 + ... + a_i), so v = ceil((total + a_1 + ... + a_i) / i) for the
// first i where that is at most a_(i+1) (or i = all).
inline std::int64_t water_level(std::vector<std::int64_t>& levels, std::int64_t total) {
  std::sort(levels.begin(), levels.end());
  Int128 need = total;
  for (std::size_t i = 1;; ++i) {
    need += levels[i - 1];
    if (i == levels.size() || need <= Int128{levels[i]} * static_cast<std::int64_t>(i)) {
      const Int128 v = (need + static_cast<std::int64_t>(i) - 1) / static_cast<std::int64_t>(i);
      return v > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(v);
    }
  }
}

// An upper bound on max_j (load_j + sends_j) over a relayed party's m members after relay_pieces,
// from totals: `highest` the largest load, `total` the sum of every load and relay (each row
// relay_pieces deals to one of u lacking members costs u - 1), `steps` the fills (overlaps
// lacked by u >= 2 members, and the pool), `fewest` the smallest such u. Proof: a fill among u
// members lifts their levels l_x = floor(T_x / (u - 1)), T_x = sends_x + load_x, to at most
// max(l_x, lo) with lo <= max(max l, ceil((sum l + z) / u)) (z rows), and keeps T_x mod (u - 1).
// In the first case a member ends at most V + u - 2, V the highest T before the fill; in the
// second at most (u - 1) (sum l + z) / u + (u - 1)^2 / u + u - 2 < S / u + 2u - 3, S the lacking
// members' sum after the fill (sum l <= sum T / (u - 1)), itself <= total. relay_pieces keeps the
// helped cut of a step instead only where its busiest member is lower, and each row costs u - 1
// sends there too, so the same holds for the step it keeps. So after each fill every member is at
// most max(V + m - 2, total / fewest + 2m - 3), and after all of them at most
// max(highest, ceil(total / fewest) + 2m - 3) + steps (m - 2). Chains only lower the busiest member.
inline std::int64_t relay_sum_bound(std::int64_t highest, Int128 total, std::int64_t fewest, std::int64_t steps, std::int64_t m) {
  if (steps == 0) return highest;
  const Int128 spread = total <= INT64_MAX - fewest ? ceil_div(static_cast<std::int64_t>(total), fewest)  // 128-bit division is slow
                                                     : (total + fewest - 1) / fewest;
  const Int128 bound = std::max<Int128>(highest, spread + 2 * m - 3) + Int128{steps} * (m - 2);
  return bound > INT64_MAX ? INT64_MAX : static_cast<std::int64_t>(bound);
}

// An upper bound on max_j (load_j + sends_j) over the members of one relayed party after
// relay_pieces (planner.h), from the party's overlaps alone: no pieces, no Party. It runs
// relay_pieces' steps on upper bounds T^_x >= T_x = sends_x + load_x (any upper bounds on the loads
// will do to start), and on M^ >= max_x T_x, which every T^_x is then capped at. The proof:
//  - An overlap (q, z rows) goes to the u members lacking it (source party not q); the others hold
//    it. u = m: pooled, dealt last over all m members as a plain step with u = m; u = 1: that
//    member copies it, no relay; u = 0: every member copies it. Each row costs u - 1 sends,
//    whichever member sends them.
//  - Plain step (plain_pieces): water_fill is given levels l_x = floor(T_x / (u - 1)) of the
//    lacking members, and each row it deals x adds u - 1 to T_x, exactly 1 to l_x. With lo its level
//    (water_level), a member with l_x >= lo gets nothing and the others end at level lo - 1 or lo,
//    keeping T_x mod (u - 1): each lacking member ends with T_x unchanged or at most
//    (u - 1) lo + u - 2, the holding members unchanged. lo is non-decreasing in every l_x, so lo^
//    from floor(T^_x / (u - 1)) gives per-member bounds P_x, and P = max_x P_x >= the plain step's
//    busiest member.
//  - Helped step (helped_pieces, for 2 <= u < m): water_fill over all m members' T with z (u - 1)
//    units, level lo_h (<= lo_h^ from T^). A lacking member enters whole rows within its cap, so
//    ends at most max(T_x, lo_h); the helpers take the rest within their caps, but for what rounding
//    leaves - the units lacking members could not use (at most u - 2 each) and the helpers' last
//    rooms (under u - 1 each): at most m (u - 2) units - which one helper takes whole. So each
//    member ends at most H_x = max(T^_x, lo_h^), plus m (u - 2) for a holding one.
//  - relay_pieces keeps the helped step only where its busiest member is below the plain step's
//    (<= P), so afterwards T_x <= max(P_x, min(H_x, P - 1)) and max_x T_x <= min(P, max_x H_x).
//  - chain_wins swaps in chains only where they lower max_j (load_j + sends_j): the bound holds.
// It is not exact (it does not know which members the fills reach, nor which step is kept): a party
// whose bound reaches direct's figure is planned exactly. The test RelayBoundsCoverRelayPieces
// checks it against relay_pieces.
class RelayBound {
 public:
  void start() {
    party_.clear();
    t_.clear();
    pooled_ = 0;
  }
  // The next member: its source party (-1: none) and at least the load relay_pieces is given for it.
  void add_member(int party, std::int64_t load) {
    party_.push_back(party);
    t_.push_back(load);
  }
  // The party's next overlap with source party q, in relay_pieces' order.
  void overlap(int q, std::int64_t rows) {
    who_.clear();
    for (std::size_t j = 0; j < party_.size(); ++j) {
      if (party_[j] != q) who_.push_back(static_cast<int>(j));
    }
    const std::int64_t m = static_cast<std::int64_t>(party_.size()), u = static_cast<std::int64_t>(who_.size());
    if (u == m) {
      pooled_ += rows;
      return;
    }
    if (u < 2) return;
    plain_ = t_;
    const std::int64_t plain = plain_step(u - 1, rows);
    std::int64_t units = 0;
    if (__builtin_mul_overflow(rows, u - 1, &units)) {  // no bound on the helped step: keep the plain one's
      t_.swap(plain_);
      return;
    }
    levels_ = t_;
    const std::int64_t lo = water_level(levels_, units), slack = m * (u - 2);
    std::int64_t helped = 0;
    for (std::size_t x = 0; x < t_.size(); ++x) {
      helped_[x] = saturated_add(std::max(t_[x], lo), party_[x] == q ? slack : 0);
      helped = std::max(helped, helped_[x]);
    }
    const std::int64_t most = std::min(plain, helped);
    for (std::size_t x = 0; x < t_.size(); ++x) t_[x] = std::min(most, std::max(plain_[x], std::min(helped_[x], plain - 1)));
  }
  // The bound, once every overlap is in (the pool is dealt here, as relay_pieces deals it last).
  std::int64_t finish() {
    if (pooled_ > 0 && party_.size() > 1) {
      who_.resize(party_.size());
      for (std::size_t j = 0; j < who_.size(); ++j) who_[j] = static_cast<int>(j);
      plain_ = t_;
      plain_step(static_cast<std::int64_t>(party_.size()) - 1, pooled_);
      t_.swap(plain_);
    }
    return t_.empty() ? 0 : *std::max_element(t_.begin(), t_.end());
  }

 private:
  static std::int64_t saturated_add(std::int64_t a, std::int64_t b) {
    std::int64_t out = 0;
    return __builtin_add_overflow(a, b, &out) ? INT64_MAX : out;
  }
  // The plain step over the members in who_, each row costing `per_row` sends, into plain_ (which
  // starts as t_); returns its busiest member's bound. Also sizes helped_.
  std::int64_t plain_step(std::int64_t per_row, std::int64_t rows) {
    levels_.clear();
    for (int j : who_) levels_.push_back(t_[j] / per_row);
    std::int64_t top = 0;  // (u - 1) lo^ + u - 2
    if (__builtin_mul_overflow(water_level(levels_, rows), per_row, &top)) top = INT64_MAX;
    top = saturated_add(top, per_row - 1);
    for (int j : who_) plain_[j] = std::max(plain_[j], top);
    helped_.resize(t_.size());
    return *std::max_element(plain_.begin(), plain_.end());
  }

  std::vector<int> party_, who_;
  std::vector<std::int64_t> t_, plain_, helped_, levels_;
  std::int64_t pooled_ = 0;
};

inline const Module& source_module(const Layout& layout, int encoder, Direction direction) {
  return layout.modules()[direction == Direction::forward ? 1 + encoder : 0];
}
inline const Module& destination_module(const Layout& layout, int encoder, Direction direction) {
  return layout.modules()[direction == Direction::forward ? 0 : 1 + encoder];
}

class RankPlanBuilder {
 public:
  RankPlanBuilder(const Layout& layout, int encoder, const BoundaryBatch& batch, Direction direction, int rank,
                  std::size_t limit, RankWorkspace& workspace)
      : ps_(source_module(layout, encoder, direction), batch, workspace.source,
            workspace.party_table(source_module(layout, encoder, direction))),
        pd_(destination_module(layout, encoder, direction), batch, workspace.destination,
            workspace.party_table(destination_module(layout, encoder, direction))),
        budget_(layout, encoder, direction, limit),
        rank_(rank),
        row_bytes_(batch.row_bytes()),
        stream_(workspace.stream),
        held_(workspace.held),
        received_(workspace.received),
        member_parties_(workspace.member_parties) {
    out_.rank = rank;
    out_.world_size = layout.world_size();
    out_.direction = direction;
    out_.encoder = encoder;
    out_.row_bytes = row_bytes_;
    out_.phases.resize(1);
  }

  RankPlan run(Strategy strategy) {
    if (strategy == Strategy::automatic) strategy = world_relay_sends_less() ? Strategy::scatter_allgather : Strategy::direct;
    out_.strategy = strategy;
    if (strategy == Strategy::scatter_allgather) return run_relayed();
    const int my_src = ps_.party_of_rank(rank_), my_dst = pd_.party_of_rank(rank_);
    std::vector<int> holders;  // source parties whose demand streams this rank takes part in
    if (my_src >= 0) {
      out_.source_bytes = ps_.party(my_src).buffer_bytes;
      holders.push_back(my_src);
    }
    if (my_dst >= 0) receive(my_src, my_dst, holders);
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    for (int q : holders) cut(q);
    return std::move(out_);
  }

 private:
  // The rows this rank keeps: local copies (in the world planner's order) and the holders to ask.
  void receive(int my_src, int my_dst, std::vector<int>& holders) {
    const Party& P = pd_.party(my_dst);
    out_.destination_bytes = P.buffer_bytes;
    for (int s : P.samples) {
      const int first = ps_.replica_of(s) * ps_.parties_per_replica();
      for (int i = P.first_range[pd_.slot(s)]; i < P.first_range[pd_.slot(s) + 1]; ++i) {
        const RowRange want = P.ranges[i];
        for (int q = first; q < first + ps_.parties_per_replica(); ++q) {
          const Party& Q = ps_.party(q);
          const int slot = ps_.slot(s);
          for (int j = Q.first_range[slot]; j < Q.first_range[slot + 1]; ++j) {
            const RowRange o{std::max(want.begin, Q.ranges[j].begin), std::min(want.end, Q.ranges[j].end)};
            if (o.begin >= o.end) continue;
            if (q != my_src) {
              holders.push_back(q);
              continue;
            }
            budget_.take(1);
            out_.phases[0].push_back(transfer(rank_, rank_, s, o, Q, P));
          }
        }
      }
    }
  }

  Transfer transfer(int src, int dst, int s, RowRange rows, const Party& Q, const Party& P) const {
    Transfer t;
    t.src = src;
    t.dst = dst;
    t.sample = s;
    t.rows = rows;
    t.src_buffer = BufferKind::source;
    t.src_offset = row_offset(Q, ps_.slot(s), rows.begin, row_bytes_);
    t.dst_offset = row_offset(P, pd_.slot(s), rows.begin, row_bytes_);
    t.bytes = rows.size() * row_bytes_;
    return t;
  }

  // Party q's demand stream, exactly as the world planner lists it (receiving parties ascending,
  // then their ranks, samples, kept ranges and q's ranges), cut among q's members; keeps this
  // rank's part.
  void cut(int q) {
    const Party& Q = ps_.party(q);  // unordered_map: references survive later insertions
    std::vector<int> replicas;      // receiving replicas holding q's samples, ascending
    for (int s : Q.samples) replicas.push_back(pd_.replica_of(s));
    std::sort(replicas.begin(), replicas.end());
    replicas.erase(std::unique(replicas.begin(), replicas.end()), replicas.end());
    stream_.clear();
    for (int d : replicas) {
      for (int pi = pd_.party_index(d, 0, 0); pi < pd_.party_index(d + 1, 0, 0); ++pi) {
        const Party& P = pd_.party(pi);
        for (int r : P.ranks) {
          if (ps_.party_of_rank(r) == q) continue;  // holds these rows itself
          for (int s : Q.samples) {
            if (pd_.replica_of(s) != d) continue;
            demands(Q, P, r, s);
          }
        }
      }
    }
    emit_cut(Q);
  }

  // Cuts stream_ (the demands on party Q) among q's members as the world planner does; keeps this rank's part.
  void emit_cut(const Party& Q) {
    budget_.take(stream_.size());
    cut_stream(stream_, static_cast<std::int64_t>(Q.ranks.size()), [&](std::int64_t h, const Demand& d, RowRange rows) {
      const int src = Q.ranks[h];
      if (src != rank_ && d.receiver != rank_) return;
      out_.phases[0].push_back(transfer(src, d.receiver, d.sample, rows, Q, pd_.party(pd_.party_of_rank(d.receiver))));
    });
  }

  void demands(const Party& Q, const Party& P, int r, int s) {
    const int ps = ps_.slot(s), pd = pd_.slot(s);
    for (int i = P.first_range[pd]; i < P.first_range[pd + 1]; ++i) {
      for (int j = Q.first_range[ps]; j < Q.first_range[ps + 1]; ++j) {
        const RowRange o{std::max(P.ranges[i].begin, Q.ranges[j].begin), std::min(P.ranges[i].end, Q.ranges[j].end)};
        if (o.begin < o.end) stream_.push_back(Demand{r, s, o});
      }
    }
  }

  // scatter_allgather (planner.h's Planner::plan_relayed and relay, restricted to what this rank
  // needs): its own party's plan in full (local copies, demands, relays), then the demand stream of
  // each source party it sends for or receives from, built from the plans of the receiving parties
  // that demand from that party. A relayed party's pieces depend on its members' loads as holders,
  // so those source parties' totals are computed too (only theirs, each once).
  struct Local {
    int rank, party, sample;
    RowRange rows;
  };
  struct PartyPlan {                              // one receiving party's part of the world plan
    std::vector<Local> locals;                    // phase-0 local copies, in the world's order
    std::vector<std::pair<int, Demand>> demands;  // (source party, demand), in the world's order
    std::vector<std::int64_t> relay_rows;         // rows each member relays after phase 0
    std::vector<std::vector<Share>> shares;       // per member (relayed parties)
    std::vector<int> member_party;                // each member's source party (-1: none)
    bool chained = false;                         // relays in chains (planner.h's chain_wins)
  };

  // Rows source party q lets out in phase 0 (Planner::estimate_source_load's per-party figure), or
  // with direct = true what it would send under the direct strategy. Once exact_relay_sends_less
  // has counted every party's, from its count.
  std::int64_t holder_rows(int q, bool direct) {
    if (holders_counted_) return direct ? held_[q].second : held_[q].first;
    auto it = holder_rows_.find(q);
    if (it == holder_rows_.end()) {
      std::int64_t relay = 0, direct_rows = 0;  // a sum: any order of the overlaps will do
      const bool replicated = pd_.party_size() > 1;
      for (const int* s = ps_.samples_begin(q); s != ps_.samples_end(q); ++s) {
        const int d = pd_.replica_of(*s);
        for (int pi = pd_.party_index(d, 0, 0); pi < pd_.party_index(d + 1, 0, 0); ++pi) {
          std::int64_t lacking = 0;
          pd_.for_each_member(pi, [&](int r) { lacking += ps_.party_of_rank(r) != q; });
          pd_.for_each_range(pi, *s, [&](RowRange want) {
            ps_.for_each_range(q, *s, [&](RowRange have) {
              const std::int64_t o = std::min(want.end, have.end) - std::max(want.begin, have.begin);
              if (o <= 0) return;
              direct_rows += o * lacking;
              relay += replicated ? (lacking > 0 ? o : 0) : o * lacking;
            });
          });
        }
      }
      it = holder_rows_.emplace(q, std::make_pair(relay, direct_rows)).first;
    }
    return direct ? it->second.second : it->second.first;
  }
  std::int64_t source_load(int r) {
    const int q = ps_.party_of_rank(r);
    if (q < 0) return 0;
    const std::int64_t k = ps_.party_size(), rows = holder_rows(q, false);
    return ceil_div(rows, k);
  }

  std::vector<int> receiving_replicas(int q) const {  // ascending
    std::vector<int> replicas;
    for (const int* s = ps_.samples_begin(q); s != ps_.samples_end(q); ++s) replicas.push_back(pd_.replica_of(*s));
    std::sort(replicas.begin(), replicas.end());
    replicas.erase(std::unique(replicas.begin(), replicas.end()), replicas.end());
    return replicas;
  }
  // Calls f(source party, overlap) for each piece of `want` (rows of sample s), as Planner::for_each_holder.
  template <class F>
  void for_each_holder(int s, RowRange want, F&& f) {
    const int first = ps_.replica_of(s) * ps_.parties_per_replica();
    for (int q = first; q < first + ps_.parties_per_replica(); ++q) {
      ps_.for_each_range(q, s, [&](RowRange have) {
        const RowRange o{std::max(want.begin, have.begin), std::min(want.end, have.end)};
        if (o.begin < o.end) f(q, o);
      });
    }
  }

  const PartyPlan& party_plan(int pi) {
    auto it = party_plans_.find(pi);
    if (it != party_plans_.end()) return it->second;
    const Party& P = pd_.party(pi);
    PartyPlan& out = party_plans_[pi];
    const int m = static_cast<int>(P.ranks.size());
    std::vector<int> member_party(m);
    for (int j = 0; j < m; ++j) member_party[j] = ps_.party_of_rank(P.ranks[j]);
    out.relay_rows.assign(m, 0);
    if (m == 1) {  // Planner::plan_direct
      for (int s : P.samples) {
        for (int i = P.first_range[pd_.slot(s)]; i < P.first_range[pd_.slot(s) + 1]; ++i) {
          for_each_holder(s, P.ranges[i], [&](int q, RowRange o) {
            if (member_party[0] == q) {
              out.locals.push_back(Local{P.ranks[0], q, s, o});
            } else {
              out.demands.emplace_back(q, Demand{P.ranks[0], s, o});
            }
          });
        }
      }
      return out;
    }
    std::vector<int> slots(P.samples.size());
    std::vector<std::int64_t> load(m);
    for (std::size_t k = 0; k < P.samples.size(); ++k) slots[k] = pd_.slot(P.samples[k]);
    for (int j = 0; j < m; ++j) load[j] = source_load(P.ranks[j]);
    out.chained = relay_pieces(
        P, slots, member_party, load,
        [&](int s, RowRange want, auto&& f) { for_each_holder(s, want, f); },
        [&](int j, int q, int s, RowRange o) { out.locals.push_back(Local{P.ranks[j], q, s, o}); },
        [&](int j, int q, int s, RowRange o) { out.demands.emplace_back(q, Demand{P.ranks[j], s, o}); }, out.shares,
        out.relay_rows);
    out.member_party = std::move(member_party);
    return out;
  }

  RankPlan run_relayed() {
    out_.phases.resize(2);
    const int my_src = ps_.party_of_rank(rank_), my_dst = pd_.party_of_rank(rank_);
    std::vector<int> holders;
    if (my_src >= 0) {
      out_.source_bytes = ps_.party(my_src).buffer_bytes;
      holders.push_back(my_src);
    }
    if (my_dst >= 0) {
      const Party& P = pd_.party(my_dst);
      out_.destination_bytes = P.buffer_bytes;
      const PartyPlan& mine = party_plan(my_dst);
      for (const Local& l : mine.locals) {
        if (l.rank != rank_) continue;
        budget_.take(1);
        out_.phases[0].push_back(transfer(rank_, rank_, l.sample, l.rows, ps_.party(l.party), P));
      }
      for (const auto& [q, d] : mine.demands) {
        if (d.receiver == rank_) holders.push_back(q);
      }
      relays(my_dst, mine);
    }
    std::sort(holders.begin(), holders.end());
    holders.erase(std::unique(holders.begin(), holders.end()), holders.end());
    for (int q : holders) {
      const Party& Q = ps_.party(q);
      stream_.clear();
      for (int d : receiving_replicas(q)) {
        for (int pi = pd_.party_index(d, 0, 0); pi < pd_.party_index(d + 1, 0, 0); ++pi) {
          for (const auto& [from, demand] : party_plan(pi).demands) {
            if (from == q) stream_.push_back(demand);
          }
        }
      }
      emit_cut(Q);
    }
    return std::move(out_);
  }

  // The relays of this rank's party it sends or receives, as Planner::plan_relayed emits them.
  void relays(int pi, const PartyPlan& plan) {
    const Party& P = pd_.party(pi);
    for_each_relay(plan.chained, plan.member_party, plan.shares, [&](int a, int b, const Share& sh, std::size_t phase) {
      if (P.ranks[a] != rank_ && P.ranks[b] != rank_) return;
      budget_.take(1);
      Transfer t;
      t.src = P.ranks[a];
      t.dst = P.ranks[b];
      t.sample = sh.sample;
      t.rows = sh.rows;
      t.src_buffer = BufferKind::destination;
      t.src_offset = row_offset(P, pd_.slot(sh.sample), sh.rows.begin, row_bytes_);
      t.dst_offset = t.src_offset;
      t.bytes = sh.rows.size() * row_bytes_;
      if (out_.phases.size() <= phase) out_.phases.resize(phase + 1);
      out_.phases[phase].push_back(t);
    });
  }

  // Planner::make_plan's choice for automatic: whether the world's busiest sender sends less under
  // scatter_allgather than under direct. Decided from bounds where they suffice, in O(samples x cp)
  // (image-only) or O(samples) (the LLM's combined input); otherwise counted (exact_relay_sends_less).
  //  - A receiving party of one rank is planned alike by both strategies: equal plans, and ties go
  //    to direct.
  //  - Modules on disjoint ranks: with A the most rows a source party keeps and B the most a
  //    receiving party keeps (parties of k and m members), direct's busiest sender sends
  //    ceil(A m / k) rows and scatter_allgather's max(ceil(A / k), pooled_relay_rows(B, m)) (see
  //    exact_relay_sends_less; non-decreasing in B). Given A in [lo, hi]: relay wins for every A >= lo once lo (m - 1) >= k
  //    (then ceil(A / k) < ceil(A m / k)) and the relay term is below ceil(lo m / k); direct wins
  //    when the relay term is at least ceil(hi m / k).
  //  - Shared ranks, relay's side (image-only): direct's source party with A rows has at most
  //    min(k, m) members in any receiving party, so it sends at least ceil(A (m - min(k, m)) / k).
  //    Under scatter_allgather a member j of party P ends with s_j relayed rows on top of its load
  //    l_j <= ceil(A / k) as a holder, and relay_pieces fills one (range, holder) overlap at a time
  //    among the u >= u' = max(2, m - min(k, m)) members lacking it, levelling (s + l) / (u - 1). A
  //    water-fill never lifts a level above the larger of the old highest and the mean after the
  //    fill, so each step leaves every member at most max(V + u - 2, W / u + 2u - 3), V the highest
  //    s + l before it and W = sum of l + s at the end <= m ceil(A / k) + B (m - 1). With N steps
  //    (at most 2 ranges of P times 2 p + 2 overlaps per sample, p source parties per replica, plus
  //    the pool), every rank sends at most max(ceil(A / k), ceil(W / u') + 2m - 3) + N (m - 2) rows;
  //    below direct's figure, that settles scatter_allgather. A party keeps a helped cut only where
  //    it lowers that step's busiest member, and chains only where that lowers its busiest member,
  //    so the plain star's bound holds for both.
  bool world_relay_sends_less() {
    if (row_bytes_ == 0) return false;  // both send nothing: ties go to direct
    const std::int64_t m = pd_.party_size(), k = ps_.party_size();
    if (m == 1) return false;
    const LazyPlacement::KeptRows a = ps_.max_kept_rows();
    const std::int64_t direct_hi = ceil_div(checked_mul(a.hi, m, "rows a source party sends under the direct strategy"), k);
    const Module &src = ps_.module(), &dst = pd_.module();
    if (src.end_rank() <= dst.first_rank() || dst.end_rank() <= src.first_rank()) {
      const LazyPlacement::KeptRows b = pd_.max_kept_rows();
      const std::int64_t relay_lo = pooled_relay_rows(b.lo, m), relay_hi = pooled_relay_rows(b.hi, m);
      if (a.lo == a.hi && b.lo == b.hi) return std::max(ceil_div(a.hi, k), relay_hi) < direct_hi;
      if (a.lo * (m - 1) >= k && relay_hi < ceil_div(a.lo * m, k)) return true;
      if (relay_lo >= direct_hi) return false;
      return separated_relay_sends_less();
    }
    if (!ps_.combined() && !pd_.combined()) {
      const std::int64_t b = pd_.max_kept_rows().hi, share = ceil_div(a.hi, k), outside = m - std::min(k, m);
      const std::int64_t direct_lo = ceil_div(a.lo * outside, k);
      const Int128 u = std::max<std::int64_t>(2, outside), w = Int128{m} * share + Int128{b} * (m - 1);
      const Int128 steps = Int128{pd_.max_replica_samples()} * (2 * Int128{ps_.parties_per_replica()} + 2) + 1;
      const Int128 relay_hi = std::max<Int128>(share, (w + u - 1) / u + 2 * m - 3) + steps * (m - 2);
      if (relay_hi < direct_lo) return true;
    }
    return exact_relay_sends_less(direct_hi);
  }

  // The exact count on disjoint ranks, in rows, from the parties' sizes: the receiving parties of a
  // replica partition each sample's rows and all have the same size, and no member of one module's
  // parties holds or keeps rows of the other's, so
  //  - source party Q: direct sends its rows once per receiving-party member, scatter_allgather
  //    once per receiving party - rows(Q) * |P| and rows(Q) - cut equally among Q's members;
  //  - receiving party P: every row it needs is pooled and its members carry no holder load:
  //    pooled_relay_rows(rows(P), m).
  bool separated_relay_sends_less() {
    const std::int64_t m = pd_.party_size(), k = ps_.party_size();
    std::int64_t direct_most = 0, relay_most = 0;
    for (int q = 0; q < ps_.num_parties(); ++q) {
      const std::int64_t rows = ps_.kept_rows(q);
      direct_most = std::max(direct_most, ceil_div(checked_mul(rows, m, "rows a source party sends under the direct strategy"), k));
      relay_most = std::max(relay_most, ceil_div(rows, k));
    }
    for (int pi = 0; pi < pd_.num_parties() && relay_most < direct_most; ++pi) {
      relay_most = std::max(relay_most, pooled_relay_rows(pd_.kept_rows(pi), m));
    }
    return relay_most < direct_most;
  }

  // The exact count on shared ranks: every rank's rows under each strategy, without planning every
  // party. Three passes:
  //  1. Each receiving party's overlaps with the source parties holding its rows (for_each_overlap),
  //     summed into every source party's rows as a holder under each strategy (holder_rows:
  //     relay, once per receiving party some member of which lacks them; direct, once per lacking
  //     member), and into the party's own relay total. A party whose members hold none of R rows
  //     must relay them to its m - 1 other members (star or chain alike), so its busiest member
  //     sends at least ceil(R (m - 1) / m): at or above direct_hi (>= direct's busiest sender),
  //     direct wins at once.
  //  2. direct's busiest sender, and under scatter_allgather an upper bound on each party's busiest
  //     member: pooled_relay_rows where no member holds rows (exact: the pool is all, no holder
  //     load); else relay_sum_bound from its totals, then RelayBound from its overlaps where that is not
  //     below direct's figure.
  //  3. The parties whose RelayBound reaches direct's figure, highest first, planned as the planner
  //     plans them (party_plan): direct wins at the first member that reaches it.
  // A rank is in at most one party of each module, so its total is its share of its source party's
  // rows plus its relays; a rank in no receiving party sends at most ceil(rows / k) of its party's.
  bool exact_relay_sends_less(std::int64_t direct_hi) {
    const int m = pd_.party_size();
    const std::int64_t k = ps_.party_size();
    const int stride = pd_.member_stride();
    held_.assign(static_cast<std::size_t>(ps_.num_parties()), {0, 0});
    holders_counted_ = false;
    received_.assign(static_cast<std::size_t>(pd_.num_parties()), ReceivedTotals{});
    std::vector<int>& member = member_parties_;
    bool direct_wins = false;
    pd_.for_each_party([&](int pi, int d, int c, int t, int first) {
      if (direct_wins) return;
      member.clear();
      for (int j = 0; j < m; ++j) member.push_back(ps_.party_of_rank_cached(first + j * stride));
      ReceivedTotals& p = received_[pi];
      std::int64_t pooled = 0, rows = 0;
      Int128 relays = 0;
      for_each_overlap(pi, d, c, t, [&](int q, std::int64_t n) {
        const int lacking = m - static_cast<int>(std::count(member.begin(), member.end(), q));
        held_[q].second += n * lacking;
        if (lacking > 0) held_[q].first += n;
        rows += n;
        if (lacking == m) {
          pooled += n;
        } else if (lacking > 1) {
          relays += Int128{n} * (lacking - 1);
          p.fewest = std::min(p.fewest, lacking);
          ++p.steps;
        }
      });
      if (pooled > 0) {
        direct_wins = ceil_div(pooled * (m - 1), m) >= direct_hi;
        relays += Int128{pooled} * (m - 1);
        p.fewest = std::min(p.fewest, m);
        ++p.steps;
      }
      p.colocated = std::any_of(member.begin(), member.end(), [](int q) { return q >= 0; });
      p.rows_or_relays = !p.colocated ? rows : relays > INT64_MAX ? -1 : static_cast<std::int64_t>(relays);
    });
    if (direct_wins) return false;
    holders_counted_ = true;
    auto share = [k](std::int64_t rows) { return k == 1 ? rows : ceil_div(rows, k); };
    std::int64_t direct_most = 0, relay_most = 0;
    for (const auto& [relay, direct] : held_) {
      direct_most = std::max(direct_most, share(direct));
      relay_most = std::max(relay_most, share(relay));
    }
    if (relay_most >= direct_most) return false;
    std::vector<std::pair<std::int64_t, int>> open;  // (-bound, party)
    pd_.for_each_party([&](int pi, int d, int c, int t, int first) {
      const ReceivedTotals& p = received_[pi];
      if (direct_wins) return;
      if (!p.colocated) {
        direct_wins = pooled_relay_rows(p.rows_or_relays, m) >= direct_most;
        return;
      }
      Int128 loads = 0;
      std::int64_t highest = 0;
      for (int j = 0; j < m; ++j) {
        const int q = ps_.party_of_rank_cached(first + j * stride);
        const std::int64_t load = q < 0 ? 0 : share(held_[q].first);
        loads += load;
        highest = std::max(highest, load);
      }
      if (p.rows_or_relays >= 0 && relay_sum_bound(highest, loads + p.rows_or_relays, p.fewest, p.steps, m) < direct_most) {
        return;
      }
      bound_.start();
      for (int j = 0; j < m; ++j) {
        const int q = ps_.party_of_rank_cached(first + j * stride);
        bound_.add_member(q, q < 0 ? 0 : share(held_[q].first));
      }
      for_each_overlap(pi, d, c, t, [&](int q, std::int64_t n) { bound_.overlap(q, n); });
      const std::int64_t most = bound_.finish();
      if (most >= direct_most) open.emplace_back(-most, pi);
    });
    if (direct_wins) return false;
    std::sort(open.begin(), open.end());
    for (const auto& [minus_bound, pi] : open) {
      const Party& P = pd_.party(pi);
      const PartyPlan& plan = party_plan(pi);
      for (std::size_t j = 0; j < P.ranks.size(); ++j) {
        if (holder_share(P.ranks[j]) + plan.relay_rows[j] >= direct_most) return false;
      }
    }
    return true;
  }

  // Calls f(source party, rows) for each overlap of receiving party pi's kept ranges (replica d, cp c, tp t) with the
  // source parties holding them, in relay_pieces' order: its samples, its ranges, the holders
  // ascending, their ranges. In an image-only layout every range has a closed form (stored_rows),
  // so no party is built and the parties' coordinates are decoded once, not per sample.
  template <class F>
  void for_each_overlap(int pi, int d, int c, int t, F&& f) {
    const int *begin = pd_.replica_begin(d), *end = pd_.replica_end(d);
    if (ps_.combined() || pd_.combined()) {
      for (const int* s = begin; s != end; ++s) {
        pd_.for_each_range(pi, *s, [&](RowRange want) { for_each_holder(*s, want, [&](int q, RowRange o) { f(q, o.size()); }); });
      }
      return;
    }
    const int cps = ps_.module().cp(), per_cp = ps_.per_cp();
    RowRange want[2], have[2];
    for (const int* s = begin; s != end; ++s) {
      const int wants = pd_.stored_ranges(*s, c, t, want);
      for (int i = 0; i < wants; ++i) {
        int q = ps_.replica_of(*s) * ps_.parties_per_replica();
        for (int sc = 0; sc < cps; ++sc) {
          for (int st = 0; st < per_cp; ++st, ++q) {
            const int haves = ps_.stored_ranges(*s, sc, st, have);
            for (int j = 0; j < haves; ++j) {
              const std::int64_t n = std::min(want[i].end, have[j].end) - std::max(want[i].begin, have[j].begin);
              if (n > 0) f(q, n);
            }
          }
        }
      }
    }
  }

  // Rank r's part of its source party's rows as a holder under scatter_allgather: the cut gives
  // member h rows [split_point(h), split_point(h + 1)).
  std::int64_t holder_share(int r) {
    const int q = ps_.party_of_rank_cached(r);
    if (q < 0) return 0;
    const std::int64_t k = ps_.party_size(), rows = holder_rows(q, false);
    std::int64_t h = 0, mine = 0;
    ps_.for_each_member(q, [&](int x) {
      if (x == r) mine = h;
      ++h;
    });
    return split_point(rows, mine + 1, k) - split_point(rows, mine, k);
  }

  LazyPlacement ps_, pd_;
  TransferBudget budget_;
  int rank_;
  std::int64_t row_bytes_;
  RankPlan out_;
  // The workspace's (RankWorkspace says what each holds); held_ is complete once holders_counted_.
  std::vector<Demand>& stream_;
  std::vector<std::pair<std::int64_t, std::int64_t>>& held_;
  std::vector<ReceivedTotals>& received_;
  std::vector<int>& member_parties_;
  bool holders_counted_ = false;
  RelayBound bound_;
  std::unordered_map<int, PartyPlan> party_plans_;
  std::unordered_map<int, std::pair<std::int64_t, std::int64_t>> holder_rows_;  // (scatter_allgather, direct)
};

// Everything a plan depends on in a micro-batch but the direction (RankPlanner keeps that beside
// the key, so the two directions of a micro-batch share one), flattened: f(value) for single values, f(data, n)
// for runs of n values, each list preceded by its length, so two sequences are equal exactly when
// the batches are. f returns false to stop early. A cache key without copying the batch's
// per-sample vectors, which would cost an allocation each; runs keep the comparison a memcmp.
template <class F>
bool visit_batch_key(const BoundaryBatch& b, F&& f) {
  static_assert(sizeof(ImageSpan) == 2 * sizeof(std::int64_t), "ImageSpan is visited as two values");
  auto run = [&](const std::int64_t* data, std::size_t n) {
    return f(static_cast<std::int64_t>(n)) && f(data, n);
  };
  auto ints = [&](const std::vector<int>& v) {
    if (!f(static_cast<std::int64_t>(v.size()))) return false;
    for (int x : v) {
      if (!f(static_cast<std::int64_t>(x))) return false;
    }
    return true;
  };
  const LlmSequence& x = b.llm_sequence;
  for (std::int64_t v : {b.hidden, b.element_size,
                         static_cast<std::int64_t>(b.encoder_assignment.rule),
                         static_cast<std::int64_t>(b.llm_assignment.rule), static_cast<std::int64_t>(x.format),
                         x.pad_multiple, x.padded_length}) {
    if (!f(v)) return false;
  }
  if (!run(b.tokens.data(), b.tokens.size()) || !ints(b.encoder_assignment.replica) ||
      !ints(b.llm_assignment.replica) || !run(x.length.data(), x.length.size()) ||
      !f(static_cast<std::int64_t>(x.images.size()))) {
    return false;
  }
  for (const auto& images : x.images) {
    if (!run(reinterpret_cast<const std::int64_t*>(images.data()), 2 * images.size())) return false;
  }
  return true;
}

// The key into `key`, reusing its storage.
inline void batch_key_into(const BoundaryBatch& b, std::vector<std::int64_t>& key) {
  struct Count {
    std::size_t n = 0;
    bool operator()(std::int64_t) { return ++n != 0; }
    bool operator()(const std::int64_t*, std::size_t k) {
      n += k;
      return true;
    }
  } count;
  visit_batch_key(b, count);
  struct Append {
    std::vector<std::int64_t>& key;
    bool operator()(std::int64_t v) {
      key.push_back(v);
      return true;
    }
    bool operator()(const std::int64_t* data, std::size_t k) {
      key.insert(key.end(), data, data + k);
      return true;
    }
  };
  key.clear();
  key.reserve(count.n);
  visit_batch_key(b, Append{key});
}

// plan_rank with the caller's tables (RankPlanner keeps them between micro-batches).
inline RankPlan plan_rank_in(RankWorkspace& workspace, const Layout& layout, int encoder, const BoundaryBatch& batch,
                             Direction direction, int rank, const PlanOptions& options) {
  if (rank < 0 || rank >= layout.world_size()) {
    throw LayoutError("rank " + std::to_string(rank) + " is outside the world of " +
                      std::to_string(layout.world_size()) + " ranks");
  }
  validate_batch(batch, layout.llm());
  layout.encoder(encoder);  // throws for a bad index
  check_boundary_fits(direction == Direction::forward ? layout.llm() : layout.encoder(encoder), batch);
  return RankPlanBuilder(layout, encoder, batch, direction, rank, options.max_transfers, workspace).run(options.strategy);
}

inline bool same_key(const std::vector<std::int64_t>& key, const BoundaryBatch& b) {
  struct Compare {
    const std::vector<std::int64_t>& key;
    std::size_t i = 0;
    bool operator()(std::int64_t v) { return i < key.size() && key[i++] == v; }
    bool operator()(const std::int64_t* data, std::size_t k) {
      if (k > key.size() - i) return false;
      const bool same = k == 0 || std::memcmp(key.data() + i, data, k * sizeof(std::int64_t)) == 0;
      i += k;
      return same;
    }
  } compare{key};
  return visit_batch_key(b, compare) && compare.i == key.size();
}

}  // namespace detail

inline RankPlan plan_rank(const Layout& layout, int encoder, const BoundaryBatch& batch, Direction direction,
                          int rank, const PlanOptions& options) {
  detail::RankWorkspace workspace;
  return detail::plan_rank_in(workspace, layout, encoder, batch, direction, rank, options);
}

inline RankSchedule make_schedule(const RankPlan& plan) {
  std::vector<RankSchedule> one(1);
  detail::build_schedules(plan.phases, plan.world_size, plan.rank, [&](RankSchedule& rs) {
    rs.source_bytes = plan.source_bytes;
    rs.destination_bytes = plan.destination_bytes;
  }, one);
  return std::move(one[0]);
}

inline const RankPlan& RankPlanner::plan(const BoundaryBatch& batch, Direction direction) {
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    if (it->direction == direction && detail::same_key(*it->key, batch)) {
      ++hits_;
      entries_.splice(entries_.begin(), entries_, it);
      return entries_.front().plan;
    }
  }
  ++misses_;
  RankPlan plan = detail::plan_rank_in(workspace_, layout_, encoder_, batch, direction, rank_, options_);
  // The micro-batch planned the other way already has its key: share it. Training plans each
  // micro-batch both ways, and a key can be large (0.8 MB for 12,288 thd sequences of three images),
  // so this halves what a planner copies and keeps.
  std::shared_ptr<std::vector<std::int64_t>> shared;
  for (const Entry& e : entries_) {
    if (e.direction != direction && detail::same_key(*e.key, batch)) {
      shared = e.key;
      break;
    }
  }
  // A full cache recycles its least recently used entry, key storage included unless another entry
  // shares it: no per-sample allocation in steady state.
  if (entries_.size() >= capacity_) {
    entries_.splice(entries_.begin(), entries_, std::prev(entries_.end()));
  } else {
    entries_.emplace_front();
  }
  Entry& entry = entries_.front();
  try {
    if (shared) {
      entry.key = std::move(shared);
    } else {
      if (!entry.key || entry.key.use_count() > 1) entry.key = std::make_shared<std::vector<std::int64_t>>();
      detail::batch_key_into(batch, *entry.key);
    }
  } catch (...) {
    entries_.pop_front();  // out of memory: an entry whose key is not this batch's must not stay
    throw;
  }
  entry.direction = direction;
  entry.plan = std::move(plan);
  return entry.plan;
}

}  // namespace zipccl::hetero
