/* Net-plugin profiler events: what a net plugin passes to the callback NCCL hands its init
 * (ncclProfilerCallback_t, net_common.h; ncclNet_v10 and later). Written from NCCL's nccl_common.h,
 * plugin/profiler/profiler_net.h and the profiler ABI's v5/v6 event descriptor; plain C.
 *
 * NCCL turns each call into calls of the loaded profiler plugin (when its event mask has
 * ncclProfileNetPlugin):
 *   Start          startEvent, descriptor type ncclProfileNetPlugin, parent = the proxy step behind
 *                  pHandle, netPlugin.id = pluginId, netPlugin.data = extData; *eHandle is set.
 *   Update         recordEventState(*eHandle, ncclProfilerNetPluginUpdate, netPlugin.data = extData).
 *   Stop           stopEvent(*eHandle).
 *   UpdateAndStop  both.
 * pHandle must be the one NCCL passed to isend/irecv (NCCL dereferences it at Start); extData is read
 * during the call only. */
#ifndef ZIPCCL_NCCL_NET_PROFILER_H_
#define ZIPCCL_NCCL_NET_PROFILER_H_

#include <stddef.h>
#include <stdint.h>

enum {
  ncclProfilerNetEventStart = 0,
  ncclProfilerNetEventStop = 1,
  ncclProfilerNetEventUpdate = 2,
  ncclProfilerNetEventUpdateAndStop = 3,
};

/* pluginId: the plugin type in the high bits, its descriptor's version in the low 16. NCCL's own: IB
 * (1 << 16) and socket (2 << 16). zipccl's type is 'z' (0x7a): a profiler that does not know it can
 * still count the events and read nothing else. */
#define NCCL_PROFILER_NET_VER_BITS 16
#define NCCL_PROFILER_NET_TYPE_IB (1U << NCCL_PROFILER_NET_VER_BITS)
#define NCCL_PROFILER_NET_TYPE_SOCK (2U << NCCL_PROFILER_NET_VER_BITS)
#define ZIPCCL_PROFILER_NET_TYPE (0x7aU << NCCL_PROFILER_NET_VER_BITS)
#define ZIPCCL_PROFILER_NET_VER 1

/* zipccl's events: one per message NCCL posts (each receive of a grouped irecv its own), started at
 * isend/irecv with the message's size and updated-and-stopped when test() completes it with what it
 * took on the wire and in the codec. */
enum { zipcclProfileSend = 1, zipcclProfileRecv = 2 };

typedef struct {
  uint8_t type; /* zipcclProfileSend | zipcclProfileRecv */
  union {
    struct {
      size_t raw_bytes;  /* NCCL's size: at Start the posted size (a receive may get less), at Update
                            the delivered size */
      size_t wire_bytes; /* at Update: payload bytes on the wire (0 at Start) */
      uint64_t codec_ns; /* at Update: encode (send) or host decode (recv) time of its segments */
      int segments;      /* at Update: transport messages it travelled as */
      int compressed;    /* at Update: 1 when at least one segment was a codec frame */
      int device;        /* 1: a device buffer (GPU path) */
    } msg;
  };
} zipcclProfilerNetDescr_v1_t;

#endif
