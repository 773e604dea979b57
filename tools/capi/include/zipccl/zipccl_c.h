/* zipccl C API: the codec and the settings registry behind a plain C ABI, in libzipccl.so.
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
  ZIPCCL_ERR_INTERNAL = -8     /* a bug or an out-of-memory inside the library; the message says which */
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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ZIPCCL_ZIPCCL_C_H_ */
