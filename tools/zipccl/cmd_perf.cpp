// zipccl perf: two processes drive libnccl-net-zipccl.so exactly as NCCL's proxy does (loaded through
// the net client with its newest table, listen/connect/accept loops, regMr, several requests in
// flight, test polling)
// and report goodput raw vs compressed, the wire ratio and CPU use, beside a plain TCP stream between
// the same two processes. Every received message is checked bit for bit.
//
// Each run forks a fresh receiver and sender (the plugin reads its settings once per process), over
// loopback by default or across two network namespaces (--netns, see tools/veth_perf.sh).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "commands.h"
#include "common/units.h"
#include "exit_status.h"
#include "zipccl/net_client.h"

namespace zipccl {
namespace tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  size_t size = 4 << 20;
  int inflight = 8;
  double seconds = 2.0;
  std::vector<std::string> data = {"bf16"};
  std::vector<std::string> modes = {"never", "always", "auto"};
  std::string plugin;
  std::string addr = "127.0.0.1";
  std::string ifname;
  std::string recv_ns, send_ns;
  bool baseline = true;
  bool verbose = false;
  int repeat = 1;
  int idle_sleep_us = 0;  // 0: sched_yield when a polling pass made no progress, as NCCL's proxy does
  bool lockstep = false;  // one message at a time: the next isend only after the receiver completed it
  std::string json;
};

// What a child reports back through its pipe.
struct Result {
  int ok;
  double seconds;  // measured window
  uint64_t bytes;  // payload bytes in the window
  uint64_t messages;
  uint64_t mismatches;
  double cpu_seconds;  // process CPU (all threads) in the window
  double tcp_seconds;  // plain TCP baseline, when run
  uint64_t tcp_bytes;
  double tcp_cpu_seconds;
  uint64_t tcp_mismatches;
  uint64_t stat_bytes_in, stat_bytes_wire, stat_compressed, stat_messages;
  int abi;  // the ncclNet table version used
  char error[240];
};

void usage(FILE* f) {
  std::fprintf(
      f,
      "usage: zipccl perf [options]\n"
      "  Two processes send messages through the NCCL net plugin as NCCL does and report goodput\n"
      "  for ZIPCCL_COMPRESS=never|always|auto beside a plain TCP stream, ratio and CPU use.\n"
      "options:\n"
      "  --size BYTES        message size (default 4MiB; K/M suffixes)\n"
      "  --inflight N        requests in flight per side (default 8)\n"
      "  --lockstep          one message at a time end to end: the sender's next isend waits until\n"
      "                      the receiver completed the previous message (single-message latency)\n"
      "  --seconds S         length of each run (default 2)\n"
      "  --data LIST         comma list: bf16 (built-in gradient-like), random, or a raw bf16 file\n"
      "  --modes LIST        comma list of never,always,auto (default all)\n"
      "  --plugin NAME|PATH  the plugin, as NCCL_NET_PLUGIN names it (zipccl: libnccl-net-zipccl.so)\n"
      "                      or a path (default: next to this program's build tree, then the loader path)\n"
      "  --addr IP           receiver address for the TCP baseline (default 127.0.0.1)\n"
      "  --ifname SPEC       NCCL_SOCKET_IFNAME for both sides (default lo, or the environment's)\n"
      "  --netns RECV,SEND   run receiver and sender in these network namespaces (root)\n"
      "  --no-baseline       skip the plain TCP stream (by default every run's two processes also\n"
      "                      stream plain TCP, before their plugin run in even rounds, after it in odd)\n"
      "  --repeat N          run every mode N times, interleaved, and report medians (default 1)\n"
      "  --json FILE         append one JSON line per run\n"
      "  --idle-sleep-us N   sleep N us instead of sched_yield when a polling pass made no progress\n"
      "  --verbose           show the plugin's INFO log\n");
}

// Sizes follow the settings' grammar (common/units.h: 64K, 64KiB, 1.5M, 2G).
bool parse_size(const char* s, size_t* out) {
  uint64_t v = 0;
  if (!units::parse_size(s, &v)) return false;
  *out = static_cast<size_t>(v);
  return true;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t c = s.find(',', pos);
    std::string item = s.substr(pos, c == std::string::npos ? std::string::npos : c - pos);
    if (!item.empty()) out.push_back(item);
    if (c == std::string::npos) break;
    pos = c + 1;
  }
  return out;
}

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

