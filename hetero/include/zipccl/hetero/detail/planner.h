// The boundary planner behind plan.h.
//
// For each destination party P (ranks that must keep the same rows) and each row range it needs,
// the ranges are intersected with the source parties that hold them. A receiver inside the holding
// party copies locally; otherwise the need becomes a demand on that source party. Each source
// party's demands form one stream of rows, cut into |party| equal consecutive pieces, piece i sent
// by member i: holders of the same rows are disjoint from other holders, so this equalises what
// each sends and needs no global optimisation. The stream lists one receiver's rows together, so
// a piece touches few receivers and consecutive rows merge into few messages.
//
// scatter_allgather, for a replicated party P of m members: every row P needs enters P once, to one
// member, which passes it on to the members that lack it in phase 2. Rows no member holds are
// water-filled over all members (each relays its share to the m-1 others). Rows that u < m members
// already hold are copied locally by those and cut into m-u pieces, one per member lacking them,
// sent by the holding party like any demand (so a holder inside P scatters, it does not send the
// rows m-u times) and relayed to the other m-u-1 lacking members. The busiest member then sends
// about what its party must let out, the relay-aware lower bound, instead of (m-u)/u times it.
// The members holding such rows copied them in phase 0, so they can relay them too (helpers):
// where that levels the members' sends better, a helper passes some pieces on instead of the
// member they entered at (issue 22's 64-GPU example: 744 -> 720 rows, the floor for relays inside
// the party).
//
// Chains, for small batches: passing a piece on whole to the u-1 others costs its member u-1 sends
// per row, and pieces are whole rows, so a party relaying few rows can make a member send more than
// a ring broadcast would (one row into a party of 4: 3 sends by the member it enters, where a ring
// sends 1 per member). There the party relays in chains instead: a piece entered at member a goes
// to the next member lacking it (in party order, round the party), which passes it to the next,
// one hop per phase, so each member sends each row at most once. chain_wins decides per party,
// from its own pieces, so both planners agree; a party relaying at least m (m - 1) rows never
// chains, and phases past the second carry only chain hops.
#pragma once

#include <algorithm>
#include <numeric>
#include <utility>

#include "zipccl/hetero/detail/placement.h"

