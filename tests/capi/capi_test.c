/* The C API from plain C, linked against libzipccl.so only: round trips of every element type and of
 * odd-length bytes, malformed streams and small buffers as error codes (never a crash or a write
 * past the buffer), and the settings registry. Exit status 0 only if every check passes. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "zipccl/zipccl_c.h"

/* Guard bytes after every output buffer: a write past dst_capacity changes them. */
enum { kGuard = 64 };
static const unsigned char kGuardByte = 0xA5;

static unsigned char* guarded_alloc(size_t n) {
  unsigned char* p = (unsigned char*)malloc(n + kGuard);
  if (!p) abort();
  memset(p + n, kGuardByte, kGuard);
  return p;
}

static int guard_intact(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < kGuard; ++i)
    if (p[n + i] != kGuardByte) return 0;
  return 1;
}

static uint32_t g_rng = 12345;
static uint32_t next_random(void) {
  g_rng = g_rng * 1664525u + 1013904223u;
  return g_rng >> 8;
}

/* Weights-like data of one type: a narrow exponent range, random mantissas. */
static void fill(unsigned char* p, size_t n, int type) {
  size_t i = 0;
  if (type == ZIPCCL_TYPE_BF16) {
    for (; i + 2 <= n; i += 2) {
      uint16_t v = (uint16_t)(0x3C00 | (next_random() & 0x3FF) | ((next_random() & 1) << 15));
      memcpy(p + i, &v, 2);
    }
  } else if (type == ZIPCCL_TYPE_FP16) {
    for (; i + 2 <= n; i += 2) {
      uint16_t v = (uint16_t)(0x2C00 | (next_random() & 0xFFF));
      memcpy(p + i, &v, 2);
    }
  } else if (type == ZIPCCL_TYPE_FP32) {
    for (; i + 4 <= n; i += 4) {
      uint32_t v = 0x3C000000u | (next_random() & 0x3FFFFFu) << 2 | (next_random() & 3);
      memcpy(p + i, &v, 4);
    }
  }
  for (; i < n; ++i) p[i] = (unsigned char)next_random();
}

/* Compresses n bytes of `fill_type` data as `type` and decompresses them; returns the stream size. */
static size_t round_trip(size_t n, int fill_type, int type, int threads) {
  unsigned char* src = guarded_alloc(n);
  fill(src, n, fill_type);
  size_t bound = 0;
  CHECK(zipccl_max_compressed_size(n, &bound) == ZIPCCL_OK);
  unsigned char* stream = guarded_alloc(bound);
  size_t written = 0;
  CHECK(zipccl_compress(src, n, stream, bound, &written, type, 0, threads, ZIPCCL_ISA_AUTO) == ZIPCCL_OK);
  CHECK(written > 0 && written <= bound);
  CHECK(guard_intact(stream, bound));

  size_t count = 0, decoded = 0;
  CHECK(zipccl_frames(stream, written, NULL, 0, &count, &decoded) == ZIPCCL_OK);
  CHECK(decoded == n);
  CHECK(count == (n == 0 ? 1 : (n + ZIPCCL_FRAME_INPUT - 1) / ZIPCCL_FRAME_INPUT));

  unsigned char* back = guarded_alloc(n);
  size_t got = 0;
  CHECK(zipccl_decompress(stream, written, back, n, &got, threads, ZIPCCL_ISA_AUTO) == ZIPCCL_OK);
  CHECK(got == n);
  CHECK(n == 0 || memcmp(src, back, n) == 0);
  CHECK(guard_intact(back, n));
  free(src);
  free(stream);
  free(back);
  return written;
}