// Built-in gradient-like traffic: a bucket of bf16 tensors, each Gaussian with its own scale.
std::vector<uint8_t> make_pool(const std::string& kind, size_t size, std::string* err) {
  std::vector<uint8_t> pool;
  if (kind == "bf16" || kind == "random") {
    pool.resize(size * 8);
    std::mt19937_64 rng(12345);
    if (kind == "random") {
      for (size_t i = 0; i + 8 <= pool.size(); i += 8) {
        uint64_t v = rng();
        std::memcpy(&pool[i], &v, 8);
      }
      return pool;
    }
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::uniform_int_distribution<int> e(-14, -4);
    const size_t kTensor = 192 << 10;
    for (size_t t = 0; t < pool.size(); t += kTensor) {
      float scale = std::ldexp(1.0f, e(rng));
      for (size_t i = t; i + 2 <= pool.size() && i < t + kTensor; i += 2) {
        uint16_t v = to_bf16(g(rng) * scale);
        std::memcpy(&pool[i], &v, 2);
      }
    }
    return pool;
  }
  std::ifstream f(kind, std::ios::binary);
  if (!f) {
    *err = "cannot read data file '" + kind + "'";
    return pool;
  }
  pool.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  if (pool.size() < size) {
    *err = "data file '" + kind + "' is smaller than one message";
    pool.clear();
    return pool;
  }
  pool.resize(pool.size() / size * size);
  return pool;
}

std::string data_label(const std::string& kind) {
  if (kind == "bf16") return "bf16 gradient-like Gaussian (built-in)";
  if (kind == "random") return "random bytes";
  size_t slash = kind.rfind('/');
  return slash == std::string::npos ? kind : kind.substr(slash + 1);
}

std::string find_plugin(const std::string& explicit_path) {
  if (!explicit_path.empty()) return explicit_path;
  char exe[4096];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    std::string dir(exe);
    dir = dir.substr(0, dir.rfind('/'));
    for (const char* rel : {"/../plugin/", "/", "/../lib/"}) {
      std::string p = dir + rel + "libnccl-net-zipccl.so";
      if (access(p.c_str(), R_OK) == 0) return p;
    }
  }
  return "libnccl-net-zipccl.so";
}

bool g_verbose = false;
void logger(ncclDebugLogLevel level, unsigned long, const char*, int, const char* fmt, ...) {
  if (level != NCCL_LOG_WARN && !(g_verbose && level == NCCL_LOG_INFO)) return;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "[%d] %s %s\n", static_cast<int>(getpid()), level == NCCL_LOG_WARN ? "WARN" : "INFO",
               buf);
}

double cpu_now() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

void idle(const Options& o) {
  if (o.idle_sleep_us > 0)
    usleep(static_cast<useconds_t>(o.idle_sleep_us));
  else
    sched_yield();
}

double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

bool read_full(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool write_full(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n) {
    ssize_t r = write(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

struct Child {
  const Options* opt;
  const std::vector<uint8_t>* pool;
  std::string mode;
  bool sender;
  bool baseline;
  bool tcp_last;  // the plain TCP stream runs after the plugin's run instead of before it
  int link_fd;    // receiver <-> sender: TCP port, plugin handle, end acknowledgement
  int result_fd;  // -> orchestrator
  std::string stats_path;
};

int fail(Child& c, Result* r, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(r->error, sizeof r->error, fmt, ap);
  va_end(ap);
  r->ok = 0;
  write_full(c.result_fd, r, sizeof *r);
  return 1;
}

// Plain TCP stream between the two processes, same addresses, same message size, and the same
// receive pipeline as the plugin runs get: a reader thread fills up to `inflight` message buffers
// while the main thread checks completed messages bit for bit (the plugin's helper threads receive
// while the driver loop checks), so neither side of the comparison gets the check for free.
bool tcp_baseline(Child& c, Result* r) {
  const Options& o = *c.opt;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, o.addr.c_str(), &a.sin_addr);
  if (!c.sender) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof a;
    if (l < 0 || bind(l, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(l, 1) != 0) return false;
    getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
    uint16_t port = a.sin_port;
    if (!write_full(c.link_fd, &port, sizeof port)) return false;
    int fd = accept(l, nullptr, nullptr);
    close(l);
    if (fd < 0) return false;
    const size_t slots = static_cast<size_t>(o.inflight);
    std::vector<std::vector<uint8_t>> bufs(slots, std::vector<uint8_t>(o.size));
    std::mutex mu;
    std::condition_variable cv;
    uint64_t filled = 0, checked = 0;  // messages read completely / checked and released
    bool eof = false;
    std::thread reader([&] {
      for (uint64_t i = 0;; ++i) {
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return i - checked < slots; });
        }
        if (!read_full(fd, bufs[i % slots].data(), o.size)) break;  // EOF (or a partial last message)
        std::lock_guard<std::mutex> lock(mu);
        filled = i + 1;
        cv.notify_all();
      }
      std::lock_guard<std::mutex> lock(mu);
      eof = true;
      cv.notify_all();
    });
    const size_t k = c.pool->size() / o.size;
    const uint64_t warm = 2;
    Clock::time_point t0 = Clock::now(), t_last = t0;
    double cpu0 = cpu_now();
    for (uint64_t i = 0;; ++i) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return filled > i || eof; });
        if (filled <= i) break;
      }
      if (std::memcmp(bufs[i % slots].data(), c.pool->data() + (i % k) * o.size, o.size) != 0)
        ++r->tcp_mismatches;
      if (i + 1 == warm) {
        t0 = Clock::now();
        cpu0 = cpu_now();
      } else if (i + 1 > warm) {
        r->tcp_bytes += o.size;
        t_last = Clock::now();
      }
      std::lock_guard<std::mutex> lock(mu);
      checked = i + 1;
      cv.notify_all();
    }
    reader.join();
    r->tcp_seconds = std::chrono::duration<double>(t_last - t0).count();
    r->tcp_cpu_seconds = cpu_now() - cpu0;
    close(fd);
    return r->tcp_bytes > 0;
  }
  uint16_t port;
  if (!read_full(c.link_fd, &port, sizeof port)) return false;
  a.sin_port = port;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) return false;
  auto t0 = Clock::now();
  double cpu0 = cpu_now();
  size_t k = c.pool->size() / o.size;
  for (uint64_t i = 0; since(t0) < o.seconds; ++i) {
    if (!write_full(fd, c.pool->data() + (i % k) * o.size, o.size)) break;
  }
  r->tcp_seconds = since(t0);
  r->tcp_cpu_seconds = cpu_now() - cpu0;
  close(fd);
  return true;
}

