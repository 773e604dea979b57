// describe_exit: how zipccl perf words a child's end, from real wait statuses.
#include "exit_status.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <string>

namespace {

// The wait status of a child that raises `sig` (0: exits with `code`).
int status_of(int sig, int code = 0) {
  const pid_t pid = fork();
  if (pid == 0) {
    const rlimit no_core{0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    if (sig) {
      signal(sig, SIG_DFL);
      raise(sig);
    }
    _exit(code);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return st;
}

TEST(ExitStatus, SignalsAreCrashesWithTheirNames) {
  using zipccl::tools::describe_exit;
  EXPECT_EQ(describe_exit(status_of(SIGILL)), "crashed: SIGILL (illegal instruction)");
  EXPECT_EQ(describe_exit(status_of(SIGSEGV)), "crashed: SIGSEGV (segmentation fault)");
  EXPECT_EQ(describe_exit(status_of(SIGBUS)), "crashed: SIGBUS (bus error)");
  EXPECT_EQ(describe_exit(status_of(SIGKILL)), "crashed: SIGKILL (killed)");
  EXPECT_EQ(describe_exit(status_of(SIGABRT)), "crashed: SIGABRT (aborted)");
}

TEST(ExitStatus, ExitsAreNotCrashes) {
  using zipccl::tools::describe_exit;
  EXPECT_EQ(describe_exit(status_of(0, 0)), "exited normally");
  EXPECT_EQ(describe_exit(status_of(0, 3)), "exited with status 3");
}

TEST(ExitStatus, EverySignalHasAName) {
  for (int sig = 1; sig < 32; ++sig) {
    const std::string n = zipccl::tools::signal_name(sig);
    EXPECT_EQ(n.rfind("SIG", 0), 0u) << sig << ": " << n;
  }
  EXPECT_EQ(zipccl::tools::signal_name(SIGRTMIN + 3), "signal " + std::to_string(SIGRTMIN + 3));
}

}  // namespace
