/* A stand-in inner net plugin (ABI v12) for the optional entries zipccl must forward or refuse
 * (docs/notes/inner.md, "Optional entries"). It only lists devices and records the calls it gets;
 * nothing here moves data. Built twice (tests/inner/inner_tests.cmake):
 *   FAKE_INNER_EXTRAS=1: the table has getDeviceMr, irecvConsumed, makeVDevice and setNetAttr, and its
 *                        devices say maxRecvs 8 (grouped receives);
 *   FAKE_INNER_EXTRAS=0: those entries are NULL and maxRecvs is 1.
 * The test reads fake_inner_state through dlopen(RTLD_NOLOAD) of the same file. */
#include <string.h>

#include "nccl/net_v12.h"

typedef struct {
  int inits, finalizes;
  int set_net_attr_calls;
  void* set_net_attr_ctx;
  ncclNetAttr_v12_t last_attr;
  int other_calls; /* getDeviceMr, irecvConsumed, makeVDevice: zipccl must never call them */
} fake_inner_state_t;

__attribute__((visibility("default"))) fake_inner_state_t fake_inner_state;

static int g_ctx_marker;
enum { kDevices = 2 };
/* An attribute op this plugin refuses, to check that its result reaches NCCL unchanged. */
enum { kRefusedOp = 999 };

static ncclResult_t f_init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v12_t* cfg, ncclDebugLogger_t log,
                           ncclProfilerCallback_t prof) {
  (void)comm_id, (void)cfg, (void)log, (void)prof;
  ++fake_inner_state.inits;
  *ctx = &g_ctx_marker;
  return ncclSuccess;
}
static ncclResult_t f_finalize(void* ctx) {
  (void)ctx;
  ++fake_inner_state.finalizes;
  return ncclSuccess;
}
static ncclResult_t f_devices(int* n) {
  *n = kDevices;
  return ncclSuccess;
}
static char g_names[kDevices][8] = {"fake0", "fake1"};
static ncclResult_t f_props(int dev, ncclNetProperties_v12_t* p) {
  if (dev < 0 || dev >= kDevices) return ncclInvalidArgument;
  memset(p, 0, sizeof *p);
  p->name = g_names[dev];
  p->ptrSupport = NCCL_PTR_HOST;
  p->speed = 100000;
  p->latency = 1;
  p->maxComms = 1024;
  p->maxRecvs = FAKE_INNER_EXTRAS ? 8 : 1;
  p->netDeviceType = NCCL_NET_DEVICE_HOST;
  p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  p->vProps.ndevs = 1;
  p->vProps.devs[0] = dev;
  p->maxP2pBytes = (size_t)1 << 30;
  p->maxCollBytes = (size_t)1 << 30;
  p->maxMultiRequestSize = 1;
  p->railId = NCCL_NET_ID_UNDEF;
  p->planeId = NCCL_NET_ID_UNDEF;
  return ncclSuccess;
}
/* Data movement: not part of these tests. */
static ncclResult_t f_listen(void* c, int d, void* h, void** l) {
  (void)c, (void)d, (void)h, (void)l;
  return ncclInternalError;
}
static ncclResult_t f_connect(void* c, int d, void* h, void** s, ncclNetDeviceHandle_v12_t** dh) {
  (void)c, (void)d, (void)h, (void)s, (void)dh;
  return ncclInternalError;
}
static ncclResult_t f_accept(void* l, void** r, ncclNetDeviceHandle_v12_t** dh) {
  (void)l, (void)r, (void)dh;
  return ncclInternalError;
}
static ncclResult_t f_reg(void* c, void* d, size_t s, int t, void** m) {
  (void)c, (void)d, (void)s, (void)t, (void)m;
  return ncclInternalError;
}
static ncclResult_t f_dereg(void* c, void* m) {
  (void)c, (void)m;
  return ncclInternalError;
}
static ncclResult_t f_isend(void* c, void* d, size_t s, int t, void* m, void* p, void** r) {
  (void)c, (void)d, (void)s, (void)t, (void)m, (void)p, (void)r;
  return ncclInternalError;
}
static ncclResult_t f_irecv(void* c, int n, void** d, size_t* s, int* t, void** m, void** p, void** r) {
  (void)c, (void)n, (void)d, (void)s, (void)t, (void)m, (void)p, (void)r;
  return ncclInternalError;
}
static ncclResult_t f_iflush(void* c, int n, void** d, int* s, void** m, void** r) {
  (void)c, (void)n, (void)d, (void)s, (void)m, (void)r;
  return ncclInternalError;
}
static ncclResult_t f_test(void* r, int* d, int* s) {
  (void)r, (void)d, (void)s;
  return ncclInternalError;
}
static ncclResult_t f_close(void* c) {
  (void)c;
  return ncclInternalError;
}

#if FAKE_INNER_EXTRAS
static ncclResult_t f_get_device_mr(void* c, void* m, void** dm) {
  (void)c, (void)m, (void)dm;
  ++fake_inner_state.other_calls;
  return ncclSuccess;
}
static ncclResult_t f_irecv_consumed(void* c, int n, void* r) {
  (void)c, (void)n, (void)r;
  ++fake_inner_state.other_calls;
  return ncclSuccess;
}
static ncclResult_t f_make_vdevice(int* d, ncclNetVDeviceProps_v12_t* p) {
  (void)p;
  ++fake_inner_state.other_calls;
  *d = kDevices;
  return ncclSuccess;
}
static ncclResult_t f_set_net_attr(void* ctx, ncclNetAttr_v12_t* a) {
  ++fake_inner_state.set_net_attr_calls;
  fake_inner_state.set_net_attr_ctx = ctx;
  fake_inner_state.last_attr = *a;
  return a->op == kRefusedOp ? ncclInvalidArgument : ncclSuccess;
}
#define F_EXTRA(f) f
#else
#define F_EXTRA(f) NULL
#endif

__attribute__((visibility("default"))) const ncclNet_v12_t ncclNetPlugin_v12 = {
    .name = "fake-inner",
    .init = f_init,
    .devices = f_devices,
    .getProperties = f_props,
    .listen = f_listen,
    .connect = f_connect,
    .accept = f_accept,
    .regMr = f_reg,
    .regMrDmaBuf = NULL,
    .deregMr = f_dereg,
    .isend = f_isend,
    .irecv = f_irecv,
    .iflush = f_iflush,
    .test = f_test,
    .closeSend = f_close,
    .closeRecv = f_close,
    .closeListen = f_close,
    .getDeviceMr = F_EXTRA(f_get_device_mr),
    .irecvConsumed = F_EXTRA(f_irecv_consumed),
    .makeVDevice = F_EXTRA(f_make_vdevice),
    .finalize = f_finalize,
    .setNetAttr = F_EXTRA(f_set_net_attr),
};