void read_stats(const std::string& path, Result* r) {
  std::ifstream f(path);
  std::string line;
  auto field = [&line](const char* key) -> uint64_t {
    std::string k = std::string("\"") + key + "\":";
    size_t p = line.find(k);
    return p == std::string::npos ? 0 : std::strtoull(line.c_str() + p + k.size(), nullptr, 10);
  };
  while (std::getline(f, line)) {
    r->stat_bytes_in += field("bytes_in");
    r->stat_bytes_wire += field("bytes_wire");
    r->stat_compressed += field("compressed");
    r->stat_messages += field("messages");
  }
}

// This child is the "job": it enters its namespace and configures the plugin through its own
// environment, before loading it. Empty, or what went wrong.
std::string prepare_child(const Child& c) {
  const Options& o = *c.opt;
  const std::string& ns = c.sender ? o.send_ns : o.recv_ns;
  if (!ns.empty()) {
    std::string p = "/var/run/netns/" + ns;
    int fd = open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return "cannot enter netns " + ns + " (root needed)";
    close(fd);
  }
  setenv("ZIPCCL_COMPRESS", c.mode.c_str(), 1);
  if (!o.ifname.empty())
    setenv("NCCL_SOCKET_IFNAME", o.ifname.c_str(), 1);
  else
    setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  if (c.sender) setenv("ZIPCCL_STATS_FILE", c.stats_path.c_str(), 1);
  return "";
}

// The plugin as NCCL's proxy sees it: its newest table both sides know, initialised for one
// communicator.
struct Plugin {
  std::unique_ptr<net_client::Net> net;
  void* ctx = nullptr;
};

std::string open_plugin(const Options& o, Plugin* p, int* abi) {
  std::string error;
  p->net = net_client::load(find_plugin(o.plugin), &error);
  if (!p->net) return error;
  *abi = p->net->version();
  net_client::CommConfig cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
  if (p->net->init(&p->ctx, 1, &cfg, logger, nullptr) != ncclSuccess) return "plugin init failed";
  int ndev = 0;
  if (p->net->devices(&ndev) != ncclSuccess || ndev < 1) return "plugin found no network device";
  return "";
}

