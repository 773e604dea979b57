// Test-side driver: loads the built libnccl-net-zipccl.so and calls any one of its exported ncclNet_vN
// tables through the net client (plugin/client), which adapts each version's signatures the way
// NCCL's own compatibility layer does.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "zipccl/net_client.h"

namespace zipccl_test {

// Collects what the plugin logs (WARNs are echoed to stderr) so tests can assert on it.
struct LogSink {
  std::mutex mu;
  std::vector<std::string> lines;
  std::atomic<int> warns{0};
  bool echo_info = false;
};
inline LogSink& log_sink() {
  // Never destroyed: a comm closed with traffic in flight leaves its stream thread running (the plugin
  // must not block NCCL's close), and that thread may still log while the process exits.
  static LogSink* s = new LogSink;
  return *s;
}
inline void test_logger(ncclDebugLogLevel level, unsigned long, const char* file, int line, const char* fmt,
                        ...) {
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  LogSink& s = log_sink();
  if (level == NCCL_LOG_WARN) {
    ++s.warns;
    std::fprintf(stderr, "[plugin WARN %s:%d] %s\n", file, line, buf);
  } else if (s.echo_info && level == NCCL_LOG_INFO) {
    std::fprintf(stderr, "[plugin INFO] %s\n", buf);
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.lines.push_back(buf);
}
inline bool log_contains(const char* what) {
  LogSink& s = log_sink();
  std::lock_guard<std::mutex> lock(s.mu);
  for (const std::string& l : s.lines) {
    if (l.find(what) != std::string::npos) return true;
  }
  return false;
}

// Runs over an inner plugin that may not have been built (ZIPCCL_TEST_INNER_REQUIRED names its file,
// tests/inner/inner_tests.cmake): why the test must skip, or empty.
inline std::string inner_plugin_absent() {
  const char* need = std::getenv("ZIPCCL_TEST_INNER_REQUIRED");
  if (!need || !*need || access(need, R_OK) == 0) return "";
  return std::string("inner plugin build absent: ") + need + " (tools/ofi_build.sh builds it)";
}

inline void* plugin_library() {
  static void* lib = [] {
    char error[ZIPCCL_NET_ERROR_MAX];
    // ZIPCCL_TEST_PLUGIN drives another plugin through the same suite, e.g. an inner plugin alone to
    // tell its own failures from zipccl's.
    const char* other = std::getenv("ZIPCCL_TEST_PLUGIN");
    const char* path = other && *other ? other : ZIPCCL_PLUGIN_PATH;
    void* l = zipccl_net_dlopen(path, nullptr, 0, error, sizeof error);
    if (!l) std::fprintf(stderr, "dlopen(%s): %s\n", path, error);
    return l;
  }();
  return lib;
}

struct Props {
  std::string name;
  int ptr_support = 0;
  int speed = 0;
  int max_recvs = 0;
  size_t max_p2p = 0;
  zipccl::net_client::Properties all{};  // every field, widened to the newest ABI by the client
};

// One table of the built plugin through the net client, with the context a test's init created.
class NetApi {
 public:
  explicit NetApi(std::unique_ptr<zipccl::net_client::Net> net) : net_(std::move(net)) {}
  zipccl::net_client::Net& net() { return *net_; }
  int version() const { return net_->version(); }
  const char* name() const { return net_->name(); }
  void* context() const { return ctx_; }
  // profiler: the callback NCCL would hand a v10+ init (nullptr: none).
  ncclResult_t init(ncclProfilerCallback_t profiler = nullptr) {
    zipccl::net_client::CommConfig cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
    return net_->init(&ctx_, 0x1234, &cfg, test_logger, profiler);
  }
  ncclResult_t finalize() { return net_->finalize(ctx_); }
  ncclResult_t devices(int* n) { return net_->devices(n); }
  ncclResult_t props(int dev, Props* p) {
    zipccl::net_client::Properties q;
    std::memset(&q, 0x5a, sizeof q);
    ncclResult_t r = net_->get_properties(dev, &q);
    if (r != ncclSuccess) return r;
    p->name = q.name ? q.name : "";
    p->ptr_support = q.ptrSupport;
    p->speed = q.speed;
    p->max_recvs = q.maxRecvs;
    p->max_p2p = q.maxP2pBytes;
    p->all = q;
    return r;
  }
  ncclResult_t listen(int dev, void* handle, void** l) { return net_->listen(ctx_, dev, handle, l); }
  ncclResult_t connect(int dev, void* handle, void** sc) {
    zipccl::net_client::DeviceHandle* dh = nullptr;
    return net_->connect(ctx_, dev, handle, sc, &dh);
  }
  ncclResult_t accept(void* l, void** rc) {
    zipccl::net_client::DeviceHandle* dh = nullptr;
    return net_->accept(l, rc, &dh);
  }
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) {
    return net_->reg_mr(comm, data, size, type, mh);
  }
  ncclResult_t dereg_mr(void* comm, void* mh) { return net_->dereg_mr(comm, mh); }
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) {
    return net_->isend(sc, data, size, tag, mh, req);
  }
  ncclResult_t irecv(void* rc, void* data, size_t size, int tag, void* mh, void** req) {
    return net_->irecv(rc, data, size, tag, mh, req);
  }
  ncclResult_t test(void* req, int* done, int* size) { return net_->test(req, done, size); }
  ncclResult_t close_send(void* c) { return net_->close_send(c); }
  ncclResult_t close_recv(void* c) { return net_->close_recv(c); }
  ncclResult_t close_listen(void* c) { return net_->close_listen(c); }

 private:
  std::unique_ptr<zipccl::net_client::Net> net_;
  void* ctx_ = nullptr;
};

// The exported table of `version`, or nullptr.
inline std::unique_ptr<NetApi> load_api(int version) {
  void* lib = plugin_library();
  if (!lib) return nullptr;
  auto net = zipccl::net_client::load_version(lib, version);
  if (!net) return nullptr;
  return std::make_unique<NetApi>(std::move(net));
}

using Clock = std::chrono::steady_clock;

// Listen on dev 0, then drive connect and accept alternately until both return comms (NCCL's loop).
// Returns false on error or timeout.
inline bool make_pair(NetApi* api, void** sc, void** rc, void** lc, double timeout_s = 10) {
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  *sc = *rc = *lc = nullptr;
  if (api->listen(0, handle, lc) != ncclSuccess || !*lc) return false;
  auto t0 = Clock::now();
  while (!*sc || !*rc) {
    if (!*sc && api->connect(0, handle, sc) != ncclSuccess) return false;
    if (!*rc && api->accept(*lc, rc) != ncclSuccess) return false;
    if (std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s) return false;
  }
  return true;
}

}  // namespace zipccl_test
