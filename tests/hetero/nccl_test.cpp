// The NCCL executor against the CPU executor, on a GPU: 8 processes share one GPU, each posing as
// its own host (distinct NCCL_HOSTID) so that NCCL accepts them in one communicator. Each process
// splits the layout's communicators from the world communicator (ncclCommSplit), runs forward and
// backward plans with grouped ncclSend/ncclRecv, and compares its destination buffer byte for byte
// with what the CPU executor produces for the same plan. Then, per layout, a 1F1B iteration of four
// micro-batches with NcclBoundaryStep (forward and backward plans of different micro-batches in one
// grouped call per wave, pipeline.h), each destination compared with the CPU executor likewise.
//
// Without a GPU the test skips. Build needs CUDA and NCCL (zipccl::hetero_nccl), so this file is
// also the check that executor_nccl.h compiles and links.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <random>
#include <stdexcept>
#include <thread>

#include "zipccl/hetero/executor_cpu.h"
#include "zipccl/hetero/executor_nccl.h"

extern char** environ;

namespace {

using namespace zipccl::hetero;

constexpr int kWorld = 8;

struct GpuCase {
  const char* name;
  LayoutSpec spec;
  Strategy strategy;
  bool world_comm;  // run over the parent communicator instead of the boundary one
};

LayoutSpec make_spec(ModuleSpec llm, ModuleSpec enc) {
  LayoutSpec s;
  s.world_size = kWorld;
  s.llm = llm;
  s.encoders.push_back(enc);
  return s;
}

std::vector<GpuCase> cases() {
  return {
      {"fan-in, replicated", make_spec({"llm", 2, 1, 1, 0, false, 4, 4}, {"vision", 1, 1, 1, 0, false, 0, 4}),
       Strategy::direct, false},
      {"fan-in, sequence parallel",
       make_spec({"llm", 2, 1, 1, 0, true, 4, 4}, {"vision", 1, 1, 1, 0, false, 0, 4}),
       Strategy::scatter_allgather, false},
      {"colocated", make_spec({"llm", 4, 1, 1, 0, false, 0, -1}, {"vision", 2, 1, 1, 0, false, 0, -1}),
       Strategy::direct, true},
      {"fan-out, cp", make_spec({"llm", 1, 2, 1, 0, false, 2, 6}, {"vision", 2, 1, 1, 0, false, 0, 2}),
       Strategy::scatter_allgather, false},
  };
}

unsigned char reference_byte(int s, std::int64_t row, std::int64_t k, std::uint64_t salt) {
  std::uint64_t x = salt ^ (static_cast<std::uint64_t>(s) << 40) ^ (static_cast<std::uint64_t>(row) << 16) ^
                    static_cast<std::uint64_t>(k);
  x *= 0x9E3779B97F4A7C15ull;
  return static_cast<unsigned char>(x >> 56);
}

std::vector<unsigned char> source_of(const Layout& layout, const BoundaryPlan& plan,
                                     const BoundaryBatch& batch, int rank, std::uint64_t salt) {
  std::vector<unsigned char> buf(plan.source_bytes[rank]);
  for (const BufferSegment& seg : buffer_segments(layout.modules()[plan.source_module], batch, rank)) {
    for (std::int64_t row = seg.rows.begin; row < seg.rows.end; ++row) {
      for (std::int64_t k = 0; k < batch.row_bytes(); ++k) {
        buf[seg.offset + (row - seg.rows.begin) * batch.row_bytes() + k] =
            reference_byte(seg.sample, row, k, salt);
      }
    }
  }
  return buf;
}

#define WORKER_CHECK(cond, msg)                                                     \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "rank %d: %s (%s:%d)\n", rank, msg, __FILE__, __LINE__); \
      return 1;                                                                     \
    }                                                                               \
  } while (0)

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorString(e));
}

// One plan's buffers of this rank on the device (source uploaded, destination poisoned), and what
// the CPU executor delivers to this rank for the same plan.
class DevicePlan {
 public:
  DevicePlan(const Layout& layout, const BoundaryPlan& plan, const BoundaryBatch& batch, int rank,
             std::uint64_t salt) {
    const int world = layout.world_size();
    std::vector<std::vector<unsigned char>> src(world), dst(world);
    std::vector<HostBuffers> bufs(world);
    for (int r = 0; r < world; ++r) {
      src[r] = source_of(layout, plan, batch, r, salt);
      dst[r].assign(plan.destination_bytes[r], 0xEE);
      bufs[r] = HostBuffers{src[r].data(), dst[r].data(), src[r].size(), dst[r].size()};
    }
    execute_cpu(plan, bufs, 1);
    source_size_ = src[rank].size();
    expect_ = std::move(dst[rank]);
    cuda_check(cudaMalloc(&source_, source_size_ + 1), "cudaMalloc");
    cuda_check(cudaMalloc(&destination_, expect_.size() + 1), "cudaMalloc");
    cuda_check(cudaMemcpy(source_, src[rank].data(), source_size_, cudaMemcpyHostToDevice), "upload");
    cuda_check(cudaMemset(destination_, 0xEE, expect_.size()), "cudaMemset");
  }
  ~DevicePlan() {
    cudaFree(source_);
    cudaFree(destination_);
  }
  DevicePlan(const DevicePlan&) = delete;
  DevicePlan& operator=(const DevicePlan&) = delete;