// The receiver's window: up to `inflight` receives posted, each completed one checked bit for bit
// against the pool; goodput counts from the third message on. Ends at the sender's 0-byte marker.
// The receives posted after the sender's end marker stay posted (the net ABI cannot cancel them) until
// the comm closes, so `bufs` belongs to the caller and must outlive close_recv: the plugin may still
// be working on them (a decode worker writing into a freed buffer crashed the receiver).
std::string receive_all(Child& c, Plugin& p, void* rc, std::vector<std::vector<uint8_t>>* buffers,
                        Result* r) {
  const Options& o = *c.opt;
  net_client::Net& net = *p.net;
  const size_t k = c.pool->size() / o.size;
  std::vector<std::vector<uint8_t>>& bufs = *buffers;
  bufs.assign(o.inflight, std::vector<uint8_t>(o.size));
  std::vector<void*> mh(o.inflight, nullptr), req(o.inflight, nullptr);
  std::vector<uint64_t> idx(o.inflight, 0);
  for (int i = 0; i < o.inflight; ++i) net.reg_mr(rc, bufs[i].data(), o.size, NCCL_PTR_HOST, &mh[i]);
  uint64_t posted = 0, completed = 0;
  const uint64_t warm = 2;
  Clock::time_point t0 = Clock::now(), t_last = t0;
  double cpu0 = cpu_now();
  bool end = false;
  while (!end) {
    // Like NCCL's proxy: yield when a pass made no progress, so codec workers get the core.
    bool progressed = false;
    for (int s = 0; s < o.inflight; ++s) {
      if (!req[s]) {
        if (net.irecv(rc, bufs[s].data(), o.size, 0, mh[s], &req[s]) != ncclSuccess) return "irecv failed";
        if (req[s]) idx[s] = posted++;
        continue;
      }
      int done = 0, size = 0;
      if (net.test(req[s], &done, &size) != ncclSuccess) return "receive test failed";
      if (!done) continue;
      progressed = true;
      req[s] = nullptr;
      if (size == 0) {  // the sender's end marker: let it close only now, so no receive sees EOF
        end = true;
        char ack = 1;
        write_full(c.link_fd, &ack, 1);
        break;
      }
      if (static_cast<size_t>(size) != o.size ||
          std::memcmp(bufs[s].data(), c.pool->data() + (idx[s] % k) * o.size, o.size) != 0) {
        ++r->mismatches;
      }
      ++completed;
      if (o.lockstep) {  // tell the sender this message is complete here (decoded, checked)
        char ack = 2;
        if (!write_full(c.link_fd, &ack, 1)) return "lockstep pipe closed";
      }
      if (completed == warm) {
        t0 = Clock::now();
        cpu0 = cpu_now();
      } else if (completed > warm) {
        r->bytes += static_cast<uint64_t>(size);
        ++r->messages;
        t_last = Clock::now();
      }
    }
    if (!progressed) idle(o);
  }
  r->seconds = std::chrono::duration<double>(t_last - t0).count();
  r->cpu_seconds = cpu_now() - cpu0;
  for (int i = 0; i < o.inflight; ++i) net.dereg_mr(rc, mh[i]);
  return "";
}

std::string run_receiver(Child& c, Plugin& p, Result* r) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  net_client::DeviceHandle* dev_handle = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  void* lc = nullptr;
  void* rc = nullptr;
  if (p.net->listen(p.ctx, 0, handle, &lc) != ncclSuccess) return "listen failed";
  if (!write_full(c.link_fd, handle, sizeof handle)) return "handle pipe closed";
  while (!rc) {
    if (p.net->accept(lc, &rc, &dev_handle) != ncclSuccess) return "accept failed";
    if (Clock::now() > deadline) return "accept timed out";
  }
  std::vector<std::vector<uint8_t>> bufs;
  std::string error = receive_all(c, p, rc, &bufs, r);
  if (!error.empty()) return error;
  p.net->close_recv(rc);
  p.net->close_listen(lc);
  return "";
}

// Sends one message and waits for it end to end: the send's completion, then the receiver's
// acknowledgement that it decoded and checked it (--lockstep: single-message latency).
std::string send_lockstep(Child& c, net_client::Net& net, void* sc, void* data, void* mh) {
  void* rq = nullptr;
  while (!rq) {
    if (net.isend(sc, data, c.opt->size, 0, mh, &rq) != ncclSuccess) return "isend failed";
  }
  for (int done = 0; !done;) {
    if (net.test(rq, &done, nullptr) != ncclSuccess) return "send test failed";
    if (!done) idle(*c.opt);
  }
  char ack;
  if (!read_full(c.link_fd, &ack, 1)) return "lockstep pipe closed";
  return "";
}

// Keeps `inflight` sends posted until the run's time is up (at once under --lockstep), then drains.
std::string send_window(Child& c, net_client::Net& net, void* sc, const std::vector<void*>& smh,
                        Clock::time_point t0, uint64_t* next) {
  const Options& o = *c.opt;
  const size_t k = smh.size();
  std::vector<void*> req(o.inflight, nullptr);
  bool stopping = o.lockstep;
  for (;;) {
    bool busy = false, progressed = false;
    stopping = stopping || since(t0) >= o.seconds;
    for (int s = 0; s < o.inflight; ++s) {
      if (!req[s]) {
        if (stopping) continue;
        uint64_t m = *next % k;
        void* data = const_cast<uint8_t*>(c.pool->data()) + m * o.size;
        if (net.isend(sc, data, o.size, 0, smh[m], &req[s]) != ncclSuccess) return "isend failed";
        if (req[s]) ++*next;
        busy = true;
        continue;
      }
      busy = true;
      int done = 0;
      if (net.test(req[s], &done, nullptr) != ncclSuccess) return "send test failed";
      if (done) {
        req[s] = nullptr;
        progressed = true;
      }
    }
    if (stopping && !busy) return "";
    if (!progressed) idle(o);
  }
}

