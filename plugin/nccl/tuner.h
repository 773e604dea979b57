/* NCCL tuner plugin ABI, ncclTunerPlugin_v2 .. v6: the tables only.
 * Written from NCCL's documented tuner interface (ext-tuner); plain C. NCCL looks for the newest
 * table it knows in NCCL_TUNER_PLUGIN's library, else in the net plugin's library.
 *
 * Everything a tuner receives by pointer is opaque here (incomplete types): a forwarder passes it on
 * and never reads it. The cost table is NCCL's float[numAlgo][numProto] cast to float**; an entry of
 * -1.0 is an algorithm/protocol NCCL will not use. */
#ifndef ZIPCCL_NCCL_TUNER_H_
#define ZIPCCL_NCCL_TUNER_H_

#include "net_common.h"

/* NCCL's enum ncclFunc_t (broadcast 0, reduce 1, allgather 2, reducescatter 3, allreduce 4, ...):
 * an int on the C ABI. */
typedef int ncclTunerFunc_t;

/* v5+: NVLink domain summary and NCCL's tuning constants, both read/written only by the tuner. */
typedef struct zipccl_nccl_nvl_domain_info ncclNvlDomainInfo_v5_t;
typedef struct zipccl_nccl_tuner_constants ncclTunerConstants_v5_t;

/* v2: the tuner picks algorithm/protocol itself. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclTunerFunc_t collType, size_t nBytes, int collNetSupport,
                              int nvlsSupport, int numPipeOps, int* algorithm, int* protocol, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v2_t;

/* v3: the tuner edits NCCL's cost table instead. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclTunerFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v3_t;

/* v4: v3 plus regBuff (whether the user buffer can be registered). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** context);
  ncclResult_t (*getCollInfo)(void* context, ncclTunerFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*destroy)(void* context);
} ncclTuner_v4_t;

/* v5: init takes the context first, the communicator id, the NVLink domains and NCCL's
 * constants (in/out); destroy is called finalize. getCollInfo as v4. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* nvlDomainInfo,
                       ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclTunerFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
} ncclTuner_v5_t;

typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v6_t;
typedef ncclTunerConstants_v5_t ncclTunerConstants_v6_t;

/* v6: v5 plus getChunkSize, which may be NULL (NCCL then keeps the chunk size it computed). */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t* nvlDomainInfo,
                       ncclTunerConstants_v6_t* constants);
  ncclResult_t (*getCollInfo)(void* context, ncclTunerFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff, int* nChannels);
  ncclResult_t (*finalize)(void* context);
  ncclResult_t (*getChunkSize)(void* context, ncclTunerFunc_t collType, size_t nBytes, int algo, int proto,
                               int nChannels, size_t* chunkSize);
} ncclTuner_v6_t;

#endif