namespace zipccl::hetero {
namespace detail {

struct Demand {
  int receiver;
  int sample;
  RowRange rows;
};

// Caps c_j >= 0 with sum c_j == total that minimise max(load_j + c_j), into caps.
inline void water_fill(const std::vector<std::int64_t>& load, std::int64_t total, std::vector<std::int64_t>& caps) {
  const std::size_t m = load.size();
  caps.assign(m, 0);
  if (total <= 0) return;
  auto fill = [&](std::int64_t level) {
    std::int64_t sum = 0;
    for (std::int64_t l : load) sum += std::max<std::int64_t>(0, level - l);
    return sum;
  };
  std::int64_t lo = *std::min_element(load.begin(), load.end()), hi = lo + total;
  while (lo < hi) {  // smallest level whose fill reaches total
    std::int64_t mid = lo + (hi - lo) / 2;
    if (fill(mid) >= total)
      hi = mid;
    else
      lo = mid + 1;
  }
  std::int64_t given = 0;
  for (std::size_t j = 0; j < m; ++j) {
    caps[j] = std::max<std::int64_t>(0, lo - 1 - load[j]);
    given += caps[j];
  }
  for (std::size_t j = 0; j < m && given < total; ++j) {
    if (load[j] + caps[j] == lo - 1) {
      ++caps[j];
      ++given;
    }
  }
}
inline std::vector<std::int64_t> water_fill(const std::vector<std::int64_t>& load, std::int64_t total) {
  std::vector<std::int64_t> caps;
  water_fill(load, total, caps);
  return caps;
}

// Cuts a source party's demand stream into k equal consecutive pieces, piece h sent by member h:
// calls emit(h, demand, rows) for each part of a demand, in stream order.
template <class Emit>
void cut_stream(const std::vector<Demand>& stream, std::int64_t k, Emit&& emit) {
  if (stream.empty()) return;
  std::int64_t total = 0;
  for (const Demand& d : stream) total += d.rows.size();
  std::size_t item = 0;
  std::int64_t used = 0;  // rows of stream[item] already sent
  for (std::int64_t h = 0; h < k; ++h) {
    std::int64_t quota = split_point(total, h + 1, k) - split_point(total, h, k);
    while (quota > 0) {
      const Demand& d = stream[item];
      const std::int64_t take = std::min(quota, d.rows.size() - used);
      emit(h, d, RowRange{d.rows.begin + used, d.rows.begin + used + take});
      quota -= take;
      used += take;
      if (used == d.rows.size()) {
        ++item;
        used = 0;
      }
    }
  }
}

inline std::int64_t max_sent(const BoundaryPlan& plan) {
  std::vector<std::int64_t> sent(plan.world_size, 0);
  std::int64_t most = 0;
  for (const auto& phase : plan.phases) {
    for (const Transfer& t : phase) {
      if (t.src != t.dst) most = std::max(most, sent[t.src] += t.bytes);
    }
  }
  return most;
}

// Rows a member of a relayed party passes on after phase 0, received from source party holder_party.
struct Share {
  int holder_party;
  int sample;
  RowRange rows;
  int helper = -1;  // a member holding these rows that passes them on instead (star relays only)
};

// Calls f(from, to, hop) for each hop of share sh's chain from member a, hops numbered from 1: to
// the next member lacking it in party order, round the party.
template <class F>
void for_each_hop(const std::vector<int>& member_party, int a, const Share& sh, F&& f) {
  const int m = static_cast<int>(member_party.size());
  std::size_t hop = 0;
  for (int step = 1, from = a; step < m; ++step) {
    const int to = a + step < m ? a + step : a + step - m;
    if (member_party[to] == sh.holder_party) continue;  // copied these itself
    f(from, to, ++hop);
    from = to;
  }
}

// Calls f(from, to, share, phase) for each relay of a party's shares (shares[a]: entered at member
// a), in the order both planners emit them. Star: phase 1, each member's own sends member by
// member and target by target (consecutive shares to one target merge into a message), then the
// helpers'. Chains: each share hop by hop, hop h in phase h.
template <class F>
void for_each_relay(bool chained, const std::vector<int>& member_party, const std::vector<std::vector<Share>>& shares,
                    F&& f) {
  const int m = static_cast<int>(member_party.size());
  if (chained) {
    for (int a = 0; a < m; ++a) {
      for (const Share& sh : shares[a]) {
        for_each_hop(member_party, a, sh, [&](int from, int to, std::size_t hop) { f(from, to, sh, hop); });
      }
    }
    return;
  }
  bool helped = false;
  for (int a = 0; a < m; ++a) {
    if (shares[a].empty()) continue;  // keeps this loop O(transfers), not O(m^2)
    for (int b = 0; b < m; ++b) {
      if (b == a) continue;
      for (const Share& sh : shares[a]) {
        if (member_party[b] == sh.holder_party) continue;  // b copied these itself
        if (sh.helper < 0) {
          f(a, b, sh, std::size_t{1});
        } else {
          helped = true;
        }
      }
    }
  }
  if (!helped) return;
  for (int a = 0; a < m; ++a) {
    for (const Share& sh : shares[a]) {
      if (sh.helper < 0) continue;
      for (int b = 0; b < m; ++b) {
        if (b != a && member_party[b] != sh.holder_party) f(sh.helper, b, sh, std::size_t{1});
      }
    }
  }
}

// Whether party P relays in chains, and then its members' relay rows in `sends` (see the top). A
// chain is taken only where some member's star relay exceeds all the rows P relays - the most a
// ring member sends - and it lowers the party's busiest sender: it costs m - 2 more phases.
inline bool chain_wins(const std::vector<int>& member_party, const std::vector<std::int64_t>& load,
                       const std::vector<std::vector<Share>>& shares, std::vector<std::int64_t>& sends) {
  const int m = static_cast<int>(member_party.size());
  std::int64_t total = 0;
  for (const auto& mine : shares) {
    for (const Share& sh : mine) total += sh.rows.size();
  }
  if (*std::max_element(sends.begin(), sends.end()) <= total) return false;
  std::vector<std::int64_t> chain(m, 0);
  for_each_relay(true, member_party, shares,
                 [&](int from, int, const Share& sh, std::size_t) { chain[from] += sh.rows.size(); });
  std::int64_t star_most = 0, chain_most = 0;
  for (int j = 0; j < m; ++j) {
    star_most = std::max(star_most, load[j] + sends[j]);
    chain_most = std::max(chain_most, load[j] + chain[j]);
  }
  if (chain_most >= star_most) return false;
  sends = std::move(chain);
  return true;
}

// The relay rows of the busiest member of a party of m members that pools all its `rows` (no member
// holds any, none sends as a holder): what relay_pieces and chain_wins give there, in closed form.
// The pool's water-fill deals floor or ceil(rows / m) to each member; the star costs ceil(rows / m)
// (m - 1), the chain rows - floor(rows / m) (each member passes on all but its successor's share).
// Non-decreasing in rows, so it bounds a range of party sizes by its ends.
inline std::int64_t pooled_relay_rows(std::int64_t rows, std::int64_t m) {
  const std::int64_t star = ceil_div(rows, m) * (m - 1);
  return star <= rows ? star : rows - rows / m;
}

// One overlap's phase-0 entries and phase-1 sends under one way of cutting it (relay_pieces
// weighs two), before they are applied to the party.
struct RelayStep {
  struct Entry {
    int member;
    Share share;  // relayed by the member, or by share.helper
  };
  std::vector<Entry> entries;
  std::vector<std::int64_t> level, caps, room;  // scratch
  std::int64_t most = 0;                        // the busiest involved member's sends + load after it
};

// The plain cut of overlap o (rows of sample s that source party q holds) among the u lacking
// members: pieces sized so their sends (relays so far plus their own phase-0 sends as holders)
// level out, each piece costing its member u - 1 relays.
inline void plain_pieces(int q, int s, RowRange o, const std::vector<int>& lacking, const std::vector<int>& holding,
                         const std::vector<std::int64_t>& load, const std::vector<std::int64_t>& sends, RelayStep& st) {
  const std::int64_t u = static_cast<std::int64_t>(lacking.size());
  st.entries.clear();
  st.level.clear();
  for (int j : lacking) st.level.push_back(u > 1 ? (sends[j] + load[j]) / (u - 1) : 0);
  water_fill(st.level, o.size(), st.caps);
  st.most = 0;
  for (int h : holding) st.most = std::max(st.most, sends[h] + load[h]);
  std::int64_t begin = o.begin;
  for (std::int64_t x = 0; x < u; ++x) {
    const int j = lacking[x];
    st.most = std::max(st.most, sends[j] + load[j] + st.caps[x] * (u - 1));
    if (st.caps[x] == 0) continue;
    st.entries.push_back(RelayStep::Entry{j, Share{q, s, RowRange{begin, begin + st.caps[x]}}});
    begin += st.caps[x];
  }
}

// The cut of the same overlap with helpers: the holding members copied o in phase 0 and can pass
// it on in phase 1 like a relay, so the u - 1 relays of each row are water-filled over lacking and
// holding members together (one send each). A lacking member whose share is f (u - 1) + r relays
// the f whole rows it entered to all u - 1 targets; the rows left enter at lacking[0] and helpers
// serve all their targets. Rounding each share down to whole rows (no row split between a member
// and a helper) costs helpers up to u - 2 units per lacking member, but keeps a piece one message
// per target: splitting rows doubled the messages for a fraction of a percent of bytes.
inline void helped_pieces(int q, int s, RowRange o, const std::vector<int>& lacking, const std::vector<int>& holding,
                          const std::vector<std::int64_t>& load, const std::vector<std::int64_t>& sends, RelayStep& st) {
  const std::int64_t u = static_cast<std::int64_t>(lacking.size());
  st.entries.clear();
  st.level.clear();
  for (int j : lacking) st.level.push_back(sends[j] + load[j]);
  for (int h : holding) st.level.push_back(sends[h] + load[h]);
  water_fill(st.level, o.size() * (u - 1), st.caps);
  st.room.assign(st.caps.begin() + u, st.caps.end());  // helpers' units left
  std::vector<std::int64_t>& after = st.level;           // each involved member's sends + load
  auto busiest_room = [&] { return static_cast<int>(std::max_element(st.room.begin(), st.room.end()) - st.room.begin()); };
  auto enter = [&](std::int64_t x, RowRange rows, int helper) {  // helper -1: lacking[x] relays them
    Share sh{q, s, rows};
    if (helper >= 0) {
      sh.helper = holding[helper];
      after[u + helper] += rows.size() * (u - 1);
      st.room[helper] -= rows.size() * (u - 1);
    } else {
      after[x] += rows.size() * (u - 1);
    }
    st.entries.push_back(RelayStep::Entry{lacking[x], sh});
  };
  std::int64_t begin = o.begin;
  for (std::int64_t i = 1; i <= u; ++i) {  // lacking[0] last: the helpers' rows enter there too
    const std::int64_t x = i % u, whole = st.caps[x] / (u - 1);
    if (whole == 0) continue;
    enter(x, RowRange{begin, begin + whole}, -1);
    begin += whole;
  }
  while (begin < o.end) {
    const int h = busiest_room();
    // What rounding left over goes to one helper in one piece.
    const std::int64_t rows = st.room[h] < u - 1 ? o.end - begin : std::min(o.end - begin, st.room[h] / (u - 1));
    enter(0, RowRange{begin, begin + rows}, h);
    begin += rows;
  }
  st.most = *std::max_element(after.begin(), after.end());
}

// scatter_allgather's phase-0 pieces for one relayed party P of m members (see the top): calls
// holders(s, range, f) to enumerate f(source party, overlap) for each range P keeps, local(j, q, s,
// rows) for rows member j copies from its own source party q, demand(j, q, s, rows) for rows member j
// receives from q. member_party[j] is member j's source party (-1: none), load[j] the rows it sends
// as a holder. Fills shares (per member, what it relays, ordered by sample and row) and sends (rows
// each member relays after phase 0); returns whether the party relays in chains (chain_wins).
// Rows that some members hold and at least two lack are cut both ways (plain_pieces,
// helped_pieces) and the cut that leaves the involved members' busiest lower is kept (ties: plain),
// so every step levels at least as well as the plain cut alone.
// Shared by the world planner and the per-rank planner, which must produce identical pieces.
template <class Holders, class Local, class DemandOn>
bool relay_pieces(const Party& P, const std::vector<int>& slots, const std::vector<int>& member_party,
                  const std::vector<std::int64_t>& load, Holders&& holders, Local&& local, DemandOn&& demand,
                  std::vector<std::vector<Share>>& shares, std::vector<std::int64_t>& sends) {
  const int m = static_cast<int>(P.ranks.size());
  shares.resize(m);
  for (auto& mine : shares) mine.clear();
  sends.assign(m, 0);
  // Scratch kept between calls: the per-rank planner's exact count cuts thousands of parties.
  thread_local struct {
    std::vector<Share> pool;  // rows no member holds; Share::holder_party is their source party
    std::vector<int> lacking, holding;
    std::vector<std::int64_t> level, caps;
    RelayStep plain, helped;
  } scratch;
  std::vector<Share>& pool = scratch.pool;
  std::vector<int>&lacking = scratch.lacking, &holding = scratch.holding;
  RelayStep &plain = scratch.plain, &helped = scratch.helped;
  pool.clear();
  std::int64_t pooled_rows = 0;
  for (std::size_t k = 0; k < P.samples.size(); ++k) {
    const int s = P.samples[k];
    for (int i = P.first_range[slots[k]]; i < P.first_range[slots[k] + 1]; ++i) {
      holders(s, P.ranges[i], [&](int q, RowRange o) {
        lacking.clear();
        holding.clear();
        for (int j = 0; j < m; ++j) {
          if (member_party[j] == q) {
            local(j, q, s, o);
            holding.push_back(j);
          } else {
            lacking.push_back(j);
          }
        }
        const int u = static_cast<int>(lacking.size());
        if (u == m) {
          pool.push_back(Share{q, s, o});
          pooled_rows += o.size();
          return;
        }
        if (u == 0) return;  // every member copied the rows
        plain_pieces(q, s, o, lacking, holding, load, sends, plain);
        const RelayStep* step = &plain;
        if (u > 1) {
          helped_pieces(q, s, o, lacking, holding, load, sends, helped);
          if (helped.most < plain.most) step = &helped;
        }
        for (const RelayStep::Entry& e : step->entries) {
          demand(e.member, q, s, e.share.rows);
          if (u > 1) shares[e.member].push_back(e.share);
          sends[e.share.helper < 0 ? e.member : e.share.helper] += e.share.rows.size() * (u - 1);
        }
      });
    }
  }
  // A pooled row costs its relay m-1 sends: fill in those units so totals level out.
  std::vector<std::int64_t>&level = scratch.level, &caps = scratch.caps;
  level.resize(m);
  for (int j = 0; j < m; ++j) level[j] = (sends[j] + load[j]) / (m - 1);
  water_fill(level, pooled_rows, caps);
  int j = 0;
  std::int64_t room = caps.empty() ? 0 : caps[0];
  for (const Share& item : pool) {
    RowRange rest = item.rows;
    while (rest.size() > 0) {
      while (room == 0) room = caps[++j];
      const RowRange piece{rest.begin, rest.begin + std::min(room, rest.size())};
      demand(j, item.holder_party, item.sample, piece);
      shares[j].push_back(Share{item.holder_party, item.sample, piece});
      sends[j] += piece.size() * (m - 1);
      room -= piece.size();
      rest.begin = piece.end;
    }
  }
  for (auto& sh : shares) {
    std::sort(sh.begin(), sh.end(), [](const Share& x, const Share& y) {
      return x.sample != y.sample ? x.sample < y.sample : x.rows.begin < y.rows.begin;
    });
  }
  return chain_wins(member_party, load, shares, sends);
}

// Counts what a plan holds as it grows, so an oversized request stops early with a message instead
// of running for minutes or exhausting memory.
class TransferBudget {
 public:
  TransferBudget(const Layout& layout, int encoder, Direction direction, std::size_t limit)
      : layout_(layout), encoder_(encoder), direction_(direction), limit_(limit) {}
  void take(std::size_t n) {
    used_ += n;
    if (used_ > limit_) {
      const Module& dst = direction_ == Direction::forward ? layout_.llm() : layout_.encoder(encoder_);
      throw LimitError(std::string("the ") + direction_name(direction_) + " plan of encoder '" +
                       layout_.encoder(encoder_).name() + "' needs more than " + std::to_string(limit_) +
                       " transfers (PlanOptions::max_transfers; zipccl plan --max-transfers); module '" +
                       dst.name() + "' receives on " + std::to_string(dst.num_ranks()) + " ranks, tp " +
                       std::to_string(dst.tp()));
    }
  }

