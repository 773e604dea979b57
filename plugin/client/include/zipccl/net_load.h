/* Finding and opening an NCCL net plugin the way NCCL does, and choosing its table: the part of the
 * net client (net_client.h) that plain C can call. NCCL loads plugins from C-level symbols through
 * dlopen/dlsym; a C program that includes only this header and the ABI headers (plugin/nccl/) proves
 * a plugin can be consumed without C++.
 *
 * Everything is static inline so the header can be included by a C program, the C++ client, the
 * tools and by libnccl-net-zipccl.so itself without a library to link (only libdl). */
#ifndef ZIPCCL_NET_LOAD_H_
#define ZIPCCL_NET_LOAD_H_

#include <dlfcn.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* The ncclNet_vN tables this client knows: every version from OLDEST to NEWEST. The only place the
 * supported range is written; the C++ client's dispatch is generated from it. */
#define ZIPCCL_NET_ABI_OLDEST 7
#define ZIPCCL_NET_ABI_NEWEST 12

#define ZIPCCL_NET_PATH_MAX 1024
#define ZIPCCL_NET_ERROR_MAX 1024

/* What zipccl_net_load found: the library, its newest known table and where it came from. */
typedef struct {
  void* lib;                        /* dlopen handle, or NULL */
  const void* table;                /* the ncclNet_v<version>_t table, or NULL */
  int version;                      /* the table's ABI version; 0 without a table */
  char opened[ZIPCCL_NET_PATH_MAX]; /* the name dlopen succeeded with */
  char error[ZIPCCL_NET_ERROR_MAX]; /* why lib or table is NULL; empty on success */
} zipccl_net_plugin;

/* Appends s to the NUL-terminated dst (capacity cap), truncating. */
static inline void zipccl_net_append_(char* dst, size_t cap, const char* s) {
  size_t n = strlen(dst);
  size_t k = strlen(s);
  if (n + 1 >= cap) return;
  if (k > cap - n - 1) k = cap - n - 1;
  memcpy(dst + n, s, k);
  dst[n + k] = '\0';
}

static inline void zipccl_net_copy_(char* dst, size_t cap, const char* s) {
  if (!cap) return;
  dst[0] = '\0';
  zipccl_net_append_(dst, cap, s);
}

/* dlopen's "cannot open ... No such file or directory" for this name: the loader did not find it, as
 * opposed to finding it and failing (missing dependency, undefined symbol), which NCCL reports. */
static inline int zipccl_net_not_found_(const char* err, const char* name) {
  return err && strstr(err, name) && strstr(err, "No such file or directory");
}

/* NCCL_NET_PLUGIN's rule: the name is tried as given; when that fails and it is neither a path (has a
 * '/') nor a library file name (lib*.so), libnccl-net-<name>.so is tried. An empty name means
 * libnccl-net.so. RTLD_LOCAL: the plugin's symbols do not leak into the process. */
static inline void* zipccl_net_dlopen(const char* name, char* opened, size_t opened_cap, char* error,
                                      size_t error_cap) {
  char candidates[2][ZIPCCL_NET_PATH_MAX];
  int count = 0;
  size_t len = name ? strlen(name) : 0;
  int n;
  if (opened_cap) opened[0] = '\0';
  if (error_cap) error[0] = '\0';
  if (len == 0) {
    zipccl_net_copy_(candidates[count++], ZIPCCL_NET_PATH_MAX, "libnccl-net.so");
  } else {
    zipccl_net_copy_(candidates[count++], ZIPCCL_NET_PATH_MAX, name);
    if (!strchr(name, '/') &&
        (strncmp(name, "lib", 3) != 0 || len < 3 || strcmp(name + len - 3, ".so") != 0)) {
      zipccl_net_copy_(candidates[count], ZIPCCL_NET_PATH_MAX, "libnccl-net-");
      zipccl_net_append_(candidates[count], ZIPCCL_NET_PATH_MAX, name);
      zipccl_net_append_(candidates[count++], ZIPCCL_NET_PATH_MAX, ".so");
    }
  }
  char missing[ZIPCCL_NET_ERROR_MAX] = "";
  char failed[ZIPCCL_NET_ERROR_MAX] = "";
  for (n = 0; n < count; ++n) {
    void* lib = dlopen(candidates[n], RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      zipccl_net_copy_(opened, opened_cap, candidates[n]);
      return lib;
    }
    const char* err = dlerror();
    if (zipccl_net_not_found_(err, candidates[n])) {
      zipccl_net_append_(missing, sizeof missing, missing[0] ? ", " : "");
      zipccl_net_append_(missing, sizeof missing, candidates[n]);
    } else if (!failed[0]) {
      zipccl_net_copy_(failed, sizeof failed, err ? err : candidates[n]);
    }
  }
  if (failed[0]) {
    zipccl_net_copy_(error, error_cap, failed);
  } else {
    zipccl_net_copy_(error, error_cap, "not found on the loader path (tried ");
    zipccl_net_append_(error, error_cap, missing);
    zipccl_net_append_(error, error_cap, ")");
  }
  return NULL;
}

