// zipccl nccl-check: the plugin under real NCCL. Starts N processes that bootstrap one
// communicator through NCCL_COMM_ID, each with its own NCCL_HOSTID (so ranks sharing one GPU still
// talk through the network plugin) and NCCL_NET=zipccl (so a broken plugin fails instead of falling
// back to NCCL's own transports). For each protocol it runs every collective and element type twice,
// ZIPCCL_COMPRESS=never and compressed, and requires bit-identical results; it reports bus bandwidth
// and the plugin's compression statistics.
//
// The tool links neither CUDA nor NCCL: each rank dlopens the CUDA driver (libcuda.so.1) and
// libnccl.so.2, so it builds and runs (and says why it cannot check anything) on machines without
// a GPU. --fake replaces CUDA+NCCL by a host emulation, to test the orchestration itself.
#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "commands.h"
#include "exit_status.h"
#include "common/units.h"

namespace zipccl {
namespace tools {
namespace {

using Clock = std::chrono::steady_clock;

// ---- Options ---------------------------------------------------------------------------------

struct Options {
  int np = 2;
  int iters = 20;
  size_t bytes = 4u << 20;
  std::vector<std::string> types{"bf16", "fp16", "fp32"};
  std::vector<std::string> protos{"Simple", "LL", "LL128"};
  std::vector<std::string> colls{"allreduce", "reducescatter", "allgather", "alltoall", "sendrecv"};
  std::string plugin;  // path of libnccl-net-zipccl.so (NCCL_NET_PLUGIN)
  std::string nccl = "libnccl.so.2";
  std::string cuda_driver = "libcuda.so.1";
  std::string compress = "always";
  int timeout_s = 300;  // one run (all collectives of one protocol and mode)
  bool fake = false;
  std::string fake_fault;  // tests: "differ" (compressed run differs), "hang" (rank 1 hangs)
  // Child only.
  int rank = -1;
  int port = 0;
  std::string run_dir, mode, proto;
};

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

void usage(FILE* f) {
  std::fprintf(
      f,
      "usage: zipccl nccl-check [--np N] [--iters K] [--bytes B] [--types bf16,fp16,fp32]\n"
      "                         [--protos Simple,LL,LL128] [--colls allreduce,reducescatter,allgather,"
      "alltoall,sendrecv]\n"
      "                         [--plugin PATH] [--nccl PATH] [--compress always|auto] [--timeout S]\n"
      "  Runs N ranks (on GPU rank %% ngpus) through NCCL with NCCL_NET=zipccl, once with\n"
      "  ZIPCCL_COMPRESS=never and once compressed, per protocol, and requires bit-identical results.\n"
      "  --plugin  the plugin (default: libnccl-net-zipccl.so beside this program's build, else the\n"
      "            loader path);  --nccl  libnccl.so.2 to load (default: the loader path)\n"
      "  --cuda-driver  the CUDA driver library (default libcuda.so.1)\n"
      "  --fake    a host emulation instead of CUDA + NCCL (tests the orchestration only)\n"
      "  Exit status: 0 all bit-exact, 1 a mismatch, hang or error, 2 bad usage, 3 no GPU here.\n");
}

// --bytes: the settings' size grammar (common/units.h); says why a value is refused.
bool parse_size(const char* s, size_t* out) {
  uint64_t v = 0;
  std::string why = "zero";
  if (!units::parse_size(s, &v, &why) || v == 0) {
    std::fprintf(stderr, "zipccl nccl-check: --bytes '%s' is not a size (%s)\n", s, why.c_str());
    return false;
  }
  *out = static_cast<size_t>(v);
  return true;
}

// ---- Per-rank work ----------------------------------------------------------------------------

size_t elem_size(const std::string& t) {
  return t == "fp32" ? 4 : 2;
}
int nccl_dtype(const std::string& t) {
  return t == "fp32" ? 7 : t == "fp16" ? 6 : 9;
}  // nccl.h values

// Element counts of one collective: what each rank sends and receives.
struct Shape {
  size_t send = 0, recv = 0;
};
Shape shape_of(const std::string& coll, size_t count, int np) {
  const size_t per = count / size_t(np);
  if (coll == "reducescatter") return {per * size_t(np), per};
  if (coll == "allgather") return {per, per * size_t(np)};
  if (coll == "alltoall") return {per * size_t(np), per * size_t(np)};
  return {count, count};  // allreduce, sendrecv
}

// nccl-tests' bus-bandwidth factors.
double bus_factor(const std::string& coll, int np) {
  if (coll == "allreduce") return 2.0 * (np - 1) / np;
  if (coll == "sendrecv") return 1.0;
  return double(np - 1) / np;
}

// Gradient-like input: N(0, 1e-2) rounded to the element type, different per rank and collective.
std::vector<uint8_t> make_input(const std::string& type, size_t count, int rank, int salt) {
  std::mt19937_64 rng(uint64_t(rank) * 7919 + uint64_t(salt) * 104729 + 1);
  std::normal_distribution<float> d(0.0f, 1e-2f);
  std::vector<uint8_t> v(count * elem_size(type));
  for (size_t i = 0; i < count; ++i) {
    const float f = d(rng);
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if (type == "fp32") {
      std::memcpy(&v[4 * i], &u, 4);
    } else if (type == "bf16") {
      const uint16_t h = uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
      std::memcpy(&v[2 * i], &h, 2);
    } else {  // fp16 of a small normal value: exponent rebased, mantissa truncated
      const int e = int((u >> 23) & 0xFF) - 127 + 15;
      const uint16_t h = e <= 0 ? uint16_t((u >> 16) & 0x8000)
                                : uint16_t(((u >> 16) & 0x8000) | (uint32_t(e) << 10) | ((u >> 13) & 0x3FF));
      std::memcpy(&v[2 * i], &h, 2);
    }
  }
  return v;
}

uint64_t fnv1a(const std::vector<uint8_t>& b) {
  uint64_t h = 1469598103934665603ull;
  for (uint8_t x : b) h = (h ^ x) * 1099511628211ull;
  return h;
}

// Output a pure data-movement collective must produce, from every rank's input (empty for reductions).
std::vector<uint8_t> expected_movement(const std::string& coll, const std::string& type, size_t count, int np,
                                       int rank, int salt) {
  const size_t es = elem_size(type), per = count / size_t(np);
  std::vector<uint8_t> out;
  if (coll == "allgather") {
    for (int r = 0; r < np; ++r) {
      const auto in = make_input(type, per, r, salt);
      out.insert(out.end(), in.begin(), in.end());
    }
  } else if (coll == "alltoall") {
    for (int r = 0; r < np; ++r) {
      const auto in = make_input(type, per * size_t(np), r, salt);
      out.insert(out.end(), in.begin() + ptrdiff_t(size_t(rank) * per * es),
                 in.begin() + ptrdiff_t(size_t(rank + 1) * per * es));
    }
  } else if (coll == "sendrecv") {
    out = make_input(type, count, (rank + np - 1) % np, salt);
  }
  return out;
}

// One backend: real (CUDA driver + NCCL, dlopened) or fake (host emulation for tests).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual bool init(const Options& o, std::string* err) = 0;
  // Runs `iters` iterations of coll on `in`, leaving the output in *out. *seconds: the loop's time.
  // What runs underneath (NCCL version, device), for the report.
  virtual std::string describe() const = 0;
  virtual bool run(const std::string& coll, const std::string& type, const std::vector<uint8_t>& in, Shape s,
                   int iters, std::vector<uint8_t>* out, double* seconds, std::string* err) = 0;
};

// The few CUDA driver and NCCL entry points used, resolved at run time (their C ABIs are stable).
using CUresult = int;
struct CudaApi {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(int*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(void**, int);
  CUresult (*cuCtxSetCurrent)(void*);
  CUresult (*cuMemAlloc)(uint64_t*, size_t);
  CUresult (*cuMemFree)(uint64_t);
  CUresult (*cuMemcpyHtoD)(uint64_t, const void*, size_t);
  CUresult (*cuMemcpyDtoH)(void*, uint64_t, size_t);
  CUresult (*cuStreamCreate)(void**, unsigned);
  CUresult (*cuStreamSynchronize)(void*);
};
struct NcclUniqueId {
  char internal[128];  // NCCL_UNIQUE_ID_BYTES
};
struct NcclApi {
  int (*GetVersion)(int*);
  int (*GetUniqueId)(void*);
  int (*CommInitRank)(void**, int, NcclUniqueId, int);
  int (*CommDestroy)(void*);
  int (*CommGetAsyncError)(void*, int*);
  const char* (*GetErrorString)(int);
  int (*AllReduce)(const void*, void*, size_t, int, int, void*, void*);
  int (*ReduceScatter)(const void*, void*, size_t, int, int, void*, void*);
  int (*AllGather)(const void*, void*, size_t, int, void*, void*);
  int (*Send)(const void*, size_t, int, int, void*, void*);
  int (*Recv)(void*, size_t, int, int, void*, void*);
  int (*GroupStart)();
  int (*GroupEnd)();
};

template <class F>
bool resolve(void* lib, const char* name, F* f, std::string* err) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
  if (!*f) *err = std::string("missing symbol ") + name;
  return *f != nullptr;
}

// Whether this machine can run the check at all (driver present, >= 1 device); the reason if not.
bool gpu_available(const std::string& driver, std::string* why) {
  void* lib = dlopen(driver.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    *why = "no CUDA driver (" + driver + " not found): nccl-check needs a GPU";
    return false;
  }
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*count)(int*) = nullptr;
  std::string err;
  if (!resolve(lib, "cuInit", &init, &err) || !resolve(lib, "cuDeviceGetCount", &count, &err)) {
    *why = "CUDA driver unusable: " + err;
    return false;
  }
  int n = 0;
  const CUresult r = init(0);
  if (r != 0 || count(&n) != 0 || n < 1) {
    *why = "no CUDA device (cuInit returned " + std::to_string(r) + "): nccl-check needs a GPU";
    return false;
  }
  return true;  // the library stays loaded; the parent never creates a context
}

class RealBackend final : public Backend {
 public:
  bool init(const Options& o, std::string* err) override {
    o_ = &o;
    void* cu = dlopen(o.cuda_driver.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!cu) return *err = o.cuda_driver + ": " + std::string(dlerror()), false;
    void* nc = dlopen(o.nccl.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (!nc) return *err = o.nccl + ": " + std::string(dlerror()), false;
    bool ok = resolve(cu, "cuInit", &cu_.cuInit, err) &&
              resolve(cu, "cuDeviceGetCount", &cu_.cuDeviceGetCount, err) &&
              resolve(cu, "cuDeviceGet", &cu_.cuDeviceGet, err) &&
              resolve(cu, "cuDevicePrimaryCtxRetain", &cu_.cuDevicePrimaryCtxRetain, err) &&
              resolve(cu, "cuCtxSetCurrent", &cu_.cuCtxSetCurrent, err) &&
              resolve(cu, "cuMemAlloc_v2", &cu_.cuMemAlloc, err) &&
              resolve(cu, "cuMemFree_v2", &cu_.cuMemFree, err) &&
              resolve(cu, "cuMemcpyHtoD_v2", &cu_.cuMemcpyHtoD, err) &&
              resolve(cu, "cuMemcpyDtoH_v2", &cu_.cuMemcpyDtoH, err) &&
              resolve(cu, "cuStreamCreate", &cu_.cuStreamCreate, err) &&
              resolve(cu, "cuStreamSynchronize", &cu_.cuStreamSynchronize, err);
    ok = ok && resolve(nc, "ncclGetVersion", &nc_.GetVersion, err) &&
         resolve(nc, "ncclGetUniqueId", &nc_.GetUniqueId, err) &&
         resolve(nc, "ncclCommInitRank", &nc_.CommInitRank, err) &&
         resolve(nc, "ncclCommDestroy", &nc_.CommDestroy, err) &&
         resolve(nc, "ncclCommGetAsyncError", &nc_.CommGetAsyncError, err) &&
         resolve(nc, "ncclGetErrorString", &nc_.GetErrorString, err) &&
         resolve(nc, "ncclAllReduce", &nc_.AllReduce, err) &&
         resolve(nc, "ncclReduceScatter", &nc_.ReduceScatter, err) &&
         resolve(nc, "ncclAllGather", &nc_.AllGather, err) && resolve(nc, "ncclSend", &nc_.Send, err) &&
         resolve(nc, "ncclRecv", &nc_.Recv, err) && resolve(nc, "ncclGroupStart", &nc_.GroupStart, err) &&
         resolve(nc, "ncclGroupEnd", &nc_.GroupEnd, err);
    if (!ok) return false;
    int ndev = 0, dev = 0;
    void* ctx = nullptr;
    if (cu_.cuInit(0) || cu_.cuDeviceGetCount(&ndev) || ndev < 1) return *err = "no CUDA device", false;
    ndev_ = ndev;
    if (cu_.cuDeviceGet(&dev, o.rank % ndev) || cu_.cuDevicePrimaryCtxRetain(&ctx, dev) ||
        cu_.cuCtxSetCurrent(ctx))
      return *err = "cannot make a context on device " + std::to_string(o.rank % ndev), false;
    if (cu_.cuStreamCreate(&stream_, 1 /* CU_STREAM_NON_BLOCKING */))
      return *err = "cuStreamCreate failed", false;
    NcclUniqueId id;
    std::memset(&id, 0, sizeof id);
    if (int r = nc_.GetUniqueId(&id))
      return *err = std::string("ncclGetUniqueId: ") + nc_.GetErrorString(r), false;
    if (int r = nc_.CommInitRank(&comm_, o.np, id, o.rank))
      return *err = std::string("ncclCommInitRank: ") + nc_.GetErrorString(r), false;
    return true;
  }

  bool run(const std::string& coll, const std::string& type, const std::vector<uint8_t>& in, Shape s,
           int iters, std::vector<uint8_t>* out, double* seconds, std::string* err) override {
    const size_t es = elem_size(type);
    uint64_t d_in = 0, d_out = 0;
    if (cu_.cuMemAlloc(&d_in, s.send * es) || cu_.cuMemAlloc(&d_out, s.recv * es))
      return *err = "cuMemAlloc failed", false;
    bool ok = cu_.cuMemcpyHtoD(d_in, in.data(), in.size()) == 0;
    const int dt = nccl_dtype(type), np = o_->np, rank = o_->rank;
    const void* src = reinterpret_cast<const void*>(d_in);
    void* dst = reinterpret_cast<void*>(d_out);
    auto one = [&]() -> int {
      if (coll == "allreduce") return nc_.AllReduce(src, dst, s.send, dt, 0 /* ncclSum */, comm_, stream_);
      if (coll == "reducescatter") return nc_.ReduceScatter(src, dst, s.recv, dt, 0, comm_, stream_);
      if (coll == "allgather") return nc_.AllGather(src, dst, s.send, dt, comm_, stream_);
      nc_.GroupStart();
      if (coll == "alltoall") {
        const size_t per = s.send / size_t(np);
        for (int p = 0; p < np; ++p) {
          nc_.Send(static_cast<const char*>(src) + size_t(p) * per * es, per, dt, p, comm_, stream_);
          nc_.Recv(static_cast<char*>(dst) + size_t(p) * per * es, per, dt, p, comm_, stream_);
        }
      } else {  // sendrecv: a ring
        nc_.Send(src, s.send, dt, (rank + 1) % np, comm_, stream_);
        nc_.Recv(dst, s.recv, dt, (rank + np - 1) % np, comm_, stream_);
      }
      return nc_.GroupEnd();
    };
    const auto t0 = Clock::now();
    for (int i = 0; ok && i < iters; ++i) {
      if (int r = one()) *err = std::string(coll) + ": " + nc_.GetErrorString(r), ok = false;
    }
    ok = ok && cu_.cuStreamSynchronize(stream_) == 0;
    *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    int async = 0;
    if (ok && (nc_.CommGetAsyncError(comm_, &async) || async))
      *err = std::string("async error: ") + nc_.GetErrorString(async), ok = false;
    out->assign(s.recv * es, 0);
    ok = ok && cu_.cuMemcpyDtoH(out->data(), d_out, out->size()) == 0;
    cu_.cuMemFree(d_in);
    cu_.cuMemFree(d_out);
    if (!ok && err->empty()) *err = "CUDA call failed";
    return ok;
  }

  std::string describe() const override {
    int v = 0;
    nc_.GetVersion(&v);
    return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
           std::to_string(v % 100) + " (" + o_->nccl + "), " + std::to_string(ndev_) + " CUDA device(s)";
  }

  ~RealBackend() override {
    if (comm_) nc_.CommDestroy(comm_);
  }

 private:
  const Options* o_ = nullptr;
  CudaApi cu_{};
  NcclApi nc_{};
  void* comm_ = nullptr;
  void* stream_ = nullptr;
  int ndev_ = 0;
};

// Host emulation: every rank recomputes all ranks' inputs. Reductions sum in float in rank order
// (only consistency between runs matters here); --fake-fault injects the failures the parent
// must catch.
class FakeBackend final : public Backend {
 public:
  bool init(const Options& o, std::string*) override {
    o_ = &o;
    if (o.fake_fault == "hang" && o.rank == 1 && o.mode != "never") pause();
    return true;
  }
  bool run(const std::string& coll, const std::string& type, const std::vector<uint8_t>& in, Shape s, int,
           std::vector<uint8_t>* out, double* seconds, std::string*) override {
    *seconds = 1e-3;
    const int salt = salt_of(coll);
    auto moved = expected_movement(coll, type, coll == "allgather" ? s.recv : s.send, o_->np, o_->rank, salt);
    if (!moved.empty()) {
      *out = moved;
    } else {  // allreduce / reducescatter: a byte-wise mix of every rank's input stands in for the sum
      out->assign(s.recv * elem_size(type), 0);
      const size_t off = coll == "reducescatter" ? size_t(o_->rank) * out->size() : 0;
      for (int r = 0; r < o_->np; ++r) {
        const auto x = r == o_->rank ? in : make_input(type, s.send, r, salt);
        for (size_t i = 0; i < out->size(); ++i) (*out)[i] = uint8_t((*out)[i] * 31 + x[off + i]);
      }
    }
    if (o_->fake_fault == "differ" && o_->mode != "never" && coll == "allreduce" && type == "bf16")
      (*out)[7] ^= 1;
    return true;
  }
  std::string describe() const override { return "host emulation"; }
  static int salt_of(const std::string& coll) { return int(std::hash<std::string>()(coll) & 0xFFFF); }