  PlanBuffers buffers() const { return PlanBuffers{source_, destination_, source_size_, expect_.size()}; }
  // Once the stream has run the plan: whether the destination equals the CPU executor's.
  bool matches() const {
    std::vector<unsigned char> got(expect_.size());
    cuda_check(cudaMemcpy(got.data(), destination_, got.size(), cudaMemcpyDeviceToHost), "download");
    return got == expect_;
  }

 private:
  void* source_ = nullptr;
  void* destination_ = nullptr;
  std::size_t source_size_ = 0;
  std::vector<unsigned char> expect_;
};

// 1F1B across the boundary with NcclBoundaryStep: four micro-batches of different token counts, the
// strategies alternating, paired in steps as boundary_1f1b orders them for two LLM stages (F0, F1,
// F2+B0, F3+B1, B2, B3); every destination is compared with the CPU executor, plan by plan.
bool pipeline_matches(int rank, const Layout& layout, ncclComm_t comm, const RankList& members,
                      cudaStream_t stream, std::uint64_t salt) {
  constexpr int kMicro = 4;
  std::vector<BoundaryPlan> fwd, bwd;
  std::deque<DevicePlan> fwd_data, bwd_data;
  for (int i = 0; i < kMicro; ++i) {
    const BoundaryBatch batch{{5 + i, 3, i, 7, 6 - i, 2, 9, 4 + i, 1, 8, 3, 5}, 24, 2};
    const Strategy a = i % 2 ? Strategy::direct : Strategy::scatter_allgather;
    const Strategy b = i % 2 ? Strategy::scatter_allgather : Strategy::direct;
    fwd.push_back(plan_forward(layout, 0, batch, PlanOptions{a}));
    bwd.push_back(plan_backward(layout, 0, batch, PlanOptions{b}));
    fwd_data.emplace_back(layout, fwd.back(), batch, rank, salt + 2 * i);
    bwd_data.emplace_back(layout, bwd.back(), batch, rank, salt + 2 * i + 1);
  }
  for (const BoundaryTick& t : boundary_1f1b(kMicro, 2)) {
    const NcclBoundaryStep step(t.forward >= 0 ? &fwd[t.forward] : nullptr,
                                t.backward >= 0 ? &bwd[t.backward] : nullptr, comm, members);
    StepBuffers buffers;
    if (t.forward >= 0) buffers.forward = fwd_data[t.forward].buffers();
    if (t.backward >= 0) buffers.backward = bwd_data[t.backward].buffers();
    if (!step.empty()) step.run(buffers, stream);
  }
  cuda_check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  for (int i = 0; i < kMicro; ++i) {
    if (!fwd_data[i].matches() || !bwd_data[i].matches()) return false;
  }
  return true;
}

