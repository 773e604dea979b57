// Boundary plan: the exact transfers that move the boundary tensor between an encoder and the LLM.
//
// Forward: encoder e's output, as the encoder keeps it (batch.h: its last pipeline stage, its own dp
// split, replicated or sequence-sharded across its tp, cp chunks), becomes the LLM's input as the
// LLM keeps it (its first pipeline stage - the only LLM stage that receives - with its own dp split,
// replicated across tp or sequence-sharded when sequence parallel, cp chunks). Backward moves the
// gradient of that tensor the other way, from the LLM's first stage to the encoder's last stage.
//
// Buffers: each rank taking part has a source buffer (what it keeps of the tensor being moved: the
// encoder output forward, the LLM input gradient backward) and a destination buffer (what it must
// end up keeping), laid out as batch.h says; BoundaryPlan::source_bytes / destination_bytes give
// their sizes. In a colocated layout a rank can have both, and copies rows from one to the other.
//
// Contract of a plan (checked by tests/hetero over thousands of random layouts and batches):
//  - Exactly once: every row a rank must keep in its destination buffer is written by exactly one
//    transfer, and that transfer reads it from a rank that holds it at that moment (in its source
//    buffer, or - in a later phase of scatter_allgather - in a destination buffer filled by an
//    earlier phase). A row a rank already holds in its source buffer is copied locally (src == dst).
//  - Nothing extra: no transfer carries a row its receiver does not keep.
//  - Balance (direct): every row needed elsewhere is sent by one of the ranks that hold it, and the
//    rows a party of identical holders must send are cut into equal consecutive pieces, one per
//    holder, so the most any rank sends is the holders-only lower bound rounded up to a whole row.
//    What a rank receives is exactly what it needs and does not hold: the lower bound for any scheme.
//  - Phases run in order; a phase may read what an earlier phase wrote. Within a phase, transfers
//    touch disjoint destination bytes and are independent.
//
// Strategies:
//  - direct: one phase; each receiver takes each row straight from a holder. Where the receiving
//    module replicates (tp without sequence parallelism), a row crosses the boundary once per
//    replica member.
//  - scatter_allgather: where the receiving module replicates, each row enters the receiving party
//    once, to one member that lacks it, and in phase 2 that member passes it on to the other members
//    that lack it (an all-gather written as sends and receives). Rows some members already hold
//    (colocated layouts) are copied by those and scattered to the others in pieces, so a holder
//    inside the party sends its rows once, not once per member; members holding rows may also pass
//    them on in the second phase. Piece sizes level each member's sends, counting what it sends as
//    a holder. Same bytes received per rank; less sent per holder
//    and across the boundary when receivers outnumber holders, at the price of a second phase. No
//    leader, no broadcast. A party relaying fewer rows than m (m - 1) for m members may pass them
//    on in chains instead (one hop per phase, up to m - 1 relay phases), where passing whole rows
//    to all m - 1 at once would make a member send more than a ring broadcast (planner.h). When holders outnumber receivers (e.g. a colocated tp-1 encoder feeding a
//    tp-8 LLM) it can send more than direct: each member relays about (m-1)/m of its party's rows.
//  - automatic: plans both and keeps the one whose busiest rank sends less (ties: direct). The
//    returned plan's strategy says which. Where the receiving parties are single ranks (sequence
//    parallel or tp 1) both plans are the same, so it plans direct only.
//
// Backward semantics (where the forward replicated, the backward takes one copy, it never sums):
// with Megatron-LM's convention, a replicated activation's gradient is complete and identical on
// every tp rank once the module's own backward has run (the backward of the copy into the tp region
// is an all-reduce; with sequence parallelism each row has a single holder anyway), so one copy of
// each row is the full gradient. The backward plan reads each row from one holder (balanced across
// holders) and delivers it to every rank that kept the activation in the forward (for a replicated
// encoder output, all tp ranks of its last stage: each needs the whole output gradient for its own
// backward). The boundary itself is the identity on the logical tensor, so its gradient is the
// identity too: d(encoder output) = d(LLM input), row for row. If your gradient copies are partial
// sums instead (no tp all-reduce yet), all-reduce them over the LLM's tp group first; summing copies
// after that all-reduce would multiply the gradient by tp.
// tests/hetero/gradient_test.cpp checks this against an undistributed model.
//
// Cost: O(samples * parties + transfers) time and memory; 16,384 ranks plan in tens of milliseconds
// (docs/notes/hetero.md has the measured figures).
// Thread-safety: pure functions; a plan is a value.
#pragma once