 private:
  const Layout& layout_;
  int encoder_;
  Direction direction_;
  std::size_t limit_;
  std::size_t used_ = 0;
};

// Builds one plan (direct or scatter_allgather); see the comment at the top for the scheme.
class Planner {
 public:
  Planner(const Layout& layout, int encoder, const BoundaryBatch& batch, const PlanOptions& options,
          Direction direction)
      : strategy_(options.strategy),
        budget_(layout, encoder, direction, options.max_transfers),
        ps_(make_placement(layout.modules()[direction == Direction::forward ? 1 + encoder : 0], batch,
                           layout.world_size())),
        pd_(make_placement(layout.modules()[direction == Direction::forward ? 0 : 1 + encoder], batch,
                           layout.world_size())),
        row_bytes_(batch.row_bytes()),
        demands_(ps_.parties.size()) {
    plan_.direction = direction;
    plan_.strategy = strategy_;
    plan_.encoder = encoder;
    plan_.world_size = layout.world_size();
    plan_.source_module = direction == Direction::forward ? 1 + encoder : 0;
    plan_.destination_module = direction == Direction::forward ? 0 : 1 + encoder;
    plan_.row_bytes = row_bytes_;
    plan_.source_bytes.assign(plan_.world_size, 0);
    plan_.destination_bytes.assign(plan_.world_size, 0);
    for (const Party& p : ps_.parties) {
      for (int r : p.ranks) plan_.source_bytes[r] = p.buffer_bytes;
    }
    for (const Party& p : pd_.parties) {
      for (int r : p.ranks) plan_.destination_bytes[r] = p.buffer_bytes;
    }
  }

