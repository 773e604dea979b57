/* A stand-in for a fabric's net plugin that also carries a tuner, a profiler and CollNet, as
 * aws-ofi-nccl (ncclTunerPlugin_v2/_v3/_v6) and nccl-rdma-sharp-plugins (SHARP CollNet) do. Linked with
 * fake_inner.c (its loopback ncclNetPlugin_v12), this file adds:
 *   ncclTunerPlugin_v6 and _v3 (no v4, v5, v2): each marks NCCL's cost table visibly
 *     (fake_tuner_inner.h), so a test sees which one a call reached and what it was given;
 *   ncclCollNetPlugin_v12 with the entries the test calls (regMrDmaBuf among them), NULL for the rest
 *     (iallgather, ireducescatter, makeVDevice, ...);
 *   ncclProfiler_v6.
 * fake_passthrough_state() returns what they saw. */
#include "fake_tuner_inner.h"

#include <stdlib.h>

#include "nccl/collnet.h"
#include "nccl/profiler.h"
#include "nccl/tuner.h"

#define EXPORT __attribute__((visibility("default")))

static fake_passthrough_state_t g_state;

EXPORT const fake_passthrough_state_t* fake_passthrough_state(void) {
  return &g_state;
}

/* ---- tuners ---- */
typedef struct {
  int version;
  size_t nranks;
} tuner_ctx;

static ncclResult_t new_ctx(int version, size_t nranks, void** ctx) {
  if (nranks == 0) return ncclInvalidArgument; /* lets a test see an inner init's failure passed back */
  tuner_ctx* c = (tuner_ctx*)malloc(sizeof *c);
  if (!c) return ncclSystemError;
  c->version = version;
  c->nranks = nranks;
  *ctx = c;
  return ncclSuccess;
}

/* The marks; entries NCCL set to -1 (will not use) stay so. */
static void mark(const tuner_ctx* c, float** cost, int nalgo, int nproto, int reg_buff) {
  float* t = (float*)cost;
  if (nalgo < 2 || nproto < 2) return;
  if (t[0] >= 0) t[0] = (float)c->version;
  if (reg_buff >= 0 && t[1] >= 0) t[1] = (float)reg_buff;
  if (t[nproto] >= 0) t[nproto] = (float)c->nranks;
}

static ncclResult_t t6_init(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                            ncclDebugLogger_t logfn, ncclNvlDomainInfo_v6_t* nvl,
                            ncclTunerConstants_v6_t* constants) {
  (void)nnodes, (void)logfn, (void)nvl;
  ncclResult_t r = new_ctx(6, nranks, ctx);
  if (r != ncclSuccess) return r;
  ++g_state.tuner6_inits;
  g_state.tuner6_comm_id = comm_id;
  g_state.tuner6_constants = constants;
  return ncclSuccess;
}
static ncclResult_t t6_coll_info(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int npipe, float** cost,
                                 int nalgo, int nproto, int reg_buff, int* nchannels) {
  (void)coll, (void)nbytes, (void)npipe;
  mark((const tuner_ctx*)ctx, cost, nalgo, nproto, reg_buff);
  *nchannels = 6;
  return ncclSuccess;
}
static ncclResult_t t6_finalize(void* ctx) {
  ++g_state.tuner6_finalizes;
  free(ctx);
  return ncclSuccess;
}
static ncclResult_t t6_chunk(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int algo, int proto, int nch,
                             size_t* chunk) {
  (void)ctx, (void)coll, (void)nbytes, (void)algo, (void)proto, (void)nch;
  *chunk = FAKE_TUNER_CHUNK_BYTES;
  return ncclSuccess;
}
EXPORT const ncclTuner_v6_t ncclTunerPlugin_v6 = {"FakeTuner", t6_init, t6_coll_info, t6_finalize, t6_chunk};

static ncclResult_t t3_init(size_t nranks, size_t nnodes, ncclDebugLogger_t logfn, void** ctx) {
  (void)nnodes, (void)logfn;
  ncclResult_t r = new_ctx(3, nranks, ctx);
  if (r == ncclSuccess) ++g_state.tuner3_inits;
  return r;
}
static ncclResult_t t3_coll_info(void* ctx, ncclTunerFunc_t coll, size_t nbytes, int npipe, float** cost,
                                 int nalgo, int nproto, int* nchannels) {
  (void)coll, (void)nbytes, (void)npipe;
  mark((const tuner_ctx*)ctx, cost, nalgo, nproto, -1);
  *nchannels = 3;
  return ncclSuccess;
}
static ncclResult_t t3_destroy(void* ctx) {
  ++g_state.tuner3_finalizes;
  free(ctx);
  return ncclSuccess;
}
EXPORT const ncclTuner_v3_t ncclTunerPlugin_v3 = {"FakeTuner", t3_init, t3_coll_info, t3_destroy};

