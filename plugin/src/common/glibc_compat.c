/* Definitions of the few glibc symbols newer than 2.28 that the shipped binaries still reference
 * when they are linked against glibc 2.28 (tools/cmake/glibc_baseline.cmake): the objects are
 * compiled with this machine's headers and GCC's static libstdc++/libgcc_eh, which name them. Each
 * is hidden, so it binds only inside the plugin or the tool and never replaces the host's copy for
 * anyone else, and each does what glibc's own does, through interfaces 2.28 already has.
 * x86_64 and aarch64: the stat wrappers below name each one's _STAT_VER and symbol version. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/auxv.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ZIPCCL_HIDDEN __attribute__((visibility("hidden")))

/* libstdc++ (GCC 11+) reads this to skip atomics while a process has one thread. 0 means "maybe
 * threaded": reference counts and shared_ptr always use atomic operations, which is correct in
 * every process and costs only what it costs in any threaded one (ours always are). */
ZIPCCL_HIDDEN char __libc_single_threaded = 0;

/* std::random_device uses arc4random when the CPU has no RDSEED/RDRAND. Like glibc 2.36's, it reads
 * the kernel's CSPRNG through getrandom (glibc 2.25, Linux 3.17) and falls back to /dev/urandom where
 * the kernel lacks the call. Where neither can be had (a sandbox denying both), glibc ends the
 * process; a plugin must never end a training job, and its callers (connection nonces, queue-pair
 * sequence numbers, a socket RNG's seed) need values that differ, not secrets, so the last resort is
 * a mix of the clock, the process and a counter. */
static uint32_t last_resort(void) {
  static uint64_t counter;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t z = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
  z ^= ((uint64_t)getpid() << 32) ^ __atomic_add_fetch(&counter, 0x9E3779B97F4A7C15ull, __ATOMIC_RELAXED);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull; /* splitmix64's finaliser */
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return (uint32_t)(z ^ (z >> 31));
}

