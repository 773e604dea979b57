/* hetero through the C API, from plain C: a layout validated and its process groups, a batch's
 * buffer segments and a boundary plan whose transfers fill exactly the buffers it sizes, and bad
 * layouts, batches and arrays as error codes with messages. Exit status 0 only if every check passes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zipccl/zipccl_c.h"

enum { kWorld = 8 };

/* The install consumer's layout: an LLM of tp 4 and an encoder of tp 2, colocated on 8 ranks. */
static void make_layout(zipccl_module_spec specs[2]) {
  CHECK(zipccl_module_spec_default(&specs[0]) == ZIPCCL_OK);
  CHECK(zipccl_module_spec_default(&specs[1]) == ZIPCCL_OK);
  specs[0].tp = 4;
  specs[1].name = "vision";
  specs[1].tp = 2;
}

static void test_layout(void) {
  zipccl_module_spec specs[2];
  make_layout(specs);
  zipccl_module_info info[2];
  CHECK(zipccl_layout_validate(kWorld, specs, 2, info) == ZIPCCL_OK);
  CHECK(info[0].role == 0 && info[0].tp == 4 && info[0].dp == 2 && info[0].num_ranks == kWorld);
  CHECK(info[1].role == 1 && info[1].tp == 2 && info[1].dp == 4);
  /* Megatron order: tp fastest, stride 1; dp next after cp. */
  CHECK(info[0].order[0] == ZIPCCL_DIM_TP && info[0].strides[ZIPCCL_DIM_TP] == 1);
  CHECK(info[0].strides[ZIPCCL_DIM_DP] == 4);

  /* A non-default rank order is taken, and reported. */
  specs[0].order = "dp-tp-cp-pp";
  CHECK(zipccl_layout_validate(kWorld, specs, 2, info) == ZIPCCL_OK);
  CHECK(info[0].order[0] == ZIPCCL_DIM_DP && info[0].strides[ZIPCCL_DIM_DP] == 1 &&
        info[0].strides[ZIPCCL_DIM_TP] == 2);
  specs[0].order = "tp-tp-dp-pp";
  CHECK(zipccl_layout_validate(kWorld, specs, 2, info) == ZIPCCL_ERR_LAYOUT);
  specs[0].order = NULL;

  /* 6 ranks are not divisible by tp 4: the message says so. */
  CHECK(zipccl_layout_validate(6, specs, 2, NULL) == ZIPCCL_ERR_LAYOUT);
  CHECK(strstr(zipccl_last_error(), "layout_validate: ") == zipccl_last_error());
  CHECK(strstr(zipccl_last_error(), "divisible") != NULL);
  CHECK(zipccl_layout_validate(kWorld, NULL, 0, NULL) == ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_layout_validate(1 << 30, specs, 2, NULL) == ZIPCCL_ERR_LIMIT);
}

static void test_groups(void) {
  zipccl_module_spec specs[2];
  make_layout(specs);
  size_t nf = 0, nr = 0;
  CHECK(zipccl_layout_groups(kWorld, specs, 2, NULL, 0, &nf, NULL, 0, &nr) == ZIPCCL_OK);
  /* tp, cp, dp, pp, model_parallel for each module, then one boundary family per encoder. */
  CHECK(nf == 11);
  zipccl_group_family* fams = (zipccl_group_family*)calloc(nf, sizeof *fams);
  int32_t* ranks = (int32_t*)calloc(nr, sizeof *ranks);
  if (!fams || !ranks) abort();
  CHECK(zipccl_layout_groups(kWorld, specs, 2, fams, nf, &nf, ranks, nr - 1, &nr) ==
        ZIPCCL_ERR_BUFFER_TOO_SMALL);
  CHECK(zipccl_layout_groups(kWorld, specs, 2, fams, nf, &nf, ranks, nr, &nr) == ZIPCCL_OK);
  CHECK(fams[0].kind == ZIPCCL_GROUP_TP && fams[0].module == 0 && fams[0].num_groups == 2 &&
        fams[0].group_size == 4);
  CHECK(ranks[0] == 0 && ranks[3] == 3 && ranks[4] == 4);
  CHECK(fams[10].kind == ZIPCCL_GROUP_BOUNDARY && fams[10].module == 1 && fams[10].num_groups == 1);
  size_t sum = 0;
  for (size_t i = 0; i < nf; ++i) sum += (size_t)fams[i].num_groups * fams[i].group_size;
  CHECK(sum == nr);
  free(fams);
  free(ranks);
}

static const int64_t kTokens[] = {100, 50, 70, 30, 9, 1};
enum { kSamples = sizeof kTokens / sizeof kTokens[0], kHidden = 16, kElem = 2 };

static zipccl_batch make_batch(void) {
  zipccl_batch b;
  memset(&b, 0, sizeof b);
  b.tokens = kTokens;
  b.num_samples = kSamples;
  b.hidden = kHidden;
  b.element_size = kElem;
  b.encoder_rule = ZIPCCL_ASSIGN_CONTIGUOUS;
  b.llm_rule = ZIPCCL_ASSIGN_BALANCED;
  return b;
}