/* ---- CollNet v12 ---- */
static int g_collnet_ctx;
static int g_listen_comm;

static ncclResult_t c_init(void** ctx, uint64_t comm_id, ncclDebugLogger_t logfn) {
  (void)logfn;
  ++g_state.collnet_inits;
  g_state.collnet_comm_id = comm_id;
  *ctx = &g_collnet_ctx;
  g_state.collnet_ctx = *ctx;
  return ncclSuccess;
}
static ncclResult_t c_devices(int* n) {
  *n = FAKE_COLLNET_DEVICES;
  return ncclSuccess;
}
static ncclResult_t c_props(int dev, ncclCollNetProperties_t* p) {
  (void)p;
  return dev >= 0 && dev < FAKE_COLLNET_DEVICES ? ncclSuccess : ncclInvalidArgument;
}
static ncclResult_t c_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  (void)dev, (void)handle;
  g_state.collnet_listen_ctx = ctx;
  *listen_comm = &g_listen_comm;
  return ncclSuccess;
}
static ncclResult_t c_connect(void* handles[], int nranks, int rank, void* listen_comm, void** coll_comm) {
  (void)handles, (void)nranks, (void)rank, (void)listen_comm, (void)coll_comm;
  return ncclInternalError; /* no data path here */
}
/* Only float (7) sums (0). */
static ncclResult_t c_reduce_support(ncclCollNetDataType_t type, ncclCollNetRedOp_t op, int* supported) {
  *supported = type == 7 && op == 0;
  return ncclSuccess;
}
static ncclResult_t c_reg(void* comm, void* data, size_t size, int type, void** mh) {
  (void)comm, (void)data, (void)size, (void)type, (void)mh;
  return ncclInternalError;
}
static ncclResult_t c_reg_dmabuf(void* comm, void* data, size_t size, int type, uint64_t off, int fd,
                                 void** mh) {
  (void)off, (void)fd;
  return c_reg(comm, data, size, type, mh);
}
static ncclResult_t c_close(void* comm) {
  return comm == &g_listen_comm ? ncclSuccess : ncclInternalError;
}
static ncclResult_t c_finalize(void* ctx) {
  ++g_state.collnet_finalizes;
  return ctx == &g_collnet_ctx ? ncclSuccess : ncclInternalError;
}
EXPORT const ncclCollNet_v12_t ncclCollNetPlugin_v12 = {
    .name = "FakeSharp",
    .init = c_init,
    .devices = c_devices,
    .getProperties = c_props,
    .listen = c_listen,
    .connect = c_connect,
    .reduceSupport = c_reduce_support,
    .regMr = c_reg,
    .regMrDmaBuf = c_reg_dmabuf,
    .deregMr = NULL,
    .iallreduce = NULL,
    .iallgather = NULL,
    .ireducescatter = NULL,
    .iflush = NULL,
    .test = NULL,
    .closeColl = c_close,
    .closeListen = c_close,
    .makeVDevice = NULL,
    .finalize = c_finalize,
};

/* ---- profiler v6 ---- */
static int g_profiler_ctx;
static int g_event;

static ncclResult_t p_init(void** ctx, uint64_t comm_id, int* mask, const char* name, int nnodes, int nranks,
                           int rank, ncclDebugLogger_t logfn) {
  (void)comm_id, (void)name, (void)nnodes, (void)nranks, (void)rank, (void)logfn;
  ++g_state.profiler_inits;
  *mask = FAKE_PROFILER_MASK;
  *ctx = &g_profiler_ctx;
  return ncclSuccess;
}
static ncclResult_t p_start(void* ctx, void** handle, ncclProfilerEventDescr_t* descr) {
  (void)descr;
  if (ctx != &g_profiler_ctx) return ncclInternalError;
  ++g_state.profiler_events;
  *handle = &g_event;
  return ncclSuccess;
}
static ncclResult_t p_stop(void* handle) {
  return handle == &g_event ? ncclSuccess : ncclInternalError;
}
static ncclResult_t p_record(void* handle, ncclProfilerEventState_t state,
                             ncclProfilerEventStateArgs_t* args) {
  (void)state, (void)args;
  return p_stop(handle);
}
static ncclResult_t p_finalize(void* ctx) {
  ++g_state.profiler_finalizes;
  return ctx == &g_profiler_ctx ? ncclSuccess : ncclInternalError;
}
EXPORT const ncclProfiler_v6_t ncclProfiler_v6 = {"FakeProfiler", p_init,   p_start,
                                                  p_stop,         p_record, p_finalize};
