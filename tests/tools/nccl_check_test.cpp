// zipccl nccl-check's orchestration, run as a user runs it: where no GPU exists it says so and
// exits 3; with the host emulation (--fake) the parent must report bit-exact runs as such, and catch
// a compressed run that differs and a rank that hangs.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

#ifndef ZIPCCL_BIN
#error "ZIPCCL_BIN must name the zipccl binary"
#endif

namespace {

struct Out {
  int status;
  std::string text;
};

Out run(const std::string& args) {
  const std::string cmd = "'" ZIPCCL_BIN "' nccl-check " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  Out o{-1, ""};
  if (!p) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) o.text.append(buf, n);
  const int st = pclose(p);
  o.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return o;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + 1)) ++n;
  return n;
}

TEST(NcclCheck, SaysSoWhereThereIsNoGpu) {
  const Out o = run("--cuda-driver /nonexistent/libcuda.so.1");
  EXPECT_EQ(o.status, 3) << o.text;
  EXPECT_NE(o.text.find("needs a GPU"), std::string::npos) << o.text;
  EXPECT_NE(o.text.find("nothing was checked"), std::string::npos) << o.text;
}

TEST(NcclCheck, EmulatedRunsAreComparedPerCollectiveTypeAndProtocol) {
  const Out o = run("--fake --np 3 --bytes 48K --iters 2 --protos Simple,LL");
  EXPECT_EQ(o.status, 0) << o.text;
  EXPECT_EQ(count(o.text, " yes "), 2u * 3u * 5u) << o.text;  // protocols x types x collectives
  EXPECT_NE(o.text.find("every result bit-exact"), std::string::npos);
}

TEST(NcclCheck, ACompressedRunThatDiffersFails) {
  const Out o = run("--fake --bytes 16K --iters 1 --protos Simple --types bf16 --fake-fault differ");
  EXPECT_EQ(o.status, 1) << o.text;
  EXPECT_NE(o.text.find("allreduce      bf16  DIFFERS"), std::string::npos) << o.text;
  EXPECT_EQ(count(o.text, " yes "), 4u) << o.text;
}

TEST(NcclCheck, AHangingRankIsKilledAndReported) {
  const Out o = run("--fake --bytes 16K --iters 1 --protos LL --types fp32 --timeout 2 --fake-fault hang");
  EXPECT_EQ(o.status, 1) << o.text;
  EXPECT_NE(o.text.find("hang?"), std::string::npos) << o.text;
}

TEST(NcclCheck, BadArgumentsAreUsageErrors) {
  EXPECT_EQ(run("--np 0").status, 2);
  EXPECT_EQ(run("--types int8").status, 2);
  EXPECT_EQ(run("--colls broadcast").status, 2);
  EXPECT_EQ(run("--bytes lots").status, 2);
}

}  // namespace