static int fill_from_urandom(void *buf, size_t len) {
  int fd;
  do {
    fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;
  unsigned char *p = buf;
  while (len > 0) {
    ssize_t n = read(fd, p, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      close(fd);
      return -1;
    }
    p += n;
    len -= (size_t)n;
  }
  close(fd);
  return 0;
}

ZIPCCL_HIDDEN uint32_t arc4random(void) {
  uint32_t value;
  unsigned char *p = (unsigned char *)&value;
  size_t left = sizeof value;
  int saved_errno = errno;
  while (left > 0) {
    ssize_t n = getrandom(p, left, 0);
    if (n > 0) {
      p += n;
      left -= (size_t)n;
    } else if (n < 0 && errno == EINTR) {
      continue;
    } else {
      if (fill_from_urandom(p, left) != 0) {
        const uint32_t v = last_resort();
        for (size_t i = 0; i < left; ++i) p[i] = (unsigned char)(v >> (8 * (i % 4)));
      }
      left = 0;
    }
  }
  errno = saved_errno;
  return value;
}

/* From glibc 2.33 the stat family is real functions; up to 2.32 the headers made them inline calls
 * to __xstat/__fxstat/__lxstat (and the *64 forms) with a structure version, which every glibc since
 * exports under the architecture's first symbol version. These are exactly what the 2.28 headers
 * compiled to. On both architectures struct stat and struct stat64 have the same layout; the
 * structure version is _STAT_VER_LINUX (1) on x86_64 and _STAT_VER_KERNEL (0, the generic Linux
 * ABI's only one) on aarch64, whose first version is GLIBC_2.17. */
#if defined(__x86_64__)
enum { kStatVerLinux = 1 };
#define ZIPCCL_GLIBC_FIRST "GLIBC_2.2.5"
#define ZIPCCL_GLIBC_FXSTATAT "GLIBC_2.4"
#elif defined(__aarch64__)
enum { kStatVerLinux = 0 };
#define ZIPCCL_GLIBC_FIRST "GLIBC_2.17"
#define ZIPCCL_GLIBC_FXSTATAT "GLIBC_2.17"
#else
#error "glibc_compat.c: the stat structure version and symbol versions of this architecture are not known"
#endif
extern int __xstat(int ver, const char *path, struct stat *buf);
extern int __fxstat(int ver, int fd, struct stat *buf);
extern int __lxstat(int ver, const char *path, struct stat *buf);
extern int __fxstatat(int ver, int dirfd, const char *path, struct stat *buf, int flags);
extern int __xstat64(int ver, const char *path, struct stat64 *buf);
extern int __fxstat64(int ver, int fd, struct stat64 *buf);
extern int __lxstat64(int ver, const char *path, struct stat64 *buf);
/* Linking against glibc 2.33+ these exist only as compatibility versions; name the version so the
 * file also links there (against 2.28 it is the default version anyway). */
__asm__(".symver __xstat,__xstat@" ZIPCCL_GLIBC_FIRST);
__asm__(".symver __fxstat,__fxstat@" ZIPCCL_GLIBC_FIRST);
__asm__(".symver __lxstat,__lxstat@" ZIPCCL_GLIBC_FIRST);
__asm__(".symver __fxstatat,__fxstatat@" ZIPCCL_GLIBC_FXSTATAT);
__asm__(".symver __xstat64,__xstat64@" ZIPCCL_GLIBC_FIRST);
__asm__(".symver __fxstat64,__fxstat64@" ZIPCCL_GLIBC_FIRST);
__asm__(".symver __lxstat64,__lxstat64@" ZIPCCL_GLIBC_FIRST);

ZIPCCL_HIDDEN int stat(const char *path, struct stat *buf) { return __xstat(kStatVerLinux, path, buf); }
ZIPCCL_HIDDEN int fstat(int fd, struct stat *buf) { return __fxstat(kStatVerLinux, fd, buf); }
ZIPCCL_HIDDEN int lstat(const char *path, struct stat *buf) { return __lxstat(kStatVerLinux, path, buf); }
ZIPCCL_HIDDEN int fstatat(int dirfd, const char *path, struct stat *buf, int flags) {
  return __fxstatat(kStatVerLinux, dirfd, path, buf, flags);
}
ZIPCCL_HIDDEN int stat64(const char *path, struct stat64 *buf) { return __xstat64(kStatVerLinux, path, buf); }
ZIPCCL_HIDDEN int fstat64(int fd, struct stat64 *buf) { return __fxstat64(kStatVerLinux, fd, buf); }
ZIPCCL_HIDDEN int lstat64(const char *path, struct stat64 *buf) { return __lxstat64(kStatVerLinux, path, buf); }

/* GCC 12's unwinder (libgcc_eh, linked statically) finds the .eh_frame_hdr of the object holding a
 * PC only through _dl_find_object when the headers it was built with declare it, and reports "no
 * FDE" - std::terminate for any throw - when the call fails. This is glibc 2.35's contract for it,
 * computed the way the unwinder itself did before 2.35: walk the loaded objects with
 * dl_iterate_phdr; the object whose mapping (first PT_LOAD page .. end of the last PT_LOAD, as the
 * loader's l_map_start/l_map_end) holds the address is the answer, its PT_GNU_EH_FRAME segment the
 * unwind table. Returns 0 and fills *result, or -1 when no object holds the address. Neither x86_64
 * nor aarch64 has dlfo_eh_dbase (DLFO_STRUCT_HAS_EH_DBASE is 0). */
struct find_object_query {
  uintptr_t address;
  uintptr_t page_size;
  struct dl_find_object *result;
};

static int find_object_in(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  struct find_object_query *q = arg;
  uintptr_t map_start = UINTPTR_MAX;
  uintptr_t map_end = 0;
  const ElfW(Phdr) *eh_frame = NULL;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type == PT_LOAD) {
      uintptr_t start = info->dlpi_addr + (ph->p_vaddr & ~(q->page_size - 1));
      uintptr_t end = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
      if (start < map_start) map_start = start;
      if (end > map_end) map_end = end;
    } else if (ph->p_type == PT_GNU_EH_FRAME) {
      eh_frame = ph;
    }
  }
  if (q->address < map_start || q->address >= map_end) return 0;
  q->result->dlfo_flags = 0;
  q->result->dlfo_map_start = (void *)map_start;
  q->result->dlfo_map_end = (void *)map_end;
  q->result->dlfo_link_map = NULL;
  q->result->dlfo_eh_frame = eh_frame ? (void *)(info->dlpi_addr + eh_frame->p_vaddr) : NULL;
  return 1;
}

ZIPCCL_HIDDEN int _dl_find_object(void *address, struct dl_find_object *result) {
  unsigned long page_size = getauxval(AT_PAGESZ);
  struct find_object_query q = {(uintptr_t)address, page_size ? page_size : 4096, result};
  if (dl_iterate_phdr(find_object_in, &q) == 0) return -1;
  /* The unwinder reads only dlfo_eh_frame; the link map is filled for any other caller. */
  Dl_info info;
  struct link_map *map = NULL;
  if (dladdr1(address, &info, (void **)&map, RTLD_DL_LINKMAP) != 0) result->dlfo_link_map = map;
  return 0;
}
