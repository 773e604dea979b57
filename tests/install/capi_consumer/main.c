/* Round-trips a buffer through the installed C API. Exit status 0 only if it works. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "zipccl/zipccl_c.h"

int main(void) {
  enum { kN = 1 << 16 };
  static unsigned short src[kN], back[kN];
  for (size_t i = 0; i < kN; ++i) src[i] = (unsigned short)(0x3f00 | ((i * 2654435761u) >> 24));
  size_t bound = 0, written = 0, got = 0;
  if (zipccl_abi_version() != ZIPCCL_C_ABI_VERSION ||
      zipccl_max_compressed_size(sizeof src, &bound) != ZIPCCL_OK) {
    fprintf(stderr, "libzipccl.so: ABI %d, header %d\n", zipccl_abi_version(), ZIPCCL_C_ABI_VERSION);
    return 1;
  }
  unsigned char* stream = malloc(bound);
  if (!stream ||
      zipccl_compress(src, sizeof src, stream, bound, &written, ZIPCCL_TYPE_BF16, 0, 1, ZIPCCL_ISA_AUTO) !=
          ZIPCCL_OK ||
      zipccl_decompress(stream, written, back, sizeof back, &got, 1, ZIPCCL_ISA_AUTO) != ZIPCCL_OK ||
      got != sizeof src || memcmp(src, back, sizeof src) != 0) {
    fprintf(stderr, "round trip failed: %s\n", zipccl_last_error());
    return 1;
  }
  printf("capi: %zu -> %zu bytes, ABI %d\n", sizeof src, written, zipccl_abi_version());
  free(stream);
  return 0;
}
