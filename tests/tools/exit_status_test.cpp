// describe_exit: how zipccl perf words a child's end, from real wait statuses; die_with_parent: a
// forked side does not outlive a killed tool.
#include "exit_status.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

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

// The tool (middle) is killed from outside while its child waits: the child must die too. This
// process is the subreaper, so the orphaned child's end is waited for and read here.
TEST(DieWithParent, AChildDiesWhenItsParentIsKilled) {
  ASSERT_EQ(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t middle = fork();
  ASSERT_GE(middle, 0);
  if (middle == 0) {
    const pid_t self = getpid();
    if (fork() == 0) {
      zipccl::tools::die_with_parent(self);
      const pid_t me = getpid();
      if (write(fds[1], &me, sizeof me) != sizeof me) _exit(2);
      pause();
      _exit(0);
    }
    pause();
    _exit(0);
  }
  pid_t child = -1;
  ASSERT_EQ(read(fds[0], &child, sizeof child), static_cast<ssize_t>(sizeof child));
  kill(middle, SIGKILL);
  ASSERT_EQ(waitpid(middle, nullptr, 0), middle);
  int st = 0;
  pid_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while ((got = waitpid(child, &st, WNOHANG)) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (got == 0) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
  }
  ASSERT_EQ(got, child) << "the child outlived its killed parent by 10 s";
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL) << zipccl::tools::describe_exit(st);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  close(fds[0]);
  close(fds[1]);
}

}  // namespace
