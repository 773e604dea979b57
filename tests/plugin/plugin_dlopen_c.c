/* Plain-C consumer. NCCL's plugin contract is C: a table of C function pointers found by dlsym. This
 * program uses only C - the ABI headers and the net client's C subset (zipccl/net_load.h: find,
 * open, choose the newest table) - and calls the chosen v12 table and the oldest (v7) directly,
 * with no C++ adapter between: init/devices/getProperties/listen/closeListen/finalize. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "nccl/net_v12.h"
#include "nccl/net_v7.h"
#include "zipccl/net_load.h"

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
  zipccl_net_plugin plugin;
  if (zipccl_net_load(path, ZIPCCL_NET_ABI_NEWEST, &plugin) != 0) {
    fprintf(stderr, "%s\n", plugin.error);
    return 1;
  }
  if (plugin.version != 12) {
    fprintf(stderr, "newest table is v%d, expected v12\n", plugin.version);
    return 1;
  }
  const ncclNet_v12_t* v12 = (const ncclNet_v12_t*)plugin.table;
  const ncclNet_v7_t* v7 = (const ncclNet_v7_t*)zipccl_net_table_exact(plugin.lib, 7);
  if (!v7 || strcmp(v12->name, "zipccl") != 0 || strcmp(v7->name, "zipccl") != 0) {
    fprintf(stderr, "symbols or names missing\n");
    return 1;
  }
  if (dlsym(plugin.lib, "ncclNetPlugin_v6") ||
      dlsym(plugin.lib, "_ZN6zipccl5codec6encodeEPKvmPvmPmRKNS0_13EncodeOptionsE")) {
    fprintf(stderr, "unexpected symbol exported\n");
    return 1;
  }
  void* ctx = NULL;
  ncclNetCommConfig_v12_t cfg = {NCCL_NET_TRAFFIC_CLASS_UNDEF};
  if (v12->init(&ctx, 42, &cfg, logger, NULL) != ncclSuccess || !ctx) return 1;
  if (v7->init(logger) != ncclSuccess) return 1;
  int n = 0;
  if (v12->devices(&n) != ncclSuccess || n < 1) return 1;
  ncclNetProperties_v12_t props;
  memset(&props, 0, sizeof props);
  if (v12->getProperties(0, &props) != ncclSuccess || !props.name || props.ptrSupport != NCCL_PTR_HOST)
    return 1;
  if (props.railId != NCCL_NET_ID_UNDEF || props.planeId != NCCL_NET_ID_UNDEF || props.vProps.ndevs != 1) {
    fprintf(stderr, "v12 properties: rail %d plane %d vdevs %d\n", props.railId, props.planeId,
            props.vProps.ndevs);
    return 1;
  }
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen_comm = NULL;
  if (v12->listen(ctx, 0, handle, &listen_comm) != ncclSuccess || !listen_comm) return 1;
  if (v12->closeListen(listen_comm) != ncclSuccess) return 1;
  if (v12->finalize(ctx) != ncclSuccess) return 1;
  printf("ok: %s through ncclNetPlugin_v%d, %d device(s), dev0 %s %d Mbit/s\n", plugin.opened, plugin.version,
         n, props.name, props.speed);
  return 0;
}