 private:
  const Options* o_ = nullptr;
};

// A rank: one communicator, every type x collective; one result line each, then "done".
int run_rank(const Options& o) {
  const std::string path = o.run_dir + "/rank" + std::to_string(o.rank) + ".txt";
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return 1;
  std::unique_ptr<Backend> be;
  if (o.fake)
    be.reset(new FakeBackend);
  else
    be.reset(new RealBackend);
  std::string err;
  if (!be->init(o, &err)) {
    std::fprintf(f, "error init %s\n", err.c_str());
    std::fclose(f);
    return 1;
  }
  if (o.rank == 0) std::fprintf(f, "info %s\n", be->describe().c_str());
  int status = 0;
  for (const std::string& type : o.types) {
    const size_t count = (o.bytes / elem_size(type)) / size_t(o.np) * size_t(o.np);
    for (const std::string& coll : o.colls) {
      const Shape s = shape_of(coll, count, o.np);
      const int salt = FakeBackend::salt_of(coll);
      const auto in = make_input(type, s.send, o.rank, salt);
      std::vector<uint8_t> out;
      double secs = 0;
      if (!be->run(coll, type, in, s, o.iters, &out, &secs, &err)) {
        std::fprintf(f, "error %s %s %s\n", coll.c_str(), type.c_str(), err.c_str());
        status = 1;
        break;
      }
      // Data movement has one right answer; reductions are checked against the never-run.
      const auto want =
          expected_movement(coll, type, coll == "allgather" ? s.recv : s.send, o.np, o.rank, salt);
      const int exact = want.empty() ? -1 : int(want == out);
      std::fprintf(f, "result %s %s %016" PRIx64 " %.6f %zu %d\n", coll.c_str(), type.c_str(), fnv1a(out),
                   secs, s.send * elem_size(type), exact);
      std::fflush(f);
    }
    if (status) break;
  }
  std::fprintf(f, "done %d\n", status);
  std::fclose(f);
  return status;
}

// ---- Orchestration ----------------------------------------------------------------------------

struct Result {
  std::string hash;
  double seconds = 0;
  size_t bytes = 0;
  int exact = -1;
};
struct Run {
  bool ok = false;
  std::string error, info;
  std::map<std::string, Result> results;  // "rank coll type"
  double ratio = 0;
  uint64_t bytes_in = 0, bytes_wire = 0, compressed = 0, messages = 0;
  uint64_t device_encoded = 0, device_decoded = 0;  // frames the GPU path encoded (send) / decoded (receive)
};

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (fd >= 0 && bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  if (fd >= 0) close(fd);
  return port;
}

uint64_t json_u64(const std::string& line, const char* key) {
  const std::string k = std::string("\"") + key + "\":";
  const size_t at = line.find(k);
  return at == std::string::npos ? 0 : std::strtoull(line.c_str() + at + k.size(), nullptr, 10);
}

Run run_all_ranks(const Options& o, const std::string& self, const std::string& proto,
                  const std::string& mode) {
  Run run;
  char tmpl[] = "/tmp/zipccl-nccl-check-XXXXXX";
  if (!mkdtemp(tmpl)) return run.error = "mkdtemp failed", run;
  const std::string dir = tmpl;
  const int port = free_port();
  std::vector<pid_t> pids;
  const pid_t self_pid = getpid();
  for (int r = 0; r < o.np; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      die_with_parent(self_pid);
      setenv("NCCL_COMM_ID", ("127.0.0.1:" + std::to_string(port)).c_str(), 1);
      setenv("NCCL_HOSTID", ("zipccl-check-" + std::to_string(r)).c_str(), 1);
      setenv("NCCL_NET", "zipccl", 1);
      if (!o.plugin.empty()) setenv("NCCL_NET_PLUGIN", o.plugin.c_str(), 1);
      setenv("NCCL_PROTO", proto.c_str(), 1);
      setenv("ZIPCCL_COMPRESS", mode.c_str(), 1);
      setenv("ZIPCCL_STATS_FILE", (dir + "/stats.jsonl").c_str(), 1);
      if (!getenv("NCCL_DEBUG")) setenv("NCCL_DEBUG", "WARN", 1);
      std::vector<std::string> args = {self,
                                       "nccl-check",
                                       "--child",
                                       std::to_string(r),
                                       "--run-dir",
                                       dir,
                                       "--np",
                                       std::to_string(o.np),
                                       "--iters",
                                       std::to_string(o.iters),
                                       "--bytes",
                                       std::to_string(o.bytes),
                                       "--nccl",
                                       o.nccl,
                                       "--cuda-driver",
                                       o.cuda_driver,
                                       "--mode",
                                       mode};
      auto join = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
        return s;
      };
      args.insert(args.end(), {"--types", join(o.types), "--colls", join(o.colls)});
      if (o.fake) args.push_back("--fake");
      if (!o.fake_fault.empty()) args.insert(args.end(), {"--fake-fault", o.fake_fault});
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(self.c_str(), argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(o.timeout_s);
  size_t left = pids.size();
  std::vector<int> status(pids.size(), -1);
  while (left && Clock::now() < deadline) {
    for (size_t i = 0; i < pids.size(); ++i) {
      int st;
      if (status[i] == -1 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
        --left;
      }
    }
    if (left) usleep(20000);
  }
  if (left) {
    run.error = "ranks still running after " + std::to_string(o.timeout_s) + " s (hang?); killed";
    for (size_t i = 0; i < pids.size(); ++i) {
      if (status[i] == -1) kill(pids[i], SIGKILL), waitpid(pids[i], nullptr, 0);
    }
  }
  bool all_done = !left;
  for (int r = 0; r < o.np; ++r) {
    std::ifstream f(dir + "/rank" + std::to_string(r) + ".txt");
    std::string line;
    bool done = false;
    while (std::getline(f, line)) {
      std::istringstream ss(line);
      std::string what;
      ss >> what;
      if (what == "result") {
        std::string coll, type;
        Result res;
        ss >> coll >> type >> res.hash >> res.seconds >> res.bytes >> res.exact;
        run.results[std::to_string(r) + " " + coll + " " + type] = res;
      } else if (what == "error") {
        if (run.error.empty()) run.error = "rank " + std::to_string(r) + ": " + line.substr(6);
      } else if (what == "info") {
        run.info = line.substr(5);
      } else if (what == "done") {
        done = line == "done 0";
      }
    }
    if (!done) all_done = false;
    if (status[size_t(r)] != 0 && run.error.empty())
      run.error = "rank " + std::to_string(r) + " exited with status " + std::to_string(status[size_t(r)]);
  }
  std::ifstream stats(dir + "/stats.jsonl");
  std::string line;
  while (std::getline(stats, line)) {
    if (line.find("\"dir\":\"recv\"") != std::string::npos) run.device_decoded += json_u64(line, "device_codec");
    if (line.find("\"dir\":\"send\"") == std::string::npos) continue;
    run.device_encoded += json_u64(line, "device_codec");
    run.bytes_in += json_u64(line, "bytes_in");
    run.bytes_wire += json_u64(line, "bytes_wire");
    run.compressed += json_u64(line, "compressed");
    run.messages += json_u64(line, "messages");
  }
  run.ratio = run.bytes_wire ? double(run.bytes_in) / double(run.bytes_wire) : 0;
  std::string rm = "rm -rf '" + dir + "'";
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "nccl-check: could not remove %s\n", dir.c_str());
  run.ok = all_done && run.error.empty();
  return run;
}

std::string default_plugin(const std::string& self) {
  // A build tree: <build>/tools/zipccl and <build>/plugin/libnccl-net-zipccl.so.
  const size_t slash = self.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : self.substr(0, slash);
  for (const std::string& p :
       {dir + "/../plugin/libnccl-net-zipccl.so", dir + "/../lib/libnccl-net-zipccl.so"}) {
    if (access(p.c_str(), R_OK) == 0) return p;
  }
  return "zipccl";  // NCCL then looks for libnccl-net-zipccl.so on the loader path
}

}  // namespace

int cmd_nccl_check(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else if (a == "--fake") {
      o.fake = true;
    } else if ((a == "--np" || a == "--iters" || a == "--timeout" || a == "--child") && (v = next())) {
      const int n = std::atoi(v);
      if (n < (a == "--child" ? 0 : 1)) return usage(stderr), 2;
      (a == "--np" ? o.np : a == "--iters" ? o.iters : a == "--timeout" ? o.timeout_s : o.rank) = n;
    } else if (a == "--bytes" && (v = next())) {
      if (!parse_size(v, &o.bytes)) return usage(stderr), 2;
    } else if ((a == "--types" || a == "--protos" || a == "--colls") && (v = next())) {
      (a == "--types" ? o.types : a == "--protos" ? o.protos : o.colls) = split_list(v);
    } else if ((a == "--plugin" || a == "--nccl" || a == "--cuda-driver" || a == "--compress" ||
                a == "--run-dir" || a == "--mode" || a == "--fake-fault") &&
               (v = next())) {
      (a == "--plugin"        ? o.plugin
       : a == "--nccl"        ? o.nccl
       : a == "--cuda-driver" ? o.cuda_driver
       : a == "--compress"    ? o.compress
       : a == "--run-dir"     ? o.run_dir
       : a == "--mode"        ? o.mode
                              : o.fake_fault) = v;
    } else {
      std::fprintf(stderr, "zipccl nccl-check: bad argument '%s'\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  for (const auto& t : o.types) {
    if (t != "bf16" && t != "fp16" && t != "fp32")
      return std::fprintf(stderr, "nccl-check: type %s?\n", t.c_str()), 2;
  }
  for (const auto& c : o.colls) {
    if (c != "allreduce" && c != "reducescatter" && c != "allgather" && c != "alltoall" && c != "sendrecv")
      return std::fprintf(stderr, "nccl-check: collective %s?\n", c.c_str()), 2;
  }
  if (o.rank >= 0) return run_rank(o);

  std::string why;
  if (!o.fake && !gpu_available(o.cuda_driver, &why)) {
    std::fprintf(stderr, "zipccl nccl-check: %s; nothing was checked\n", why.c_str());
    return 3;
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) return std::fprintf(stderr, "nccl-check: cannot find this program\n"), 1;
  self[n] = 0;
  if (o.plugin.empty()) o.plugin = default_plugin(self);
  // Line-buffered even into a file or pipe: a run cut short by an outer timeout still leaves every line
  // it printed, the header and each finished protocol included.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf(
      "zipccl nccl-check: %d ranks, %zu bytes per rank, %d iterations, plugin %s, compressed run: %s%s\n",
      o.np, o.bytes, o.iters, o.plugin.c_str(), o.compress.c_str(), o.fake ? " (fake backend)" : "");
  std::printf("%-7s %-14s %-5s %-10s %14s %14s\n", "proto", "collective", "type", "bit-exact", "busbw never",
              "busbw comp.");
  bool all_ok = true;
  for (const std::string& proto : o.protos) {
    std::printf("%-7s running: never, then %s (limit %d s each)\n", proto.c_str(), o.compress.c_str(), o.timeout_s);
    const Run never = run_all_ranks(o, self, proto, "never");
    const Run comp = run_all_ranks(o, self, proto, o.compress);
    if (proto == o.protos.front() && !never.info.empty()) std::printf("under: %s\n", never.info.c_str());
    for (const Run* r : {&never, &comp}) {
      if (!r->ok) {
        std::printf("%-7s run %s FAILED: %s\n", proto.c_str(), r == &never ? "never" : o.compress.c_str(),
                    r->error.c_str());
        all_ok = false;
      }
    }
    for (const auto& type : o.types) {
      for (const auto& coll : o.colls) {
        bool same = true, exact = true, have = true;
        double tn = 0, tc = 0;
        size_t bytes = 0;
        for (int r = 0; r < o.np; ++r) {
          const std::string key = std::to_string(r) + " " + coll + " " + type;
          const auto a = never.results.find(key), b = comp.results.find(key);
          if (a == never.results.end() || b == comp.results.end()) {
            have = false;
            continue;
          }
          same &= a->second.hash == b->second.hash;
          exact &= a->second.exact != 0 && b->second.exact != 0;
          tn = std::max(tn, a->second.seconds), tc = std::max(tc, b->second.seconds);
          bytes = a->second.bytes;
        }
        const bool ok = have && same && exact;
        all_ok &= ok;
        const double f = bus_factor(coll, o.np) * double(bytes) * o.iters / 1e9;
        std::printf("%-7s %-14s %-5s %-10s %11.2f GB/s %9.2f GB/s\n", proto.c_str(), coll.c_str(),
                    type.c_str(),
                    !have    ? "MISSING"
                    : !exact ? "WRONG"
                    : same   ? "yes"
                             : "DIFFERS",
                    tn > 0 ? f / tn : 0.0, tc > 0 ? f / tc : 0.0);
      }
    }
    std::printf("%-7s plugin statistics (send side), compressed run: %" PRIu64 " messages, %" PRIu64
                " compressed, ratio %.3f; GPU path: %" PRIu64 " device-encoded, %" PRIu64 " device-decoded\n",
                proto.c_str(), comp.messages, comp.compressed, comp.ratio, comp.device_encoded, comp.device_decoded);
  }
  std::printf("%s\n", all_ok ? "nccl-check: every result bit-exact" : "nccl-check: FAILED");
  return all_ok ? 0 : 1;
}

}  // namespace tools
}  // namespace zipccl
