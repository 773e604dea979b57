/* zipccl C API: the codec, `zipccl inspect`, the settings registry and hetero behind a plain C ABI,
 * in libzipccl.so.
 *
 * For C programs and for language bindings that load a shared library without compiling against
 * an interpreter (Python's ctypes or cffi in ABI mode): the library imports no Python symbol, so one
 * build serves every interpreter.
 *
 * Contract, for every function declared here:
 *  - It returns an int status: ZIPCCL_OK (0) or a negative ZIPCCL_ERR_* code. On an error,
 *    zipccl_last_error() describes it; output parameters are then unspecified unless said otherwise.
 *  - It never throws, aborts or asserts, whatever the input; a malformed frame is an error code.
 *  - The caller owns every buffer. Inputs are never modified. Outputs are written only inside
 *    [dst, dst + dst_capacity); nothing is allocated for the caller and nothing is handed back that
 *    the caller must free. Strings returned through `const char**` have static storage.
 *  - It is thread-safe: concurrent calls share no mutable state (besides each thread's last error).
 *  - Sizes are size_t; element types and kernel sets are the int enums below.
 *
 * Streams: zipccl_compress cuts its input into frames of at most ZIPCCL_FRAME_INPUT bytes and writes
 * them back to back, exactly as `zipccl compress` does (the bytes are identical). The frame format
 * is written out in gpu_codec/FORMAT.md.
 *
 * Versioning: ZIPCCL_C_ABI_VERSION grows by one on any change that breaks a caller compiled against
 * an older header (a changed signature, enum value or struct layout). Functions are only ever added.
 * A binding checks zipccl_abi_version() == the version it was written for. */
#ifndef ZIPCCL_ZIPCCL_C_H_
#define ZIPCCL_ZIPCCL_C_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZIPCCL_C_ABI_VERSION 1

/* The library is built with hidden visibility; this marks what it exports. */
#if defined(__GNUC__)
#define ZIPCCL_C_API __attribute__((visibility("default")))
#else
#define ZIPCCL_C_API
#endif

/* Bytes of input per frame of a stream (8 MiB), as the zipccl tool writes them. */
#define ZIPCCL_FRAME_INPUT ((size_t)8 << 20)

/* ---- Status codes ---- */
enum {
  ZIPCCL_OK = 0,
  ZIPCCL_ERR_INVALID_ARGUMENT = -1, /* a null pointer with a non-zero size, an option out of range */
  ZIPCCL_ERR_BUFFER_TOO_SMALL = -2, /* the output does not fit dst_capacity; nothing past it is written */
  ZIPCCL_ERR_TOO_LARGE = -3,        /* an input one frame cannot carry */
  /* -4 .. -7: the input is not a well-formed zipccl stream (Python: FormatError). */
  ZIPCCL_ERR_TRUNCATED = -4,   /* shorter than its headers say, or empty */
  ZIPCCL_ERR_BAD_MAGIC = -5,   /* not a zipccl frame */
  ZIPCCL_ERR_BAD_VERSION = -6, /* a zipccl frame of a format version this build does not decode */
  ZIPCCL_ERR_CORRUPT = -7,     /* a field, offset, code table or bit stream is inconsistent */
  ZIPCCL_ERR_INTERNAL = -8,    /* a bug or an out-of-memory inside the library; the message says which */
  /* hetero (Python: LayoutError, BatchError, LimitError). */
  ZIPCCL_ERR_LAYOUT = -9, /* the layout cannot exist; the message names the constraint and the values */
  ZIPCCL_ERR_BATCH = -10, /* the batch does not describe a tensor (negative tokens, a bad replica map) */
  ZIPCCL_ERR_LIMIT = -11  /* valid, but beyond a limit kept against typos (world size, transfers) */
};

/* Element types (the frame header's wire values). */
enum {
  ZIPCCL_TYPE_NONE = 0, /* no element structure: bytes */
  ZIPCCL_TYPE_BF16 = 1,
  ZIPCCL_TYPE_FP16 = 2,
  ZIPCCL_TYPE_FP32 = 3,
  ZIPCCL_TYPE_AUTO = 255 /* compress only: detect the type from the bytes of each frame */
};

/* CPU kernel sets. Every set writes the same bytes; AUTO runs the fastest this CPU has, and a set the
 * CPU lacks falls back to it. */
enum {
  ZIPCCL_ISA_AUTO = 0,
  ZIPCCL_ISA_SCALAR = 1,
  ZIPCCL_ISA_AVX2 = 2,
  ZIPCCL_ISA_AVX512 = 3,
  ZIPCCL_ISA_NEON = 4
};

/* Frame kinds. */
enum { ZIPCCL_FRAME_RAW = 0, ZIPCCL_FRAME_CONST = 1, ZIPCCL_FRAME_CODED = 2 };

