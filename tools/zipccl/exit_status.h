// How a child process ended, in words, for the tools that fork (zipccl perf, nccl-check), and how a
// child is tied to its parent.
#pragma once

#include <sys/types.h>

#include <string>

namespace zipccl {
namespace tools {

// `status` as waitpid returns it. Any signal reads "crashed: SIGILL (illegal instruction)", so that an
// instruction this CPU lacks or a segfault is never taken for a hang; an exit reads "exited with
// status 3", or "exited normally" for 0.
std::string describe_exit(int status);

// "SIGILL" for SIGILL, "signal 77" for a number without a name here.
std::string signal_name(int sig);

// Called first in a forked child: the child is killed when `parent` dies, so that a parent killed
// from outside (a batch system's time limit, ctest's --timeout) leaves no rank or transfer side
// running, holding its port and its terminal. Exits at once when `parent` is already gone. The kernel
// ties the signal to the thread that forked, not its process: fork from a thread that outlives the
// child (the tools fork from main).
void die_with_parent(pid_t parent);

}  // namespace tools
}  // namespace zipccl
