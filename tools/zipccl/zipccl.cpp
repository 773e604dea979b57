// zipccl: one program, subcommands like git.
#include <cstdio>
#include <cstring>

#include "commands.h"
#include "common/version.h"

namespace {

struct Command {
  const char* name;
  int (*run)(int, char**);
  const char* summary;
};

const Command kCommands[] = {
    {"compress", zipccl::tools::cmd_compress, "compress a file into a zipccl frame stream"},
    {"decompress", zipccl::tools::cmd_decompress, "restore a file compressed by `zipccl compress`"},
    {"bench", zipccl::tools::cmd_bench, "ratio and speed against zstd and lz4, with entropy bounds"},
    {"plan", zipccl::tools::cmd_plan, "print heterogeneous-TP groups and boundary traffic for a layout"},
    {"perf", zipccl::tools::cmd_perf, "drive the NCCL net plugin between two processes, raw vs compressed"},
    {"inspect", zipccl::tools::cmd_inspect, "per-tensor exponent histograms, entropy and what zipccl saves"},
    {"doctor", zipccl::tools::cmd_doctor, "check that NCCL would load the plugin on this node, and why not"},
    {"nccl-check", zipccl::tools::cmd_nccl_check, "run collectives through real NCCL and the plugin; bit-exact?"},
    {"stats", zipccl::tools::cmd_stats, "the plugin's live snapshots of a job: a table over ranks, --watch, --svg"},
};

void usage(FILE* f) {
  std::fprintf(f,
               "usage: zipccl <command> [options]   (zipccl <command> --help for its options)\n"
               "       zipccl --version | -V\n\ncommands:\n");
  for (const Command& c : kCommands) std::fprintf(f, "  %-12s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (!std::strcmp(argv[1], "--version") || !std::strcmp(argv[1], "-V")) {
    std::printf("zipccl %s\n", zipccl::version_string());
    return 0;
  }
  for (const Command& c : kCommands) {
    if (!std::strcmp(argv[1], c.name)) return c.run(argc - 1, argv + 1);
  }
  std::fprintf(stderr, "zipccl: '%s' is not a command\n\n", argv[1]);
  usage(stderr);
  return 2;
}