std::string run_sender(Child& c, Plugin& p, Result* r) {
  const Options& o = *c.opt;
  net_client::Net& net = *p.net;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  net_client::DeviceHandle* dev_handle = nullptr;
  auto deadline = Clock::now() + std::chrono::seconds(20);
  if (!read_full(c.link_fd, handle, sizeof handle)) return "no handle from the receiver";
  void* sc = nullptr;
  while (!sc) {
    if (net.connect(p.ctx, 0, handle, &sc, &dev_handle) != ncclSuccess) return "connect failed";
    if (Clock::now() > deadline) return "connect timed out";
  }
  const size_t k = c.pool->size() / o.size;
  std::vector<void*> smh(k, nullptr);
  for (size_t i = 0; i < k; ++i)
    net.reg_mr(sc, const_cast<uint8_t*>(c.pool->data()) + i * o.size, o.size, NCCL_PTR_HOST, &smh[i]);
  auto t0 = Clock::now();
  double cpu0 = cpu_now();
  uint64_t next = 0;
  for (; o.lockstep && since(t0) < o.seconds; ++next) {
    const uint64_t m = next % k;
    std::string error = send_lockstep(c, net, sc, const_cast<uint8_t*>(c.pool->data()) + m * o.size, smh[m]);
    if (!error.empty()) return error;
  }
  std::string error = send_window(c, net, sc, smh, t0, &next);
  if (!error.empty()) return error;
  void* end_req = nullptr;
  while (!end_req) {
    // A registered address even for zero bytes: other plugins (aws-ofi-nccl, as ZIPCCL_NET_INNER's
    // baseline) dereference the memory handle of every send.
    if (net.isend(sc, const_cast<uint8_t*>(c.pool->data()), 0, 0, smh[0], &end_req) != ncclSuccess)
      return "isend failed";
  }
  for (int done = 0; !done;) {
    if (net.test(end_req, &done, nullptr) != ncclSuccess) return "send test failed";
  }
  r->seconds = since(t0);
  r->cpu_seconds = cpu_now() - cpu0;
  r->messages = next;
  char ack;
  read_full(c.link_fd, &ack, 1);
  for (size_t i = 0; i < k; ++i) net.dereg_mr(sc, smh[i]);
  net.close_send(sc);  // writes the comm's statistics line
  read_stats(c.stats_path, r);
  unlink(c.stats_path.c_str());
  return "";
}

int run_child(Child& c) {
  Result r{};
  std::string error = prepare_child(c);
  if (!error.empty()) return fail(c, &r, "%s", error.c_str());
  if (c.baseline && !c.tcp_last && !tcp_baseline(c, &r))
    return fail(c, &r, "plain TCP baseline failed: %s", std::strerror(errno));
  Plugin p;
  error = open_plugin(*c.opt, &p, &r.abi);
  if (error.empty()) error = c.sender ? run_sender(c, p, &r) : run_receiver(c, p, &r);
  if (!error.empty()) return fail(c, &r, "%s", error.c_str());
  p.net->finalize(p.ctx);
  if (c.baseline && c.tcp_last && !tcp_baseline(c, &r))
    return fail(c, &r, "plain TCP baseline failed: %s", std::strerror(errno));
  r.ok = 1;
  write_full(c.result_fd, &r, sizeof r);
  return 0;
}

// Removes a folder of plain files (no subfolders) and the folder.
void remove_flat_folder(const std::string& path) {
  if (DIR* d = opendir(path.c_str())) {
    while (const dirent* e = readdir(d))
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) unlink((path + "/" + e->d_name).c_str());
    closedir(d);
  }
  rmdir(path.c_str());
}

struct RunOutcome {
  Result recv{}, send{};
  bool ok = false;
};

