// hetero behind the C API: C structs in, the C++ library's validation and planning, C arrays out.
// Its exceptions become status codes here (LayoutError -> ZIPCCL_ERR_LAYOUT, ...), with their
// messages, which name the constraint and the values that broke it.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "c_status.h"
#include "zipccl/hetero/batch.h"
#include "zipccl/hetero/groups.h"
#include "zipccl/hetero/layout.h"
#include "zipccl/hetero/plan.h"
#include "zipccl/zipccl_c.h"

using namespace zipccl;
using capi::fail;

static_assert(sizeof(zipccl_module_info) == 64, "zipccl_module_info is 64 bytes");
static_assert(sizeof(zipccl_group_family) == 16, "zipccl_group_family is 16 bytes");
static_assert(sizeof(zipccl_segment) == 32, "zipccl_segment is 32 bytes");
static_assert(sizeof(zipccl_transfer) == 56, "zipccl_transfer is 56 bytes");
static_assert(sizeof(zipccl_plan_info) == 40, "zipccl_plan_info is 40 bytes");

namespace {

// A bad argument of the C call itself (not of the layout or the batch it describes).
struct InvalidArgument : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class Body>
int hetero_guarded(const char* fn, Body&& body) noexcept {
  return capi::guarded(fn, [&]() -> int {
    try {
      return body();
    } catch (const InvalidArgument& e) {
      return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "%s: %s", fn, e.what());
    } catch (const hetero::LayoutError& e) {
      return fail(ZIPCCL_ERR_LAYOUT, "%s: %s", fn, e.what());
    } catch (const hetero::BatchError& e) {
      return fail(ZIPCCL_ERR_BATCH, "%s: %s", fn, e.what());
    } catch (const hetero::LimitError& e) {
      return fail(ZIPCCL_ERR_LIMIT, "%s: %s", fn, e.what());
    } catch (const hetero::Error& e) {
      return fail(ZIPCCL_ERR_INVALID_ARGUMENT, "%s: %s", fn, e.what());
    }
  });
}

hetero::ModuleSpec module_spec(const zipccl_module_spec& s) {
  hetero::ModuleSpec m;
  if (s.name) m.name = s.name;
  m.tp = s.tp;
  m.cp = s.cp;
  m.pp = s.pp;
  m.dp = s.dp;
  m.sequence_parallel = s.sequence_parallel != 0;
  m.first_rank = s.first_rank;
  m.num_ranks = s.num_ranks;
  if (s.order && *s.order) m.order = hetero::parse_rank_order(s.order);
  return m;
}

hetero::Layout make_layout(int world_size, const zipccl_module_spec* modules, size_t num_modules) {
  if (!modules || num_modules == 0)
    throw InvalidArgument("modules must hold the LLM's spec and the encoders'");
  hetero::LayoutSpec spec;
  spec.world_size = world_size;
  spec.llm = module_spec(modules[0]);
  for (size_t i = 1; i < num_modules; ++i) spec.encoders.push_back(module_spec(modules[i]));
  return hetero::Layout(spec);
}

hetero::SampleAssignment assignment(int rule, const int32_t* replica, size_t n, const char* who) {
  hetero::SampleAssignment a;
  switch (rule) {
    case ZIPCCL_ASSIGN_CONTIGUOUS:
      a.rule = hetero::AssignmentRule::contiguous;
      break;
    case ZIPCCL_ASSIGN_BALANCED:
      a.rule = hetero::AssignmentRule::balanced;
      break;
    case ZIPCCL_ASSIGN_GIVEN:
      if (!replica && n != 0) throw InvalidArgument(std::string(who) + "_replica is NULL with rule GIVEN");
      a.rule = hetero::AssignmentRule::given;
      a.replica.assign(replica, replica + n);
      break;
    default:
      throw InvalidArgument(std::string(who) +
                            "_rule must be ZIPCCL_ASSIGN_CONTIGUOUS (0), BALANCED (1) or GIVEN (2), not " +
                            std::to_string(rule));
  }
  return a;
}