/* ---- Library ---- */

/* ZIPCCL_C_ABI_VERSION of the library that is loaded. The one function that returns no status. */
ZIPCCL_C_API int zipccl_abi_version(void);

/* The message of the last error on the calling thread ("" if none): what failed and where
 * ("decompress: frame 2 at byte 16777300: frame is corrupt"). Never NULL; valid until the next
 * zipccl_* call on the same thread. Returns a pointer, not a status. */
ZIPCCL_C_API const char* zipccl_last_error(void);

/* *version = "0.1.0 (git 1a2b3c4d5e)": the release and the commit the library was built from. */
ZIPCCL_C_API int zipccl_version(const char** version);

/* *name = the kernel set ZIPCCL_ISA_AUTO runs here: "avx512", "avx2", "neon" or "scalar". */
ZIPCCL_C_API int zipccl_simd_path(const char** name);

/* ---- Codec ---- */

/* *bound = the most bytes zipccl_compress writes for an n-byte input, whatever the data and options.
 * ZIPCCL_ERR_TOO_LARGE if that does not fit a size_t. */
ZIPCCL_C_API int zipccl_max_compressed_size(size_t n, size_t* bound);

/* Compresses src[0, n) into a stream of frames at dst; *written = the stream's length.
 *  elem_type:  ZIPCCL_TYPE_*; AUTO detects it per frame. n need not be a multiple of the element size.
 *  block_log2: log2 of elements per block, 10..14, or 0 for the default (14).
 *  threads:    1..1024 threads per frame (the output is the same bytes whatever the count; use > 1
 *              only for inputs of several MiB).
 *  isa:        ZIPCCL_ISA_*.
 * src and dst must not overlap. With dst_capacity >= zipccl_max_compressed_size(n) it cannot run out
 * of room; with less it succeeds when the stream fits and returns ZIPCCL_ERR_BUFFER_TOO_SMALL
 * otherwise. src is read and dst written in place: no copy is made. An empty input is one frame. */
ZIPCCL_C_API int zipccl_compress(const void* src, size_t n, void* dst, size_t dst_capacity, size_t* written,
                                 int elem_type, int block_log2, int threads, int isa);

/* One frame header of a stream. 32 bytes, no padding. */
typedef struct zipccl_frame_info {
  int32_t kind;           /* ZIPCCL_FRAME_* */
  int32_t elem_type;      /* ZIPCCL_TYPE_* (never AUTO) */
  uint64_t original_size; /* bytes the frame decodes to */
  uint64_t frame_size;    /* bytes the frame occupies, header included */
  uint32_t num_blocks;    /* coded frames; 0 otherwise */
  uint32_t block_elems;   /* elements per block (coded frames); 0 otherwise */
} zipccl_frame_info;

/* Reads and validates every frame header of the stream src[0, n) (not the blocks behind them).
 * *count = the number of frames; the first min(count, capacity) are written to frames, which may be
 * NULL when capacity is 0 (a size query). A stream of more frames than capacity is not an error:
 * compare *count with capacity. *decoded_size (may be NULL) = the sum of their original sizes, the
 * dst_capacity zipccl_decompress needs. An empty input is ZIPCCL_ERR_TRUNCATED. */
ZIPCCL_C_API int zipccl_frames(const void* src, size_t n, zipccl_frame_info* frames, size_t capacity,
                               size_t* count, size_t* decoded_size);

/* Decompresses the stream src[0, n) (frames back to back) into dst; *written = the decoded length.
 * Every header is validated before anything is written: a stream that decodes to more than
 * dst_capacity is ZIPCCL_ERR_BUFFER_TOO_SMALL with dst untouched. A malformed frame is an error
 * (-4 .. -7) naming the frame and its byte offset; dst may then hold part of the output, and nothing
 * outside [dst, dst + dst_capacity) is written. threads and isa as for zipccl_compress. */
ZIPCCL_C_API int zipccl_decompress(const void* src, size_t n, void* dst, size_t dst_capacity, size_t* written,
                                   int threads, int isa);

