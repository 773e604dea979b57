// Test-side driver: loads the built libnccl-net-zipccl.so with dlopen and presents every exported
// ncclNet_vN table through one small interface, calling each with its own version's signatures the
// way NCCL's proxy does.
#pragma once

#include <dlfcn.h>
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

#include "nccl/net_v10.h"
#include "nccl/net_v11.h"
#include "nccl/net_v7.h"
#include "nccl/net_v8.h"
#include "nccl/net_v9.h"

namespace zipccl_test {

// Collects what the plugin logs (WARNs are echoed to stderr) so tests can assert on it.
struct LogSink {
  std::mutex mu;
  std::vector<std::string> lines;
  std::atomic<int> warns{0};
  bool echo_info = false;
};
inline LogSink& log_sink() {
  static LogSink s;
  return s;
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
  static void* lib = dlopen(ZIPCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!lib) std::fprintf(stderr, "dlopen(%s): %s\n", ZIPCCL_PLUGIN_PATH, dlerror());
  return lib;
}

struct Props {
  std::string name;
  int ptr_support = 0;
  int speed = 0;
  int max_recvs = 0;
  size_t max_p2p = 0;
};

class NetApi {
 public:
  virtual ~NetApi() = default;
  virtual int version() const = 0;
  virtual const char* name() const = 0;
  virtual ncclResult_t init() = 0;
  virtual ncclResult_t finalize() = 0;
  virtual ncclResult_t devices(int* n) = 0;
  virtual ncclResult_t props(int dev, Props* p) = 0;
  virtual ncclResult_t listen(int dev, void* handle, void** l) = 0;
  virtual ncclResult_t connect(int dev, void* handle, void** sc) = 0;
  virtual ncclResult_t accept(void* l, void** rc) = 0;
  virtual ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) = 0;
  virtual ncclResult_t dereg_mr(void* comm, void* mh) = 0;
  virtual ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) = 0;
  virtual ncclResult_t irecv(void* rc, void* data, size_t size, int tag, void* mh, void** req) = 0;
  virtual ncclResult_t test(void* req, int* done, int* size) = 0;
  virtual ncclResult_t close_send(void* c) = 0;
  virtual ncclResult_t close_recv(void* c) = 0;
  virtual ncclResult_t close_listen(void* c) = 0;
};

