// Subcommands of the `zipccl` tool, one file each (tools/zipccl/cmd_<name>.cpp; `decompress` shares
// cmd_compress.cpp, the stream both ways). main() in zipccl.cpp dispatches to them by name.
#pragma once

namespace zipccl {
namespace tools {

// The exit statuses every command returns (and `--gpu` without a GPU: kExitNoGpu, gpu_tool.h).
constexpr int kExitOk = 0;       // done
constexpr int kExitFailure = 1;  // the operation failed
constexpr int kExitUsage = 2;    // bad usage: nothing was attempted

// Each returns the process exit status above.
int cmd_compress(int argc, char** argv);
int cmd_decompress(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_perf(int argc, char** argv);
int cmd_doctor(int argc, char** argv);
int cmd_inspect(int argc, char** argv);
int cmd_nccl_check(int argc, char** argv);
int cmd_stats(int argc, char** argv);

}  // namespace tools
}  // namespace zipccl