  BoundaryPlan run() {
    if (strategy_ == Strategy::scatter_allgather) estimate_source_load();
    for (int pi = 0; pi < static_cast<int>(pd_.parties.size()); ++pi) {
      if (strategy_ == Strategy::direct || pd_.parties[pi].ranks.size() == 1) {
        plan_direct(pd_.parties[pi]);
      } else {
        plan_relayed(pi);
      }
    }
    cut_demands();
    plan_.phases.push_back(std::move(phase0_));
    if (strategy_ == Strategy::scatter_allgather) {
      relays_.resize(std::max<std::size_t>(relays_.size(), 1));
      for (auto& phase : relays_) plan_.phases.push_back(std::move(phase));
    }
    return std::move(plan_);
  }

 private:
  Transfer make_transfer(int src, int dst, int s, RowRange rows, BufferKind from, std::int64_t src_offset) const {
    Transfer t;
    t.src = src;
    t.dst = dst;
    t.sample = s;
    t.rows = rows;
    t.src_buffer = from;
    t.src_offset = src_offset;
    t.dst_offset = pd_.offset(pd_.party_of_rank[dst], s, rows.begin);
    t.bytes = rows.size() * row_bytes_;
    return t;
  }
  // Calls f(source party, overlap) for each piece of `want` (rows of sample s) and the party holding it.
  template <class F>
  void for_each_holder(int s, RowRange want, F&& f) const {
    const int first = ps_.first_party_of_sample(s);
    for (int q = first; q < first + ps_.parties_per_replica; ++q) {
      for (const RowRange* r = ps_.ranges_begin(ps_.parties[q], s); r != ps_.ranges_end(ps_.parties[q], s); ++r) {
        const RowRange o{std::max(want.begin, r->begin), std::min(want.end, r->end)};
        if (o.begin < o.end) f(q, o);
      }
    }
  }
  void local_copy(int rank, int q, int s, RowRange o) {
    budget_.take(1);
    phase0_.push_back(make_transfer(rank, rank, s, o, BufferKind::source, ps_.offset(q, s, o.begin)));
  }
  void demand(int q, int receiver, int s, RowRange rows) {
    budget_.take(1);
    demands_[q].push_back(Demand{receiver, s, rows});
  }

