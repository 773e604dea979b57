/* A stand-in libcudart.so for test machines without a CUDA driver, so that a net plugin built with a
 * dynamically loaded CUDA runtime (aws-ofi-nccl's --enable-cudart-dynamic) gets past its CUDA init and
 * runs its host-memory path. It reports a runtime and a driver (version 13000) and answers every other
 * driver entry point it hands out with CUDA_ERROR_NO_DEVICE; no plugin calls one on host memory after
 * init. Test-only: tools/ofi_build.sh builds it beside the plugin, named libcudart.so only, so it
 * shadows nothing but the runtime that is absent anyway. */
#include <string.h>

#define kCudaSuccess 0
#define kCudaErrorNoDevice 100 /* CUDA_ERROR_NO_DEVICE (driver) */
#define kStandInVersion 13000
#define kEntryPointFound 0 /* cudaDriverEntryPointSuccess */

__attribute__((visibility("default"))) int cudaRuntimeGetVersion(int* version) {
  if (version) *version = kStandInVersion;
  return kCudaSuccess;
}

static int driver_version(int* version) {
  if (version) *version = kStandInVersion;
  return kCudaSuccess;
}

/* Every other entry point: callers pass their own arguments; on the supported ABIs (caller-cleaned
 * stacks, arguments in registers) a function that reads none of them may be called with any. */
static int no_device(void) { return kCudaErrorNoDevice; }

static int entry_point(const char* symbol, void** fn, int* status) {
  if (!fn) return 1; /* cudaErrorInvalidValue */
  *fn = (symbol && strcmp(symbol, "cuDriverGetVersion") == 0) ? (void*)driver_version : (void*)no_device;
  if (status) *status = kEntryPointFound;
  return kCudaSuccess;
}

__attribute__((visibility("default"))) int cudaGetDriverEntryPoint(const char* symbol, void** fn,
                                                                   unsigned long long flags, int* status) {
  (void)flags;
  return entry_point(symbol, fn, status);
}

__attribute__((visibility("default"))) int cudaGetDriverEntryPointByVersion(const char* symbol, void** fn,
                                                                            unsigned int version,
                                                                            unsigned long long flags,
                                                                            int* status) {
  (void)version;
  (void)flags;
  return entry_point(symbol, fn, status);
}