/* What `zipccl inspect` measures of one buffer (tools/zipccl/inspect.h). 2,408 bytes, no padding. */
typedef struct zipccl_inspect_report {
  int32_t elem_type;          /* the type it was coded as (ZIPCCL_TYPE_*; never AUTO) */
  int32_t type_detected;      /* 1 when elem_type was detected from the bytes (AUTO) */
  int32_t frame_kind;         /* ZIPCCL_FRAME_* of the first frame */
  int32_t exponent_bits;      /* 8 (bf16, fp32), 5 (fp16), 0 (no float type: no histogram) */
  int32_t exponent_bias;      /* 127, 15 */
  int32_t has_exponent_range; /* 0 when no normal number occurs */
  int32_t exponent_min;       /* unbiased exponents of the normal numbers, when has_exponent_range */
  int32_t exponent_max;
  int32_t distinct_exponents;
  int32_t reserved;
  uint64_t bytes;            /* the input */
  uint64_t compressed_bytes; /* zipccl frames, cut as zipccl_compress cuts them */
  uint64_t predicted_bytes;  /* what the order-0 entropy bound predicts */
  double ratio;              /* bytes / compressed_bytes */
  double bound_ratio;        /* bytes / predicted_bytes (infinity for a constant input) */
  double entropy_bits;       /* per element (per byte for NONE), sum of the planes */
  uint64_t zero_or_subnormal;
  uint64_t inf_or_nan;
  uint64_t exponent_counts[256]; /* elements per exponent field; 2^exponent_bits entries are used */
  char exponent_summary[256];    /* the histogram as `zipccl inspect` prints it, NUL-terminated */
} zipccl_inspect_report;

/* Measures src[0, n) as `zipccl inspect` does (compressing it on `threads` threads to a buffer of
 * its own, and checking the round trip): elem_type as for zipccl_compress. Not a hot path: it
 * allocates inside. */
ZIPCCL_C_API int zipccl_inspect(const void* src, size_t n, int elem_type, int threads,
                                zipccl_inspect_report* report);

/* ---- Settings registry ----
 * The environment variables the NCCL plugin reads, in registry order: its ZIPCCL_* settings and the
 * few NCCL_* ones it reads itself (NCCL_IB_TC, ...). What a launcher (Python's zipccl.enable()) may
 * set. The strings describe the settings, not this process's environment. */

/* *count = the number of settings. */
ZIPCCL_C_API int zipccl_setting_count(size_t* count);

/* Setting `index` (0 .. count-1). Any output may be NULL.
 *  name:          "ZIPCCL_COMPRESS"
 *  values:        what it accepts ("auto|always|never", "integer 1..16", "size 0..1TiB", ...)
 *  default_value: the default, machine-independent
 *  doc:           one line
 * ZIPCCL_ERR_INVALID_ARGUMENT for an index out of range. */
ZIPCCL_C_API int zipccl_setting(size_t index, const char** name, const char** values,
                                const char** default_value, const char** doc);

/* ---- hetero: heterogeneous parallelism at the encoder -> LLM boundary ----
 * The C++ library zipccl::hetero (hetero/include/zipccl/hetero/) behind C structs; see layout.h,
 * groups.h, batch.h and plan.h for the meaning of every field. A layout is passed as an array of
 * module specs: modules[0] is the LLM, modules[1 + e] encoder e. Results are written to caller
 * arrays; a call with NULL arrays is a size query (the counts are set and ZIPCCL_OK returned), a call
 * with arrays too small for the counts returns ZIPCCL_ERR_BUFFER_TOO_SMALL (counts set, arrays
 * unspecified). Each call validates and recomputes from its arguments: nothing is kept between calls. */

/* Dimensions (indices of zipccl_module_info.strides; values of .order). */
enum { ZIPCCL_DIM_TP = 0, ZIPCCL_DIM_CP = 1, ZIPCCL_DIM_DP = 2, ZIPCCL_DIM_PP = 3 };

typedef struct zipccl_module_spec {
  const char* name;          /* NULL or "": "llm", or "encoder<i>" */
  const char* order;         /* rank order, fastest first, "tp-cp-dp-pp" (the default: NULL or "") */
  int32_t tp, cp, pp;        /* >= 1 */
  int32_t dp;                /* 0: derived; otherwise must equal num_ranks / (tp*cp*pp) */
  int32_t sequence_parallel; /* 0 or 1 */
  int32_t first_rank;
  int32_t num_ranks; /* -1: the whole world */
  int32_t reserved;  /* 0 */
} zipccl_module_spec;

/* *spec = the defaults: tp = cp = pp = 1, dp derived, whole world, default order. */
ZIPCCL_C_API int zipccl_module_spec_default(zipccl_module_spec* spec);

/* A validated module. 64 bytes. */
typedef struct zipccl_module_info {
  int32_t role; /* 0: the LLM, 1: an encoder */
  int32_t tp, cp, dp, pp;
  int32_t first_rank, num_ranks;
  int32_t sequence_parallel; /* 1 only where it shards anything (tp > 1) */
  int32_t order[4];          /* ZIPCCL_DIM_*, fastest-varying first */
  int32_t strides[4];        /* rank stride of each dimension, indexed by ZIPCCL_DIM_* */
} zipccl_module_info;

/* Validates the layout (ZIPCCL_ERR_LAYOUT / _LIMIT naming the first constraint that fails) and, when
 * modules_out is not NULL, writes num_modules entries to it, in the order of `modules`. */