  void plan_direct(const Party& P) {
    for (int r : P.ranks) {
      for (int s : P.samples) {
        for (const RowRange* I = pd_.ranges_begin(P, s); I != pd_.ranges_end(P, s); ++I) {
          for_each_holder(s, *I, [&](int q, RowRange o) {
            if (ps_.party_of_rank[r] == q) {
              local_copy(r, q, s, o);
            } else {
              demand(q, r, s, o);
            }
          });
        }
      }
    }
  }

  // Rows each rank will send from its source buffer in phase 0. They do not depend on which member
  // of a relayed party receives a row, so they are known before the relays are placed, which then
  // avoid members that are busy sending as holders.
  void estimate_source_load() {
    std::vector<std::int64_t> rows(ps_.parties.size(), 0);
    for (const Party& P : pd_.parties) {
      const bool relayed = P.ranks.size() > 1;
      for (int s : P.samples) {
        for (const RowRange* I = pd_.ranges_begin(P, s); I != pd_.ranges_end(P, s); ++I) {
          for_each_holder(s, *I, [&](int q, RowRange o) {
            std::int64_t lacking = 0;
            for (int r : P.ranks) lacking += ps_.party_of_rank[r] != q;
            rows[q] += relayed ? (lacking > 0 ? o.size() : 0) : o.size() * lacking;
          });
        }
      }
    }
    source_load_.assign(plan_.world_size, 0);
    for (std::size_t q = 0; q < rows.size(); ++q) {
      const std::int64_t k = static_cast<std::int64_t>(ps_.parties[q].ranks.size());
      for (int r : ps_.parties[q].ranks) source_load_[r] += ceil_div(rows[q], k);
    }
  }