RunOutcome run_pair(const Options& o, const std::vector<uint8_t>& pool, const std::string& mode,
                    bool baseline, bool tcp_last) {
  RunOutcome out;
  // The sender's per-connection record, in a folder of its own: the plugin writes its live snapshots
  // beside the record file unless ZIPCCL_STATS_DIR says where, and they go with the folder.
  char folder[] = "/tmp/zipccl-perf-XXXXXX";
  if (!mkdtemp(folder)) {
    std::snprintf(out.send.error, sizeof out.send.error, "cannot create a folder in /tmp: %s", std::strerror(errno));
    return out;
  }
  const std::string stats = std::string(folder) + "/" + mode + ".jsonl";
  int link[2], rres[2], sres[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, link) || pipe(rres) || pipe(sres)) {
    remove_flat_folder(folder);
    return out;
  }
  pid_t pids[2];
  const pid_t self = getpid();
  for (int side = 0; side < 2; ++side) {
    pids[side] = fork();
    if (pids[side] == 0) {
      die_with_parent(self);
      // Only its own ends stay open, so that a side's pipe and link reach EOF when that side dies.
      close(rres[0]);
      close(sres[0]);
      close(side == 0 ? sres[1] : rres[1]);
      close(side == 0 ? link[0] : link[1]);
      Child c{&o,
              &pool,
              mode,
              side == 1,
              baseline,
              tcp_last,
              side == 0 ? link[1] : link[0],
              side == 0 ? rres[1] : sres[1],
              stats};
      _exit(run_child(c));
    }
  }
  close(link[0]);
  close(link[1]);
  close(rres[1]);
  close(sres[1]);
  // Both children finish within the run length plus setup; beyond that something hangs. A side whose
  // pipe ends without a result has died; its peer gets 2 s to report (it sees the link close) before
  // it is stopped, rather than waiting out the deadline.
  const double limit_s = o.seconds * (baseline ? 2 : 1) + 30;
  Clock::time_point deadline =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
  const int fds[2] = {rres[0], sres[0]};
  Result* res[2] = {&out.recv, &out.send};
  bool got[2] = {false, false}, ended[2] = {false, false};
  auto waiting = [&](int s) { return pids[s] > 0 && !got[s] && !ended[s]; };
  while ((waiting(0) || waiting(1)) && Clock::now() < deadline) {
    pollfd p[2] = {{waiting(0) ? fds[0] : -1, POLLIN, 0}, {waiting(1) ? fds[1] : -1, POLLIN, 0}};
    if (poll(p, 2, 200) <= 0) continue;
    for (int s = 0; s < 2; ++s) {
      if (!waiting(s) || !p[s].revents) continue;
      got[s] = read_full(fds[s], res[s], sizeof(Result));
      ended[s] = !got[s];
      if (ended[s]) deadline = std::min(deadline, Clock::now() + std::chrono::seconds(2));
    }
  }
  static const char* const kSide[2] = {"receiver", "sender"};
  // A side that reported a failure while its peer died without a result failed because of that death
  // (its link closed under it): say so, with the error it saw.
  for (int s = 0; s < 2; ++s) {
    if (got[s] && !res[s]->ok && ended[1 - s]) {
      char seen[sizeof res[s]->error];
      std::snprintf(seen, sizeof seen, "%s", res[s]->error);
      std::snprintf(res[s]->error, sizeof res[s]->error, "%s stopped after the %s died (%.180s)", kSide[s],
                    kSide[1 - s], seen);
    }
  }
  for (int s = 0; s < 2; ++s) {
    std::string why;
    if (pids[s] <= 0) {
      why = "could not be started (fork failed)";
    } else {
      if (waiting(s)) kill(pids[s], SIGKILL);
      int status = 0;
      waitpid(pids[s], &status, 0);
      if (got[s]) continue;
      if (ended[s])
        why = describe_exit(status) + (WIFSIGNALED(status) ? "" : " before reporting a result");
      else if (ended[1 - s])
        why = std::string("stopped after the ") + kSide[1 - s] + " died";
      else
        why = "timed out (still running after " + std::to_string(static_cast<int>(limit_s)) + " s)";
    }
    *res[s] = Result{};
    std::snprintf(res[s]->error, sizeof res[s]->error, "%s %s", kSide[s], why.c_str());
  }
  close(rres[0]);
  close(sres[0]);
  remove_flat_folder(folder);
  out.ok = out.recv.ok && out.send.ok;
  return out;
}

double gbps(uint64_t bytes, double s) {
  return s > 0 ? bytes * 8.0 / s / 1e9 : 0;
}