ZIPCCL_C_API int zipccl_layout_validate(int world_size, const zipccl_module_spec* modules, size_t num_modules,
                                        zipccl_module_info* modules_out);

/* Group kinds. */
enum {
  ZIPCCL_GROUP_TP = 0,
  ZIPCCL_GROUP_CP = 1,
  ZIPCCL_GROUP_DP = 2,
  ZIPCCL_GROUP_PP = 3,
  ZIPCCL_GROUP_MODEL_PARALLEL = 4,
  ZIPCCL_GROUP_BOUNDARY = 5
};

/* A family of equal-sized disjoint process groups: its num_groups * group_size ranks follow the
 * previous family's in the ranks array, group after group. */
typedef struct zipccl_group_family {
  int32_t kind;   /* ZIPCCL_GROUP_* */
  int32_t module; /* index into modules; for BOUNDARY: 1 + encoder index */
  uint32_t num_groups;
  uint32_t group_size;
} zipccl_group_family;

/* Every process-group family of the layout, in the order every process must create them
 * (torch.distributed.new_group is collective). */
ZIPCCL_C_API int zipccl_layout_groups(int world_size, const zipccl_module_spec* modules, size_t num_modules,
                                      zipccl_group_family* families, size_t family_capacity,
                                      size_t* family_count, int32_t* ranks, size_t rank_capacity,
                                      size_t* rank_count);

/* Sample -> replica assignments (batch.h). */
enum { ZIPCCL_ASSIGN_CONTIGUOUS = 0, ZIPCCL_ASSIGN_BALANCED = 1, ZIPCCL_ASSIGN_GIVEN = 2 };

/* One batch of the boundary tensor. */
typedef struct zipccl_batch {
  const int64_t* tokens; /* rows per sample */
  size_t num_samples;
  int64_t hidden;                 /* elements per row */
  int64_t element_size;           /* bytes per element */
  int32_t encoder_rule;           /* ZIPCCL_ASSIGN_* for the encoder's replicas */
  int32_t llm_rule;               /* ... and for the LLM's */
  const int32_t* encoder_replica; /* GIVEN: num_samples replicas; otherwise NULL */
  const int32_t* llm_replica;
} zipccl_batch;

/* A run of rows of one sample in a rank's packed local buffer. 32 bytes. */
typedef struct zipccl_segment {
  int32_t sample;
  int32_t reserved;
  int64_t row_begin, row_end; /* rows [begin, end) of the sample */
  int64_t offset;             /* bytes from the start of the buffer */
} zipccl_segment;

/* Where `rank` keeps module `module`'s part of the boundary tensor (none where the rank is not in
 * the module's boundary stage). */
ZIPCCL_C_API int zipccl_boundary_segments(int world_size, const zipccl_module_spec* modules,
                                          size_t num_modules, int module, const zipccl_batch* batch, int rank,
                                          zipccl_segment* segments, size_t capacity, size_t* count);

/* Plan strategies. */
enum { ZIPCCL_STRATEGY_DIRECT = 0, ZIPCCL_STRATEGY_SCATTER_ALLGATHER = 1, ZIPCCL_STRATEGY_AUTOMATIC = 2 };

/* One copy of a boundary plan. 56 bytes. */
typedef struct zipccl_transfer {
  int32_t src, dst; /* world ranks (equal: a local copy) */
  int32_t sample;
  int32_t src_buffer; /* 0: the sender's source buffer, 1: its destination buffer */
  int64_t row_begin, row_end;
  int64_t src_offset, dst_offset, bytes;
} zipccl_transfer;

/* The scalars of a boundary plan and the sizes of its arrays. */
typedef struct zipccl_plan_info {
  int32_t strategy; /* the one chosen (never AUTOMATIC) */
  int32_t source_module, destination_module;
  int32_t reserved;
  int64_t row_bytes;
  uint64_t num_phases;
  uint64_t num_transfers;
} zipccl_plan_info;

/* Plans the boundary of encoder `encoder` (forward: encoder -> LLM; backward: back). The transfers
 * of all phases go to `transfers`, phase after phase; phase_ends[p] is the index after phase p's
 * last. source_bytes and destination_bytes get world_size entries each (the per-rank buffer sizes).
 * A NULL transfers/phase_ends is a size query: *info is set. Call it twice to plan into exact arrays:
 * planning is deterministic. */
ZIPCCL_C_API int zipccl_boundary_plan(int world_size, const zipccl_module_spec* modules, size_t num_modules,
                                      int encoder, const zipccl_batch* batch, int backward, int strategy,
                                      zipccl_plan_info* info, uint64_t* phase_ends, size_t phase_capacity,
                                      zipccl_transfer* transfers, size_t transfer_capacity,
                                      int64_t* source_bytes, int64_t* destination_bytes);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZIPCCL_ZIPCCL_C_H_ */
