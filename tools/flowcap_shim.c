/* LD_PRELOAD shim: caps every TCP socket of the process at a per-flow rate, as clouds cap each TCP
 * flow (5-10 Gbit/s), by setting SO_MAX_PACING_RATE on it. TCP's internal pacing honours the cap
 * without the fq qdisc (measured: 25 MB/s set gives 25 MB/s over a veth pair).
 *
 *   cc -O2 -shared -fPIC -o flowcap_shim.so tools/flowcap_shim.c -ldl
 *   FLOWCAP_RATE=1gbit LD_PRELOAD=$PWD/flowcap_shim.so PROGRAM ...
 *
 * FLOWCAP_RATE: bytes per second as a plain number, or a number with a kbit/mbit/gbit suffix (bits);
 * or a comma list of such rates, taken in turn by the sockets as they are made.
 * Unset, empty or malformed: the shim does nothing (a malformed value says so once on stderr).
 * Covers socket() (connecting sides) and accept()/accept4() (accepted sockets send too). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#ifndef SO_MAX_PACING_RATE
#define SO_MAX_PACING_RATE 47
#endif

#define FLOWCAP_MAX_RATES 16

/* FLOWCAP_RATE may list several rates ("500mbit,125mbit"): the process's TCP sockets take them in
 * turn, in the order they are made, so some flows are slower than others, as flows that hash onto a
 * congested path of a multipath fabric are. */
static unsigned long long rates[FLOWCAP_MAX_RATES];
static int nrates = -1;

static int parse_rate(const char* v, size_t n, unsigned long long* out) {
  char buf[64];
  if (n == 0 || n >= sizeof buf) return 0;
  memcpy(buf, v, n);
  buf[n] = 0;
  char* end = NULL;
  double x = strtod(buf, &end);
  double mul = 1;
  if (end && *end) {
    if (!strcasecmp(end, "kbit")) mul = 1e3 / 8;
    else if (!strcasecmp(end, "mbit")) mul = 1e6 / 8;
    else if (!strcasecmp(end, "gbit")) mul = 1e9 / 8;
    else return 0;
  }
  if (end == buf || !(x > 0)) return 0;
  *out = (unsigned long long)(x * mul);
  return 1;
}

static unsigned long long flowcap_rate(void) {
  static unsigned long next = 0;
  if (nrates < 0) {
    nrates = 0;
    const char* v = getenv("FLOWCAP_RATE");
    if (!v || !*v) return 0;
    for (const char* p = v; nrates < FLOWCAP_MAX_RATES;) {
      const char* c = strchr(p, ',');
      size_t n = c ? (size_t)(c - p) : strlen(p);
      if (!parse_rate(p, n, &rates[nrates])) {
        fprintf(stderr, "flowcap_shim: FLOWCAP_RATE='%s' is not a rate or a list of rates; not capping\n", v);
        nrates = 0;
        return 0;
      }
      ++nrates;
      if (!c) break;
      p = c + 1;
    }
  }
  if (nrates == 0) return 0;
  return rates[__atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % (unsigned long)nrates];
}

static void flowcap_apply(int fd) {
  if (fd < 0) return;
  int type = 0, proto = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) return;
  len = sizeof proto;
  if (getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP) return;
  unsigned long long rate = flowcap_rate();
  if (rate == 0) return;
  /* The kernel takes a u32 (or, since 5.x, a u64) in bytes per second; clamp to u32. */
  unsigned int r32 = rate > 0xffffffffull ? 0xffffffffu : (unsigned int)rate;
  setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &r32, sizeof r32);
}

int socket(int domain, int type, int protocol) {
  static int (*real)(int, int, int) = NULL;
  if (!real) real = (int (*)(int, int, int))dlsym(RTLD_NEXT, "socket");
  int fd = real(domain, type, protocol);
  if (domain == AF_INET || domain == AF_INET6) flowcap_apply(fd);
  return fd;
}

int accept(int fd, struct sockaddr* addr, socklen_t* len) {
  static int (*real)(int, struct sockaddr*, socklen_t*) = NULL;
  if (!real) real = (int (*)(int, struct sockaddr*, socklen_t*))dlsym(RTLD_NEXT, "accept");
  int c = real(fd, addr, len);
  flowcap_apply(c);
  return c;
}

int accept4(int fd, struct sockaddr* addr, socklen_t* len, int flags) {
  static int (*real)(int, struct sockaddr*, socklen_t*, int) = NULL;
  if (!real) real = (int (*)(int, struct sockaddr*, socklen_t*, int))dlsym(RTLD_NEXT, "accept4");
  int c = real(fd, addr, len, flags);
  flowcap_apply(c);
  return c;
}
