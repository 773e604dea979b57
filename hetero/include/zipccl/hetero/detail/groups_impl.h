// Definitions for groups.h.
#pragma once

#include <algorithm>

namespace zipccl::hetero {

inline std::vector<RankList> dimension_groups(const Module& m, Dim d) {
  const int size = m.size(d);
  std::vector<RankList> groups;
  groups.reserve(m.num_ranks() / size);
  for (int r = m.first_rank(); r < m.end_rank(); ++r) {
    Coords c = m.coords(r);
    if (c[d] != 0) continue;
    RankList g(size);
    for (int i = 0; i < size; ++i) {
      c[d] = i;
      g[i] = m.rank(c);
    }
    groups.push_back(std::move(g));
  }
  // Visiting ranks ascending and keeping coordinate 0 yields groups sorted by member 0, which need
  // not be the smallest rank under a custom order; sort by the first rank as the contract says.
  std::sort(groups.begin(), groups.end(), [](const RankList& a, const RankList& b) {
    return *std::min_element(a.begin(), a.end()) < *std::min_element(b.begin(), b.end());
  });
  return groups;
}

inline std::vector<RankList> model_parallel_groups(const Module& m) {
  std::vector<RankList> groups(m.dp());
  for (int r = m.first_rank(); r < m.end_rank(); ++r) groups[m.coords(r).dp].push_back(r);
  std::sort(groups.begin(), groups.end());
  return groups;
}

inline RankList boundary_stage_ranks(const Module& m, int replica) {
  RankList ranks;
  ranks.reserve(static_cast<std::size_t>(m.cp()) * m.tp());
  for (int c = 0; c < m.cp(); ++c) {
    for (int t = 0; t < m.tp(); ++t) ranks.push_back(m.rank(Coords{t, c, replica, m.boundary_stage()}));
  }
  return ranks;
}

inline RankList boundary_ranks(const Layout& layout, int encoder) {
  RankList ranks;
  for (const Module* m : {&layout.encoder(encoder), &layout.llm()}) {
    for (int d = 0; d < m->dp(); ++d) {
      RankList part = boundary_stage_ranks(*m, d);
      ranks.insert(ranks.end(), part.begin(), part.end());
    }
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

inline std::vector<GroupFamily> all_group_families(const Layout& layout) {
  std::vector<GroupFamily> families;
  const auto& modules = layout.modules();
  for (int i = 0; i < static_cast<int>(modules.size()); ++i) {
    for (Dim d : {Dim::tp, Dim::cp, Dim::dp, Dim::pp}) {
      families.push_back(
          GroupFamily{static_cast<GroupKind>(static_cast<int>(d)), i, dimension_groups(modules[i], d)});
    }
    families.push_back(GroupFamily{GroupKind::model_parallel, i, model_parallel_groups(modules[i])});
  }
  for (int e = 0; e < layout.num_encoders(); ++e) {
    families.push_back(GroupFamily{GroupKind::boundary, 1 + e, {boundary_ranks(layout, e)}});
  }
  return families;
}

}  // namespace zipccl::hetero