static void test_round_trips(void) {
  static const size_t kSizes[] = {0, 1, 2, 3, 7, 1023, 4096, 65537, 1000001};
  static const int kTypes[] = {ZIPCCL_TYPE_BF16, ZIPCCL_TYPE_FP16, ZIPCCL_TYPE_FP32, ZIPCCL_TYPE_NONE};
  for (size_t s = 0; s < sizeof kSizes / sizeof kSizes[0]; ++s)
    for (size_t t = 0; t < sizeof kTypes / sizeof kTypes[0]; ++t) {
      round_trip(kSizes[s], kTypes[t], kTypes[t], 1);
      round_trip(kSizes[s], kTypes[t], ZIPCCL_TYPE_AUTO, 1);
    }
  /* bf16 compresses; more than one frame, on several threads. */
  const size_t n = ZIPCCL_FRAME_INPUT * 2 + 12345;
  const size_t stream = round_trip(n, ZIPCCL_TYPE_BF16, ZIPCCL_TYPE_BF16, 4);
  CHECK(stream < n * 9 / 10);
  /* AUTO compresses bf16 data too (whichever type it detects). */
  CHECK(round_trip(1 << 20, ZIPCCL_TYPE_BF16, ZIPCCL_TYPE_AUTO, 1) < (1 << 20) * 9 / 10);
}

