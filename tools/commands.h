// Subcommands of the `zipccl` tool, one file each (tools/cmd_<name>.cpp).
#pragma once

namespace zipccl {
namespace tools {

// Each returns the process exit status: 0 success, 1 failure of the operation, 2 bad usage.
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