int worker(int rank, const std::string& dir) {
  ncclUniqueId id;
  const std::string id_path = dir + "/nccl_id";
  if (rank == 0) {
    WORKER_CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId failed");
    {
      std::ofstream out(id_path + ".tmp", std::ios::binary);
      out.write(reinterpret_cast<const char*>(&id), sizeof id);
    }
    WORKER_CHECK(std::rename((id_path + ".tmp").c_str(), id_path.c_str()) == 0, "cannot publish the NCCL id");
  } else {
    bool got = false;
    for (int i = 0; i < 6000 && !got; ++i) {
      std::ifstream in(id_path, std::ios::binary);
      got = in.read(reinterpret_cast<char*>(&id), sizeof id).gcount() == sizeof id;
      if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    WORKER_CHECK(got, "no NCCL id from rank 0 within 60 s");
  }
  WORKER_CHECK(cudaSetDevice(0) == cudaSuccess, "cudaSetDevice(0) failed");
  ncclComm_t world = nullptr;
  WORKER_CHECK(ncclCommInitRank(&world, kWorld, id, rank) == ncclSuccess, "ncclCommInitRank failed");
  cudaStream_t stream;
  WORKER_CHECK(cudaStreamCreate(&stream) == cudaSuccess, "cudaStreamCreate failed");
  const BoundaryBatch batch{{5, 3, 0, 7, 6, 2, 9, 4, 1, 8, 3, 5}, 24, 2};
  int checks = 0, pipelines = 0;
  RankList everyone;
  for (int r = 0; r < kWorld; ++r) everyone.push_back(r);
  const std::vector<GpuCase> all = cases();
  for (std::size_t n = 0; n < all.size(); ++n) {
    const GpuCase& c = all[n];
    Layout layout(c.spec);
    NcclGroups groups(world, layout);
    ncclComm_t comm = c.world_comm ? world : groups.boundary(0);
    if (comm == nullptr) continue;  // not at this boundary
    const RankList& members = c.world_comm ? everyone : groups.boundary_members(0);
    for (Direction dir : {Direction::forward, Direction::backward}) {
      const BoundaryPlan plan = plan_boundary(layout, 0, batch, dir, PlanOptions{c.strategy});
      // The same salt on every rank: each compares against sources the others uploaded.
      const DevicePlan data(layout, plan, batch, rank, 1000 * n + 17 + (dir == Direction::backward));
      const NcclBoundaryExecutor ex(plan, comm, members);
      const PlanBuffers b = data.buffers();
      ex.run(b.source, b.source_size, b.destination, b.destination_size, stream);
      WORKER_CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "stream failed");
      if (!data.matches()) {
        std::fprintf(stderr, "rank %d: %s %s: NCCL result differs from the CPU executor\n", rank, c.name,
                     direction_name(dir));
        return 1;
      }
      ++checks;
    }
    if (!pipeline_matches(rank, layout, comm, members, stream, 1000 * n + 500)) {
      std::fprintf(stderr, "rank %d: %s: 1F1B steps differ from the CPU executor\n", rank, c.name);
      return 1;
    }
    ++pipelines;
  }
  cudaStreamDestroy(stream);
  ncclCommDestroy(world);
  std::fprintf(stderr, "rank %d: %d plans and %d 1F1B iterations match the CPU executor\n", rank, checks,
               pipelines);
  return 0;
}

TEST(HeteroNccl, MatchesTheCpuExecutor) {
  int devices = 0;
  const cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess) GTEST_SKIP() << "no GPU: cudaGetDeviceCount says " << cudaGetErrorString(e);
  if (devices == 0) GTEST_SKIP() << "no GPU: cudaGetDeviceCount found 0 devices";

  char dir_template[] = "/tmp/zipccl-hetero-nccl-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  std::vector<pid_t> pids;
  for (int rank = 0; rank < kWorld; ++rank) {
    // Each child gets its own host id; loopback sockets unless the caller chose otherwise.
    std::vector<std::string> env;
    for (char** p = environ; *p != nullptr; ++p) {
      if (std::strncmp(*p, "NCCL_HOSTID=", 12) != 0) env.emplace_back(*p);
    }
    env.push_back("NCCL_HOSTID=zipccl-hetero-test-" + std::to_string(rank));
    if (std::getenv("NCCL_SOCKET_IFNAME") == nullptr) env.push_back("NCCL_SOCKET_IFNAME=lo");
    if (std::getenv("NCCL_IB_DISABLE") == nullptr) env.push_back("NCCL_IB_DISABLE=1");
    std::vector<char*> envp;
    for (std::string& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string rank_text = std::to_string(rank), exe = "/proc/self/exe", flag = "--hetero-nccl-worker";
    std::vector<char*> argv = {exe.data(), flag.data(), rank_text.data(), const_cast<char*>(dir.c_str()),
                               nullptr};
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv.data(), envp.data()), 0);
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(240);
  std::vector<int> status(kWorld, -1);
  int left = kWorld;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    for (int r = 0; r < kWorld; ++r) {
      int st = 0;
      if (status[r] == -1 && waitpid(pids[r], &st, WNOHANG) == pids[r]) {
        status[r] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        --left;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  for (int r = 0; r < kWorld; ++r) {
    if (status[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
    }
  }
  std::remove((dir + "/nccl_id").c_str());
  rmdir(dir.c_str());
  for (int r = 0; r < kWorld; ++r)
    EXPECT_EQ(status[r], 0) << "worker " << r << (status[r] == -1 ? " timed out" : "");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "--hetero-nccl-worker") == 0) {
    try {
      return worker(std::atoi(argv[2]), argv[3]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rank %s: %s\n", argv[2], e.what());
      return 1;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