template <typename Net, int V>
class NetApiImpl final : public NetApi {
 public:
  explicit NetApiImpl(const Net* n) : n_(n) {}
  int version() const override { return V; }
  const char* name() const override { return n_->name; }
  ncclResult_t init() override {
    if constexpr (V >= 11) {
      ncclNetCommConfig_v11_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
      return n_->init(&ctx_, 0x1234, &cfg, test_logger, nullptr);
    } else if constexpr (V == 10) {
      return n_->init(test_logger, nullptr);
    } else {
      return n_->init(test_logger);
    }
  }
  ncclResult_t finalize() override {
    if constexpr (V >= 11) return n_->finalize(ctx_);
    return ncclSuccess;
  }
  ncclResult_t devices(int* n) override { return n_->devices(n); }
  ncclResult_t props(int dev, Props* p) override {
    decltype(props_type()) q;
    std::memset(&q, 0x5a, sizeof q);
    ncclResult_t r = n_->getProperties(dev, &q);
    if (r != ncclSuccess) return r;
    p->name = q.name ? q.name : "";
    p->ptr_support = q.ptrSupport;
    p->speed = q.speed;
    p->max_recvs = q.maxRecvs;
    if constexpr (V >= 9) p->max_p2p = q.maxP2pBytes;
    return r;
  }
  ncclResult_t listen(int dev, void* handle, void** l) override {
    if constexpr (V >= 11)
      return n_->listen(ctx_, dev, handle, l);
    else
      return n_->listen(dev, handle, l);
  }
  ncclResult_t connect(int dev, void* handle, void** sc) override {
    ncclNetDeviceHandle_v7_t* dh = nullptr;
    if constexpr (V >= 11) {
      return n_->connect(ctx_, dev, handle, sc, &dh);
    } else if constexpr (V == 10) {
      ncclNetCommConfig_v10_t cfg{NCCL_NET_TRAFFIC_CLASS_UNDEF};
      return n_->connect(dev, &cfg, handle, sc, &dh);
    } else {
      return n_->connect(dev, handle, sc, &dh);
    }
  }
  ncclResult_t accept(void* l, void** rc) override {
    ncclNetDeviceHandle_v7_t* dh = nullptr;
    return n_->accept(l, rc, &dh);
  }
  ncclResult_t reg_mr(void* comm, void* data, size_t size, int type, void** mh) override {
    if constexpr (V == 7)
      return n_->regMr(comm, data, static_cast<int>(size), type, mh);
    else
      return n_->regMr(comm, data, size, type, mh);
  }
  ncclResult_t dereg_mr(void* comm, void* mh) override { return n_->deregMr(comm, mh); }
  ncclResult_t isend(void* sc, void* data, size_t size, int tag, void* mh, void** req) override {
    if constexpr (V <= 8)
      return n_->isend(sc, data, static_cast<int>(size), tag, mh, req);
    else if constexpr (V == 9)
      return n_->isend(sc, data, size, tag, mh, req);
    else
      return n_->isend(sc, data, size, tag, mh, nullptr, req);
  }
  ncclResult_t irecv(void* rc, void* data, size_t size, int tag, void* mh, void** req) override {
    void* datas[1] = {data};
    int tags[1] = {tag};
    void* mhs[1] = {mh};
    if constexpr (V <= 8) {
      int sizes[1] = {static_cast<int>(size)};
      return n_->irecv(rc, 1, datas, sizes, tags, mhs, req);
    } else if constexpr (V == 9) {
      size_t sizes[1] = {size};
      return n_->irecv(rc, 1, datas, sizes, tags, mhs, req);
    } else {
      size_t sizes[1] = {size};
      void* ph[1] = {nullptr};
      return n_->irecv(rc, 1, datas, sizes, tags, mhs, ph, req);
    }
  }
  ncclResult_t test(void* req, int* done, int* size) override { return n_->test(req, done, size); }
  ncclResult_t close_send(void* c) override { return n_->closeSend(c); }
  ncclResult_t close_recv(void* c) override { return n_->closeRecv(c); }
  ncclResult_t close_listen(void* c) override { return n_->closeListen(c); }

 private:
  static auto props_type() {
    if constexpr (V == 7)
      return ncclNetProperties_v7_t{};
    else if constexpr (V == 8)
      return ncclNetProperties_v8_t{};
    else if constexpr (V == 9)
      return ncclNetProperties_v9_t{};
    else if constexpr (V == 10)
      return ncclNetProperties_v10_t{};
    else
      return ncclNetProperties_v11_t{};
  }
  const Net* n_;
  void* ctx_ = nullptr;
};

// The exported table of `version`, or nullptr.
inline std::unique_ptr<NetApi> load_api(int version) {
  void* lib = plugin_library();
  if (!lib) return nullptr;
  std::string sym = "ncclNetPlugin_v" + std::to_string(version);
  void* p = dlsym(lib, sym.c_str());
  if (!p) return nullptr;
  switch (version) {
    case 7:
      return std::make_unique<NetApiImpl<ncclNet_v7_t, 7>>(static_cast<ncclNet_v7_t*>(p));
    case 8:
      return std::make_unique<NetApiImpl<ncclNet_v8_t, 8>>(static_cast<ncclNet_v8_t*>(p));
    case 9:
      return std::make_unique<NetApiImpl<ncclNet_v9_t, 9>>(static_cast<ncclNet_v9_t*>(p));
    case 10:
      return std::make_unique<NetApiImpl<ncclNet_v10_t, 10>>(static_cast<ncclNet_v10_t*>(p));
    case 11:
      return std::make_unique<NetApiImpl<ncclNet_v11_t, 11>>(static_cast<ncclNet_v11_t*>(p));
  }
  return nullptr;
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
