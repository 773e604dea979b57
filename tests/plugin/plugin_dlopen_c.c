/* Plain-C consumer: loads the plugin the way NCCL does (dlopen + dlsym of ncclNetPlugin_v11 .. v7),
 * using only the C ABI headers, and runs init/devices/getProperties/listen/closeListen. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nccl/net_v11.h"
#include "nccl/net_v7.h"

static void logger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                   ...) {
  (void)flags;
  if (level != NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "WARN %s:%d ", file, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : ZIPCCL_PLUGIN_PATH;
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  const ncclNet_v11_t* v11 = (const ncclNet_v11_t*)dlsym(lib, "ncclNetPlugin_v11");
  const ncclNet_v7_t* v7 = (const ncclNet_v7_t*)dlsym(lib, "ncclNetPlugin_v7");
  if (!v11 || !v7 || strcmp(v11->name, "zipccl") != 0 || strcmp(v7->name, "zipccl") != 0) {
    fprintf(stderr, "symbols or names missing\n");
    return 1;
  }
  if (dlsym(lib, "ncclNetPlugin_v6") || dlsym(lib, "_ZN6zipccl5codec6encodeEPKvmPvmPmRKNS0_13EncodeOptionsE")) {
    fprintf(stderr, "unexpected symbol exported\n");
    return 1;
  }
  void* ctx = NULL;
  ncclNetCommConfig_v11_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  if (v11->init(&ctx, 42, &cfg, logger, NULL) != ncclSuccess || !ctx) return 1;
  if (v7->init(logger) != ncclSuccess) return 1;
  int n = 0;
  if (v11->devices(&n) != ncclSuccess || n < 1) return 1;
  ncclNetProperties_v11_t props;
  memset(&props, 0, sizeof props);
  if (v11->getProperties(0, &props) != ncclSuccess || !props.name || props.ptrSupport != NCCL_PTR_HOST) return 1;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen_comm = NULL;
  if (v11->listen(ctx, 0, handle, &listen_comm) != ncclSuccess || !listen_comm) return 1;
  if (v11->closeListen(listen_comm) != ncclSuccess) return 1;
  if (v11->finalize(ctx) != ncclSuccess) return 1;
  printf("ok: %d device(s), dev0 %s %d Mbit/s\n", n, props.name, props.speed);
  return 0;
}
