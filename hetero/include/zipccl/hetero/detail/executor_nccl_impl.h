// Definitions for executor_nccl.h.
#pragma once

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

inline NcclBoundaryExecutor::NcclBoundaryExecutor(const BoundaryPlan& plan, ncclComm_t comm, RankList members)
    : comm_(comm) {
  int size = 0, comm_rank = 0;
  ZIPCCL_HETERO_NCCL(ncclCommCount(comm, &size), comm);
  ZIPCCL_HETERO_NCCL(ncclCommUserRank(comm, &comm_rank), comm);
  if (size != static_cast<int>(members.size())) {
    throw ExecutionError("the communicator has " + std::to_string(size) + " ranks but " +
                         std::to_string(members.size()) + " members were given");
  }
  std::unordered_map<int, int> comm_rank_of;
  for (std::size_t i = 0; i < members.size(); ++i) comm_rank_of[members[i]] = static_cast<int>(i);
  schedule_ = make_schedule(plan, members[comm_rank]);
  for (PhaseOps& ops : schedule_.phases) {
    for (auto* list : {&ops.sends, &ops.recvs}) {
      for (Message& m : *list) {
        auto it = comm_rank_of.find(m.peer);
        if (it == comm_rank_of.end()) {
          throw ExecutionError("rank " + std::to_string(schedule_.rank) + " exchanges with world rank " +
                               std::to_string(m.peer) + ", which is not in the communicator");
        }
        m.peer = it->second;
      }
    }
  }
}

inline void NcclBoundaryExecutor::run(const void* source, std::size_t source_size, void* destination,
                                      std::size_t destination_size, cudaStream_t stream) const {
  if (static_cast<std::int64_t>(source_size) < schedule_.source_bytes ||
      (schedule_.source_bytes > 0 && source == nullptr)) {
    throw ExecutionError("rank " + std::to_string(schedule_.rank) + ": source buffer of " +
                         std::to_string(source_size) + " bytes, the plan needs " +
                         std::to_string(schedule_.source_bytes));
  }
  if (static_cast<std::int64_t>(destination_size) < schedule_.destination_bytes ||
      (schedule_.destination_bytes > 0 && destination == nullptr)) {
    throw ExecutionError("rank " + std::to_string(schedule_.rank) + ": destination buffer of " +
                         std::to_string(destination_size) + " bytes, the plan needs " +
                         std::to_string(schedule_.destination_bytes));
  }
  const auto* src = static_cast<const unsigned char*>(source);
  auto* dst = static_cast<unsigned char*>(destination);
  auto base = [&](BufferKind k) -> const unsigned char* { return k == BufferKind::source ? src : dst; };
  for (const PhaseOps& ops : schedule_.phases) {
    for (const LocalCopy& c : ops.copies) {
      ZIPCCL_HETERO_CUDA(cudaMemcpyAsync(dst + c.to_offset, base(c.from) + c.from_offset,
                                         static_cast<std::size_t>(c.bytes), cudaMemcpyDeviceToDevice,
                                         stream));
    }
    if (ops.sends.empty() && ops.recvs.empty()) continue;
    ZIPCCL_HETERO_NCCL(ncclGroupStart(), comm_);
    try {
      for (const Message& m : ops.sends) {
        ZIPCCL_HETERO_NCCL(ncclSend(base(m.buffer) + m.offset, static_cast<std::size_t>(m.bytes), ncclUint8,
                                    m.peer, comm_, stream),
                           comm_);
      }
      for (const Message& m : ops.recvs) {
        ZIPCCL_HETERO_NCCL(
            ncclRecv(dst + m.offset, static_cast<std::size_t>(m.bytes), ncclUint8, m.peer, comm_, stream),
            comm_);
      }
    } catch (...) {
      ncclGroupEnd();  // close the group before reporting
      throw;
    }
    ZIPCCL_HETERO_NCCL(ncclGroupEnd(), comm_);
  }
}

}  // namespace zipccl::hetero