// Parses the command line into *o. -1: go on; otherwise the exit status.
int parse_options(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](const char* what) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "zipccl perf: %s needs a value\n", what);
        std::exit(2);
      }
      return argv[++i];
    };
    auto bad = [](const char* text) {
      std::fprintf(stderr, "zipccl perf: %s\n", text);
      return 2;
    };
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else if (a == "--size") {
      if (!parse_size(next("--size"), &o->size) || o->size == 0 || o->size > (1u << 30))
        return bad("--size must be 1B..1GiB");
    } else if (a == "--inflight") {
      o->inflight = std::atoi(next("--inflight"));
      if (o->inflight < 1 || o->inflight > 32) return bad("--inflight must be 1..32");
    } else if (a == "--lockstep") {
      o->lockstep = true;
    } else if (a == "--seconds") {
      o->seconds = std::atof(next("--seconds"));
      if (!(o->seconds > 0 && o->seconds <= 600)) return bad("--seconds must be in (0, 600]");
    } else if (a == "--data") {
      o->data = split(next("--data"));
    } else if (a == "--modes") {
      o->modes = split(next("--modes"));
      for (auto& m : o->modes) {
        if (m != "never" && m != "always" && m != "auto") return bad(("unknown mode '" + m + "'").c_str());
      }
    } else if (a == "--plugin") {
      o->plugin = next("--plugin");
    } else if (a == "--addr") {
      o->addr = next("--addr");
    } else if (a == "--ifname") {
      o->ifname = next("--ifname");
    } else if (a == "--netns") {
      auto v = split(next("--netns"));
      if (v.size() != 2) return bad("--netns takes RECV_NS,SEND_NS");
      o->recv_ns = v[0];
      o->send_ns = v[1];
    } else if (a == "--repeat") {
      o->repeat = std::atoi(next("--repeat"));
      if (o->repeat < 1 || o->repeat > 50) return bad("--repeat must be 1..50");
    } else if (a == "--idle-sleep-us") {
      o->idle_sleep_us = std::atoi(next("--idle-sleep-us"));
      if (o->idle_sleep_us < 0 || o->idle_sleep_us > 100000) return bad("--idle-sleep-us must be 0..100000");
    } else if (a == "--no-baseline") {
      o->baseline = false;
    } else if (a == "--json") {
      o->json = next("--json");
    } else if (a == "--verbose") {
      o->verbose = g_verbose = true;
    } else {
      std::fprintf(stderr, "zipccl perf: unknown option '%s'\n\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  in_addr probe;
  if (inet_pton(AF_INET, o->addr.c_str(), &probe) != 1) {
    std::fprintf(stderr, "zipccl perf: --addr must be an IPv4 address\n");
    return 2;
  }
  return -1;
}

template <typename Key>
RunOutcome median_of(std::vector<RunOutcome> v, Key key) {
  std::sort(v.begin(), v.end(), [&](const RunOutcome& a, const RunOutcome& b) { return key(a) < key(b); });
  return v[v.size() / 2];
}
double goodput(const RunOutcome& r) {
  return gbps(r.recv.bytes, r.recv.seconds);
}
double tcp_goodput(const RunOutcome& r) {
  return gbps(r.recv.tcp_bytes, r.recv.tcp_seconds);
}

// The plain TCP row: the median over the pairs of every mode. False when a TCP byte differed.
bool print_tcp_row(const Options& o, const std::string& d, const std::vector<std::vector<RunOutcome>>& runs,
                   double raw_gbps, FILE* json) {
  std::vector<RunOutcome> all;
  for (const auto& v : runs) all.insert(all.end(), v.begin(), v.end());
  RunOutcome b = median_of(all, tcp_goodput);
  double t = tcp_goodput(b);
  bool tcp_exact = true;
  for (const RunOutcome& r : all) tcp_exact &= r.recv.tcp_mismatches == 0;
  char vs[16] = "";
  if (raw_gbps > 0) std::snprintf(vs, sizeof vs, "%.2fx", t / raw_gbps);
  std::printf("  %-24s %9.2f Gb/s %8s %10s %11s %8.0f%% %8.0f%% %10s\n", "plain TCP stream", t, vs, "-", "-",
              100 * b.send.tcp_cpu_seconds / b.send.tcp_seconds,
              100 * b.recv.tcp_cpu_seconds / std::max(b.recv.tcp_seconds, 1e-9), tcp_exact ? "yes" : "NO");
  if (json) {
    std::string each;  // in the order of the modes, then rounds
    for (const RunOutcome& r : all) each += (each.empty() ? "" : ",") + std::to_string(tcp_goodput(r));
    std::fprintf(json,
                 "{\"data\":\"%s\",\"run\":\"tcp\",\"gbps\":%.4f,\"all_gbps\":[%s],\"size\":%zu,"
                 "\"runs\":%zu}\n",
                 data_label(d).c_str(), t, each.c_str(), o.size, all.size());
  }
  return tcp_exact;
}

// One mode's row (median goodput). False when a byte differed or nothing arrived.
bool print_mode_row(const Options& o, const std::string& d, const std::string& mode,
                    const std::vector<RunOutcome>& runs, double raw_gbps, FILE* json) {
  RunOutcome out = median_of(runs, goodput);
  double g = goodput(out);
  double ratio =
      out.send.stat_bytes_wire ? static_cast<double>(out.send.stat_bytes_in) / out.send.stat_bytes_wire : 1;
  char vs[16] = "";
  if (raw_gbps > 0) std::snprintf(vs, sizeof vs, "%.2fx", g / raw_gbps);
  char comp[32];
  std::snprintf(comp, sizeof comp, "%llu/%llu", (unsigned long long)out.send.stat_compressed,
                (unsigned long long)out.send.stat_messages);
  bool exact = true;
  for (const RunOutcome& r : runs) exact &= r.recv.mismatches == 0 && r.recv.messages > 0;
  std::printf("  %-24s %9.2f Gb/s %8s %10.3f %11s %8.0f%% %8.0f%% %10s\n",
              ("ZIPCCL_COMPRESS=" + mode).c_str(), g, vs, ratio, comp,
              100 * out.send.cpu_seconds / out.send.seconds,
              100 * out.recv.cpu_seconds / std::max(out.recv.seconds, 1e-9), exact ? "yes" : "NO");
  if (json) {
    std::string all;
    for (const RunOutcome& r : runs) all += (all.empty() ? "" : ",") + std::to_string(goodput(r));
    std::fprintf(json,
                 "{\"data\":\"%s\",\"run\":\"%s\",\"gbps\":%.4f,\"all_gbps\":[%s],\"ratio\":%.4f,"
                 "\"compressed\":%llu,"
                 "\"messages\":%llu,\"send_cpu\":%.3f,\"recv_cpu\":%.3f,\"exact\":%s,\"size\":%zu}\n",
                 data_label(d).c_str(), mode.c_str(), g, all.c_str(), ratio,
                 (unsigned long long)out.send.stat_compressed, (unsigned long long)out.send.stat_messages,
                 out.send.cpu_seconds / out.send.seconds,
                 out.recv.cpu_seconds / std::max(out.recv.seconds, 1e-9), exact ? "true" : "false", o.size);
  }
  return exact;
}

// Every mode over one data set, o.repeat rounds, then its table. The exit status so far; *abi gets the
// ncclNet table version the children used.
int run_data(const Options& o, const std::string& d, FILE* json, int* abi) {
  std::string err;
  std::vector<uint8_t> pool = make_pool(d, o.size, &err);
  if (pool.empty()) {
    std::fprintf(stderr, "zipccl perf: %s\n", err.c_str());
    return 2;
  }
  std::printf("\ndata: %s%s\n", data_label(d).c_str(),
              o.repeat > 1 ? (" (median of " + std::to_string(o.repeat) + " interleaved runs)").c_str() : "");
  std::printf("  %-24s %14s %8s %10s %11s %9s %9s %10s\n", "run", "goodput", "vs raw", "wire ratio",
              "compressed", "send CPU", "recv CPU", "bit-exact");
  // Rounds interleave the modes so slow drifts in machine load hit every mode alike. Every pair of
  // processes streams plain TCP too, before its plugin run in even rounds and after it in odd ones:
  // a run measured in processes that already moved data for seconds went ~20-30% faster on this
  // machine than one in fresh processes, so every run gets the same history, and TCP both places.
  std::vector<std::vector<RunOutcome>> runs(o.modes.size());
  int status = 0;
  for (int round = 0; round < o.repeat; ++round) {
    for (size_t m = 0; m < o.modes.size(); ++m) {
      RunOutcome out = run_pair(o, pool, o.modes[m], o.baseline, round % 2 == 1);
      if (!out.ok) {
        const bool both = out.recv.error[0] && out.send.error[0];
        std::printf("  FAILED %s\n",
                    (o.modes[m] + ": " + out.recv.error + (both ? " / " : "") + out.send.error).c_str());
        status = 1;
        continue;
      }
      *abi = out.recv.abi;
      runs[m].push_back(out);
    }
  }
  double raw_gbps = 0;
  for (size_t m = 0; m < o.modes.size(); ++m) {
    if (!runs[m].empty() && o.modes[m] == "never") raw_gbps = goodput(median_of(runs[m], goodput));
  }
  for (size_t m = 0; m < o.modes.size(); ++m) {
    if (runs[m].empty()) continue;
    if (o.baseline && m == 0 && !print_tcp_row(o, d, runs, raw_gbps, json)) status = 1;
    if (!print_mode_row(o, d, o.modes[m], runs[m], raw_gbps, json)) status = 1;
  }
  return status;
}

}  // namespace

