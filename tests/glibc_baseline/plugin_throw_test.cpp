// An exception thrown and caught inside the built plugin. The plugin carries its own C++ runtime and
// unwinder (static libstdc++/libgcc_eh); linked for an old glibc, the unwinder finds the plugin's
// unwind tables through glibc_compat.c's _dl_find_object. If that fails, every throw ends in
// std::terminate - including the ones the adapters exist to catch.
//
// The throw: std::thread's constructor throws std::system_error when pthread_create fails, and it
// fails when RLIMIT_AS leaves no room for a thread stack; connect starts its stream threads, and
// the adapter's guard must catch the error and return it to NCCL. Done in a child process, so the
// limit and the plugin's state stay there.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "plugin_driver.h"

using namespace zipccl_test;

namespace {

enum ChildExit { kCaught = 0, kNoThrow = 2, kSetupFailed = 3, kWrongError = 4 };

size_t mapped_bytes() {
  long pages = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  if (std::fscanf(f, "%ld", &pages) != 1) pages = 0;
  std::fclose(f);
  return static_cast<size_t>(pages) * static_cast<size_t>(sysconf(_SC_PAGESIZE));
}

int throw_inside_plugin() {
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);  // loopback: the test needs no network
  std::unique_ptr<NetApi> api = load_api(9);
  if (!api || api->init() != ncclSuccess) return kSetupFailed;
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
  void* listen_comm = nullptr;
  if (api->listen(0, handle, &listen_comm) != ncclSuccess) return kSetupFailed;
  // 1 MiB more than is mapped now: enough for small allocations (and the exception object), not for
  // the 8 MiB stack of a new thread.
  const size_t now = mapped_bytes();
  if (now == 0) return kSetupFailed;
  struct rlimit lim = {static_cast<rlim_t>(now + (1u << 20)), RLIM_INFINITY};
  if (setrlimit(RLIMIT_AS, &lim) != 0) return kSetupFailed;
  void* send_comm = nullptr;
  void* recv_comm = nullptr;
  for (int i = 0; i < 2000 && !(send_comm && recv_comm); ++i) {
    if (!send_comm) {
      ncclResult_t r = api->connect(0, handle, &send_comm);
      if (r != ncclSuccess) return log_contains("connect: internal error") ? kCaught : kWrongError;
    }
    if (!recv_comm) {
      ncclResult_t r = api->accept(listen_comm, &recv_comm);
      if (r != ncclSuccess) return log_contains("accept: internal error") ? kCaught : kWrongError;
    }
    usleep(1000);
  }
  return kNoThrow;
}

TEST(PluginThrow, CaughtInsideThePlugin) {
  std::fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0) << std::strerror(errno);
  if (pid == 0) _exit(throw_inside_plugin());
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_FALSE(WIFSIGNALED(status))
      << "the child died of signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status))
      << "): an exception thrown inside the plugin was not caught there - std::terminate, i.e. its "
         "unwinder found no unwind table for the plugin's frames (_dl_find_object)";
  ASSERT_TRUE(WIFEXITED(status));
  switch (WEXITSTATUS(status)) {
    case kCaught:
      break;
    case kNoThrow:
      FAIL() << "connect and accept succeeded under RLIMIT_AS: nothing was thrown, so nothing was tested";
    case kSetupFailed:
      FAIL() << "could not load, init or listen on the plugin, or set RLIMIT_AS";
    case kWrongError:
      FAIL() << "connect/accept failed, but not through the adapter's catch (no 'internal error' WARN)";
    default:
      FAIL() << "unexpected child exit " << WEXITSTATUS(status);
  }
}

}  // namespace