/* The newest table the library exports between ZIPCCL_NET_ABI_OLDEST and `newest` (NCCL's order:
 * newest first), or NULL. */
static inline const void* zipccl_net_table(void* lib, int newest, int* version) {
  int v;
  char sym[32];
  if (newest > ZIPCCL_NET_ABI_NEWEST) newest = ZIPCCL_NET_ABI_NEWEST;
  for (v = newest; v >= ZIPCCL_NET_ABI_OLDEST; --v) {
    snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", v);
    const void* t = dlsym(lib, sym);
    if (t) {
      if (version) *version = v;
      return t;
    }
  }
  if (version) *version = 0;
  return NULL;
}

/* The table of exactly `version`, or NULL. */
static inline const void* zipccl_net_table_exact(void* lib, int version) {
  char sym[32];
  if (version < ZIPCCL_NET_ABI_OLDEST || version > ZIPCCL_NET_ABI_NEWEST) return NULL;
  snprintf(sym, sizeof sym, "ncclNetPlugin_v%d", version);
  return dlsym(lib, sym);
}

/* Opens `name` (see zipccl_net_dlopen) and takes its newest table up to `newest`. Returns 0 when both
 * were found; otherwise -1 with out->error naming the library and the reason. The library stays
 * loaded either way when it opened (out->lib): plugins start threads that must not lose their code. */
static inline int zipccl_net_load(const char* name, int newest, zipccl_net_plugin* out) {
  memset(out, 0, sizeof *out);
  char why[ZIPCCL_NET_ERROR_MAX];
  const char* shown = name && *name ? name : "libnccl-net.so";
  out->lib = zipccl_net_dlopen(name, out->opened, sizeof out->opened, why, sizeof why);
  if (!out->lib) {
    zipccl_net_copy_(out->error, sizeof out->error, "cannot load NCCL net plugin ");
    zipccl_net_append_(out->error, sizeof out->error, shown);
    zipccl_net_append_(out->error, sizeof out->error, ": ");
    zipccl_net_append_(out->error, sizeof out->error, why);
    return -1;
  }
  out->table = zipccl_net_table(out->lib, newest, &out->version);
  if (!out->table) {
    char range[64];
    snprintf(range, sizeof range, " exports no ncclNetPlugin_v%d..v%d table", ZIPCCL_NET_ABI_OLDEST,
             newest < ZIPCCL_NET_ABI_NEWEST ? newest : ZIPCCL_NET_ABI_NEWEST);
    zipccl_net_copy_(out->error, sizeof out->error, out->opened);
    zipccl_net_append_(out->error, sizeof out->error, range);
    zipccl_net_append_(out->error, sizeof out->error, ": not an NCCL net plugin this client can use");
    return -1;
  }
  return 0;
}

/* `name`, the first member of every version's table. */
static inline const char* zipccl_net_table_name(const void* table) {
  const char* const* name = (const char* const*)table;
  return table && *name ? *name : "(null)";
}

#endif