hetero::BoundaryBatch make_batch(const zipccl_batch* b) {
  if (!b) throw InvalidArgument("batch is NULL");
  if (!b->tokens && b->num_samples != 0) throw InvalidArgument("batch.tokens is NULL");
  // Checked before the copies below: a garbage count must not allocate.
  if (b->num_samples > static_cast<size_t>(hetero::kMaxSamples))
    throw hetero::LimitError("batch: " + std::to_string(b->num_samples) + " samples, above the limit of " +
                             std::to_string(hetero::kMaxSamples));
  hetero::BoundaryBatch out(std::vector<int64_t>(b->tokens, b->tokens + b->num_samples), b->hidden,
                            b->element_size);
  out.encoder_assignment = assignment(b->encoder_rule, b->encoder_replica, b->num_samples, "encoder");
  out.llm_assignment = assignment(b->llm_rule, b->llm_replica, b->num_samples, "llm");
  hetero::validate_batch(out);
  return out;
}

void check_output(size_t* count, const char* name) {
  if (!count) throw InvalidArgument(std::string(name) + " is NULL");
}

}  // namespace

extern "C" {

int zipccl_module_spec_default(zipccl_module_spec* spec) {
  return hetero_guarded("module_spec_default", [&]() -> int {
    if (!spec) throw InvalidArgument("spec is NULL");
    *spec = zipccl_module_spec{nullptr, nullptr, 1, 1, 1, 0, 0, 0, -1, 0};
    return ZIPCCL_OK;
  });
}

int zipccl_layout_validate(int world_size, const zipccl_module_spec* modules, size_t num_modules,
                           zipccl_module_info* modules_out) {
  return hetero_guarded("layout_validate", [&]() -> int {
    const hetero::Layout layout = make_layout(world_size, modules, num_modules);
    if (!modules_out) return ZIPCCL_OK;
    for (size_t i = 0; i < layout.modules().size(); ++i) {
      const hetero::Module& m = layout.modules()[i];
      zipccl_module_info& o = modules_out[i];
      o.role = m.role() == hetero::Role::llm ? 0 : 1;
      o.tp = m.tp();
      o.cp = m.cp();
      o.dp = m.dp();
      o.pp = m.pp();
      o.first_rank = m.first_rank();
      o.num_ranks = m.num_ranks();
      o.sequence_parallel = m.sequence_parallel() ? 1 : 0;
      for (int d = 0; d < 4; ++d) {
        o.order[d] = static_cast<int32_t>(m.order()[d]);
        o.strides[d] = m.stride(static_cast<hetero::Dim>(d));
      }
    }
    return ZIPCCL_OK;
  });
}

int zipccl_layout_groups(int world_size, const zipccl_module_spec* modules, size_t num_modules,
                         zipccl_group_family* families, size_t family_capacity, size_t* family_count,
                         int32_t* ranks, size_t rank_capacity, size_t* rank_count) {
  return hetero_guarded("layout_groups", [&]() -> int {
    check_output(family_count, "family_count");
    check_output(rank_count, "rank_count");
    const hetero::Layout layout = make_layout(world_size, modules, num_modules);
    const std::vector<hetero::GroupFamily> all = hetero::all_group_families(layout);
    size_t total = 0;
    for (const hetero::GroupFamily& f : all)
      for (const hetero::RankList& g : f.groups) {
        if (g.size() != f.groups[0].size())
          return fail(ZIPCCL_ERR_INTERNAL, "layout_groups: a %s family holds groups of %zu and %zu ranks",
                      hetero::group_kind_name(f.kind), f.groups[0].size(), g.size());
        total += g.size();
      }
    *family_count = all.size();
    *rank_count = total;
    if (!families && !ranks) return ZIPCCL_OK;
    if (!families || !ranks || family_capacity < all.size() || rank_capacity < total)
      return fail(ZIPCCL_ERR_BUFFER_TOO_SMALL,
                  "layout_groups: %zu families of %zu ranks in all; the arrays hold %zu and %zu", all.size(),
                  total, families ? family_capacity : 0, ranks ? rank_capacity : 0);
    size_t r = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const hetero::GroupFamily& f = all[i];
      families[i] =
          zipccl_group_family{static_cast<int32_t>(f.kind), f.module, static_cast<uint32_t>(f.groups.size()),
                              static_cast<uint32_t>(f.groups.empty() ? 0 : f.groups[0].size())};
      for (const hetero::RankList& g : f.groups)
        for (int rank : g) ranks[r++] = rank;
    }
    return ZIPCCL_OK;
  });
}

