// How a child process ended, in words, for the tools that fork (zipccl perf).
#pragma once

#include <string>

namespace zipccl {
namespace tools {

// `status` as waitpid returns it. Any signal reads "crashed: SIGILL (illegal instruction)", so that an
// instruction this CPU lacks or a segfault is never taken for a hang; an exit reads "exited with
// status 3", or "exited normally" for 0.
std::string describe_exit(int status);

// "SIGILL" for SIGILL, "signal 77" for a number without a name here.
std::string signal_name(int sig);

}  // namespace tools
}  // namespace zipccl
