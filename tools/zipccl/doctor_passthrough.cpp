#include "doctor_passthrough.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>

#include "fabric/fabric.h"
#include "src/abi/passthrough_versions.h"
#include "zipccl/net_load.h"

namespace zipccl {
namespace tools {
namespace {

bool has(void* lib, const std::string& symbol) {
  return lib && dlsym(lib, symbol.c_str()) != nullptr;
}

// The newest of prefix<oldest..newest> that lib exports; 0 if none.
int newest_in(void* lib, const char* prefix, int oldest, int newest) {
  for (int v = newest; v >= oldest; --v)
    if (has(lib, prefix + std::to_string(v))) return v;
  return 0;
}

// The versions of prefix<oldest..newest> that lib exports, "v6 v3", or "" if none.
std::string versions_in(void* lib, const char* prefix, int oldest, int newest) {
  std::string out;
  for (int v = newest; v >= oldest; --v)
    if (has(lib, prefix + std::to_string(v))) out += (out.empty() ? "v" : " v") + std::to_string(v);
  return out;
}

}  // namespace

void print_passthrough(const std::string& inner_library_path, std::vector<std::string>* notes) {
  const std::vector<std::string> names = net::inner_plugin_list(inner_library_path);
  if (names.empty()) {
    std::printf("passthrough none: zipccl wraps no other net plugin (NCCL's own tuner choices stand)\n");
    return;
  }
  // The first entry that opens, as the plugin takes it (passthrough_library.h).
  char opened[ZIPCCL_NET_PATH_MAX], error[ZIPCCL_NET_ERROR_MAX];
  void* inner = nullptr;
  std::string reasons;
  for (const std::string& n : names) {
    inner = zipccl_net_dlopen(n.c_str(), opened, sizeof opened, error, sizeof error);
    if (inner) break;
    reasons += (reasons.empty() ? "" : "; ") + n + ": " + error;
  }
  if (!inner) {
    std::printf("passthrough none: cannot open %s\n", inner_library_path.c_str());
    notes->push_back("cannot open the wrapped plugin (" + reasons + "): its tuner and CollNet are not used");
    return;
  }
  const std::string name = opened;
  // The zipccl plugin NCCL would load; the tables it exports are what NCCL can ask for.
  void* self = zipccl_net_dlopen("zipccl", nullptr, 0, error, sizeof error);
  // zipccl itself, or another zipccl build (found by its net table's name, when this one is not on the
  // loader path): it ends the plugin's search (plugin/src/abi/passthrough_library.h), or passes on
  // nothing of its own.
  const void* net = zipccl_net_table(inner, ZIPCCL_NET_ABI_NEWEST, nullptr);
  if ((self && self == inner) || (net && std::strcmp(zipccl_net_table_name(net), "zipccl") == 0)) {
    std::printf("passthrough none: %s is zipccl itself\n", name.c_str());
    notes->push_back("the wrapped plugin " + name + " is zipccl itself: nothing is passed through");
    return;
  }
  int tuner = net::kTunerNewest, profiler = net::kProfilerNewest, collnet = net::kCollNetNewest;
  if (self) {
    tuner = newest_in(self, "ncclTunerPlugin_v", net::kTunerOldest, net::kTunerNewest);
    profiler = newest_in(self, "ncclProfiler_v", net::kProfilerOldest, net::kProfilerNewest);
    collnet = newest_in(self, "ncclCollNetPlugin_v", net::kCollNetOldest, net::kCollNetNewest);
    if (!tuner && !profiler && !collnet) {
      std::printf("passthrough none: the zipccl plugin exports no tuner, profiler or CollNet table\n");
      notes->push_back("this zipccl plugin build passes nothing through: " + name +
                       "'s tuner and CollNet are not used (install a newer zipccl)");
      return;
    }
  }

  std::string line = "passthrough";
  const int tuner_to = net::tuner_forward_version(
      tuner, [&](int v) { return has(inner, "ncclTunerPlugin_v" + std::to_string(v)); });
  if (tuner_to) {
    line += " tuner v" + std::to_string(tuner) + " -> " + name + " v" + std::to_string(tuner_to);
  } else {
    line += " tuner: none in " + name;
    const std::string others = versions_in(inner, "ncclTunerPlugin_v", net::kTunerOldest, net::kTunerNewest);
    notes->push_back(name + " has no tuner zipccl's v" + std::to_string(tuner) + " can call" +
                     (others.empty() ? "" : " (it has " + others + ")") + ": NCCL tunes on its own");
  }
  const int profiler_to = net::same_version_only(
      profiler, [&](int v) { return has(inner, "ncclProfiler_v" + std::to_string(v)); });
  if (profiler_to)
    line += "; profiler v" + std::to_string(profiler) + " -> " + name + " v" + std::to_string(profiler_to);
  else
    line += "; profiler: none in " + name;
  const int collnet_to = net::same_version_only(
      collnet, [&](int v) { return has(inner, "ncclCollNetPlugin_v" + std::to_string(v)); });
  if (collnet_to) {
    line += "; collnet v" + std::to_string(collnet) + " -> " + name + " (uncompressed)";
    notes->push_back("CollNet (in-network reductions) runs on " + name +
                     " as it is: zipccl does not compress it");
  } else {
    line += "; collnet: none in " + name;
    const std::string others =
        versions_in(inner, "ncclCollNetPlugin_v", net::kCollNetOldest, net::kCollNetNewest);
    if (!others.empty())
      notes->push_back(name + " has CollNet " + others + " but not v" + std::to_string(collnet) +
                       ": CollNet stays off with an NCCL that asks for v" + std::to_string(collnet));
  }
  std::printf("%s\n", line.c_str());
}

}  // namespace tools
}  // namespace zipccl
