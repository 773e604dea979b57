// The exported ncclCollNetPlugin_v6 .. v12: NCCL's CollNet (in-network reductions, e.g. SHARP) passed
// to the wrapped net plugin's CollNet of the same version (passthrough_library.h). CollNet traffic does
// not go through zipccl's compressing layer: it is the inner's, uncompressed. Without an inner CollNet,
// init fails and NCCL runs without CollNet, as it does on a node without one.
#include "abi/passthrough_forward.h"
#include "nccl/collnet.h"

// The exported tables (defined at the end). Writable: init clears the optional entries the inner
// lacks (follow_optional).
extern "C" {
extern ncclCollNet_v6_t ncclCollNetPlugin_v6;
extern ncclCollNet_v7_t ncclCollNetPlugin_v7;
extern ncclCollNet_v8_t ncclCollNetPlugin_v8;
extern ncclCollNet_v9_t ncclCollNetPlugin_v9;
extern ncclCollNet_v10_t ncclCollNetPlugin_v10;
extern ncclCollNet_v11_t ncclCollNetPlugin_v11;
extern ncclCollNet_v12_t ncclCollNetPlugin_v12;
}

namespace zipccl {
namespace net {
namespace {

constexpr const char kCollNetName[] = "zipccl (pass-through)";

// An optional entry (NCCL reads NULL as "not offered") follows the inner's: cleared when the inner's is
// NULL. NCCL reads the entries after init returns (older versions' adapters copy them then; v11+ tables
// are read in place).
template <typename Fn>
void follow(Fn* ours, Fn theirs) {
  if (!theirs) __atomic_store_n(ours, static_cast<Fn>(nullptr), __ATOMIC_RELEASE);
}

template <int V, typename Table>
void follow_optional(Table* ours, const Table* inner) {
  follow(&ours->regMrDmaBuf, inner->regMrDmaBuf);
  if constexpr (V >= 8) {
    follow(&ours->iallgather, inner->iallgather);
    follow(&ours->ireducescatter, inner->ireducescatter);
  }
  if constexpr (V >= 9) follow(&ours->makeVDevice, inner->makeVDevice);
}

// Finds the inner's ncclCollNetPlugin_v<V>, publishes it to the forwarders and shapes `ours` after it;
// false without one.
template <int V, typename Table>
bool find_inner(Table* ours) {
  const Table* t = publish_inner<Table, V>("ncclCollNetPlugin_v", "CollNet", " uncompressed",
                                           "NCCL runs without CollNet", NCCL_INIT | NCCL_NET);
  if (!t) return false;
  follow_optional<V>(ours, t);
  return true;
}

// v6 .. v10: init(logger), which NCCL calls once per process.
template <int V, typename Table, Table* Ours>
ncclResult_t init_once(ncclDebugLogger_t logfn) {
  try {
    passthrough_adopt_logger(logfn);
    if (!find_inner<V>(Ours)) return ncclInvalidUsage;
    return Forward<V, &Table::init>::call(logfn);
  } catch (...) {
    return caught_exception("CollNet init");
  }
}
// v11, v12: init per communicator; the inner's context is handed to NCCL as it is.
template <int V, typename Table, Table* Ours>
ncclResult_t init_ctx(void** ctx, uint64_t comm_id, ncclDebugLogger_t logfn) {
  try {
    passthrough_adopt_logger(logfn);
    if (!find_inner<V>(Ours)) return ncclInvalidUsage;
    return Forward<V, &Table::init>::call(ctx, comm_id, logfn);
  } catch (...) {
    return caught_exception("CollNet init");
  }
}

// Sets each entry E of t to its forwarder.
template <int V, auto... E, typename T>
constexpr void forward_entries(T* t) {
  ((t->*E = Forward<V, E>::call), ...);
}

// zipccl's table of version V: every entry but init forwarded; the optional ones until init finds the
// inner lacks them.
template <int V, typename T, typename Init>
constexpr T collnet_table(Init init) {
  T t{};
  t.name = kCollNetName;
  t.init = init;
  forward_entries<V, &T::devices, &T::getProperties, &T::listen, &T::connect, &T::reduceSupport, &T::regMr,
                  &T::regMrDmaBuf, &T::deregMr, &T::iallreduce, &T::iflush, &T::test, &T::closeColl,
                  &T::closeListen>(&t);
  if constexpr (V >= 8) forward_entries<V, &T::iallgather, &T::ireducescatter>(&t);
  if constexpr (V >= 9) forward_entries<V, &T::makeVDevice>(&t);
  if constexpr (V >= 11) forward_entries<V, &T::finalize>(&t);
  return t;
}

}  // namespace
}  // namespace net
}  // namespace zipccl

using namespace zipccl::net;

#define ZIPCCL_EXPORT __attribute__((visibility("default")))
#define ZIPCCL_COLLNET(V, INIT)                               \
  ZIPCCL_EXPORT ncclCollNet_v##V##_t ncclCollNetPlugin_v##V = \
      collnet_table<V, ncclCollNet_v##V##_t>(INIT<V, ncclCollNet_v##V##_t, &ncclCollNetPlugin_v##V>)
ZIPCCL_COLLNET(6, init_once);
ZIPCCL_COLLNET(7, init_once);
ZIPCCL_COLLNET(8, init_once);
ZIPCCL_COLLNET(9, init_once);
ZIPCCL_COLLNET(10, init_once);
ZIPCCL_COLLNET(11, init_ctx);
ZIPCCL_COLLNET(12, init_ctx);
#undef ZIPCCL_COLLNET
#undef ZIPCCL_EXPORT