static void test_segments(void) {
  zipccl_module_spec specs[2];
  make_layout(specs);
  zipccl_batch b = make_batch();
  /* The encoder (tp 2, not sequence parallel) keeps every row of its replica's samples on each tp rank:
   * summed over one tp rank of every replica, every row once, packed. */
  int64_t rows = 0;
  for (int rank = 0; rank < kWorld; rank += 2) {
    zipccl_segment seg[kSamples];
    size_t n = 0;
    CHECK(zipccl_boundary_segments(kWorld, specs, 2, 1, &b, rank, seg, kSamples, &n) == ZIPCCL_OK);
    int64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      CHECK(seg[i].offset == offset);
      offset += (seg[i].row_end - seg[i].row_begin) * kHidden * kElem;
      rows += seg[i].row_end - seg[i].row_begin;
    }
  }
  CHECK(rows == 100 + 50 + 70 + 30 + 9 + 1);
  size_t n = 0;
  CHECK(zipccl_boundary_segments(kWorld, specs, 2, 2, &b, 0, NULL, 0, &n) == ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(zipccl_last_error(), "out of range") != NULL);

  /* A negative token count, a replica out of range: BatchError's code. */
  int64_t bad_tokens[kSamples];
  memcpy(bad_tokens, kTokens, sizeof bad_tokens);
  bad_tokens[2] = -1;
  zipccl_batch bad = b;
  bad.tokens = bad_tokens;
  CHECK(zipccl_boundary_segments(kWorld, specs, 2, 1, &bad, 0, NULL, 0, &n) == ZIPCCL_ERR_BATCH);
  int32_t replica[kSamples] = {0, 1, 2, 3, 0, 9};
  bad = b;
  bad.encoder_rule = ZIPCCL_ASSIGN_GIVEN;
  bad.encoder_replica = replica;
  CHECK(zipccl_boundary_segments(kWorld, specs, 2, 1, &bad, 0, NULL, 0, &n) == ZIPCCL_ERR_BATCH);
  replica[5] = 1;
  CHECK(zipccl_boundary_segments(kWorld, specs, 2, 1, &bad, 0, NULL, 0, &n) == ZIPCCL_OK);
  bad.encoder_replica = NULL;
  CHECK(zipccl_boundary_segments(kWorld, specs, 2, 1, &bad, 0, NULL, 0, &n) == ZIPCCL_ERR_INVALID_ARGUMENT);
}

static void test_plan(int strategy) {
  zipccl_module_spec specs[2];
  make_layout(specs);
  zipccl_batch b = make_batch();
  zipccl_plan_info info;
  int64_t src_bytes[kWorld], dst_bytes[kWorld];
  CHECK(zipccl_boundary_plan(kWorld, specs, 2, 0, &b, 0, strategy, &info, NULL, 0, NULL, 0, src_bytes,
                             dst_bytes) == ZIPCCL_OK);
  CHECK(info.num_phases >= 1 && info.num_transfers >= 1);
  CHECK(info.row_bytes == kHidden * kElem && info.source_module == 1 && info.destination_module == 0);
  CHECK(info.strategy == ZIPCCL_STRATEGY_DIRECT || info.strategy == ZIPCCL_STRATEGY_SCATTER_ALLGATHER);
  uint64_t* ends = (uint64_t*)calloc(info.num_phases, sizeof *ends);
  zipccl_transfer* t = (zipccl_transfer*)calloc(info.num_transfers, sizeof *t);
  if (!ends || !t) abort();
  CHECK(zipccl_boundary_plan(kWorld, specs, 2, 0, &b, 0, strategy, &info, ends, info.num_phases, t,
                             info.num_transfers - 1, NULL, NULL) == ZIPCCL_ERR_BUFFER_TOO_SMALL);
  CHECK(zipccl_boundary_plan(kWorld, specs, 2, 0, &b, 0, strategy, &info, ends, info.num_phases, t,
                             info.num_transfers, NULL, NULL) == ZIPCCL_OK);
  CHECK(ends[info.num_phases - 1] == info.num_transfers);
  /* Every transfer writes the receiver's destination buffer, and together they fill each exactly. */
  int64_t into[kWorld] = {0};
  for (size_t i = 0; i < info.num_transfers; ++i) {
    CHECK(t[i].dst >= 0 && t[i].dst < kWorld);
    CHECK(t[i].bytes == (t[i].row_end - t[i].row_begin) * info.row_bytes);
    CHECK(t[i].dst_offset + t[i].bytes <= dst_bytes[t[i].dst]);
    into[t[i].dst] += t[i].bytes;
  }
  for (int r = 0; r < kWorld; ++r) CHECK(into[r] == dst_bytes[r]);
  free(ends);
  free(t);
  CHECK(zipccl_boundary_plan(kWorld, specs, 2, 0, &b, 0, 7, &info, NULL, 0, NULL, 0, NULL, NULL) ==
        ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_boundary_plan(kWorld, specs, 2, 3, &b, 0, strategy, &info, NULL, 0, NULL, 0, NULL, NULL) ==
        ZIPCCL_ERR_LAYOUT);
}

int main(void) {
  test_layout();
  test_groups();
  test_segments();
  test_plan(ZIPCCL_STRATEGY_DIRECT);
  test_plan(ZIPCCL_STRATEGY_SCATTER_ALLGATHER);
  test_plan(ZIPCCL_STRATEGY_AUTOMATIC);
  return check_exit("capi_hetero_test");
}
