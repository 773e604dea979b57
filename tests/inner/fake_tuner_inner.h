/* What the stand-in inner plugin's tuner, profiler and CollNet tables saw (fake_tuner_inner.c), read by
 * tests/plugin/test_passthrough.cpp through fake_passthrough_state(). */
#ifndef ZIPCCL_TEST_FAKE_TUNER_INNER_H_
#define ZIPCCL_TEST_FAKE_TUNER_INNER_H_

#include <stdint.h>

/* The marks the stand-in's tuners leave in NCCL's cost table (float[numAlgo][numProto]):
 * [0][0] = the tuner's version, [0][1] = regBuff as received (v6 only), [1][0] = nRanks its init got. */
#define FAKE_TUNER_CHUNK_BYTES 6000 /* what the v6 tuner's getChunkSize answers */
#define FAKE_COLLNET_DEVICES 2
#define FAKE_PROFILER_MASK 0x42

typedef struct {
  int tuner6_inits, tuner6_finalizes, tuner3_inits, tuner3_finalizes;
  uint64_t tuner6_comm_id;      /* commId v6's init received */
  const void* tuner6_constants; /* the constants pointer v6's init received */
  int collnet_inits, collnet_finalizes;
  uint64_t collnet_comm_id;
  const void* collnet_ctx;        /* the context CollNet's init handed out */
  const void* collnet_listen_ctx; /* the context CollNet's listen received */
  int profiler_inits, profiler_events, profiler_finalizes;
} fake_passthrough_state_t;

#endif
