// The exported ncclTunerPlugin_v2 .. v6: NCCL's tuner calls passed to the wrapped net plugin's tuner
// (passthrough_library.h), adapted between versions as passthrough_versions.h says.
//
// NCCL fails the communicator when a tuner's init fails, and finds zipccl's tuner whenever
// NCCL_TUNER_PLUGIN is unset. So without an inner tuner to forward to, init succeeds and every call
// leaves NCCL's cost table, channels and chunk size untouched: NCCL tunes as if there were no tuner.
// An inner tuner's own failure is passed back unchanged, as NCCL would see it without zipccl.
#include <atomic>
#include <memory>
#include <new>
#include <string>

#include "abi/net.h"
#include "abi/passthrough_library.h"
#include "abi/passthrough_versions.h"
#include "common/log.h"
#include "nccl/tuner.h"

namespace zipccl {
namespace net {
namespace {

// One per tuner init (NCCL: one per communicator).
struct TunerContext {
  int inner_version = 0;        // 0: no inner tuner, calls change nothing
  const void* inner = nullptr;  // the inner's ncclTuner_v<inner_version>_t
  void* inner_ctx = nullptr;
};

const void* inner_tuner(int version) {
  std::string symbol;
  return passthrough_table("ncclTunerPlugin_v", version, &symbol);
}

// Whether the inner's table t has init, getCollInfo and its last call (`done`: finalize or destroy), which
// zipccl calls unconditionally: a table without them is treated as absent, never called through NULL.
// (v6's getChunkSize may be NULL.)
template <typename T, typename Done>
bool has_calls(const void* t, Done T::*done) {
  const T* x = static_cast<const T*>(t);
  return x && x->init && x->getCollInfo && x->*done;
}
bool usable(int version, const void* t) {
  switch (version) {
    case 6:
      return has_calls(t, &ncclTuner_v6_t::finalize);
    case 5:
      return has_calls(t, &ncclTuner_v5_t::finalize);
    case 4:
      return has_calls(t, &ncclTuner_v4_t::destroy);
    case 3:
      return has_calls(t, &ncclTuner_v3_t::destroy);
    case 2:
      return has_calls(t, &ncclTuner_v2_t::destroy);
    default:
      return false;
  }
}

template <typename T>
const T* as(const TunerContext* c) {
  return static_cast<const T*>(c->inner);
}

void say_once(std::atomic<bool>* said, int requested, int chosen) {
  if (said->exchange(true)) return;
  const PassthroughLibrary& lib = passthrough_library();
  if (chosen)
    ZIPCCL_INFO(NCCL_INIT | NCCL_TUNING, "tuner v%d passed through to %s's ncclTunerPlugin_v%d", requested,
                lib.library.c_str(), chosen);
  else
    ZIPCCL_INFO(NCCL_INIT | NCCL_TUNING, "tuner v%d: %s; NCCL tunes on its own", requested,
                passthrough_missing("tuner a v" + std::to_string(requested) + " call can reach").c_str());
}

// Every version's init. commId, nvl and constants are given by v5/v6 only (and only reach a v5/v6
// inner, which only a v5/v6 request chooses).
ncclResult_t tuner_init(int requested, void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                        ncclDebugLogger_t logfn, ncclNvlDomainInfo_v5_t* nvl,
                        ncclTunerConstants_v5_t* constants) {
  static std::atomic<bool> said[kTunerNewest + 1];
  try {
    passthrough_adopt_logger(logfn);
    if (!ctx) return ncclInternalError;
    std::unique_ptr<TunerContext> owned(new TunerContext);
    TunerContext* c = owned.get();
    c->inner_version = tuner_forward_version(requested, [](int v) { return usable(v, inner_tuner(v)); });
    c->inner = c->inner_version ? inner_tuner(c->inner_version) : nullptr;
    say_once(&said[requested], requested, c->inner_version);
    ncclResult_t r = ncclSuccess;
    switch (c->inner_version) {
      case 6:
        r = as<ncclTuner_v6_t>(c)->init(&c->inner_ctx, comm_id, nranks, nnodes, logfn, nvl, constants);
        break;
      case 5:
        r = as<ncclTuner_v5_t>(c)->init(&c->inner_ctx, comm_id, nranks, nnodes, logfn, nvl, constants);
        break;
      case 4:
        r = as<ncclTuner_v4_t>(c)->init(nranks, nnodes, logfn, &c->inner_ctx);
        break;
      case 3:
        r = as<ncclTuner_v3_t>(c)->init(nranks, nnodes, logfn, &c->inner_ctx);
        break;
      case 2:
        r = as<ncclTuner_v2_t>(c)->init(nranks, nnodes, logfn, &c->inner_ctx);
        break;
      default:
        break;
    }
    if (r != ncclSuccess) {
      ZIPCCL_WARN("the inner tuner (%s, ncclTunerPlugin_v%d) failed its init: %d",
                  passthrough_library().library.c_str(), c->inner_version, static_cast<int>(r));
      return r;
    }
    *ctx = owned.release();
    return ncclSuccess;
  } catch (...) {
    return caught_exception("tuner init");
  }
}

// getCollInfo of v3 .. v6 (v3 has no regBuff: given as 0, never passed on).
ncclResult_t tuner_coll_info(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int npipe, float** cost,
                             int nalgo, int nproto, int reg_buff, int* nchannels) {
  const TunerContext* c = static_cast<const TunerContext*>(ctx);
  if (!c) return ncclInternalError;
  switch (c->inner_version) {
    case 6:
      return as<ncclTuner_v6_t>(c)->getCollInfo(c->inner_ctx, coll, nbytes, npipe, cost, nalgo, nproto,
                                                reg_buff, nchannels);
    case 5:
      return as<ncclTuner_v5_t>(c)->getCollInfo(c->inner_ctx, coll, nbytes, npipe, cost, nalgo, nproto,
                                                reg_buff, nchannels);
    case 4:
      return as<ncclTuner_v4_t>(c)->getCollInfo(c->inner_ctx, coll, nbytes, npipe, cost, nalgo, nproto,
                                                reg_buff, nchannels);
    case 3:
      return as<ncclTuner_v3_t>(c)->getCollInfo(c->inner_ctx, coll, nbytes, npipe, cost, nalgo, nproto,
                                                nchannels);
    default:
      return ncclSuccess;  // no inner tuner: the table stays NCCL's
  }
}

ncclResult_t tuner_finalize(void* ctx) {
  TunerContext* c = static_cast<TunerContext*>(ctx);
  if (!c) return ncclInternalError;
  ncclResult_t r = ncclSuccess;
  switch (c->inner_version) {
    case 6:
      r = as<ncclTuner_v6_t>(c)->finalize(c->inner_ctx);
      break;
    case 5:
      r = as<ncclTuner_v5_t>(c)->finalize(c->inner_ctx);
      break;
    case 4:
      r = as<ncclTuner_v4_t>(c)->destroy(c->inner_ctx);
      break;
    case 3:
      r = as<ncclTuner_v3_t>(c)->destroy(c->inner_ctx);
      break;
    case 2:
      r = as<ncclTuner_v2_t>(c)->destroy(c->inner_ctx);
      break;
    default:
      break;
  }
  delete c;
  return r;
}

// ---- the exported entries, per version ----
template <int V>
ncclResult_t init_v1_ctx_last(size_t nranks, size_t nnodes, ncclDebugLogger_t logfn, void** ctx) {
  return tuner_init(V, ctx, 0, nranks, nnodes, logfn, nullptr, nullptr);
}
template <int V>
ncclResult_t init_ctx_first(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                            ncclDebugLogger_t logfn, ncclNvlDomainInfo_v5_t* nvl,
                            ncclTunerConstants_v5_t* constants) {
  return tuner_init(V, ctx, comm_id, nranks, nnodes, logfn, nvl, constants);
}
ncclResult_t finalize(void* ctx) {
  try {
    return tuner_finalize(ctx);
  } catch (...) {
    return caught_exception("tuner finalize");
  }
}
ncclResult_t coll_info(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int npipe, float** cost, int nalgo,
                       int nproto, int reg_buff, int* nchannels) {
  try {
    return tuner_coll_info(ctx, coll, nbytes, npipe, cost, nalgo, nproto, reg_buff, nchannels);
  } catch (...) {
    return caught_exception("tuner getCollInfo");
  }
}
ncclResult_t coll_info_v3(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int npipe, float** cost, int nalgo,
                          int nproto, int* nchannels) {
  return coll_info(ctx, coll, nbytes, npipe, cost, nalgo, nproto, 0, nchannels);
}
// v2 forwards only to a v2 inner (passthrough_versions.h); without one NCCL picks (nothing is set).
ncclResult_t coll_info_v2(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int collnet, int nvls, int npipe,
                          int* algorithm, int* protocol, int* nchannels) {
  try {
    const TunerContext* c = static_cast<const TunerContext*>(ctx);
    if (!c) return ncclInternalError;
    if (c->inner_version != 2) return ncclSuccess;
    return as<ncclTuner_v2_t>(c)->getCollInfo(c->inner_ctx, coll, nbytes, collnet, nvls, npipe, algorithm,
                                              protocol, nchannels);
  } catch (...) {
    return caught_exception("tuner getCollInfo");
  }
}
// v6's optional entry: an inner v6 tuner's own, else the chunk size stays NCCL's.
ncclResult_t chunk_size(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int algo, int proto, int nchannels,
                        size_t* chunk) {
  try {
    const TunerContext* c = static_cast<const TunerContext*>(ctx);
    if (!c) return ncclInternalError;
    if (c->inner_version != 6 || !as<ncclTuner_v6_t>(c)->getChunkSize) return ncclSuccess;
    return as<ncclTuner_v6_t>(c)->getChunkSize(c->inner_ctx, coll, nbytes, algo, proto, nchannels, chunk);
  } catch (...) {
    return caught_exception("tuner getChunkSize");
  }
}

constexpr const char kTunerName[] = "zipccl (pass-through)";

}  // namespace
}  // namespace net
}  // namespace zipccl

using namespace zipccl::net;

extern "C" __attribute__((visibility("default")))
const ncclTuner_v2_t ncclTunerPlugin_v2 = {kTunerName, init_v1_ctx_last<2>, coll_info_v2, finalize};
extern "C" __attribute__((visibility("default")))
const ncclTuner_v3_t ncclTunerPlugin_v3 = {kTunerName, init_v1_ctx_last<3>, coll_info_v3, finalize};
extern "C" __attribute__((visibility("default")))
const ncclTuner_v4_t ncclTunerPlugin_v4 = {kTunerName, init_v1_ctx_last<4>, coll_info, finalize};
extern "C" __attribute__((visibility("default")))
const ncclTuner_v5_t ncclTunerPlugin_v5 = {kTunerName, init_ctx_first<5>, coll_info, finalize};
extern "C" __attribute__((visibility("default")))
const ncclTuner_v6_t ncclTunerPlugin_v6 = {kTunerName, init_ctx_first<6>, coll_info, finalize, chunk_size};
