// Definitions for layout.h.
#pragma once

#include <algorithm>
#include <sstream>
#include <utility>

namespace zipccl::hetero {

namespace detail {

inline std::string span_text(int first, int count) {
  std::ostringstream os;
  if (count <= 0) {
    os << "none";
  } else if (count == 1) {
    os << first;
  } else {
    os << first << "-" << first + count - 1;
  }
  return os.str();
}

}  // namespace detail

inline RankOrder parse_rank_order(const std::string& text) {
  RankOrder order{};
  std::array<bool, 4> seen{};
  std::size_t pos = 0;
  int n = 0;
  bool ok = true;
  while (ok && pos <= text.size()) {
    std::size_t dash = text.find('-', pos);
    std::string part = text.substr(pos, dash == std::string::npos ? std::string::npos : dash - pos);
    Dim d{};
    if (part == "tp")
      d = Dim::tp;
    else if (part == "cp")
      d = Dim::cp;
    else if (part == "dp")
      d = Dim::dp;
    else if (part == "pp")
      d = Dim::pp;
    else {
      ok = false;
      break;
    }
    if (n == 4 || seen[static_cast<int>(d)]) {
      ok = false;
      break;
    }
    seen[static_cast<int>(d)] = true;
    order[n++] = d;
    if (dash == std::string::npos) break;
    pos = dash + 1;
  }
  if (!ok || n != 4) {
    throw LayoutError("rank order '" + text +
                      "' must name each of tp, cp, dp, pp exactly once, "
                      "fastest-varying first, separated by '-' (e.g. tp-cp-dp-pp)");
  }
  return order;
}

inline std::string to_string(const RankOrder& order) {
  std::string s;
  for (int i = 0; i < 4; ++i) {
    if (i) s += "-";
    s += dim_name(order[i]);
  }
  return s;
}

inline Coords Module::coords(int rank) const {
  if (!contains(rank)) {
    throw LayoutError("rank " + std::to_string(rank) + " is not in module '" + name_ + "' (ranks " +
                      detail::span_text(first_rank_, num_ranks_) + ")");
  }
  int local = rank - first_rank_;
  Coords c;
  for (int i = 0; i < 4; ++i) {
    Dim d = order_[i];
    c[d] = (local / strides_[static_cast<int>(d)]) % sizes_[static_cast<int>(d)];
  }
  return c;
}

inline int Module::rank(const Coords& c) const {
  int local = 0;
  for (int i = 0; i < 4; ++i) {
    Dim d = static_cast<Dim>(i);
    if (c[d] < 0 || c[d] >= sizes_[i]) {
      throw LayoutError("module '" + name_ + "': " + dim_name(d) + " coordinate " + std::to_string(c[d]) +
                        " is outside 0.." + std::to_string(sizes_[i] - 1));
    }
    local += c[d] * strides_[i];
  }
  return first_rank_ + local;
}

inline const Module& Layout::encoder(int e) const {
  if (e < 0 || e >= num_encoders()) {
    throw LayoutError("encoder index " + std::to_string(e) + " is outside 0.." +
                      std::to_string(num_encoders() - 1));
  }
  return modules_[1 + e];
}

inline int Layout::find_encoder(const std::string& name) const {
  for (int e = 0; e < num_encoders(); ++e) {
    if (modules_[1 + e].name() == name) return e;
  }
  return -1;
}

inline Layout::Layout(const LayoutSpec& spec) : world_size_(spec.world_size) {
  if (spec.world_size < 1) {
    throw LayoutError("world size must be at least 1 (got " + std::to_string(spec.world_size) + ")");
  }
  if (spec.world_size > kMaxWorldSize) {
    throw LimitError("world size " + std::to_string(spec.world_size) + " is above the limit of " +
                     std::to_string(kMaxWorldSize) +
                     " ranks (zipccl::hetero::kMaxWorldSize; plans keep tables per world rank)");
  }
  if (spec.encoders.empty()) throw LayoutError("a layout needs at least one encoder (got none)");

  auto build = [&](const ModuleSpec& ms, Role role, const std::string& default_name) {
    Module m;
    m.name_ = ms.name.empty() ? default_name : ms.name;
    m.role_ = role;
    const std::string who = "module '" + m.name_ + "': ";
    const std::pair<const char*, int> sizes[] = {{"tp", ms.tp}, {"cp", ms.cp}, {"pp", ms.pp}};
    for (const auto& [what, v] : sizes) {
      if (v < 1) throw LayoutError(who + what + " must be at least 1 (got " + std::to_string(v) + ")");
    }
    if (ms.dp < 0)
      throw LayoutError(who + "dp must be at least 1, or 0 to derive it (got " + std::to_string(ms.dp) + ")");
    m.first_rank_ = ms.first_rank;
    m.num_ranks_ = ms.num_ranks < 0 ? spec.world_size : ms.num_ranks;
    if (ms.num_ranks < 0 && ms.first_rank != 0) {
      throw LayoutError(who + "first rank " + std::to_string(ms.first_rank) +
                        " given without a number of ranks");
    }
    if (m.num_ranks_ < 1) {
      throw LayoutError(who + "needs at least 1 rank (got " + std::to_string(m.num_ranks_) + ")");
    }
    if (m.first_rank_ < 0 || static_cast<long long>(m.first_rank_) + m.num_ranks_ > spec.world_size) {
      throw LayoutError(who + "ranks " + detail::span_text(m.first_rank_, m.num_ranks_) +
                        " must lie inside the world of " + std::to_string(spec.world_size) + " ranks (0-" +
                        std::to_string(spec.world_size - 1) + ")");
    }
    long long model = static_cast<long long>(ms.tp) * ms.cp * ms.pp;
    if (m.num_ranks_ % model != 0) {
      throw LayoutError(
          who + std::to_string(m.num_ranks_) + " ranks (" + detail::span_text(m.first_rank_, m.num_ranks_) +
          ") are not divisible by tp*cp*pp = " + std::to_string(model) + " (tp " + std::to_string(ms.tp) +
          ", cp " + std::to_string(ms.cp) + ", pp " + std::to_string(ms.pp) + ")");
    }
    int dp = static_cast<int>(m.num_ranks_ / model);
    if (ms.dp != 0 && ms.dp != dp) {
      throw LayoutError(who + "dp " + std::to_string(ms.dp) + " was given, but " +
                        std::to_string(m.num_ranks_) + " ranks / (tp*cp*pp = " + std::to_string(model) +
                        ") give dp " + std::to_string(dp));
    }
    m.sizes_ = {ms.tp, ms.cp, dp, ms.pp};
    std::array<bool, 4> seen{};
    for (Dim d : ms.order) {
      int i = static_cast<int>(d);
      if (i < 0 || i > 3 || seen[i]) {
        throw LayoutError(who + "rank order must name each of tp, cp, dp, pp exactly once");
      }
      seen[i] = true;
    }
    m.order_ = ms.order;
    int stride = 1;
    for (Dim d : m.order_) {
      m.strides_[static_cast<int>(d)] = stride;
      stride *= m.sizes_[static_cast<int>(d)];
    }
    m.sequence_parallel_ = ms.sequence_parallel;
    return m;
  };

  modules_.push_back(build(spec.llm, Role::llm, "llm"));
  for (std::size_t e = 0; e < spec.encoders.size(); ++e) {
    modules_.push_back(build(spec.encoders[e], Role::encoder, "encoder" + std::to_string(e)));
  }

  for (std::size_t i = 0; i < modules_.size(); ++i) {
    for (std::size_t j = i + 1; j < modules_.size(); ++j) {
      const Module& a = modules_[i];
      const Module& b = modules_[j];
      if (a.name() == b.name())
        throw LayoutError("module names must be unique: '" + a.name() + "' appears twice");
      bool same = a.first_rank() == b.first_rank() && a.num_ranks() == b.num_ranks();
      bool disjoint = a.end_rank() <= b.first_rank() || b.end_rank() <= a.first_rank();
      if (!same && !disjoint) {
        throw LayoutError("modules '" + a.name() + "' (ranks " +
                          detail::span_text(a.first_rank(), a.num_ranks()) + ") and '" + b.name() +
                          "' (ranks " + detail::span_text(b.first_rank(), b.num_ranks()) +
                          ") partially overlap: spans must be identical (colocated) or disjoint (separate)");
      }
    }
  }

  // Distinct spans, sorted, must tile [0, world).
  std::vector<std::pair<int, int>> spans;
  for (const Module& m : modules_) spans.emplace_back(m.first_rank(), m.num_ranks());
  std::sort(spans.begin(), spans.end());
  spans.erase(std::unique(spans.begin(), spans.end()), spans.end());
  int next = 0;
  for (const auto& [first, count] : spans) {
    if (first > next) {
      throw LayoutError("ranks " + detail::span_text(next, first - next) +
                        " belong to no module: module spans must cover the world (0-" +
                        std::to_string(world_size_ - 1) + ")");
    }
    next = first + count;
  }
  if (next < world_size_) {
    throw LayoutError("ranks " + detail::span_text(next, world_size_ - next) +
                      " belong to no module: module spans must cover the world (0-" +
                      std::to_string(world_size_ - 1) + ")");
  }
}

}  // namespace zipccl::hetero