  void plan_relayed(int pi) {
    const Party& P = pd_.parties[pi];
    const int m = static_cast<int>(P.ranks.size());
    std::vector<int> slots(P.samples.size()), member_party(m);
    std::vector<std::int64_t> load(m), sends;
    for (std::size_t k = 0; k < P.samples.size(); ++k) slots[k] = pd_.slot[P.samples[k]];
    for (int j = 0; j < m; ++j) {
      member_party[j] = ps_.party_of_rank[P.ranks[j]];
      load[j] = source_load_[P.ranks[j]];
    }
    std::vector<std::vector<Share>> shares;
    const bool chained = relay_pieces(
        P, slots, member_party, load,
        [&](int s, RowRange want, auto&& f) { for_each_holder(s, want, f); },
        [&](int j, int q, int s, RowRange o) { local_copy(P.ranks[j], q, s, o); },
        [&](int j, int q, int s, RowRange o) { demand(q, P.ranks[j], s, o); }, shares, sends);
    for_each_relay(chained, member_party, shares,
                   [&](int from, int to, const Share& sh, std::size_t phase) { relay_transfer(pi, from, to, sh, phase); });
  }
  void relay_transfer(int pi, int a, int b, const Share& sh, std::size_t phase) {
    budget_.take(1);
    if (relays_.size() < phase) relays_.resize(phase);
    const Party& P = pd_.parties[pi];
    relays_[phase - 1].push_back(make_transfer(P.ranks[a], P.ranks[b], sh.sample, sh.rows, BufferKind::destination,
                                               pd_.offset(pi, sh.sample, sh.rows.begin)));
  }

