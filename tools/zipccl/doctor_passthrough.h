// `zipccl doctor`: where zipccl's tuner, profiler and CollNet tables pass NCCL's calls (the wrapped net
// plugin's tables, plugin/src/abi/passthrough_*), read from the libraries without initialising them.
#pragma once

#include <string>
#include <vector>

namespace zipccl {
namespace tools {

// Prints one line "passthrough tuner v6 -> <inner> v6; profiler: none in <inner>; collnet v12 -> <inner>
// (uncompressed)" for the newest version of each table the zipccl plugin (found as NCCL_NET_PLUGIN=zipccl
// finds it) exports, i.e. what NCCL 2.30+ asks for. `inner_library_path`: the wrapped plugin (a path or a
// name as NCCL_NET_PLUGIN takes it, or such a list: the first that opens); empty or "none": zipccl wraps
// nothing. Adds to *notes what a user should know:
// no inner tuner (NCCL tunes on its own), CollNet traffic uncompressed, an inner that cannot be opened or
// is zipccl itself, a zipccl build without the tables.
void print_passthrough(const std::string& inner_library_path, std::vector<std::string>* notes);

}  // namespace tools
}  // namespace zipccl
