// Groups: the rank lists of every communicator a layout needs.
//
// For each module: the groups along one dimension (tp, cp, dp, pp: ranks that differ only in that
// coordinate) and the model-parallel groups (every rank of one data-parallel replica: tp*cp*pp ranks).
// For each encoder: its boundary group, the ranks that take part in moving its outputs into the LLM
// (the encoder's last pipeline stage and the LLM's first; in a colocated layout these overlap).
//
// Ordering contract, relied on when communicators are built from these lists: a group along
// dimension d lists its ranks by their coordinate in d (member i has coordinate i); a model-parallel
// group and a boundary group list ranks ascending; a family's groups are sorted by their first rank.
// All functions are pure and deterministic, so every process computes the same lists.
#pragma once

#include <string>
#include <vector>

#include "zipccl/hetero/layout.h"

namespace zipccl::hetero {

using RankList = std::vector<int>;

enum class GroupKind { tp, cp, dp, pp, model_parallel, boundary };

inline const char* group_kind_name(GroupKind k) {
  switch (k) {
    case GroupKind::tp:
      return "tp";
    case GroupKind::cp:
      return "cp";
    case GroupKind::dp:
      return "dp";
    case GroupKind::pp:
      return "pp";
    case GroupKind::model_parallel:
      return "model_parallel";
    case GroupKind::boundary:
      return "boundary";
  }
  return "?";
}

// One family of disjoint groups (one per dimension and module, or one boundary group per encoder).
struct GroupFamily {
  GroupKind kind = GroupKind::tp;
  int module = 0;                // index into Layout::modules(); for boundary: 1 + encoder index
  std::vector<RankList> groups;  // disjoint; every rank of the module is in exactly one (boundary: one group)
};

// Groups of module m along dimension d; dp groups span the replicas of one (tp, cp, pp) position.
inline std::vector<RankList> dimension_groups(const Module& m, Dim d);
// One group per data-parallel replica with all of its tp*cp*pp ranks.
inline std::vector<RankList> model_parallel_groups(const Module& m);
// Ranks of encoder e's boundary: its last stage and the LLM's first stage, ascending, no duplicates.
inline RankList boundary_ranks(const Layout& layout, int encoder);
// Every family, in a fixed order: per module (LLM first) tp, cp, dp, pp, model_parallel; then one
// boundary family per encoder. Families whose groups all have one rank are included (skip them if
// you like: a one-rank communicator does no communication).
inline std::vector<GroupFamily> all_group_families(const Layout& layout);

// Ranks of one replica's boundary stage at data-parallel index `replica`, ordered by (cp, tp).
inline RankList boundary_stage_ranks(const Module& m, int replica);

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/groups_impl.h"
