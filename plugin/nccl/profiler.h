/* NCCL profiler plugin ABI, ncclProfiler_v1 .. v6: the tables only.
 * Written from NCCL's documented profiler interface (ext-profiler); plain C. NCCL looks for
 * the newest table it knows in NCCL_PROFILER_PLUGIN's library, else in the net plugin's library; an init
 * that fails leaves NCCL running without a profiler.
 *
 * Event descriptors and state arguments differ between versions and are opaque here: a forwarder
 * passes them on and never reads them. */
#ifndef ZIPCCL_NCCL_PROFILER_H_
#define ZIPCCL_NCCL_PROFILER_H_

#include "net_common.h"

/* NCCL's enum ncclProfilerEventState_t: an int on the C ABI, the same values in every version. */
typedef int ncclProfilerEventState_t;
typedef struct zipccl_nccl_profiler_event_descr ncclProfilerEventDescr_t;
typedef struct zipccl_nccl_profiler_state_args ncclProfilerEventStateArgs_t;

/* v1 .. v3: init gets only the context and the event mask (out). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v1_t;
/* v2 and v3 keep v1's entries; their event descriptors grew. */
typedef ncclProfiler_v1_t ncclProfiler_v2_t;
typedef ncclProfiler_v1_t ncclProfiler_v3_t;

/* v4: init also gets the communicator's name, hash, size, rank and NCCL's logger. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName, uint64_t commHash,
                       int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

/* v5 and v6: the communicator id second, no hash. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                       int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;
/* v6 keeps v5's entries (descriptors gained the copy-engine events). */
typedef ncclProfiler_v5_t ncclProfiler_v6_t;

#endif
