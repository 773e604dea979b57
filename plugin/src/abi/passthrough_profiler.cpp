// The exported ncclProfiler_v1 .. v6: NCCL's profiler calls passed to the wrapped net plugin's profiler
// of the same version (passthrough_library.h). Without one, init fails: NCCL then says "Continue
// without profiler" and runs on; zipccl never pretends to be a profiler.
#include "abi/passthrough_forward.h"
#include "nccl/profiler.h"

namespace zipccl {
namespace net {
namespace {

template <typename Table, int V>
bool find_inner() {
  return publish_inner<Table, V>("ncclProfiler_v", "profiler", "", "NCCL continues without a profiler",
                                 NCCL_INIT);
}

template <int V>
ncclResult_t init_v1(void** ctx, int* mask) {
  try {
    if (!find_inner<ncclProfiler_v1_t, V>()) return ncclInvalidUsage;
    return Forward<V, &ncclProfiler_v1_t::init>::call(ctx, mask);
  } catch (...) {
    return caught_exception("profiler init");
  }
}
ncclResult_t init_v4(void** ctx, int* mask, const char* name, uint64_t hash, int nnodes, int nranks, int rank,
                     ncclDebugLogger_t logfn) {
  try {
    passthrough_adopt_logger(logfn);
    if (!find_inner<ncclProfiler_v4_t, 4>()) return ncclInvalidUsage;
    return Forward<4, &ncclProfiler_v4_t::init>::call(ctx, mask, name, hash, nnodes, nranks, rank, logfn);
  } catch (...) {
    return caught_exception("profiler init");
  }
}
template <int V>
ncclResult_t init_v5(void** ctx, uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                     int rank, ncclDebugLogger_t logfn) {
  try {
    passthrough_adopt_logger(logfn);
    if (!find_inner<ncclProfiler_v5_t, V>()) return ncclInvalidUsage;
    return Forward<V, &ncclProfiler_v5_t::init>::call(ctx, comm_id, mask, name, nnodes, nranks, rank, logfn);
  } catch (...) {
    return caught_exception("profiler init");
  }
}

// The table of version V, whose type is Table, with init `init`.
template <typename Table, int V, auto Init>
constexpr Table table() {
  return Table{"zipccl (pass-through)",
               Init,
               Forward<V, &Table::startEvent>::call,
               Forward<V, &Table::stopEvent>::call,
               Forward<V, &Table::recordEventState>::call,
               Forward<V, &Table::finalize>::call};
}

}  // namespace
}  // namespace net
}  // namespace zipccl

using namespace zipccl::net;

extern "C" __attribute__((visibility("default"))) const ncclProfiler_v1_t ncclProfiler_v1 =
    table<ncclProfiler_v1_t, 1, &init_v1<1>>();
extern "C" __attribute__((visibility("default"))) const ncclProfiler_v2_t ncclProfiler_v2 =
    table<ncclProfiler_v2_t, 2, &init_v1<2>>();
extern "C" __attribute__((visibility("default"))) const ncclProfiler_v3_t ncclProfiler_v3 =
    table<ncclProfiler_v3_t, 3, &init_v1<3>>();
extern "C" __attribute__((visibility("default"))) const ncclProfiler_v4_t ncclProfiler_v4 =
    table<ncclProfiler_v4_t, 4, &init_v4>();
extern "C" __attribute__((visibility("default"))) const ncclProfiler_v5_t ncclProfiler_v5 =
    table<ncclProfiler_v5_t, 5, &init_v5<5>>();
extern "C" __attribute__((visibility("default"))) const ncclProfiler_v6_t ncclProfiler_v6 =
    table<ncclProfiler_v6_t, 6, &init_v5<6>>();