/* A bf16 stream of n bytes, for the malformed-input tests. */
static unsigned char* make_stream(size_t n, size_t* size) {
  unsigned char* src = guarded_alloc(n);
  fill(src, n, ZIPCCL_TYPE_BF16);
  size_t bound = 0;
  CHECK(zipccl_max_compressed_size(n, &bound) == ZIPCCL_OK);
  unsigned char* stream = guarded_alloc(bound);
  CHECK(zipccl_compress(src, n, stream, bound, size, ZIPCCL_TYPE_BF16, 0, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_OK);
  free(src);
  return stream;
}

static int is_format_error(int rc) {
  return rc <= ZIPCCL_ERR_TRUNCATED && rc >= ZIPCCL_ERR_CORRUPT;
}

static void test_malformed(void) {
  const size_t n = 1 << 18;
  size_t size = 0;
  unsigned char* stream = make_stream(n, &size);
  unsigned char* out = guarded_alloc(n);
  size_t got = 0, count = 0;

  /* Truncated: every prefix is an error with a message, and nothing past the output is written. */
  static const size_t kCuts[] = {1, 4, 8, 16, 31, 64, 1000};
  for (size_t i = 0; i < sizeof kCuts / sizeof kCuts[0]; ++i) {
    const size_t cut = kCuts[i] < size ? kCuts[i] : size - 1;
    int rc = zipccl_decompress(stream, cut, out, n, &got, 1, ZIPCCL_ISA_AUTO);
    CHECK(is_format_error(rc));
    CHECK(strlen(zipccl_last_error()) > 0);
    CHECK(strstr(zipccl_last_error(), "decompress: frame 0 at byte 0") != NULL);
    CHECK(is_format_error(zipccl_frames(stream, cut, NULL, 0, &count, NULL)));
  }
  CHECK(zipccl_decompress(stream, size - 1, out, n, &got, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_ERR_TRUNCATED);
  CHECK(zipccl_decompress(stream, 0, out, n, &got, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_ERR_TRUNCATED);

  /* Not a zipccl frame. */
  unsigned char junk[64];
  memset(junk, 'x', sizeof junk);
  CHECK(zipccl_decompress(junk, sizeof junk, out, n, &got, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_ERR_BAD_MAGIC);
  CHECK(strstr(zipccl_last_error(), "frame 0") != NULL);

  /* Corrupted: flip bytes of the body, one at a time; any outcome but a crash or an overflow is
   * allowed for a byte the format does not check, but flips in the header and block table must fail. */
  int errors = 0;
  for (size_t pos = 0; pos < size; pos += 1 + size / 97) {
    unsigned char* bad = guarded_alloc(size);
    memcpy(bad, stream, size);
    bad[pos] ^= 0x5A;
    const int rc = zipccl_decompress(bad, size, out, n, &got, 1, ZIPCCL_ISA_AUTO);
    if (rc != ZIPCCL_OK) {
      ++errors;
      CHECK(rc < 0);
      CHECK(strlen(zipccl_last_error()) > 0);
    }
    CHECK(guard_intact(out, n));
    free(bad);
  }
  CHECK(errors > 0);
  {
    unsigned char* bad = guarded_alloc(size);
    memcpy(bad, stream, size);
    bad[0] ^= 0xFF; /* the magic */
    CHECK(zipccl_decompress(bad, size, out, n, &got, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_ERR_BAD_MAGIC);
    free(bad);
  }
  /* A second, truncated frame after a good one names the second. */
  {
    unsigned char* two = guarded_alloc(size * 2);
    memcpy(two, stream, size);
    memcpy(two + size, stream, size);
    unsigned char* out2 = guarded_alloc(2 * n);
    CHECK(zipccl_decompress(two, 2 * size, out2, 2 * n, &got, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_OK &&
          got == 2 * n);
    CHECK(zipccl_decompress(two, 2 * size - 3, out2, 2 * n, &got, 1, ZIPCCL_ISA_AUTO) ==
          ZIPCCL_ERR_TRUNCATED);
    char want[64];
    snprintf(want, sizeof want, "frame 1 at byte %zu", size);
    CHECK(strstr(zipccl_last_error(), want) != NULL);
    free(two);
    free(out2);
  }
  /* Success clears the message. */
  CHECK(zipccl_decompress(stream, size, out, n, &got, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_OK);
  CHECK(zipccl_last_error()[0] == '\0');
  free(stream);
  free(out);
}

static void test_small_buffers(void) {
  const size_t n = 1 << 16;
  size_t size = 0;
  unsigned char* stream = make_stream(n, &size);

  /* decompress: one byte short writes nothing at all. */
  unsigned char* out = guarded_alloc(n - 1);
  memset(out, 0, n - 1);
  size_t got = 123;
  CHECK(zipccl_decompress(stream, size, out, n - 1, &got, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_ERR_BUFFER_TOO_SMALL);
  CHECK(strstr(zipccl_last_error(), "dst_capacity") != NULL);
  CHECK(guard_intact(out, n - 1));
  int untouched = 1;
  for (size_t i = 0; i < n - 1; ++i) untouched &= out[i] == 0;
  CHECK(untouched);
  free(out);

  /* compress: random bytes need the whole bound; any smaller buffer is an error, not an overflow. */
  unsigned char* noise = guarded_alloc(n);
  fill(noise, n, ZIPCCL_TYPE_NONE);
  size_t bound = 0;
  CHECK(zipccl_max_compressed_size(n, &bound) == ZIPCCL_OK);
  static const size_t kShort[] = {0, 1, 16, 1000};
  for (size_t i = 0; i < sizeof kShort / sizeof kShort[0]; ++i) {
    const size_t cap = n / 2 - kShort[i];
    unsigned char* dst = guarded_alloc(cap);
    size_t written = 0;
    CHECK(zipccl_compress(noise, n, dst, cap, &written, ZIPCCL_TYPE_NONE, 0, 1, ZIPCCL_ISA_AUTO) ==
          ZIPCCL_ERR_BUFFER_TOO_SMALL);
    CHECK(strstr(zipccl_last_error(), "too small") != NULL);
    CHECK(guard_intact(dst, cap));
    free(dst);
  }
  /* A capacity below the bound that still holds the stream succeeds (compressible data). */
  unsigned char* dst = guarded_alloc(size);
  size_t written = 0;
  unsigned char* src = guarded_alloc(n);
  g_rng = 777;
  fill(src, n, ZIPCCL_TYPE_BF16);
  size_t want = 0;
  unsigned char* full = guarded_alloc(bound);
  CHECK(zipccl_compress(src, n, full, bound, &want, ZIPCCL_TYPE_BF16, 0, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_OK);
  unsigned char* exact = guarded_alloc(want);
  CHECK(zipccl_compress(src, n, exact, want, &written, ZIPCCL_TYPE_BF16, 0, 1, ZIPCCL_ISA_AUTO) == ZIPCCL_OK);
  CHECK(written == want && memcmp(exact, full, want) == 0);
  CHECK(guard_intact(exact, want));
  free(exact);
  free(full);
  free(src);
  free(dst);
  free(noise);

  /* frames: a capacity of 1 for a 3-frame stream reports 3 and writes one. */
  const size_t big = ZIPCCL_FRAME_INPUT * 2 + 5;
  size_t big_size = 0;
  unsigned char* big_stream = make_stream(big, &big_size);
  zipccl_frame_info info[2];
  memset(info, 0xEE, sizeof info);
  size_t count = 0, decoded = 0;
  CHECK(zipccl_frames(big_stream, big_size, info, 1, &count, &decoded) == ZIPCCL_OK);
  CHECK(count == 3 && decoded == big);
  CHECK(info[0].kind == ZIPCCL_FRAME_CODED && info[0].elem_type == ZIPCCL_TYPE_BF16);
  CHECK(info[0].original_size == ZIPCCL_FRAME_INPUT && info[0].num_blocks > 0);
  CHECK(info[1].kind == (int32_t)0xEEEEEEEE);
  free(big_stream);
  free(stream);
}

static void test_arguments(void) {
  unsigned char buf[256] = {0};
  size_t written = 0, bound = 0;
  CHECK(zipccl_compress(buf, 16, buf + 64, 192, &written, 7, 0, 1, ZIPCCL_ISA_AUTO) ==
        ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(zipccl_last_error(), "elem_type") != NULL);
  CHECK(zipccl_compress(buf, 16, buf + 64, 192, &written, ZIPCCL_TYPE_BF16, 0, 0, ZIPCCL_ISA_AUTO) ==
        ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_compress(buf, 16, buf + 64, 192, &written, ZIPCCL_TYPE_BF16, 9, 1, ZIPCCL_ISA_AUTO) ==
        ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_compress(buf, 16, buf + 64, 192, &written, ZIPCCL_TYPE_BF16, 0, 1, 99) ==
        ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_compress(NULL, 16, buf, sizeof buf, &written, ZIPCCL_TYPE_BF16, 0, 1, ZIPCCL_ISA_AUTO) ==
        ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_compress(buf, 16, buf + 64, 192, NULL, ZIPCCL_TYPE_BF16, 0, 1, ZIPCCL_ISA_AUTO) ==
        ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_decompress(buf, 16, buf + 64, 192, &written, 1, -1) == ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_max_compressed_size((size_t)-1, &bound) == ZIPCCL_ERR_TOO_LARGE);
  CHECK(zipccl_max_compressed_size(0, NULL) == ZIPCCL_ERR_INVALID_ARGUMENT);
  /* Every kernel set (one the CPU lacks falls back) writes the same bytes. */
  unsigned char src[4096];
  g_rng = 99;
  fill(src, sizeof src, ZIPCCL_TYPE_BF16);
  CHECK(zipccl_max_compressed_size(sizeof src, &bound) == ZIPCCL_OK);
  unsigned char* ref = guarded_alloc(bound);
  unsigned char* other = guarded_alloc(bound);
  size_t ref_size = 0;
  CHECK(zipccl_compress(src, sizeof src, ref, bound, &ref_size, ZIPCCL_TYPE_BF16, 12, 1, ZIPCCL_ISA_SCALAR) ==
        ZIPCCL_OK);
  for (int isa = ZIPCCL_ISA_AUTO; isa <= ZIPCCL_ISA_NEON; ++isa) {
    CHECK(zipccl_compress(src, sizeof src, other, bound, &written, ZIPCCL_TYPE_BF16, 12, 1, isa) ==
          ZIPCCL_OK);
    CHECK(written == ref_size && memcmp(ref, other, written) == 0);
  }
  free(ref);
  free(other);
}

static void test_inspect(void) {
  const size_t n = 1 << 20;
  unsigned char* src = guarded_alloc(n);
  g_rng = 4242;
  fill(src, n, ZIPCCL_TYPE_BF16);
  zipccl_inspect_report r;
  /* AUTO: the type is detected (fill()'s bf16 has a constant fp16 exponent field, so that may be fp16),
   * and the frames it measures are the ones zipccl_compress writes. */
  CHECK(zipccl_inspect(src, n, ZIPCCL_TYPE_AUTO, 2, &r) == ZIPCCL_OK);
  CHECK(r.type_detected == 1 && r.elem_type != ZIPCCL_TYPE_AUTO && r.bytes == n);
  size_t bound = 0, written = 0;
  CHECK(zipccl_max_compressed_size(n, &bound) == ZIPCCL_OK);
  unsigned char* stream = guarded_alloc(bound);
  CHECK(zipccl_compress(src, n, stream, bound, &written, ZIPCCL_TYPE_AUTO, 0, 1, ZIPCCL_ISA_AUTO) ==
        ZIPCCL_OK);
  CHECK(r.compressed_bytes == written && r.ratio > 1.1);

  CHECK(zipccl_inspect(src, n, ZIPCCL_TYPE_BF16, 2, &r) == ZIPCCL_OK);
  CHECK(r.elem_type == ZIPCCL_TYPE_BF16 && r.type_detected == 0 && r.frame_kind == ZIPCCL_FRAME_CODED);
  CHECK(r.exponent_bits == 8 && r.exponent_bias == 127 && r.ratio > 1.1 && r.bound_ratio > 1.0);
  uint64_t elements = 0;
  for (int i = 0; i < 256; ++i) elements += r.exponent_counts[i];
  CHECK(elements == n / 2);
  /* fill()'s bf16: exponent fields 0x78..0x7F (biased), i.e. -7..0. */
  CHECK(r.has_exponent_range && r.exponent_min == -7 && r.exponent_max == 0 && r.distinct_exponents == 8);
  CHECK(r.exponent_summary[0] != '\0' && strstr(r.exponent_summary, "-7..0") != NULL);
  free(stream);

  CHECK(zipccl_inspect(src, 1001, ZIPCCL_TYPE_NONE, 1, &r) == ZIPCCL_OK);
  CHECK(r.elem_type == ZIPCCL_TYPE_NONE && r.exponent_bits == 0 && r.bytes == 1001);
  CHECK(zipccl_inspect(src, n, 4, 1, &r) == ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(zipccl_inspect(src, n, ZIPCCL_TYPE_BF16, 1, NULL) == ZIPCCL_ERR_INVALID_ARGUMENT);
  free(src);
}

static void test_library(void) {
  CHECK(zipccl_abi_version() == ZIPCCL_C_ABI_VERSION);
  const char* s = NULL;
  CHECK(zipccl_version(&s) == ZIPCCL_OK && s && s[0] >= '0' && s[0] <= '9');
  printf("version %s, ", s);
  CHECK(zipccl_simd_path(&s) == ZIPCCL_OK);
  CHECK(strcmp(s, "avx512") == 0 || strcmp(s, "avx2") == 0 || strcmp(s, "neon") == 0 ||
        strcmp(s, "scalar") == 0);
  printf("simd %s\n", s);

  size_t count = 0;
  CHECK(zipccl_setting_count(&count) == ZIPCCL_OK);
  CHECK(count >= 10);
  int has_compress = 0, has_min_bytes = 0;
  for (size_t i = 0; i < count; ++i) {
    const char *name = NULL, *values = NULL, *def = NULL, *doc = NULL;
    CHECK(zipccl_setting(i, &name, &values, &def, &doc) == ZIPCCL_OK);
    /* ZIPCCL_*, and the NCCL_IB_* variables the plugin reads itself. */
    CHECK(name && (strncmp(name, "ZIPCCL_", 7) == 0 || strncmp(name, "NCCL_", 5) == 0));
    CHECK(values && def && doc && doc[0] != '\0');
    has_compress |= strcmp(name, "ZIPCCL_COMPRESS") == 0;
    has_min_bytes |= strcmp(name, "ZIPCCL_MIN_BYTES") == 0;
  }
  CHECK(has_compress && has_min_bytes);
  printf("%zu settings\n", count);
  CHECK(zipccl_setting(count, NULL, NULL, NULL, NULL) == ZIPCCL_ERR_INVALID_ARGUMENT);
  CHECK(strstr(zipccl_last_error(), "out of range") != NULL);
}

int main(void) {
  test_library();
  test_arguments();
  test_round_trips();
  test_malformed();
  test_small_buffers();
  test_inspect();
  return check_exit("capi_test");
}