  // Cut each source party's demand stream into equal consecutive pieces, one per member.
  void cut_demands() {
    std::size_t cut_transfers = 0, cut_extra = 0;  // a cut adds at most members - 1 to a stream
    for (std::size_t q = 0; q < demands_.size(); ++q) {
      if (demands_[q].empty()) continue;
      cut_transfers += demands_[q].size() + ps_.parties[q].ranks.size() - 1;
      cut_extra += ps_.parties[q].ranks.size() - 1;
    }
    budget_.take(cut_extra);  // the demands themselves were counted as they were made
    phase0_.reserve(phase0_.size() + cut_transfers);
    for (int q = 0; q < static_cast<int>(ps_.parties.size()); ++q) {
      const Party& Q = ps_.parties[q];
      cut_stream(demands_[q], static_cast<std::int64_t>(Q.ranks.size()), [&](std::int64_t h, const Demand& d, RowRange rows) {
        phase0_.push_back(make_transfer(Q.ranks[h], d.receiver, d.sample, rows, BufferKind::source,
                                        ps_.offset(q, d.sample, rows.begin)));
      });
    }
  }

  Strategy strategy_;
  TransferBudget budget_;
  Placement ps_, pd_;
  std::int64_t row_bytes_;
  BoundaryPlan plan_;
  std::vector<std::vector<Demand>> demands_;  // per source party
  std::vector<std::int64_t> source_load_;      // per world rank (scatter_allgather)
  std::vector<Transfer> phase0_;
  std::vector<std::vector<Transfer>> relays_;  // phases 1, 2, ...
};

inline BoundaryPlan make_plan(const Layout& layout, int encoder, const BoundaryBatch& batch,
                              const PlanOptions& options, Direction direction) {
  if (options.strategy == Strategy::automatic) {
    PlanOptions one = options;
    one.strategy = Strategy::direct;
    BoundaryPlan direct = make_plan(layout, encoder, batch, one, direction);
    const Module& receiver = layout.modules()[direction == Direction::forward ? 0 : 1 + encoder];
    if (receiver.sequence_parallel() || receiver.tp() == 1) return direct;  // one-rank parties: the same plan
    one.strategy = Strategy::scatter_allgather;
    BoundaryPlan relay = make_plan(layout, encoder, batch, one, direction);
    return max_sent(relay) < max_sent(direct) ? relay : direct;
  }
  validate_batch(batch, layout.llm());
  layout.encoder(encoder);  // throws for a bad index
  check_boundary_fits(direction == Direction::forward ? layout.llm() : layout.encoder(encoder), batch);
  return Planner(layout, encoder, batch, options, direction).run();
}

}  // namespace detail

inline BoundaryPlan plan_forward(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                 const PlanOptions& options) {
  return detail::make_plan(layout, encoder, batch, options, Direction::forward);
}

inline BoundaryPlan plan_backward(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                  const PlanOptions& options) {
  return detail::make_plan(layout, encoder, batch, options, Direction::backward);
}

}  // namespace zipccl::hetero
