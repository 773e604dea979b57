// Definitions for executor_nccl.h.
#pragma once

#include <algorithm>
#include <array>
#include <unordered_map>

namespace zipccl::hetero {
namespace detail {

[[noreturn]] inline void throw_nccl(ncclResult_t r, const char* call, const char* file, int line,
                                    ncclComm_t comm) {
  std::string msg =
      std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') msg += std::string(" (") + last + ")";
  throw ExecutionError(msg);
}

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw ExecutionError(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                       cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace detail

#define ZIPCCL_HETERO_NCCL(call, comm)                                                         \
  do {                                                                                         \
    ncclResult_t zipccl_hetero_r_ = (call);                                                    \
    if (zipccl_hetero_r_ != ncclSuccess && zipccl_hetero_r_ != ncclInProgress) {               \
      ::zipccl::hetero::detail::throw_nccl(zipccl_hetero_r_, #call, __FILE__, __LINE__, comm); \
    }                                                                                          \
  } while (0)

#define ZIPCCL_HETERO_CUDA(call)                                                         \
  do {                                                                                   \
    cudaError_t zipccl_hetero_e_ = (call);                                               \
    if (zipccl_hetero_e_ != cudaSuccess) {                                               \
      ::zipccl::hetero::detail::throw_cuda(zipccl_hetero_e_, #call, __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)

inline NcclGroups::NcclGroups(ncclComm_t parent, const Layout& layout, ncclConfig_t* config) {
  int size = 0;
  ZIPCCL_HETERO_NCCL(ncclCommCount(parent, &size), parent);
  ZIPCCL_HETERO_NCCL(ncclCommUserRank(parent, &rank_), parent);
  if (size != layout.world_size()) {
    throw ExecutionError("the parent communicator has " + std::to_string(size) +
                         " ranks, the layout's world " + std::to_string(layout.world_size()));
  }
  try {
    for (GroupFamily& f : all_group_families(layout)) {
      bool trivial = true;
      for (const RankList& g : f.groups) trivial = trivial && g.size() <= 1;
      if (trivial) continue;
      int color = NCCL_SPLIT_NOCOLOR, key = 0;
      for (std::size_t g = 0; g < f.groups.size() && color == NCCL_SPLIT_NOCOLOR; ++g) {
        for (std::size_t i = 0; i < f.groups[g].size(); ++i) {
          if (f.groups[g][i] == rank_) {
            color = static_cast<int>(g);
            key = static_cast<int>(i);
          }
        }
      }
      ncclComm_t comm = nullptr;
      ZIPCCL_HETERO_NCCL(ncclCommSplit(parent, color, key, &comm, config), parent);
      if (color != NCCL_SPLIT_NOCOLOR) {
        entries_.push_back(Entry{f.kind, f.module, comm, std::move(f.groups[color])});
      }
    }
  } catch (...) {
    destroy();
    throw;
  }
}

inline NcclGroups::~NcclGroups() {
  destroy();
}

inline void NcclGroups::destroy() noexcept {
  for (Entry& e : entries_) {
    if (e.comm != nullptr) ncclCommDestroy(e.comm);
  }
  entries_.clear();
}

inline ncclComm_t NcclGroups::comm(GroupKind kind, int module) const {
  for (const Entry& e : entries_) {
    if (e.kind == kind && e.module == module) return e.comm;
  }
  return nullptr;
}

inline const RankList& NcclGroups::members(GroupKind kind, int module) const {
  static const RankList kNone;
  for (const Entry& e : entries_) {
    if (e.kind == kind && e.module == module) return e.members;
  }
  return kNone;
}

namespace detail {

// This process's world rank under `members`, and every member's communicator rank.
struct CommRanks {
  int world_rank = -1;
  std::unordered_map<int, int> of_world;
};

inline CommRanks comm_ranks(ncclComm_t comm, const RankList& members) {
  int size = 0, comm_rank = 0;
  ZIPCCL_HETERO_NCCL(ncclCommCount(comm, &size), comm);
  ZIPCCL_HETERO_NCCL(ncclCommUserRank(comm, &comm_rank), comm);
  if (size != static_cast<int>(members.size())) {
    throw ExecutionError("the communicator has " + std::to_string(size) + " ranks but " +
                         std::to_string(members.size()) + " members were given");
  }
  CommRanks out;
  out.world_rank = members[comm_rank];
  for (std::size_t i = 0; i < members.size(); ++i) out.of_world[members[i]] = static_cast<int>(i);
  return out;
}

// Rewrites the schedule's peers from world ranks to communicator ranks.
inline void to_comm_peers(RankSchedule& schedule, const CommRanks& ranks) {
  for (PhaseOps& ops : schedule.phases) {
    for (auto* list : {&ops.sends, &ops.recvs}) {
      for (Message& m : *list) {
        auto it = ranks.of_world.find(m.peer);
        if (it == ranks.of_world.end()) {
          throw ExecutionError("rank " + std::to_string(schedule.rank) + " exchanges with world rank " +
                               std::to_string(m.peer) + ", which is not in the communicator");
        }
        m.peer = it->second;
      }
    }
  }
}

struct PartToRun {
  const RankSchedule* schedule;
  PlanBuffers buffers;
};

// Enqueues the parts wave by wave: wave w = local copies of phase w of each part, then one group
// with each part's sends and receives of phase w, parts in the given order (pipeline.h's contract).
inline void post_waves_nccl(const PartToRun* parts, std::size_t count, ncclComm_t comm, cudaStream_t stream) {
  std::size_t waves = 0;
  for (std::size_t i = 0; i < count; ++i) waves = std::max(waves, parts[i].schedule->phases.size());
  auto base = [](const PlanBuffers& b, BufferKind k) -> unsigned char* {
    return k == BufferKind::source ? static_cast<unsigned char*>(const_cast<void*>(b.source))
                                   : static_cast<unsigned char*>(b.destination);
  };
  for (std::size_t wave = 0; wave < waves; ++wave) {
    bool messages = false;
    for (std::size_t i = 0; i < count; ++i) {
      if (wave >= parts[i].schedule->phases.size()) continue;
      const PhaseOps& ops = parts[i].schedule->phases[wave];
      unsigned char* dst = base(parts[i].buffers, BufferKind::destination);
      for (const LocalCopy& c : ops.copies) {
        ZIPCCL_HETERO_CUDA(cudaMemcpyAsync(dst + c.to_offset, base(parts[i].buffers, c.from) + c.from_offset,
                                           static_cast<std::size_t>(c.bytes), cudaMemcpyDeviceToDevice,
                                           stream));
      }
      messages = messages || !ops.sends.empty() || !ops.recvs.empty();
    }
    if (!messages) continue;
    ZIPCCL_HETERO_NCCL(ncclGroupStart(), comm);
    try {
      for (std::size_t i = 0; i < count; ++i) {
        if (wave >= parts[i].schedule->phases.size()) continue;
        const PhaseOps& ops = parts[i].schedule->phases[wave];
        for (const Message& m : ops.sends) {
          ZIPCCL_HETERO_NCCL(ncclSend(base(parts[i].buffers, m.buffer) + m.offset,
                                      static_cast<std::size_t>(m.bytes), ncclUint8, m.peer, comm, stream),
                             comm);
        }
        unsigned char* dst = base(parts[i].buffers, BufferKind::destination);
        for (const Message& m : ops.recvs) {
          ZIPCCL_HETERO_NCCL(
              ncclRecv(dst + m.offset, static_cast<std::size_t>(m.bytes), ncclUint8, m.peer, comm, stream),
              comm);
        }
      }
    } catch (...) {
      ncclGroupEnd();  // close the group before reporting
      throw;
    }
    ZIPCCL_HETERO_NCCL(ncclGroupEnd(), comm);
  }
}

}  // namespace detail

inline NcclBoundaryExecutor::NcclBoundaryExecutor(const BoundaryPlan& plan, ncclComm_t comm, RankList members)
    : comm_(comm) {
  const detail::CommRanks ranks = detail::comm_ranks(comm, members);
  schedule_ = make_schedule(plan, ranks.world_rank);
  detail::to_comm_peers(schedule_, ranks);
}

inline void NcclBoundaryExecutor::run(const void* source, std::size_t source_size, void* destination,
                                      std::size_t destination_size, cudaStream_t stream) const {
  const PlanBuffers buffers{source, destination, source_size, destination_size};
  detail::check_plan_buffers(schedule_, buffers, "the plan");
  const detail::PartToRun part{&schedule_, buffers};
  detail::post_waves_nccl(&part, 1, comm_, stream);
}

inline NcclBoundaryStep::NcclBoundaryStep(const BoundaryPlan* forward, const BoundaryPlan* backward,
                                          ncclComm_t comm, RankList members)
    : comm_(comm) {
  const detail::CommRanks ranks = detail::comm_ranks(comm, members);
  schedule_ = make_step_schedule(forward, backward, ranks.world_rank);
  for (StepPart& part : schedule_.parts) detail::to_comm_peers(part.schedule, ranks);
}

inline void NcclBoundaryStep::run(const StepBuffers& buffers, cudaStream_t stream) const {
  std::array<detail::PartToRun, 2> parts{};  // a step has at most two parts; run() does not allocate
  std::size_t count = 0;
  for (const StepPart& part : schedule_.parts) {
    detail::check_plan_buffers(part.schedule, buffers.of(part.direction),
                               detail::step_part_name(part.direction));
    parts[count++] = detail::PartToRun{&part.schedule, buffers.of(part.direction)};
  }
  detail::post_waves_nccl(parts.data(), count, comm_, stream);
}

}  // namespace zipccl::hetero
