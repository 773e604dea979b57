// The NCCL executor against the CPU executor, on a GPU: 8 processes share one GPU, each posing as
// its own host (distinct NCCL_HOSTID) so that NCCL accepts them in one communicator. Each process
// splits the layout's communicators from the world communicator (ncclCommSplit), runs forward and
// backward plans with grouped ncclSend/ncclRecv, and compares its destination buffer byte for byte
// with what the CPU executor produces for the same plan.
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
#include <fstream>
#include <random>
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
  int checks = 0;
  RankList everyone;
  for (int r = 0; r < kWorld; ++r) everyone.push_back(r);
  for (const GpuCase& c : cases()) {
    Layout layout(c.spec);
    NcclGroups groups(world, layout);
    for (Direction dir : {Direction::forward, Direction::backward}) {
      const BoundaryPlan plan = plan_boundary(layout, 0, batch, dir, PlanOptions{c.strategy});
      const std::uint64_t salt = 1000 * checks + 17;
      // What the CPU executor delivers to this rank.
      std::vector<std::vector<unsigned char>> src(kWorld), dst(kWorld);
      std::vector<HostBuffers> bufs(kWorld);
      for (int r = 0; r < kWorld; ++r) {
        src[r] = source_of(layout, plan, batch, r, salt);
        dst[r].assign(plan.destination_bytes[r], 0xEE);
        bufs[r] = HostBuffers{src[r].data(), dst[r].data(), src[r].size(), dst[r].size()};
      }
      execute_cpu(plan, bufs, 1);

      ncclComm_t comm = c.world_comm ? world : groups.boundary(0);
      if (comm == nullptr) continue;  // not at this boundary
      const NcclBoundaryExecutor ex(plan, comm, c.world_comm ? everyone : groups.boundary_members(0));
      void *d_src = nullptr, *d_dst = nullptr;
      const std::size_t ns = src[rank].size(), nd = dst[rank].size();
      WORKER_CHECK(cudaMalloc(&d_src, ns + 1) == cudaSuccess && cudaMalloc(&d_dst, nd + 1) == cudaSuccess,
                   "cudaMalloc failed");
      WORKER_CHECK(cudaMemcpy(d_src, src[rank].data(), ns, cudaMemcpyHostToDevice) == cudaSuccess,
                   "upload failed");
      WORKER_CHECK(cudaMemset(d_dst, 0xEE, nd) == cudaSuccess, "cudaMemset failed");
      ex.run(d_src, ns, d_dst, nd, stream);
      WORKER_CHECK(cudaStreamSynchronize(stream) == cudaSuccess, "stream failed");
      std::vector<unsigned char> got(nd);
      WORKER_CHECK(cudaMemcpy(got.data(), d_dst, nd, cudaMemcpyDeviceToHost) == cudaSuccess,
                   "download failed");
      cudaFree(d_src);
      cudaFree(d_dst);
      if (got != dst[rank]) {
        std::fprintf(stderr, "rank %d: %s %s: NCCL result differs from the CPU executor\n", rank, c.name,
                     direction_name(dir));
        return 1;
      }
      ++checks;
    }
  }
  cudaStreamDestroy(stream);
  ncclCommDestroy(world);
  std::fprintf(stderr, "rank %d: %d plans match the CPU executor\n", rank, checks);
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
