// Layout: how a multimodal model (one LLM, one or more encoders) is laid out over the ranks of a job.
//
// Each module has tensor (tp), context (cp) and pipeline (pp) parallel sizes and a span of ranks
// [first_rank, first_rank + num_ranks). Its data-parallel size is derived: dp = num_ranks / (tp*cp*pp).
// Spans are either identical (the modules are colocated: every rank runs both) or disjoint (the
// modules run on separate GPUs), and together they cover every rank of the world exactly once.
//
// Inside a span, a rank's coordinates (tp, cp, dp, pp) follow a rank order, fastest-varying first.
// The default, tp-cp-dp-pp, is Megatron-LM's (its tp-cp-ep-dp-pp without expert parallelism): the
// ranks of one TP group are consecutive. Any permutation may be given.
//
// Only the LLM's first pipeline stage receives encoder outputs (its input layer lives there) and
// only an encoder's last stage produces them; the backward runs the other way.
//
// Thread-safety: a Layout is immutable after construction; share it freely.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "zipccl/hetero/errors.h"

namespace zipccl::hetero {

// Plans and traffic summaries keep a few words per world rank; this bounds them (and a mistyped
// world size) at ~100 MB per plan, ten times the largest jobs trained today.
inline constexpr int kMaxWorldSize = 1 << 20;

enum class Dim : int { tp = 0, cp = 1, dp = 2, pp = 3 };

// A permutation of the four dimensions, fastest-varying first.
using RankOrder = std::array<Dim, 4>;
inline constexpr RankOrder kMegatronOrder = {Dim::tp, Dim::cp, Dim::dp, Dim::pp};

inline const char* dim_name(Dim d) {
  switch (d) {
    case Dim::tp:
      return "tp";
    case Dim::cp:
      return "cp";
    case Dim::dp:
      return "dp";
    case Dim::pp:
      return "pp";
  }
  return "?";
}

// "tp-cp-dp-pp" -> {tp, cp, dp, pp}. Throws LayoutError unless each dimension appears exactly once.
inline RankOrder parse_rank_order(const std::string& text);
inline std::string to_string(const RankOrder& order);

enum class Role { llm, encoder };

struct ModuleSpec {
  std::string name;  // empty: "llm", or "encoder<i>"
  int tp = 1;
  int cp = 1;  // context parallel: each sample split in 2*cp chunks, zigzag
  int pp = 1;
  int dp = 0;                      // 0: derived; otherwise must equal the derived value
  bool sequence_parallel = false;  // boundary tensor sequence-sharded across tp (else replicated)
  int first_rank = 0;
  int num_ranks = -1;  // -1: the whole world (colocated with every other such module)
  RankOrder order = kMegatronOrder;
};

struct LayoutSpec {
  int world_size = 0;
  ModuleSpec llm;
  std::vector<ModuleSpec> encoders;  // at least one
};

struct Coords {
  int tp = 0, cp = 0, dp = 0, pp = 0;
  int& operator[](Dim d) { return d == Dim::tp ? tp : d == Dim::cp ? cp : d == Dim::dp ? dp : pp; }
  int operator[](Dim d) const { return d == Dim::tp ? tp : d == Dim::cp ? cp : d == Dim::dp ? dp : pp; }
  bool operator==(const Coords& o) const { return tp == o.tp && cp == o.cp && dp == o.dp && pp == o.pp; }
};

// A validated module. Obtain from Layout.
class Module {
 public:
  const std::string& name() const { return name_; }
  Role role() const { return role_; }
  int first_rank() const { return first_rank_; }
  int num_ranks() const { return num_ranks_; }
  int end_rank() const { return first_rank_ + num_ranks_; }
  int tp() const { return sizes_[0]; }
  int cp() const { return sizes_[1]; }
  int dp() const { return sizes_[2]; }
  int pp() const { return sizes_[3]; }
  int size(Dim d) const { return sizes_[static_cast<int>(d)]; }
  int stride(Dim d) const { return strides_[static_cast<int>(d)]; }
  // Sequence parallelism with tp 1 changes nothing; this reports whether it shards anything.
  bool sequence_parallel() const { return sequence_parallel_ && tp() > 1; }
  const RankOrder& order() const { return order_; }

  bool contains(int rank) const { return rank >= first_rank_ && rank < end_rank(); }
  // Throws LayoutError if the rank is outside the span.
  Coords coords(int rank) const;
  // Throws LayoutError if a coordinate is out of range.
  int rank(const Coords& c) const;
  // The pipeline stage that touches the boundary: 0 for the LLM (it receives), pp-1 for an encoder.
  int boundary_stage() const { return role_ == Role::llm ? 0 : pp() - 1; }

 private:
  friend class Layout;
  std::string name_;
  Role role_ = Role::llm;
  int first_rank_ = 0, num_ranks_ = 0;
  std::array<int, 4> sizes_{};    // indexed by Dim
  std::array<int, 4> strides_{};  // indexed by Dim
  bool sequence_parallel_ = false;
  RankOrder order_ = kMegatronOrder;
};

class Layout {
 public:
  // Validates the spec; throws LayoutError naming the first constraint that fails, LimitError for a
  // world above kMaxWorldSize.
  explicit Layout(const LayoutSpec& spec);

  int world_size() const { return world_size_; }
  // modules()[0] is the LLM, modules()[1 + e] is encoder e.
  const std::vector<Module>& modules() const { return modules_; }
  const Module& llm() const { return modules_[0]; }
  int num_encoders() const { return static_cast<int>(modules_.size()) - 1; }
  // Throws LayoutError for an index out of range.
  const Module& encoder(int e) const;
  // Index of the encoder with this name, or -1.
  int find_encoder(const std::string& name) const;
  // Whether encoder e runs on the LLM's ranks.
  bool colocated(int e) const {
    return encoder(e).first_rank() == llm().first_rank() && encoder(e).num_ranks() == llm().num_ranks();
  }

 private:
  int world_size_ = 0;
  std::vector<Module> modules_;
};

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/layout_impl.h"
