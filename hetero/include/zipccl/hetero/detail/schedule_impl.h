// Definitions for schedule.h.
#pragma once

#include <string>

namespace zipccl::hetero {
namespace detail {

// Builds schedules for ranks [base, base + out.size()) of the world from `phases` (a whole plan's,
// or a rank's share of it: transfers other ranks' schedules do not see may be absent);
// sizes(schedule) fills in its buffer sizes.
template <class Sizes>
void build_schedules(const std::vector<std::vector<Transfer>>& phases, int world, int base, Sizes&& sizes,
                     std::vector<RankSchedule>& out) {
  for (std::size_t i = 0; i < out.size(); ++i) {
    RankSchedule& rs = out[i];
    rs.rank = base + static_cast<int>(i);
    sizes(rs);
    rs.phases.assign(phases.size(), PhaseOps{});
  }
  auto mine = [&](int r) { return r >= base && r < base + static_cast<int>(out.size()); };
  struct PairLast {
    BufferKind buffer;
    std::int64_t src_end, dst_end;
    int send_index, recv_index;  // -1 where that side is not built here
  };
  for (std::size_t phase = 0; phase < phases.size(); ++phase) {
    std::unordered_map<std::int64_t, PairLast> last;
    last.reserve(out.size() == 1 ? 64 : phases[phase].size());
    for (const Transfer& t : phases[phase]) {
      if (t.src == t.dst) {
        if (!mine(t.src)) continue;
        auto& copies = out[t.src - base].phases[phase].copies;
        if (!copies.empty()) {
          LocalCopy& c = copies.back();
          if (c.from == t.src_buffer && c.from_offset + c.bytes == t.src_offset &&
              c.to_offset + c.bytes == t.dst_offset) {
            c.bytes += t.bytes;
            continue;
          }
        }
        copies.push_back(LocalCopy{t.src_buffer, t.src_offset, t.dst_offset, t.bytes});
        continue;
      }
      const bool send_here = mine(t.src), recv_here = mine(t.dst);
      if (!send_here && !recv_here) continue;
      const std::int64_t key = static_cast<std::int64_t>(t.src) * world + t.dst;
      auto it = last.find(key);
      if (it != last.end() && it->second.buffer == t.src_buffer && it->second.src_end == t.src_offset &&
          it->second.dst_end == t.dst_offset) {
        PairLast& p = it->second;
        if (send_here) out[t.src - base].phases[phase].sends[p.send_index].bytes += t.bytes;
        if (recv_here) out[t.dst - base].phases[phase].recvs[p.recv_index].bytes += t.bytes;
        p.src_end += t.bytes;
        p.dst_end += t.bytes;
        continue;
      }
      PairLast p{t.src_buffer, t.src_offset + t.bytes, t.dst_offset + t.bytes, -1, -1};
      if (send_here) {
        auto& sends = out[t.src - base].phases[phase].sends;
        p.send_index = static_cast<int>(sends.size());
        sends.push_back(Message{t.dst, t.src_buffer, t.src_offset, t.bytes});
      }
      if (recv_here) {
        auto& recvs = out[t.dst - base].phases[phase].recvs;
        p.recv_index = static_cast<int>(recvs.size());
        recvs.push_back(Message{t.src, BufferKind::destination, t.dst_offset, t.bytes});
      }
      last[key] = p;
    }
  }
}

inline void build_schedules(const BoundaryPlan& plan, int base, std::vector<RankSchedule>& out) {
  build_schedules(plan.phases, plan.world_size, base, [&](RankSchedule& rs) {
    rs.source_bytes = plan.source_bytes[rs.rank];
    rs.destination_bytes = plan.destination_bytes[rs.rank];
  }, out);
}

}  // namespace detail

inline RankSchedule make_schedule(const BoundaryPlan& plan, int rank) {
  if (rank < 0 || rank >= plan.world_size) {
    throw ExecutionError("rank " + std::to_string(rank) + " is outside the plan's world of " +
                         std::to_string(plan.world_size) + " ranks");
  }
  std::vector<RankSchedule> one(1);
  detail::build_schedules(plan, rank, one);
  return std::move(one[0]);
}

inline std::vector<RankSchedule> make_all_schedules(const BoundaryPlan& plan) {
  std::vector<RankSchedule> all(plan.world_size);
  detail::build_schedules(plan, 0, all);
  return all;
}

}  // namespace zipccl::hetero