#include <cstdint>
#include <vector>

#include "zipccl/hetero/batch.h"
#include "zipccl/hetero/layout.h"

namespace zipccl::hetero {

enum class Direction { forward, backward };
enum class Strategy { direct, scatter_allgather, automatic };
enum class BufferKind : std::uint8_t { source, destination };

inline const char* direction_name(Direction d) {
  return d == Direction::forward ? "forward" : "backward";
}
inline const char* strategy_name(Strategy s) {
  return s == Strategy::direct              ? "direct"
         : s == Strategy::scatter_allgather ? "scatter_allgather"
                                            : "automatic";
}

struct Transfer {
  int src = 0;  // world rank that sends (== dst: a local copy)
  int dst = 0;  // world rank that receives
  int sample = 0;
  RowRange rows;                               // rows [begin, end) of the sample
  BufferKind src_buffer = BufferKind::source;  // which of the sender's buffers it reads
  std::int64_t src_offset = 0;                 // bytes into that buffer
  std::int64_t dst_offset = 0;                 // bytes into the receiver's destination buffer
  std::int64_t bytes = 0;                      // rows.size() * row_bytes
};

inline bool operator==(const Transfer& a, const Transfer& b) {
  return a.src == b.src && a.dst == b.dst && a.sample == b.sample && a.rows == b.rows &&
         a.src_buffer == b.src_buffer && a.src_offset == b.src_offset && a.dst_offset == b.dst_offset &&
         a.bytes == b.bytes;
}
inline bool operator!=(const Transfer& a, const Transfer& b) { return !(a == b); }

struct BoundaryPlan {
  Direction direction = Direction::forward;
  Strategy strategy = Strategy::direct;
  int encoder = 0;
  int world_size = 0;
  int source_module = 0;       // index into Layout::modules() of the module that holds the tensor
  int destination_module = 0;  // ... and of the one that receives it
  std::int64_t row_bytes = 0;
  std::vector<std::vector<Transfer>> phases;    // direct: 1 phase; scatter_allgather: 2 (more with chains)
  std::vector<std::int64_t> source_bytes;       // per world rank; 0 for ranks without a source buffer
  std::vector<std::int64_t> destination_bytes;  // per world rank

  std::size_t num_transfers() const {
    std::size_t n = 0;
    for (const auto& p : phases) n += p.size();
    return n;
  }
};

// Transfers are 56 bytes each: 2^22 of them is about 230 MB (and a few seconds to plan, schedule and
// summarise; a tp of 2^20 made 2.8 GB and 10 s at 2^24). The 16,384-rank examples in
// docs/notes/hetero.md need 0.4M.
inline constexpr std::size_t kDefaultMaxTransfers = std::size_t{1} << 22;

struct PlanOptions {
  Strategy strategy = Strategy::direct;
  // The plan stops with LimitError as soon as it would hold more transfers than this (time and
  // memory grow with the transfers; a receiving tp of 10^6 would otherwise need 10^12).
  std::size_t max_transfers = kDefaultMaxTransfers;
};

// Throws LayoutError for a bad encoder index, BatchError for a bad batch or byte counts that overflow
// 64 bits (check_boundary_fits), LimitError above options.max_transfers or the batch and world limits.
inline BoundaryPlan plan_forward(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                 const PlanOptions& options = {});
inline BoundaryPlan plan_backward(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                  const PlanOptions& options = {});
inline BoundaryPlan plan_boundary(const Layout& layout, int encoder, const BoundaryBatch& batch,
                                  Direction direction, const PlanOptions& options = {}) {
  return direction == Direction::forward ? plan_forward(layout, encoder, batch, options)
                                         : plan_backward(layout, encoder, batch, options);
}

}  // namespace zipccl::hetero

#include "zipccl/hetero/detail/planner.h"