int cmd_perf(int argc, char** argv) {
  Options o;
  const int parsed = parse_options(argc, argv, &o);
  if (parsed >= 0) return parsed;
  signal(SIGPIPE, SIG_IGN);
  std::string plugin = find_plugin(o.plugin);
  const char* env_if = std::getenv("NCCL_SOCKET_IFNAME");
  std::string ifname = !o.ifname.empty() ? o.ifname : (env_if ? env_if : "lo");
  std::printf("zipccl perf: 2 processes through %s over %s%s%s\n", plugin.c_str(), ifname.c_str(),
              o.recv_ns.empty() ? "" : ", netns ",
              o.recv_ns.empty() ? "" : (o.recv_ns + "/" + o.send_ns).c_str());
  const std::string flight =
      o.lockstep ? "one at a time end to end (--lockstep)" : std::to_string(o.inflight) + " in flight";
  std::printf("  %zu KiB messages, %s, %.1f s per run; goodput = uncompressed bytes delivered per second\n",
              o.size >> 10, flight.c_str(), o.seconds);
  int status = 0, abi = 0;
  FILE* json = o.json.empty() ? nullptr : std::fopen(o.json.c_str(), "a");
  for (const std::string& d : o.data) {
    const int s = run_data(o, d, json, &abi);
    if (s == 2) return 2;
    status = std::max(status, s);
  }
  if (json) std::fclose(json);
  if (abi) std::printf("\nABI: ncclNetPlugin_v%d, the plugin's newest table this tool knows.\n", abi);
  std::printf(
      "\nCPU: share of one core used by each process (plugin threads and its busy-polling driver loop\n"
      "included) while it ran.\n");
  if (o.recv_ns.empty() && (ifname == "lo" || ifname == "=lo")) {
    std::printf(
        "On loopback the 'link' is a memory copy between two processes on the same cores: compression\n"
        "cannot pay here and auto should stay raw. For a network-limited link run (root):\n"
        "  tools/veth_perf.sh 2gbit      (two namespaces joined by a veth pair shaped with tc tbf)\n");
  }
  return status;
}

}  // namespace tools
}  // namespace zipccl