int zipccl_boundary_segments(int world_size, const zipccl_module_spec* modules, size_t num_modules,
                             int module, const zipccl_batch* batch, int rank, zipccl_segment* segments,
                             size_t capacity, size_t* count) {
  return hetero_guarded("boundary_segments", [&]() -> int {
    check_output(count, "count");
    const hetero::Layout layout = make_layout(world_size, modules, num_modules);
    if (module < 0 || module >= static_cast<int>(layout.modules().size()))
      throw InvalidArgument("module index " + std::to_string(module) + " is out of range (" +
                            std::to_string(layout.modules().size()) + " modules)");
    const std::vector<hetero::BufferSegment> all =
        hetero::buffer_segments(layout.modules()[module], make_batch(batch), rank);
    *count = all.size();
    if (!segments) return ZIPCCL_OK;
    if (capacity < all.size())
      return fail(ZIPCCL_ERR_BUFFER_TOO_SMALL, "boundary_segments: %zu segments; the array holds %zu",
                  all.size(), capacity);
    for (size_t i = 0; i < all.size(); ++i)
      segments[i] = zipccl_segment{all[i].sample, 0, all[i].rows.begin, all[i].rows.end, all[i].offset};
    return ZIPCCL_OK;
  });
}

int zipccl_boundary_plan(int world_size, const zipccl_module_spec* modules, size_t num_modules, int encoder,
                         const zipccl_batch* batch, int backward, int strategy, zipccl_plan_info* info,
                         uint64_t* phase_ends, size_t phase_capacity, zipccl_transfer* transfers,
                         size_t transfer_capacity, int64_t* source_bytes, int64_t* destination_bytes) {
  return hetero_guarded("boundary_plan", [&]() -> int {
    if (!info) throw InvalidArgument("info is NULL");
    const hetero::Layout layout = make_layout(world_size, modules, num_modules);
    hetero::PlanOptions opt;
    switch (strategy) {
      case ZIPCCL_STRATEGY_DIRECT:
        opt.strategy = hetero::Strategy::direct;
        break;
      case ZIPCCL_STRATEGY_SCATTER_ALLGATHER:
        opt.strategy = hetero::Strategy::scatter_allgather;
        break;
      case ZIPCCL_STRATEGY_AUTOMATIC:
        opt.strategy = hetero::Strategy::automatic;
        break;
      default:
        throw InvalidArgument(
            "strategy must be ZIPCCL_STRATEGY_DIRECT (0), SCATTER_ALLGATHER (1) or AUTOMATIC (2), not " +
            std::to_string(strategy));
    }
    const hetero::BoundaryPlan p =
        hetero::plan_boundary(layout, encoder, make_batch(batch),
                              backward ? hetero::Direction::backward : hetero::Direction::forward, opt);
    *info = zipccl_plan_info{static_cast<int32_t>(p.strategy),
                             p.source_module,
                             p.destination_module,
                             0,
                             p.row_bytes,
                             p.phases.size(),
                             p.num_transfers()};
    // world_size entries each: the layout validated world_size >= 1.
    for (size_t r = 0; r < p.source_bytes.size(); ++r) {
      if (source_bytes) source_bytes[r] = p.source_bytes[r];
      if (destination_bytes) destination_bytes[r] = p.destination_bytes[r];
    }
    if (!phase_ends && !transfers) return ZIPCCL_OK;
    if (!phase_ends || !transfers || phase_capacity < p.phases.size() ||
        transfer_capacity < p.num_transfers())
      return fail(ZIPCCL_ERR_BUFFER_TOO_SMALL,
                  "boundary_plan: %zu phases of %zu transfers in all; the arrays hold %zu and %zu",
                  p.phases.size(), p.num_transfers(), phase_ends ? phase_capacity : 0,
                  transfers ? transfer_capacity : 0);
    size_t t = 0;
    for (size_t ph = 0; ph < p.phases.size(); ++ph) {
      for (const hetero::Transfer& x : p.phases[ph])
        transfers[t++] =
            zipccl_transfer{x.src,        x.dst,      x.sample,     static_cast<int32_t>(x.src_buffer),
                            x.rows.begin, x.rows.end, x.src_offset, x.dst_offset,
                            x.bytes};
      phase_ends[ph] = t;
    }
    return ZIPCCL_OK;
  });
}

}  // extern "C"
